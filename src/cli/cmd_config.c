/*
 * cmd_config.c - "delayq config": a queue's own settings (lease, max
 * attempts, backoff), shared by every consumer that does not set its own.
 *
 * Owns parsing the setting options, calling dq_queue_config_set/_get/_reset,
 * and printing the settings as "name value" lines or one JSON object.
 */
#include <errno.h>
#include <stdlib.h>

#include "cli/cli.h"

const char cli_usage_config[] =
    "usage: delayq config QUEUE [--lease DUR] [--max-attempts N]\n"
    "                    [--backoff-base DUR] [--backoff-max DUR] [--shards N]\n"
    "                    [--reset] [--json]\n"
    "\n"
    "Shows QUEUE's settings, after changing those given. Consumers that do not\n"
    "set their own ('take --ack manual' without --lease, 'work' without --lease\n"
    "or --max-attempts) use them:\n"
    "  --lease DUR          how long a taken item stays in flight; default 30s\n"
    "  --max-attempts N     deliveries before a dead letter; 0 = no limit;\n"
    "                       default 16\n"
    "  --backoff-base DUR   first retry delay of a nack without --delay; it\n"
    "                       doubles each attempt, with jitter; default 1s\n"
    "  --backoff-max DUR    the cap of that delay; default 10m\n"
    "  --shards N           spread the queue over N slots (so, on a cluster,\n"
    "                       over the masters), 1..64; default 1. Changes only\n"
    "                       while the queue is empty: refused otherwise, and\n"
    "                       nothing changes\n"
    "  --reset              back to the defaults (before applying the others)\n"
    "  --json               {\"lease_ms\":N,\"max_attempts\":N,\"backoff_base_ms\":N,\n"
    "                       \"backoff_max_ms\":N,\"shards\":N}\n"
    "  --redis URL          the Redis server (see 'delayq --help')\n"
    "\n"
    "Prints lease_ms, max_attempts, backoff_base_ms, backoff_max_ms, shards, one\n"
    "per line.\n"
    "A backoff base above the backoff max (given, or kept from before) is a\n"
    "usage error and changes nothing.\n"
    "Exit codes: 0 ok, 2 usage error or a refused setting, 3 Redis unreachable\n"
    "or erroring, or stdout could not be written.\n";

static int parse_count(const char *text, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end || errno || v > INT32_MAX) {
        cli_err("config: invalid max attempts '%s': expected a whole number, 0 = no limit",
                cli_quote(text));
        return CLI_USAGE;
    }
    *out = v;
    return 0;
}

/* The backoff defaults (lua/lib/20_counters.lua's CFG_DEFAULTS): what --reset
 * leaves for a bound not given with it. */
#define BACKOFF_BASE_DEFAULT_MS 1000
#define BACKOFF_MAX_DEFAULT_MS 600000

/* A base above the cap that the options themselves show (both given, or
 * one given with --reset): refused here, before anything is changed. One
 * given against the other's stored value is the script's to refuse. */
static int check_backoff(const char *base, const char *cap, int reset, const dq_queue_config *set) {
    int64_t b = set->backoff_base_ms, m = set->backoff_max_ms;

    if (reset && !base) b = BACKOFF_BASE_DEFAULT_MS;
    if (reset && !cap) m = BACKOFF_MAX_DEFAULT_MS;
    if (b < 0 || m < 0 || b <= m) return 0;
    cli_err("config: backoff base %s is above backoff max %s: the base must not exceed the max",
            base ? cli_quote(base) : "1s (the default)", cap ? cli_quote(cap) : "10m (the default)");
    return CLI_USAGE;
}

/* Reads the options into *set (DQ_QUEUE_SETTING for those not given). */
static int parse_settings(const char *lease, const char *max, const char *base, const char *cap,
                          const char *shards, dq_queue_config *set) {
    set->lease_ms = set->max_attempts = DQ_QUEUE_SETTING;
    set->backoff_base_ms = set->backoff_max_ms = set->shards = DQ_QUEUE_SETTING;
    char *end;
    if (shards && (shards[0] < '0' || shards[0] > '9' || (set->shards = strtol(shards, &end, 10)) < 1 ||
                   set->shards > 64 || *end)) {
        cli_err("config: invalid shard count '%s': expected 1 to 64", cli_quote(shards));
        return CLI_USAGE;
    }
    if (lease && cli_parse_delay("", "lease", lease, &set->lease_ms)) return CLI_USAGE;
    if (lease && set->lease_ms <= 0) {
        cli_err("config: invalid lease '%s': it must be longer than 0", cli_quote(lease));
        return CLI_USAGE;
    }
    if (max && parse_count(max, &set->max_attempts)) return CLI_USAGE;
    if (base && cli_parse_delay("", "backoff base", base, &set->backoff_base_ms)) return CLI_USAGE;
    if (cap && cli_parse_delay("", "backoff max", cap, &set->backoff_max_ms)) return CLI_USAGE;
    return 0;
}

int cli_cmd_config(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    const char *lease = NULL, *max = NULL, *base = NULL, *cap = NULL, *shards = NULL;
    int json = 0, reset = 0, npos;
    const cli_opt opts[] = {{"lease", &lease, NULL},       {"max-attempts", &max, NULL},
                            {"backoff-base", &base, NULL}, {"backoff-max", &cap, NULL},
                            {"shards", &shards, NULL},     {"reset", NULL, &reset},
                            {"json", NULL, &json},         {NULL, NULL, NULL}};
    dq_queue_config set, now;
    dq_client *c;

    int rc = cli_parse(env, "config", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("config", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc) rc = parse_settings(lease, max, base, cap, shards, &set);
    if (!rc) rc = check_backoff(base, cap, reset, &set);
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    if (reset) rc = dq_queue_config_reset(c, argv[0]);
    if (rc == 0) rc = dq_queue_config_set(c, argv[0], &set, &now);
    if (rc < 0) rc = cli_fail(c, rc, "config");
    else rc = cli_print_settings(&now, json);
    dq_client_free(c);
    return rc;
}
