/*
 * cmd_browse.c - "delayq lookup" and "delayq list": one item by id, and the
 * items of a queue in one state, a page at a time.
 *
 * Owns their arguments and printing through output.c. Both read only (the
 * library's no-writes scripts), on the same paged reads as the HTTP API of
 * 'delayq serve': a page's cursor is printed on stderr ("next: C") so a
 * script can ask for the next page with --cursor C.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

const char cli_usage_lookup[] =
    "usage: delayq lookup QUEUE ID [--json]\n"
    "\n"
    "Prints the state of ID in QUEUE: 'state S' (pending, ready, inflight, dead\n"
    "or unknown), then 'due_ms N' (pending) or 'lease_end_ms N' (inflight),\n"
    "'attempts N', and 'holder NAME' while a lease whose take named its holder\n"
    "lasts (take --holder).\n"
    "\n"
    "  --json        one object: {\"id\":ID,\"state\":S,\"due_ms\":N|null,\n"
    "                \"lease_end_ms\":N|null,\"attempts\":N,\"holder\":NAME|null}\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 found, 1 unknown id, 2 usage error, 3 Redis unreachable or\n"
    "erroring.\n";

const char cli_usage_list[] =
    "usage: delayq list QUEUE [--state S] [--limit N] [--cursor C] [--json]\n"
    "\n"
    "Prints one page of the items of QUEUE in state S: pending (by due time,\n"
    "the default), inflight (by lease end), ready or dead (oldest first). Each\n"
    "item is a line ID<TAB>STATE<TAB>TIME<TAB>ATTEMPTS<TAB>ERROR<TAB>PAYLOAD, TIME\n"
    "being its due time, lease end or time of death in ms; a sealed payload\n"
    "shows as <sealed>. When more may follow, 'next: C' goes to stderr: pass\n"
    "--cursor C for the next page. A page reads a bounded part of the queue, so\n"
    "it may hold fewer than N items and still have a next one.\n"
    "\n"
    "  --state S     pending, ready, inflight or dead\n"
    "  --limit N     items a page, 1 to 1000 (default 100)\n"
    "  --cursor C    the page after the one that printed 'next: C'\n"
    "  --json        one object per item (see docs/operations.md, 'The HTTP\n"
    "                API'); an item in flight has its take's \"holder\" while\n"
    "                the lease lasts\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 ok, 2 usage error, 3 Redis unreachable or erroring.\n";

int cli_cmd_lookup(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE", "ID"};
    int json = 0, npos;
    const cli_opt opts[] = {{"json", NULL, &json}, {NULL, NULL, NULL}};
    dq_client *c;
    dq_item_info info;

    int rc = cli_parse_ids(env, "lookup", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("lookup", npos, 2, 2, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_check_id("lookup: ", argv[1], strlen(argv[1]));
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = dq_lookup(c, argv[0], argv[1], &info);
    if (rc < 0) rc = cli_fail(c, rc, "lookup");
    else if ((rc = cli_print_lookup(argv[1], &info, json)) == 0 && info.state == DQ_STATE_UNKNOWN)
        rc = CLI_NONE;
    dq_client_free(c);
    return rc;
}

/* An enum dq_state from its name, or -1. */
static int state_named(const char *name) {
    for (int s = DQ_STATE_PENDING; s <= DQ_STATE_DEAD; s++)
        if (strcmp(name, cli_state_name(s)) == 0) return s;
    return -1;
}

/* Prints the page and its cursor. */
static int print_page(const dq_listed *items, size_t n, const char *next, int json) {
    for (size_t i = 0; i < n; i++)
        if (cli_print_listed(&items[i], json)) return CLI_FAIL;
    if (next[0]) cli_err("next: %s", next);
    return CLI_OK;
}

int cli_cmd_list(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    const char *state_arg = "pending", *limit_arg = "100", *cursor = "";
    int json = 0, npos;
    const cli_opt opts[] = {{"state", &state_arg, NULL},
                            {"limit", &limit_arg, NULL},
                            {"cursor", &cursor, NULL},
                            {"json", NULL, &json},
                            {NULL, NULL, NULL}};
    dq_client *c;

    int rc = cli_parse(env, "list", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("list", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    int state = state_named(state_arg);
    if (!rc && state < 0) {
        cli_err("list: --state: expected pending, ready, inflight or dead, not %s",
                cli_quote(state_arg));
        rc = CLI_USAGE;
    }
    char *end;
    long limit = strtol(limit_arg, &end, 10);
    if (!rc && (!*limit_arg || *end || limit < 1 || limit > 1000)) {
        cli_err("list: --limit: expected a number from 1 to 1000, not %s", cli_quote(limit_arg));
        rc = CLI_USAGE;
    }
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    dq_listed *items;
    size_t n;
    char next[DQ_CURSOR_MAX + 1];
    rc = dq_list(c, argv[0], state, cursor, (size_t)limit, &items, &n, next);
    if (rc < 0) {
        rc = cli_fail(c, rc, "list");
    } else {
        rc = print_page(items, n, next, json);
        dq_listed_free(items, n);
    }
    dq_client_free(c);
    return rc;
}
