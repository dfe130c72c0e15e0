/*
 * cmd_offer.c - the producer's commands: offer, offer --batch, cancel.
 *
 * Owns checking what is to be offered before Redis is contacted (queue, delay,
 * id, payload size; a batch file as a whole), sending it (one dq_offer, or
 * dq_offer_many in chunks of CHUNK items) and reporting: the id of an offered
 * item, the count of a batch, and for cancel only the exit code.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#define CHUNK 1000

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
    "                ID may be empty (generated), PAYLOAD is the rest of the line;\n"
    "                blank lines are skipped. The whole file is checked before\n"
    "                anything is sent. Prints the number of items accepted.\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Payloads are at most 1048576 bytes. Exit codes: 0 ok, 2 usage error or bad\n"
    "input, 3 Redis unreachable or erroring (for a batch, after a partial failure;\n"
    "the count printed is what was accepted).\n";

const char cli_usage_cancel[] =
    "usage: delayq cancel QUEUE ID\n"
    "\n"
    "Removes the pending item ID from QUEUE. Exit 0 if it was pending and is now\n"
    "removed, 1 if it was not pending (unknown, cancelled, or already due and\n"
    "moved to the ready list), 2 usage error, 3 Redis unreachable or erroring.\n";

/* ------------------------------------------------------------ one item */

/* The payload: the argument, else all of stdin. *owned is what to free. */
static int get_payload(int npos, char **argv, dq_item *it, char **owned)
{
    size_t len;

    *owned = NULL;
    if (npos > 2) {
        it->payload = argv[2];
        len = strlen(argv[2]);
    } else if (cli_read_all(0, DQ_PAYLOAD_DEFAULT_MAX, owned, &len) == 0) {
        it->payload = *owned;
    } else {
        cli_err("cannot read the payload from stdin: %s", strerror(errno));
        return CLI_USAGE;
    }
    it->payload_len = len;
    return cli_check_payload("", len, DQ_PAYLOAD_DEFAULT_MAX);
}

/* Offers it and prints its id. */
static int send_one(const cli_env *env, const char *queue, const dq_item *it)
{
    dq_client *c;
    dq_offer_result res;
    char what[DQ_QUEUE_MAX + 32];

    int rc = cli_connect(env, &c);
    if (rc)
        return rc;
    rc = dq_offer(c, queue, it, &res);
    if (rc < 0) {
        snprintf(what, sizeof what, "offer to %s", queue);
        rc = cli_fail(c, rc, what);
    } else {
        if (res.status == DQ_KEPT)
            cli_err("id %s already %s, kept", res.id,
                    res.state == DQ_STATE_READY ? "ready" :
                    res.state == DQ_STATE_IN_FLIGHT ? "in flight" : "pending");
        printf("%s\n", res.id);
        rc = cli_write_out(NULL, 0);
    }
    dq_client_free(c);
    return rc;
}

static int offer_one(const cli_env *env, int npos, char **argv, const char *id, int nx)
{
    static const char *const names[] = {"QUEUE", "DELAY"};
    dq_item it = {.id = id, .flags = nx ? DQ_OFFER_KEEP : 0};
    char *owned = NULL;

    int rc = cli_want_args("offer", npos, 2, 3, names, argv);
    if (!rc)
        rc = cli_check_queue(argv[0]);
    if (!rc)
        rc = cli_parse_delay("", "delay", argv[1], &it.delay_ms);
    if (!rc && id)
        rc = cli_check_id("", id, strlen(id));
    if (!rc)
        rc = get_payload(npos, argv, &it, &owned);
    if (!rc)
        rc = send_one(env, argv[0], &it);
    free(owned);
    return rc;
}

/* ------------------------------------------------------------ a batch */

/* Reports the first failed item of a chunk that Redis partly refused. */
static void report_partial(const dq_client *c, const cli_batch *b, size_t off, size_t k,
                           const dq_offer_result *res)
{
    char what[64];

    for (size_t i = 0; i < k; i++) {
        if (res[i].status < 0) {
            snprintf(what, sizeof what, "batch line %zu", b->lines[off + i]);
            cli_fail(c, res[i].status, what);
            return;
        }
    }
    cli_fail(c, DQ_EREDIS, "batch");
}

/* Sends the batch in chunks; *accepted counts what Redis took. */
static int send_chunks(dq_client *c, const char *queue, const cli_batch *b,
                       size_t *accepted)
{
    dq_offer_result *res = malloc(CHUNK * sizeof *res);
    int rc = 0;

    if (!res) {
        cli_err("batch: out of memory");
        return CLI_FAIL;
    }
    for (size_t off = 0; off < b->n && !rc; off += CHUNK) {
        size_t k = b->n - off < CHUNK ? b->n - off : CHUNK;
        int got = dq_offer_many(c, queue, b->items + off, k, res);
        if (got < 0) {
            rc = cli_fail(c, got, "batch");
            rc = *accepted ? CLI_FAIL : rc;
        } else {
            *accepted += (size_t)got;
            if ((size_t)got < k) {
                report_partial(c, b, off, k, res);
                rc = CLI_FAIL;
            }
        }
    }
    free(res);
    return rc;
}

static int offer_batch(const cli_env *env, int npos, char **argv, const char *file,
                       const char *id, int nx)
{
    static const char *const names[] = {"QUEUE"};
    cli_batch b;
    dq_client *c;
    size_t accepted = 0;

    if (id) {
        cli_err("offer: --id cannot be used with --batch (give ids in the file)");
        return CLI_USAGE;
    }
    int rc = cli_want_args("offer", npos, 1, 1, names, argv);
    if (!rc)
        rc = cli_check_queue(argv[0]);
    if (!rc)
        rc = cli_batch_load(file, nx ? DQ_OFFER_KEEP : 0, &b);
    if (rc)
        return rc;
    rc = cli_connect(env, &c);
    if (!rc) {
        rc = send_chunks(c, argv[0], &b, &accepted);
        dq_client_free(c);
        printf("%zu\n", accepted);
        int wrc = cli_write_out(NULL, 0);
        rc = rc ? rc : wrc;
    }
    cli_batch_release(&b);
    return rc;
}

/* ------------------------------------------------------------ commands */

int cli_cmd_offer(cli_env *env, int argc, char **argv)
{
    const char *id = NULL, *batch = NULL;
    int nx = 0, npos;
    const cli_opt opts[] = {
        {"id", &id, NULL}, {"nx", NULL, &nx}, {"batch", &batch, NULL}, {NULL, NULL, NULL}};

    int rc = cli_parse(env, "offer", argc, argv, opts, &npos);
    if (rc == CLI_HELP)
        return cli_help(cli_usage_offer);
    if (rc)
        return rc;
    if (batch)
        return offer_batch(env, npos, argv, batch, id, nx);
    return offer_one(env, npos, argv, id, nx);
}

int cli_cmd_cancel(cli_env *env, int argc, char **argv)
{
    static const char *const names[] = {"QUEUE", "ID"};
    const cli_opt opts[] = {{NULL, NULL, NULL}};
    dq_client *c;
    int npos;

    int rc = cli_parse_ids(env, "cancel", argc, argv, opts, &npos);
    if (rc == CLI_HELP)
        return cli_help(cli_usage_cancel);
    if (!rc)
        rc = cli_want_args("cancel", npos, 2, 2, names, argv);
    if (!rc)
        rc = cli_check_queue(argv[0]);
    if (!rc)
        rc = cli_check_id("", argv[1], strlen(argv[1]));
    if (!rc)
        rc = cli_connect(env, &c);
    if (rc)
        return rc;
    int n = dq_cancel(c, argv[0], argv[1]);
    if (n < 0)
        rc = cli_fail(c, n, "cancel");
    else if (n == 0)
        cli_err("%s is not pending in %s", argv[1], argv[0]);
    dq_client_free(c);
    return n < 0 ? rc : n == 1 ? CLI_OK : CLI_NONE;
}
