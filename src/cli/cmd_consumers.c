/*
 * cmd_consumers.c - "delayq consumers": who consumes a queue now.
 *
 * Owns reading dq_consumers for a queue and printing it, one line per live
 * consumer ("NAME in_hand N up_s N seen_s N") or with --json one object
 * per line, and the JSON form of a consumer that serve's API shares
 * (cli_consumer_json). The consumers are the long-running takes, workers
 * and serve's takes, which beat in Redis (src/ops/consumer.c); one that stops
 * beating drops out within 3 beats (45 s by default).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util.h"

const char cli_usage_consumers[] =
    "usage: delayq consumers QUEUE [--json]\n"
    "\n"
    "Lists the live consumers of QUEUE, by name, one a line:\n"
    "  NAME in_hand N up_s N seen_s N\n"
    "NAME is the consumer's (--name of take and work; default host:pid), in_hand\n"
    "the items it held at its last beat, up_s the seconds since it started and\n"
    "seen_s since its last beat. Consumers ('take' when it streams or waits,\n"
    "'work', serve's HTTP takes, dq_worker) beat every 15 s; one that stops\n"
    "(killed, frozen, cut off) drops out of the list within 45 s, and one that\n"
    "exits cleanly at once.\n"
    "\n"
    "  --json        one object per consumer: {\"name\":S,\"queue\":S,\n"
    "                \"started_ms\":N,\"in_hand\":N,\"last_seen_ms\":N,\n"
    "                \"last_seen_ago_ms\":N} (server ms)\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 listed (none is an empty list), 2 usage error, 3 Redis\n"
    "unreachable or erroring.\n";

json_t *cli_consumer_json(const char *queue, const dq_consumer_info *ci) {
    json_t *o = json_object();
    if (o && (json_object_set_new(o, "name", json_string(ci->name)) ||
              json_object_set_new(o, "queue", json_string(queue)) ||
              json_object_set_new(o, "started_ms", json_integer((json_int_t)ci->started_ms)) ||
              json_object_set_new(o, "in_hand", json_integer((json_int_t)ci->in_hand)) ||
              json_object_set_new(o, "last_seen_ms", json_integer((json_int_t)ci->last_seen_ms)) ||
              json_object_set_new(o, "last_seen_ago_ms",
                                  json_integer((json_int_t)(ci->now_ms - ci->last_seen_ms))))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

int cli_name_ok(const char *name) { return dq__name_valid(name, DQ_CONSUMER_NAME_MAX); }

int cli_name_valid(const char *cmd, const char *name) {
    int ok = cli_name_ok(name);
    if (!ok)
        cli_err("%s: invalid --name '%s': 1 to %d bytes of UTF-8, no control character", cmd,
                cli_quote(name), DQ_CONSUMER_NAME_MAX);
    return ok;
}

void cli_consumer_start(dq_client *c, const char *queue, const char *name, dq_consumer **out) {
    *out = NULL;
    if (dq_consumer_start(c, queue, name, out) != 0)
        cli_err("consumer of %s not registered ('delayq consumers' will not list it): %s", queue,
                dq_client_errstr(c));
}

/* One consumer's line into b. Returns 0 or -1 (out of memory). */
static int consumer_line(dq__buf *b, const char *queue, const dq_consumer_info *ci, int json) {
    if (json) return cli_json_line(b, cli_consumer_json(queue, ci));
    return dq__buf_printf(b, "%s in_hand %" PRId64 " up_s %" PRId64 " seen_s %" PRId64 "\n", ci->name,
                          ci->in_hand, (ci->now_ms - ci->started_ms) / 1000,
                          (ci->now_ms - ci->last_seen_ms) / 1000);
}

int cli_cmd_consumers(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    int json = 0, npos;
    const cli_opt opts[] = {{"json", NULL, &json}, {NULL, NULL, NULL}};
    dq_client *c;
    dq_consumer_info *list;
    size_t n;

    int rc = cli_parse(env, "consumers", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("consumers", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = dq_consumers(c, argv[0], &list, &n);
    if (rc < 0) {
        rc = cli_fail(c, rc, "consumers");
        dq_client_free(c);
        return rc;
    }
    dq__buf b = {0};
    for (size_t i = 0; i < n && !rc; i++) rc = consumer_line(&b, argv[0], &list[i], json);
    if (rc) {
        cli_err("consumers: out of memory");
        rc = CLI_FAIL;
    } else {
        rc = cli_write_out(b.data, b.len) ? CLI_FAIL : 0;
    }
    dq__buf_release(&b);
    free(list);
    dq_client_free(c);
    return rc;
}
