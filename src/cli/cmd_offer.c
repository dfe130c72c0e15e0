/*
 * cmd_offer.c - the producer's commands: offer, offer --batch, cancel.
 *
 * Owns checking what is to be offered before it is sent (queue, delay and the
 * due time it makes, id, payload size), sending it (one dq_offer; a batch
 * file streamed a chunk at a time through batch.c, each chunk checked whole
 * and then sent in one dq_offer_many) and reporting: the id of an offered
 * item, the count of a batch, and for cancel only the exit code.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

const char cli_usage_offer[] =
    "usage: delayq offer QUEUE DELAY [PAYLOAD] [--id ID] [--nx]\n"
    "       delayq offer QUEUE --batch FILE [--nx]\n"
    "\n"
    "Adds an item to QUEUE, due DELAY from now (by the Redis server's clock), and\n"
    "prints its id. Without PAYLOAD the payload is all of stdin (any bytes).\n"
    "\n"
    "  DELAY         250ms, 30s, 5m, 2h, 1d, or bare milliseconds; 0 = now\n"
    "  --id ID       the item's id (1-128 printable ASCII characters, no spaces);\n"
    "                default: a new random id. Offering a pending id again replaces\n"
    "                its payload and due time.\n"
    "  --nx          keep a pending item with that id as it is (still prints the id)\n"
    "  --batch FILE  offer every line of FILE ('-' = stdin): DELAY<TAB>ID<TAB>PAYLOAD,\n"
    "                ID may be empty (generated), PAYLOAD is the rest of the line\n"
    "                (without a '\\r' that ends it: CRLF files read as LF ones);\n"
    "                blank lines are skipped. Read, checked and sent in chunks of\n"
    "                16384 lines (at most about 4 MiB; fewer when piped input\n"
    "                pauses, so streamed lines go out as they come), each checked\n"
    "                whole before it is sent, its lines in delay order unless an\n"
    "                id comes twice; a line longer than a delay, an id and a payload\n"
    "                can be is refused as soon as it is seen. Prints the number\n"
    "                of items offered, also after a failure once anything was\n"
    "                sent: a bad line or a failure stops the batch, the chunks\n"
    "                before it stay offered, nothing after it is sent.\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Payloads are at most 1048576 bytes, and the due time (the Redis server's\n"
    "now + DELAY) at most 4398046511103 ms after the epoch (in 2109).\n"
    "Exit codes: 0 ok, 2 usage error or bad input (a bad line of a batch, a\n"
    "delay that puts the due time out of range), 3 Redis unreachable or erroring,\n"
    "or stdout could not be written.\n";

const char cli_usage_cancel[] =
    "usage: delayq cancel QUEUE ID\n"
    "\n"
    "Removes the pending item ID from QUEUE. Exit 0 if it was pending and is now\n"
    "removed, 1 if it was not pending (unknown, cancelled, or already due and\n"
    "moved to the ready list), 2 usage error, 3 Redis unreachable or erroring.\n";

/* ------------------------------------------------------------ one item */

/* The payload: the argument, else all of stdin. *owned is what to free. */
static int get_payload(int npos, char **argv, dq_item *it, char **owned) {
    size_t len;

    *owned = NULL;
    if (npos > 2) {
        it->payload = argv[2];
        len = strlen(argv[2]);
    } else if (cli_read_all(0, DQ_PAYLOAD_DEFAULT_MAX, owned, &len) == 0) {
        it->payload = *owned;
        if (len > DQ_PAYLOAD_DEFAULT_MAX) {
            cli_err("payload on stdin is more than %u bytes, the limit", DQ_PAYLOAD_DEFAULT_MAX);
            return CLI_USAGE;
        }
    } else {
        cli_err("cannot read the payload from stdin: %s", strerror(errno));
        return CLI_USAGE;
    }
    it->payload_len = len;
    return cli_check_payload("", len, DQ_PAYLOAD_DEFAULT_MAX);
}

/* Offers it and prints its id. */
static int send_one(const cli_env *env, const char *queue, const dq_item *it) {
    dq_client *c;
    dq_offer_result res;
    char what[DQ_QUEUE_MAX + 32];
    char line[DQ_ID_MAX + 2];

    int rc = cli_connect(env, &c);
    if (rc) return rc;
    int code = dq_offer(c, queue, it, &res);
    snprintf(what, sizeof what, "offer to %s", queue);
    if (code < 0 && code != DQ_ENOTDURABLE) {
        rc = cli_fail(c, code, what);
    } else {
        if (res.status == DQ_KEPT)
            cli_err("id %s already %s, kept", cli_quote(res.id),
                    res.state == DQ_STATE_READY       ? "ready"
                    : res.state == DQ_STATE_IN_FLIGHT ? "in flight"
                                                      : "pending");
        int n = snprintf(line, sizeof line, "%s\n", res.id);
        rc = cli_write_out(line, (size_t)n);
        /* Offered, but not confirmed by the replicas asked for: exit 4. */
        if (!rc && code == DQ_ENOTDURABLE) rc = cli_fail(c, code, what);
    }
    dq_client_free(c);
    return rc;
}

static int offer_one(const cli_env *env, int npos, char **argv, const char *id, int nx) {
    static const char *const names[] = {"QUEUE", "DELAY"};
    dq_item it = {.id = id, .flags = nx ? DQ_OFFER_KEEP : 0};
    char *owned = NULL;

    int rc = cli_want_args("offer", npos, 2, 3, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_parse_delay("", "delay", argv[1], &it.delay_ms);
    if (!rc) rc = cli_check_due("", argv[1], it.delay_ms, cli_delay_max());
    if (!rc && id) rc = cli_check_id("", id, strlen(id));
    if (!rc) rc = get_payload(npos, argv, &it, &owned);
    if (!rc) rc = send_one(env, argv[0], &it);
    free(owned);
    return rc;
}

/* ------------------------------------------------------------ a batch */

/* A batch run: the chunks read from the file, and what Redis took. */
typedef struct batch_run {
    cli_batch b;
    dq_client *c;          /* connected for the first chunk to send       */
    dq_offer_result *res;  /* BATCH_CHUNK_ITEMS results                   */
    size_t accepted;       /* items Redis took                            */
    size_t whole;          /* ... of them in the chunks it took whole     */
    size_t last_line;      /* the last line of those chunks, 0 if none    */
    int not_durable;       /* some chunk was not confirmed: exit 4 at end */
} batch_run;

/* Reports the first failed item of a chunk that Redis partly refused. */
static int report_partial(const batch_run *r, size_t k) {
    char what[64];

    for (size_t i = 0; i < k; i++) {
        if (r->res[i].status < 0) {
            snprintf(what, sizeof what, "batch line %zu", r->b.lines[i]);
            return cli_fail(r->c, r->res[i].status, what);
        }
    }
    return cli_fail(r->c, DQ_EREDIS, "batch");
}

/* Sends the chunk in r->b; counts what Redis took. */
static int send_chunk(batch_run *r, const char *queue) {
    size_t k = r->b.n;
    int got = dq_offer_many(r->c, queue, r->b.items, k, r->res);

    if (got == DQ_ENOTDURABLE) {
        /* All offered; say so once, go on, and exit 4 at the end. */
        if (!r->not_durable) cli_fail(r->c, got, "batch");
        r->not_durable = 1;
        got = (int)k;
    }
    if (got < 0) return cli_fail(r->c, got, "batch");
    r->accepted += (size_t)got;
    if ((size_t)got < k) return report_partial(r, k);
    r->whole = r->accepted;
    r->last_line = r->b.lines[k - 1];
    return 0;
}

/* Reads, checks and sends the file a chunk at a time. */
static int run_batch(const cli_env *env, const char *queue, batch_run *r) {
    int rc;

    while ((rc = cli_batch_next(&r->b)) == 0 && r->b.n > 0) {
        if (!r->c && (rc = cli_connect(env, &r->c)) != 0) return rc;
        if (!r->res && !(r->res = malloc(BATCH_CHUNK_ITEMS * sizeof *r->res))) {
            cli_err("batch: out of memory");
            return CLI_FAIL;
        }
        if ((rc = send_chunk(r, queue)) != 0) return rc;
    }
    return rc;
}

static int offer_batch(const cli_env *env, int npos, char **argv, const char *file, const char *id,
                       int nx) {
    static const char *const names[] = {"QUEUE"};
    batch_run r = {0};
    char line[32];

    if (id) {
        cli_err("offer: --id cannot be used with --batch (give ids in the file)");
        return CLI_USAGE;
    }
    int rc = cli_want_args("offer", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_batch_open(file, nx ? DQ_OFFER_KEEP : 0, &r.b);
    if (rc) return rc;
    rc = run_batch(env, argv[0], &r);
    if (rc && r.whole)
        cli_err("batch: stopped; offered before: %zu item%s, every line up to line %zu%s", r.whole,
                r.whole == 1 ? "" : "s", r.last_line,
                r.accepted > r.whole ? ", and some of the chunk that failed (see the count)" : "");
    else if (rc && r.accepted)
        cli_err("batch: stopped; offered before: %zu item%s of the first chunk", r.accepted,
                r.accepted == 1 ? "" : "s");
    /* The count: what was offered, also after a failure once Redis was
     * reached, so a caller knows how far the batch got. */
    if (!rc || r.c) {
        int n = snprintf(line, sizeof line, "%zu\n", r.accepted);
        int wrc = cli_write_out(line, (size_t)n);
        rc = rc ? rc : wrc;
    }
    if (!rc && r.not_durable) rc = CLI_NOT_DURABLE;
    dq_client_free(r.c);
    free(r.res);
    cli_batch_close(&r.b);
    return rc;
}

/* ------------------------------------------------------------ commands */

int cli_cmd_offer(cli_env *env, int argc, char **argv) {
    const char *id = NULL, *batch = NULL;
    int nx = 0, npos;
    const cli_opt opts[] = {
        {"id", &id, NULL}, {"nx", NULL, &nx}, {"batch", &batch, NULL}, {NULL, NULL, NULL}};

    int rc = cli_parse(env, "offer", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (rc) return rc;
    if (batch) return offer_batch(env, npos, argv, batch, id, nx);
    return offer_one(env, npos, argv, id, nx);
}

int cli_cmd_cancel(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE", "ID"};
    const cli_opt opts[] = {{NULL, NULL, NULL}};
    dq_client *c;
    int npos;

    int rc = cli_parse_ids(env, "cancel", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("cancel", npos, 2, 2, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_check_id("", argv[1], strlen(argv[1]));
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    int n = dq_cancel(c, argv[0], argv[1]);
    if (n < 0) rc = cli_fail(c, n, "cancel");
    else if (n == 0) cli_err("%s is not pending in %s", cli_quote(argv[1]), argv[0]);
    dq_client_free(c);
    return n < 0 ? rc : n == 1 ? CLI_OK : CLI_NONE;
}
