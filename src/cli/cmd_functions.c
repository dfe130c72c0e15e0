/*
 * cmd_functions.c - "delayq functions": delayq's Redis function library, as
 * an administrator loads it.
 *
 * Owns the two subcommands and how they print each master's answer:
 * "functions load" loads this version's library on every master of the
 * topology (dq_functions_load) and prints "NODE<TAB>LIBRARY" for each;
 * "functions status" prints "NODE<TAB>current|missing<TAB>LIBRARIES" (the
 * delayq libraries the master holds, "-" for none; dq_functions_status). A
 * master that fails gets one "delayq: " line on stderr.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

const char cli_usage_functions[] =
    "usage: delayq functions load | status\n"
    "\n"
    "delayq's scripts run as the functions of one Redis function library, named\n"
    "for this version's scripts (delayq_ and 12 hex digits). Loading it is an\n"
    "administrator's act: the users 'delayq acl' makes may call its functions,\n"
    "not load them.\n"
    "\n"
    "  load     load (FUNCTION LOAD REPLACE) this version's library on every\n"
    "           master: the one node, the Sentinel's master, or each master of\n"
    "           the cluster (replicas get it by replication). Run it with an\n"
    "           administrator's --redis URL before application users of this\n"
    "           version start, and again on a master added later. Prints\n"
    "           NODE<TAB>LIBRARY for each master.\n"
    "  status   prints NODE<TAB>current|missing<TAB>LIBRARIES for each master:\n"
    "           whether it holds this version's library, and every delayq\n"
    "           library it holds ('-': none). Older versions' libraries stay\n"
    "           until deleted (FUNCTION DELETE NAME) once no client uses them.\n"
    "\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 ok (status: every master holds it), 1 status: some master\n"
    "lacks it, 2 usage error, 3 Redis unreachable or erroring (NOPERM: the user\n"
    "may not load functions).\n";

typedef struct printing {
    const char *what; /* "functions load", "functions status" */
    int missing;      /* status: masters without this version's library */
    int failed;       /* stdout could not be written */
} printing;

/* 1 if the space-separated names hold name. */
static int holds(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; (p = strstr(p, name)) != NULL; p += n)
        if ((p == names || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

static void print_master(void *privdata, const char *node, int code, const char *text) {
    printing *pr = privdata;
    if (code) {
        cli_err("%s: %s: %s%s", pr->what, node, text,
                code == DQ_EAUTH ? " (an administrator's --redis URL: a user that may run FUNCTION LOAD)"
                                 : "");
        return;
    }
    char line[1024];
    int n;
    if (strcmp(pr->what, "functions load") == 0) {
        n = snprintf(line, sizeof line, "%s\t%s\n", node, text);
    } else {
        int current = holds(text, dq_library_name());
        pr->missing += !current;
        n = snprintf(line, sizeof line, "%s\t%s\t%s\n", node, current ? "current" : "missing",
                     text[0] ? text : "-");
    }
    if (n < 0 || (size_t)n >= sizeof line || cli_write_out(line, (size_t)n) != 0) pr->failed = 1;
}

int cli_cmd_functions(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"load|status"};
    const cli_opt opts[] = {{NULL, NULL, NULL}};
    int npos;
    dq_client *c;

    int rc = cli_parse(env, "functions", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("functions", npos, 1, 1, names, argv);
    int load = !rc && strcmp(argv[0], "load") == 0;
    if (!rc && !load && strcmp(argv[0], "status") != 0) {
        cli_err("functions: unknown subcommand '%s': expected load or status", cli_quote(argv[0]));
        rc = CLI_USAGE;
    }
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    printing pr = {load ? "functions load" : "functions status", 0, 0};
    rc = load ? dq_functions_load(c, print_master, &pr) : dq_functions_status(c, print_master, &pr);
    dq_client_free(c);
    if (rc < 0) return cli_exit_code(rc);
    if (pr.failed) return CLI_FAIL;
    return pr.missing ? CLI_NONE : CLI_OK;
}
