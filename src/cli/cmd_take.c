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
 * comes back by itself if nobody acks it in time. A lease runs from its
 * take, so a leased take asks for one item at a time (--batch N: up to N),
 * and, when stdout is a pipe, only once the reader has read every line
 * printed before (FIONREAD, checked every DRAIN_CHECK_S): no lease runs
 * out while its line waits in the pipe behind a slow reader's backlog.
 */
#include <ev.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

#define TAKE_BATCH 64 /* items one take asks for: dq_take_many_async's limit */
/* How often a leased take looks at the pipe, at most: from 1 ms, doubling
 * while it waits. */
#define DRAIN_CHECK_S 0.01

const char cli_usage_take[] =
    "usage: delayq take QUEUE [--count N] [--timeout DUR] [--json] [--no-scheduler]\n"
    "                   [--ack manual [--lease DUR] [--holder NAME] [--batch N]]\n"
    "                   [--connect-wait DUR]\n"
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
    "  --batch N       with --ack manual: items a take asks for, 1 to 64; default\n"
    "                  1. A lease starts when its item is taken, so a leased take\n"
    "                  takes one item at a time and, when stdout is a pipe, the\n"
    "                  next only once the reader has read every line before: no\n"
    "                  lease runs while its line waits in the pipe. A batch is\n"
    "                  faster, but its leases all start at once\n"
    "  --name NAME     this consumer's name in 'delayq consumers' (1 to 64 bytes\n"
    "                  of UTF-8); default: --holder, else host:pid. A take that\n"
    "                  waits or streams (all but --timeout 0 --count 1) is\n"
    "                  listed there while it runs (items in hand: 0, its items\n"
    "                  are its reader's once printed)\n"
    "  --connect-wait DUR  while Redis cannot be reached at the start, try\n"
    "                  again (backoff 100ms to 5s) for up to DUR ('forever' for\n"
    "                  no limit); default 0: exit 3 at once\n"
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
    int64_t batch;        /* items a take asks for (at most)              */
    int pipe_out;         /* leased, and stdout is a pipe: wait for the
                             reader to read it all before the next take   */
    ev_timer drain;       /* that wait, while it lasts                    */
    double drain_in;      /* the wait's next check, in s                  */
} take_run;

static void on_take(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata);

/* Bytes printed to stdout (a pipe) that its reader has not read yet. */
static int unread_out(void) {
    int n = 0;
    return ioctl(STDOUT_FILENO, FIONREAD, &n) == 0 ? n : 0;
}

/* Starts the next take, or, for a leased one whose reader has not read all
 * that came before, the wait for it (on_drain). Returns 0, or -1 with t->rc
 * set. */
static int start_take(take_run *t) {
    struct ev_loop *loop = dq_client_loop(t->c);
    if (t->pipe_out && unread_out() > 0) {
        /* A reader that keeps up reads within a millisecond or so. */
        ev_timer_set(&t->drain, t->drain_in, 0);
        ev_timer_start(loop, &t->drain);
        t->drain_in = t->drain_in * 2 < DRAIN_CHECK_S ? t->drain_in * 2 : DRAIN_CHECK_S;
        return 0;
    }
    t->drain_in = 0.001;
    /* Each take gets what is left of --timeout as its own timeout, so a take
     * that ends it still looks at the queue once (--timeout 0 included). */
    int64_t left = -1;
    if (t->deadline >= 0) {
        double s = t->deadline - ev_now(loop);
        left = s > 0 ? (int64_t)(s * 1000.0 + 0.5) : 0;
    }
    int64_t batch = t->batch;
    if (t->want && t->want - t->got < batch) batch = t->want - t->got;
    int rc = dq_take_many_async(t->c, t->queue, t->opts, left, (size_t)batch, on_take, t, &t->req);
    if (rc == 0) return 0;
    t->rc = cli_fail(t->c, rc, "take");
    return -1;
}

/* Ends the run: right away, or once the outstanding take has reported. */
static void finish(take_run *t, const char *why) {
    if (t->stopping) return;
    t->stopping = 1;
    t->stop_why = why;
    ev_timer_stop(dq_client_loop(t->c), &t->drain);
    if (t->req) dq_take_cancel(t->req);
    else dq_stop(t->c);
}

/* The wait for the reader: the next take once it has read all, the end at
 * --timeout. */
static void on_drain(struct ev_loop *loop, ev_timer *w, int revents) {
    take_run *t = w->data;
    (void)revents;
    if (t->deadline >= 0 && ev_now(loop) >= t->deadline) {
        finish(t, "timeout");
        return;
    }
    if (start_take(t) < 0) dq_stop(t->c);
}

static void on_take(dq_client *c, int status, dq_msg **msgs, size_t n, void *privdata) {
    take_run *t = privdata;

    t->req = NULL;
    if (status == 1) {
        t->got += (int64_t)n;
        int rc = cli_print_msgs(msgs, n, t->json);
        for (size_t i = 0; i < n; i++) dq_msg_free(msgs[i]);
        if (rc) t->rc = rc;
        if (rc || (t->want && t->got >= t->want)) t->stopping = 1;
    } else if (status == 0) {
        t->stopping = 1; /* the take's timeout is what was left of --timeout */
        t->stop_why = "timeout";
    } else if (status < 0 && !(status == DQ_ECLOSED && t->stopping)) {
        t->rc = cli_fail(c, status, "take");
        t->stopping = 1;
    }
    if (t->stopping || start_take(t) < 0) dq_stop(c);
}

static void on_signal(void *data, int signum) { finish(data, signum == SIGINT ? "SIGINT" : "SIGTERM"); }

/* Runs the loop until the run is over; returns the exit code. */
static int run(take_run *t, int64_t timeout_ms, int scheduler) {
    struct ev_loop *loop = dq_client_loop(t->c);
    cli_doctor_start(t->c, DQ_DOCTOR_QUICK, NULL, NULL);
    int rc = scheduler ? dq_schedule(t->c, t->queue) : 0;

    cli_log_start(t->c);
    if (rc < 0) return cli_fail(t->c, rc, "schedule");
    ev_now_update(loop);
    t->deadline = timeout_ms >= 0 ? ev_now(loop) + (double)timeout_ms / 1000.0 : -1;
    struct stat st;
    t->pipe_out = t->opts && fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode);
    ev_timer_init(&t->drain, on_drain, DRAIN_CHECK_S, 0);
    t->drain.data = t;
    if (start_take(t) < 0) return t->rc;
    cli_signals_start(loop, on_signal, t);
    dq_run(t->c);
    cli_signals_stop(loop);
    ev_timer_stop(loop, &t->drain);
    if (t->rc) return t->rc;
    if (t->want && t->got < t->want) {
        cli_err("take: %" PRId64 " of %" PRId64 " items arrived before the %s", t->got, t->want,
                t->stop_why ? t->stop_why : "end");
        return CLI_NONE;
    }
    return CLI_OK;
}

/* Checks --ack, --lease and --holder; *out gets opts filled in for a
 * leased take, or NULL. Returns 0 or CLI_USAGE. */
static int parse_ack(const char *ack, const char *lease, const char *holder, dq_take_opts *opts,
                     const dq_take_opts **out) {
    *out = NULL;
    if (!ack) {
        if (!lease && !holder) return 0;
        cli_err("take: --%s needs --ack manual", lease ? "lease" : "holder");
        return CLI_USAGE;
    }
    if (strcmp(ack, "manual") != 0) {
        cli_err("take: invalid --ack '%s': the only mode is 'manual'", cli_quote(ack));
        return CLI_USAGE;
    }
    dq_take_opts_init(opts); /* the queue's lease and max attempts */
    if (lease && cli_parse_delay("", "lease", lease, &opts->lease_ms)) return CLI_USAGE;
    if (lease && opts->lease_ms <= 0) {
        cli_err("take: invalid lease '%s': it must be longer than 0", cli_quote(lease));
        return CLI_USAGE;
    }
    opts->holder = holder; /* checked by the library's take (exit 2) */
    *out = opts;
    return 0;
}

/* Checks --batch (a leased take's only; default 1) into *out. Returns 0 or
 * CLI_USAGE. */
static int parse_batch(const char *batch, int leased, int64_t *out) {
    if (!batch) {
        if (leased) *out = 1;
        return 0;
    }
    if (!leased) {
        cli_err("take: --batch needs --ack manual");
        return CLI_USAGE;
    }
    if (cli_parse_count(batch, out)) return CLI_USAGE;
    if (*out < 1 || *out > TAKE_BATCH) {
        cli_err("take: invalid --batch '%s': 1 to %d", cli_quote(batch), TAKE_BATCH);
        return CLI_USAGE;
    }
    return 0;
}

int cli_cmd_take(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    const char *count = NULL, *timeout = NULL, *ack = NULL, *lease = NULL, *holder = NULL;
    const char *batch = NULL, *wait = NULL, *name = NULL;
    int64_t wait_ms = 0;
    int json = 0, no_sched = 0, npos;
    const cli_opt opts[] = {{"count", &count, NULL},
                            {"timeout", &timeout, NULL},
                            {"json", NULL, &json},
                            {"no-scheduler", NULL, &no_sched},
                            {"ack", &ack, NULL},
                            {"lease", &lease, NULL},
                            {"holder", &holder, NULL},
                            {"batch", &batch, NULL},
                            {"connect-wait", &wait, NULL},
                            {"name", &name, NULL},
                            {NULL, NULL, NULL}};
    take_run t = {.want = 1, .batch = TAKE_BATCH};
    dq_take_opts take_opts;
    int64_t timeout_ms = -1;

    int rc = cli_parse(env, "take", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("take", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc && count) rc = cli_parse_count(count, &t.want);
    if (!rc && timeout) rc = cli_parse_delay("", "timeout", timeout, &timeout_ms);
    if (!rc) rc = parse_ack(ack, lease, holder, &take_opts, &t.opts);
    if (!rc) rc = parse_batch(batch, t.opts != NULL, &t.batch);
    if (!rc && wait) rc = cli_parse_connect_wait(wait, &wait_ms);
    if (!rc && name && !cli_name_valid("take", name)) rc = CLI_USAGE;
    if (!rc && !t.opts) rc = cli_out_usable("take"); /* a leased item would come back */
    if (!rc) rc = cli_connect_wait(env, NULL, wait_ms, &t.c);
    if (rc) return rc;
    t.queue = argv[0];
    t.json = json;
    /* One that waits or streams shows in 'delayq consumers'; cli_close says
     * it leaves. A bad --holder is the take's to refuse (exit 2). */
    dq_consumer *me = NULL;
    if (!name && holder && cli_name_ok(holder)) name = holder;
    if (timeout_ms != 0 || t.want != 1) cli_consumer_start(t.c, t.queue, name, &me);
    rc = run(&t, timeout_ms, !no_sched);
    cli_close(t.c);
    return rc;
}
