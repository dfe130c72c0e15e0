/*
 * cmd_schedule.c - "delayq schedule": a standalone scheduler.
 *
 * Owns running dq_schedule for each queue named on the command line in the
 * foreground until SIGINT or SIGTERM. The library retries by itself while
 * Redis is away, so once connected this command only ends on a signal, or
 * at the first refusal by Redis's ACL (which retrying cannot cure).
 * Nothing goes to stdout; one line on stderr says what is scheduled, and the
 * library's background problems (failed transfers, reconnects) follow there.
 */
#include "cli/cli.h"

const char cli_usage_schedule[] =
    "usage: delayq schedule QUEUE... [--connect-wait DUR]\n"
    "\n"
    "Moves due items of each QUEUE to its ready list, in the foreground, until\n"
    "SIGINT or SIGTERM. Any number of schedulers (and 'delayq take' without\n"
    "--no-scheduler) may run for the same queue at once.\n"
    "\n"
    "  --connect-wait DUR  while Redis cannot be reached at the start, try again\n"
    "                (backoff 100ms to 5s) for up to DUR (0: exit 3 at once);\n"
    "                default: forever\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 stopped by a signal, 2 usage error, 3 Redis unreachable or\n"
    "erroring, or refusing the user (ACL: exits at the first refusal).\n";

typedef struct sched_run {
    dq_client *c;
    int signum;  /* the signal that stopped the run, 0 if none    */
    int refused; /* Redis's ACL refused a transfer or subscription */
} sched_run;

static void on_signal(void *data, int signum) {
    sched_run *s = data;
    s->signum = signum;
    dq_stop(s->c);
}

/* The refusal's line is on stderr already (the log); retrying cannot help
 * until the user's rule changes, so stop and exit 3. */
static void on_refused(void *data, const char *msg) {
    sched_run *s = data;

    (void)msg;
    s->refused = 1;
    dq_stop(s->c);
}

/* Starts a scheduler for each of the n queues. */
static int schedule_all(dq_client *c, int n, char **queues) {
    for (int i = 0; i < n; i++) {
        int rc = dq_schedule(c, queues[i]);
        if (rc < 0) return cli_fail(c, rc, queues[i]);
    }
    return 0;
}

static int run(sched_run *s, int n, char **queues) {
    cli_doctor_start(s->c, DQ_DOCTOR_QUICK, NULL, NULL);
    int rc = schedule_all(s->c, n, queues);
    if (rc) return rc;
    cli_err("scheduling %d queue%s until SIGINT or SIGTERM", n, n == 1 ? "" : "s");
    cli_log_start(s->c);
    dq_set_on_refused(s->c, on_refused, s);
    cli_signals_start(dq_client_loop(s->c), on_signal, s);
    dq_run(s->c);
    cli_signals_stop(dq_client_loop(s->c));
    dq_set_on_refused(s->c, NULL, NULL);
    if (s->refused) return CLI_FAIL;
    if (s->signum) return CLI_OK;
    return cli_fail(s->c, DQ_ECLOSED, "schedule");
}

int cli_cmd_schedule(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    const char *wait = NULL;
    const cli_opt opts[] = {{"connect-wait", &wait, NULL}, {NULL, NULL, NULL}};
    sched_run s = {0};
    int64_t wait_ms = -1;
    int npos;

    int rc = cli_parse(env, "schedule", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("schedule", npos, 1, -1, names, argv);
    for (int i = 0; !rc && i < npos; i++) rc = cli_check_queue(argv[i]);
    if (!rc && wait) rc = cli_parse_connect_wait(wait, &wait_ms);
    if (!rc) rc = cli_connect_wait(env, NULL, wait_ms, &s.c);
    if (rc) return rc;
    rc = run(&s, npos, argv);
    cli_close(s.c);
    return rc;
}
