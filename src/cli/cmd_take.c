/*
 * cmd_take.c - "delayq take": wait for due items and print them.
 *
 * Owns the consumer loop of the CLI: one dq_take_many_async outstanding at a
 * time on the client's loop, asking for up to TAKE_BATCH items (or what is
 * left of --count), each batch printed and flushed as it arrives, the
 * in-process scheduler (unless --no-scheduler), one libev timer bounding the
 * whole wait (--timeout) and SIGINT/SIGTERM. Stopping never loses an item:
 * with a take outstanding it is cancelled with dq_take_cancel, and an item
 * that was already on its way still reaches on_take and is printed. A batch
 * is printed whole before any signal is acted on. What a batch costs a
 * consumer that is killed (SIGKILL) before printing it: a plain take has
 * removed its items (at most TAKE_BATCH are lost, as one item was before);
 * with --ack manual they come back when their leases end.
 * With --ack manual each take holds a lease (--lease) instead of removing the
 * item: it is printed with its id and token for a later "delayq ack", and
 * comes back by itself if nobody acks it in time.
 */
#include <ev.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define TAKE_BATCH 64 /* items one take asks for: dq_take_many_async's limit */

const char cli_usage_take[] =
    "usage: delayq take QUEUE [--count N] [--timeout DUR] [--json] [--no-scheduler]\n"
    "                   [--ack manual [--lease DUR] [--holder NAME]]\n"
    "\n"
    "Waits for N due items of QUEUE and prints them as they arrive, taking up to\n"
    "64 a round trip. Taking removes the item from the queue, unless --ack manual\n"
    "is given (a plain take is at-most-once: a take killed by SIGKILL loses the\n"
    "items of its last batch that it had not printed; SIGINT/SIGTERM lose none).\n"
    "\n"
    "  --count N       items to wait for; default 1, 0 = no limit\n"
    "  --timeout DUR   bound the whole wait (250ms, 30s, 5m, 2h, 1d, milliseconds);\n"
    "                  default: wait forever\n"
    "  --json          one JSON object per line: \"queue\", \"id\", \"payload\", \"due_ms\",\n"
    "                  \"ready_ms\" (Redis server epoch ms); an id or payload that is\n"
    "                  not valid UTF-8 comes as \"id_base64\" or \"payload_base64\"\n"
    "                  (standard base64) instead of \"id\" or \"payload\"\n"
    "  --no-scheduler  do not move due items to the ready list in this process\n"
    "                  (rely on a 'delayq schedule' or another consumer)\n"
    "  --ack manual    take each item with a lease: it stays in flight until\n"
    "                  'delayq ack QUEUE ID TOKEN' (done) or 'delayq nack QUEUE ID\n"
    "                  TOKEN' (retry); if neither comes before the lease ends, it is\n"
    "                  delivered again (after 16 attempts it becomes a dead letter:\n"
    "                  see 'delayq dead'). Each item prints as\n"
    "                  ID<TAB>TOKEN<TAB>PAYLOAD (raw payload bytes); with --json the\n"
    "                  object adds \"attempt\" (1 on first delivery) and \"token\"\n"
    "  --lease DUR     with --ack manual: how long the lease lasts; default: the\n"
    "                  queue's (delayq config), else 30s\n"
    "  --holder NAME   with --ack manual: who holds the items (1 to 64 bytes of\n"
    "                  UTF-8, no control character), shown by 'delayq lookup'\n"
    "                  while the lease lasts\n"
    "  --redis URL     the Redis server (see 'delayq --help')\n"
    "\n"
    "Without --json each item is printed as its raw payload bytes followed by a\n"
    "newline (payloads holding newlines are then ambiguous: use --json).\n"
    "Exit codes: 0 when N items arrived (with N = 0: at the timeout or on\n"
    "SIGINT/SIGTERM), 1 when the wait ended with fewer, 2 usage error,\n"
    "3 Redis unreachable or erroring.\n";

typedef struct take_run {
    dq_client *c;
    const char *queue;
    int64_t want;         /* items to take; 0 = no limit                  */
    int64_t got;          /* items taken and printed                      */
    int json;
    const dq_take_opts *opts; /* the lease (--ack manual), NULL for none  */
    dq_take_req *req;     /* the outstanding take, NULL if none           */
    int stopping;         /* no new take once set                         */
    const char *stop_why; /* "timeout", "SIGINT", "SIGTERM"               */
    int rc;               /* exit code of a failure, 0 if none            */
    double deadline;      /* ev_now() time --timeout ends; < 0: none      */
} take_run;

static void on_take(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata);

/* Starts the next take. Returns 0, or -1 with t->rc set. */
static int start_take(take_run *t)
{
    /* Each take gets what is left of --timeout as its own timeout, so a take
     * that ends it still looks at the queue once (--timeout 0 included). */
    int64_t left = -1;
    if (t->deadline >= 0) {
        double s = t->deadline - ev_now(dq_client_loop(t->c));
        left = s > 0 ? (int64_t)(s * 1000.0 + 0.5) : 0;
    }
    int64_t batch = TAKE_BATCH;
    if (t->want && t->want - t->got < batch)
        batch = t->want - t->got;
    int rc = dq_take_many_async(t->c, t->queue, t->opts, left, (size_t)batch, on_take, t,
                                &t->req);
    if (rc == 0)
        return 0;
    t->rc = cli_fail(t->c, rc, "take");
    return -1;
}

/* Ends the run: right away, or once the outstanding take has reported. */
static void finish(take_run *t, const char *why)
{
    if (t->stopping)
        return;
    t->stopping = 1;
    t->stop_why = why;
    if (t->req)
        dq_take_cancel(t->req);
    else
        dq_stop(t->c);
}

static void on_take(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata)
{
    take_run *t = privdata;

    t->req = NULL;
    if (status == 1) {
        t->got += (int64_t)n;
        int rc = cli_print_msgs(msgs, n, t->json);
        for (size_t i = 0; i < n; i++)
            dq_msg_free(msgs[i]);
        if (rc)
            t->rc = rc;
        if (rc || (t->want && t->got >= t->want))
            t->stopping = 1;
    } else if (status == 0) {
        t->stopping = 1; /* the take's timeout is what was left of --timeout */
        t->stop_why = "timeout";
    } else if (status < 0 && !(status == DQ_ECLOSED && t->stopping)) {
        t->rc = cli_fail(c, status, "take");
        t->stopping = 1;
    }
    if (t->stopping || start_take(t) < 0)
        dq_stop(c);
}

static void on_signal(void *data, int signum)
{
    finish(data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* Runs the loop until the run is over; returns the exit code. */
static int run(take_run *t, int64_t timeout_ms, int scheduler)
{
    struct ev_loop *loop = dq_client_loop(t->c);
    cli_doctor_start(t->c, DQ_DOCTOR_QUICK, NULL, NULL);
    int rc = scheduler ? dq_schedule(t->c, t->queue) : 0;

    cli_log_start(t->c);
    if (rc < 0)
        return cli_fail(t->c, rc, "schedule");
    ev_now_update(loop);
    t->deadline = timeout_ms >= 0 ? ev_now(loop) + (double)timeout_ms / 1000.0 : -1;
    if (start_take(t) < 0)
        return t->rc;
    cli_signals_start(loop, on_signal, t);
    dq_run(t->c);
    cli_signals_stop(loop);
    if (t->rc)
        return t->rc;
    if (t->want && t->got < t->want) {
        cli_err("take: %" PRId64 " of %" PRId64 " items arrived before the %s", t->got,
                t->want, t->stop_why ? t->stop_why : "end");
        return CLI_NONE;
    }
    return CLI_OK;
}

/* Checks --ack, --lease and --holder; *out gets opts filled in for a
 * leased take, or NULL. Returns 0 or CLI_USAGE. */
static int parse_ack(const char *ack, const char *lease, const char *holder, dq_take_opts *opts,
                     const dq_take_opts **out)
{
    *out = NULL;
    if (!ack) {
        if (!lease && !holder)
            return 0;
        cli_err("take: --%s needs --ack manual", lease ? "lease" : "holder");
        return CLI_USAGE;
    }
    if (strcmp(ack, "manual") != 0) {
        cli_err("take: invalid --ack '%s': the only mode is 'manual'", cli_quote(ack));
        return CLI_USAGE;
    }
    dq_take_opts_init(opts); /* the queue's lease and max attempts */
    if (lease && cli_parse_delay("", "lease", lease, &opts->lease_ms))
        return CLI_USAGE;
    if (lease && opts->lease_ms <= 0) {
        cli_err("take: invalid lease '%s': it must be longer than 0", cli_quote(lease));
        return CLI_USAGE;
    }
    opts->holder = holder; /* checked by the library's take (exit 2) */
    *out = opts;
    return 0;
}

int cli_cmd_take(cli_env *env, int argc, char **argv)
{
    static const char *const names[] = {"QUEUE"};
    const char *count = NULL, *timeout = NULL, *ack = NULL, *lease = NULL, *holder = NULL;
    int json = 0, no_sched = 0, npos;
    const cli_opt opts[] = {{"count", &count, NULL},    {"timeout", &timeout, NULL},
                            {"json", NULL, &json},      {"no-scheduler", NULL, &no_sched},
                            {"ack", &ack, NULL},        {"lease", &lease, NULL},
                            {"holder", &holder, NULL},  {NULL, NULL, NULL}};
    take_run t = {.want = 1};
    dq_take_opts take_opts;
    int64_t timeout_ms = -1;

    int rc = cli_parse(env, "take", argc, argv, opts, &npos);
    if (rc == CLI_HELP)
        return cli_help(cli_usage_take);
    if (!rc)
        rc = cli_want_args("take", npos, 1, 1, names, argv);
    if (!rc)
        rc = cli_check_queue(argv[0]);
    if (!rc && count)
        rc = cli_parse_count(count, &t.want);
    if (!rc && timeout)
        rc = cli_parse_delay("", "timeout", timeout, &timeout_ms);
    if (!rc)
        rc = parse_ack(ack, lease, holder, &take_opts, &t.opts);
    if (!rc)
        rc = cli_connect(env, &t.c);
    if (rc)
        return rc;
    t.queue = argv[0];
    t.json = json;
    rc = run(&t, timeout_ms, !no_sched);
    cli_close(t.c);
    return rc;
}
