/*
 * cmd_stats.c - "delayq stats": the counts of one queue.
 *
 * Owns reading dq_get_stats for a queue and printing it through output.c:
 * "pending N", "ready N", "next_due_in_ms N", "inflight N", "dead N" lines
 * (and "set_aside N" when some entries were set aside), "schedulers N",
 * "overdue_ms N", or with --json one
 * object holding the same fields, set_aside always included. A queue never
 * used (no keys, not in the registry) is an error (exit 1), not zeros.
 */
#include <string.h>

#include "cli/cli.h"

const char cli_usage_stats[] =
    "usage: delayq stats QUEUE [--json]\n"
    "\n"
    "Prints the counts of QUEUE:\n"
    "  pending N          items waiting for their due time\n"
    "  ready N            items due and waiting for a consumer\n"
    "  next_due_in_ms N   ms until the earliest pending item is due (0 if overdue,\n"
    "                     -1 if nothing is pending; up to 4 s early when that\n"
    "                     item waits in a timing-wheel bucket of over 4,096)\n"
    "  inflight N         items taken with a lease ('take --ack manual', 'work')\n"
    "                     and not acked yet\n"
    "  dead N             dead letters (see 'delayq dead')\n"
    "  set_aside N        (only when N > 0) entries that could not be decoded\n"
    "  schedulers N       processes scheduling QUEUE now, by their heartbeats\n"
    "  overdue_ms N       how long the earliest pending item or lease end has\n"
    "                     been past due, 0 when none: with schedulers 0, work\n"
    "                     waits for a scheduler ('delayq schedule')\n"
    "\n"
    "  --json        one object: {\"pending\":N,\"ready\":N,\"next_due_in_ms\":N,\n"
    "                \"set_aside\":N,\"inflight\":N,\"dead\":N,\"schedulers\":N,\n"
    "                \"overdue_ms\":N}\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 ok (a known queue, empty or not), 1 no such queue (never\n"
    "offered to: no keys, not in the registry), 2 usage error, 3 Redis\n"
    "unreachable or erroring.\n";

/* 1 if queue is in the registry of queues offered to (dq_queues); 0 if not,
 * or when the registry cannot be read (*rc gets the code). */
static int registered(dq_client *c, const char *queue, int *rc) {
    char **names;
    size_t n;
    int found = 0;
    *rc = dq_queues(c, &names, &n);
    if (*rc < 0) return 0;
    for (size_t i = 0; i < n && !found; i++) found = strcmp(names[i], queue) == 0;
    dq_queues_free(names, n);
    return found;
}

int cli_cmd_stats(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    int json = 0, npos;
    const cli_opt opts[] = {{"json", NULL, &json}, {NULL, NULL, NULL}};
    dq_client *c;
    dq_stats st;

    int rc = cli_parse(env, "stats", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("stats", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = dq_get_stats(c, argv[0], &st);
    /* A registry that cannot be read is an error (3), not "never offered". */
    int known = rc >= 0 && (st.exists || registered(c, argv[0], &rc));
    if (rc >= 0 && !known) {
        cli_err("stats: no queue %s: never offered to (no keys, not in the registry)", argv[0]);
        rc = CLI_NONE;
    } else if (rc >= 0) {
        rc = cli_print_stats(&st, json);
    }
    if (rc < 0) rc = cli_fail(c, rc, "stats");
    dq_client_free(c);
    return rc;
}
