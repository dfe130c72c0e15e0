/*
 * cmd_doctor.c - "delayq doctor": what in the deployment breaks delayq's
 * promises, and what to change.
 *
 * Owns the command's arguments and the printing of the library's findings
 * (dq_doctor: the checks themselves live there), one line each or one JSON
 * object, and the exit code: 0 when nothing is unsafe, 1 otherwise.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

const char cli_usage_doctor[] =
    "usage: delayq doctor [--json]\n"
    "\n"
    "Examines the deployment --redis points at (the node, the Sentinel group's\n"
    "master, or every cluster master, and the replicas each lists) and prints one\n"
    "finding per check, 'CHECK STATUS DETAIL', STATUS being ok, warn or unsafe:\n"
    "  maxmemory-policy       anything but noeviction loses items silently\n"
    "  persistence            AOF (appendfsync always) or RDB, replicas\n"
    "  replicas               how many each master has, how far behind\n"
    "  min-replicas-to-write  writes a cut-off master takes, or refuses\n"
    "  clock                  each server's clock against this host's: more\n"
    "                         than 1 s apart is unsafe\n"
    "  redis-version          7.0 or later (functions, sharded pub/sub)\n"
    "  function-library       delayq's library of this version loaded\n"
    "  acl                    what this user may run (EVAL, FUNCTION LOAD)\n"
    "A setting this user may not read is a warning that says so.\n"
    "\n"
    "  --json        one object: {\"findings\": [{\"check\": C, \"status\": S,\n"
    "                \"detail\": D}, ...]}\n"
    "  --redis URL   the Redis deployment (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 nothing unsafe, 1 something unsafe, 2 usage error, 3 Redis\n"
    "unreachable.\n";

static int print_text(const dq_finding *f, size_t n) {
    size_t size = 1;
    for (size_t i = 0; i < n; i++) size += strlen(f[i].check) + strlen(f[i].detail) + 32;
    char *buf = malloc(size);
    if (!buf) {
        cli_err("doctor: out of memory");
        return CLI_FAIL;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, size - len, "%-21s %-6s %s\n", f[i].check,
                                dq_finding_status_name(f[i].status), f[i].detail);
    int rc = cli_write_out(buf, len);
    free(buf);
    return rc;
}

static int print_json(const dq_finding *f, size_t n) {
    json_t *list = json_array(), *body = json_object();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list,
                              json_pack("{s:s, s:s, s:s}", "check", f[i].check, "status",
                                        dq_finding_status_name(f[i].status), "detail", f[i].detail));
    json_object_set_new(body, "findings", list);
    char *text = json_dumps(body, 0);
    json_decref(body);
    if (!text) {
        cli_err("doctor: out of memory");
        return CLI_FAIL;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps's NUL becomes the line's end */
    int rc = cli_write_out(text, len + 1);
    free(text);
    return rc;
}

int cli_cmd_doctor(cli_env *env, int argc, char **argv) {
    int json = 0, npos;
    const cli_opt opts[] = {{"json", NULL, &json}, {NULL, NULL, NULL}};
    dq_client *c;
    dq_finding *f;
    size_t n;

    int rc = cli_parse(env, "doctor", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("doctor", npos, 0, 0, NULL, argv);
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = dq_doctor(c, 0, &f, &n);
    if (rc < 0) {
        rc = cli_fail(c, rc, "doctor");
        cli_close(c);
        return rc;
    }
    cli_close(c);
    rc = json ? print_json(f, n) : print_text(f, n);
    for (size_t i = 0; !rc && i < n; i++)
        if (f[i].status == DQ_FINDING_UNSAFE) rc = CLI_NONE;
    dq_findings_free(f, n);
    return rc;
}
