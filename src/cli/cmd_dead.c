/*
 * cmd_dead.c - "delayq dead": the dead letters of a queue.
 *
 * Owns the four actions on the items that ran out of attempts: list (all of
 * them, oldest death first, read in pages of PAGE through dq_dead_list and
 * printed as they come, as tab-separated lines or JSON through output.c),
 * count, redrive (one id or all, back to the ready list with their attempts
 * starting over) and purge. count, redrive and purge print one number.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define PAGE 1000
#define MAX_PAGES 100000 /* a bound, should the list keep growing under us */

const char cli_usage_dead[] =
    "usage: delayq dead QUEUE list [--json]\n"
    "       delayq dead QUEUE count\n"
    "       delayq dead QUEUE redrive [ID]\n"
    "       delayq dead QUEUE purge\n"
    "\n"
    "The dead letters of QUEUE: items taken with a lease ('take --ack manual',\n"
    "'work') that failed or timed out on every one of their attempts.\n"
    "\n"
    "  list          all dead letters, oldest death first, one per line:\n"
    "                ID<TAB>ATTEMPTS<TAB>REASON<TAB>ERROR<TAB>PAYLOAD\n"
    "                (control characters and invalid UTF-8 in REASON and ERROR,\n"
    "                and any byte but printable ASCII in an ID that breaks the id\n"
    "                rules, are escaped as \\xHH, and '\\' there as '\\\\'; the\n"
    "                payload is printed as it is when it is\n"
    "                valid UTF-8 without control characters and does not start\n"
    "                with \"base64:\", else as \"base64:\" followed by its base64)\n"
    "  --json        with list: one object per line: \"id\", \"died_ms\", \"attempts\",\n"
    "                \"due_ms\", \"reason\", \"error\", and \"payload\"; an id or\n"
    "                payload that is not valid UTF-8 comes as \"id_base64\" or\n"
    "                \"payload_base64\" instead\n"
    "  count         prints how many there are\n"
    "  redrive [ID]  moves dead letter ID (default: all of them) back to the ready\n"
    "                list as a new item, attempts starting over; prints how many\n"
    "                were moved (an id that is in the queue again is dropped\n"
    "                instead of doubled)\n"
    "  purge         deletes them all; prints how many were deleted\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 ok, 1 redrive ID found no such dead letter, 2 usage error,\n"
    "3 Redis unreachable or erroring.\n";

static int print_count(int64_t n) {
    char line[32];
    int len = snprintf(line, sizeof line, "%" PRId64 "\n", n);
    return cli_write_out(line, (size_t)len);
}

static int list(dq_client *c, const char *queue, int json) {
    size_t offset = 0;

    for (int page = 0; page < MAX_PAGES; page++) {
        dq_dead_letter *d;
        size_t n;
        int rc = dq_dead_list(c, queue, offset, PAGE, &d, &n);
        if (rc < 0) return cli_fail(c, rc, "dead list");
        for (size_t i = 0; i < n && !rc; i++) rc = cli_print_dead(&d[i], json);
        dq_dead_letters_free(d, n);
        /* dq_dead_list returns every dead letter it examined (undecodable
         * ones too), so the next page starts n further on; only an empty
         * page ends the list. */
        if (rc || n == 0) return rc;
        offset += n;
    }
    return 0;
}

static int redrive(dq_client *c, const char *queue, const char *id) {
    int64_t n = dq_dead_redrive(c, queue, id);
    if (n < 0) return cli_fail(c, (int)n, "dead redrive");
    int rc = print_count(n);
    if (!rc && id && n == 0) {
        cli_err("dead: %s is not a dead letter of %s", cli_quote(id), queue);
        return CLI_NONE;
    }
    return rc;
}

/* Runs action on the connected client. */
static int run(dq_client *c, const char *queue, const char *action, const char *id, int json) {
    int64_t n;
    int rc;

    if (strcmp(action, "list") == 0) return list(c, queue, json);
    if (strcmp(action, "redrive") == 0) return redrive(c, queue, id);
    if (strcmp(action, "count") == 0) {
        rc = dq_dead_count(c, queue, &n);
        return rc < 0 ? cli_fail(c, rc, "dead count") : print_count(n);
    }
    n = dq_dead_purge(c, queue);
    return n < 0 ? cli_fail(c, (int)n, "dead purge") : print_count(n);
}

/* Checks the action and its arguments. Returns 0 or CLI_USAGE. */
static int check_action(int npos, char **argv, int json) {
    static const char *const names[] = {"QUEUE", "action (list, count, redrive or purge)"};
    const char *action = npos > 1 ? argv[1] : "";
    int max = strcmp(action, "redrive") == 0 ? 3 : 2;

    int rc = cli_want_args("dead", npos, 2, max, names, argv);
    if (rc) return rc;
    if (strcmp(action, "list") && strcmp(action, "count") && strcmp(action, "redrive") &&
        strcmp(action, "purge")) {
        cli_err("dead: unknown action '%s': expected list, count, redrive or purge", cli_quote(action));
        return CLI_USAGE;
    }
    if (json && strcmp(action, "list") != 0) {
        cli_err("dead: --json goes with 'list' only");
        return CLI_USAGE;
    }
    rc = cli_check_queue(argv[0]);
    if (!rc && npos > 2) rc = cli_check_id("", argv[2], strlen(argv[2]));
    return rc;
}

int cli_cmd_dead(cli_env *env, int argc, char **argv) {
    int json = 0, npos;
    const cli_opt opts[] = {{"json", NULL, &json}, {NULL, NULL, NULL}};
    dq_client *c;

    int rc = cli_parse_ids(env, "dead", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = check_action(npos, argv, json);
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = run(c, argv[0], argv[1], npos > 2 ? argv[2] : NULL, json);
    dq_client_free(c);
    return rc;
}
