/*
 * cmd_lease.c - settling a leased delivery: ack, nack, release, extend.
 *
 * Owns the four commands that take back what "delayq take --ack manual"
 * handed out, each by QUEUE, ID and the delivery's TOKEN: checking them
 * before Redis is contacted, one library call (dq_ack, dq_nack, dq_release,
 * dq_extend),
 * and the exit code of its answer: 0 when it was done, 1 when the id is not
 * in flight with that token (acked already, unknown, or the lease ran out
 * and the item went elsewhere). Nothing goes to stdout.
 */
#include <string.h>

#include "cli/cli.h"

const char cli_usage_ack[] = "usage: delayq ack QUEUE ID TOKEN\n"
                             "\n"
                             "Done with a delivery of 'delayq take --ack manual': removes item ID from\n"
                             "QUEUE for good. TOKEN is the one that take printed with it.\n"
                             "\n"
                             "  --redis URL   the Redis server (see 'delayq --help')\n"
                             "\n"
                             "Exit codes: 0 acked, 1 ID is not in flight with TOKEN (acked already,\n"
                             "unknown, or its lease ran out and it went elsewhere), 2 usage error,\n"
                             "3 Redis unreachable or erroring.\n";

const char cli_usage_nack[] =
    "usage: delayq nack QUEUE ID TOKEN [--delay DUR] [--error TEXT]\n"
    "\n"
    "Failed a delivery of 'delayq take --ack manual': item ID goes back to\n"
    "QUEUE for another attempt, or, if that was its last attempt, becomes a dead\n"
    "letter (one line on stderr says so; see 'delayq dead').\n"
    "\n"
    "  --delay DUR   retry after DUR (250ms, 30s, 5m, 2h, 1d, milliseconds; 0 =\n"
    "                now); default: a backoff doubling with each attempt, from 1s\n"
    "                up to 10m, with jitter\n"
    "  --error TEXT  kept with the item as its last error (shown by 'delayq dead\n"
    "                QUEUE list'); at most 1000 bytes are kept\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 nacked (retry scheduled, or now a dead letter), 1 ID is not in\n"
    "flight with TOKEN, 2 usage error, 3 Redis unreachable or erroring.\n";

const char cli_usage_release[] =
    "usage: delayq release QUEUE ID TOKEN [--delay DUR]\n"
    "\n"
    "Gives back a delivery of 'delayq take --ack manual' that did not fail (a\n"
    "resource of a pool, done with for now): item ID goes back to QUEUE, ready\n"
    "at once, as it was before this take: the take counts as no attempt, so a\n"
    "release never makes a dead letter, and no error is recorded.\n"
    "\n"
    "  --delay DUR   ready again after DUR instead (250ms, 30s, 5m, 2h, 1d,\n"
    "                milliseconds)\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 released, 1 ID is not in flight with TOKEN (acked already,\n"
    "unknown, or its lease ran out), 2 usage error, 3 Redis unreachable or\n"
    "erroring.\n";

const char cli_usage_extend[] =
    "usage: delayq extend QUEUE ID TOKEN DUR\n"
    "\n"
    "Still working on a delivery of 'delayq take --ack manual': its lease now\n"
    "ends DUR from now (250ms, 30s, 5m, 2h, 1d, milliseconds; more than 0).\n"
    "\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 extended, 1 ID is not in flight with TOKEN (acked already,\n"
    "unknown, or its lease ran out), 2 usage error, 3 Redis unreachable or\n"
    "erroring.\n";

/* Parses and checks the arguments of cmd: QUEUE ID TOKEN plus nextra more
 * (left unchecked). Returns 0, CLI_HELP or CLI_USAGE. */
static int lease_args(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts,
                      int nextra) {
    static const char *const names[] = {"QUEUE", "ID", "TOKEN", "DUR"};
    int npos;

    int rc = cli_parse_ids(env, cmd, argc, argv, opts, &npos);
    if (!rc) rc = cli_want_args(cmd, npos, 3 + nextra, 3 + nextra, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_check_id("", argv[1], strlen(argv[1]));
    if (!rc) rc = cli_check_token(argv[2]);
    return rc;
}

/* The exit code of a settling call's answer n. */
static int settled(dq_client *c, int n, const char *cmd, char **argv) {
    if (n < 0) return cli_fail(c, n, cmd);
    if (n == 0) {
        cli_err("%s: %s is not in flight in %s with that token (acked already, unknown, "
                "or its lease ran out)",
                cmd, cli_quote(argv[1]), argv[0]);
        return CLI_NONE;
    }
    return CLI_OK;
}

int cli_cmd_ack(cli_env *env, int argc, char **argv) {
    const cli_opt opts[] = {{NULL, NULL, NULL}};
    dq_client *c;

    int rc = lease_args(env, "ack", argc, argv, opts, 0);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = settled(c, dq_ack(c, argv[0], argv[1], argv[2]), "ack", argv);
    dq_client_free(c);
    return rc;
}

/* The start of nack and release (QUEUE ID TOKEN, options opts, one of them
 * --delay, its value at *delay, parsed into *delay_ms when given): *c is the
 * connected client, or NULL when the command is over already (CLI_HELP, a
 * usage error, no connection), with that code returned. */
static int delayed_open(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts,
                        const char *const *delay, int64_t *delay_ms, dq_client **c) {
    *c = NULL;
    int rc = lease_args(env, cmd, argc, argv, opts, 0);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc && *delay) rc = cli_parse_delay("", "delay", *delay, delay_ms);
    if (!rc) rc = cli_connect(env, c);
    if (rc) *c = NULL;
    return rc;
}

int cli_cmd_nack(cli_env *env, int argc, char **argv) {
    const char *delay = NULL, *error = NULL;
    const cli_opt opts[] = {{"delay", &delay, NULL}, {"error", &error, NULL}, {NULL, NULL, NULL}};
    int64_t delay_ms = -1;
    dq_client *c;

    int rc = delayed_open(env, "nack", argc, argv, opts, &delay, &delay_ms, &c);
    if (!c) return rc;
    int n = dq_nack(c, argv[0], argv[1], argv[2], delay_ms, error);
    rc = settled(c, n, "nack", argv);
    if (n == 2) cli_err("%s had its last attempt: now a dead letter", cli_quote(argv[1]));
    dq_client_free(c);
    return rc;
}

int cli_cmd_release(cli_env *env, int argc, char **argv) {
    const char *delay = NULL;
    const cli_opt opts[] = {{"delay", &delay, NULL}, {NULL, NULL, NULL}};
    int64_t delay_ms = 0;
    dq_client *c;

    int rc = delayed_open(env, "release", argc, argv, opts, &delay, &delay_ms, &c);
    if (!c) return rc;
    rc = settled(c, dq_release(c, argv[0], argv[1], argv[2], delay_ms), "release", argv);
    dq_client_free(c);
    return rc;
}

int cli_cmd_extend(cli_env *env, int argc, char **argv) {
    const cli_opt opts[] = {{NULL, NULL, NULL}};
    int64_t lease_ms;
    dq_client *c;

    int rc = lease_args(env, "extend", argc, argv, opts, 1);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_parse_delay("", "lease", argv[3], &lease_ms);
    if (!rc && lease_ms <= 0) {
        cli_err("extend: invalid lease '%s': it must be longer than 0", cli_quote(argv[3]));
        rc = CLI_USAGE;
    }
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = settled(c, dq_extend(c, argv[0], argv[1], argv[2], lease_ms), "extend", argv);
    dq_client_free(c);
    return rc;
}
