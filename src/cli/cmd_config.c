/*
 * cmd_config.c - "delayq config": a queue's own settings (lease, max
 * attempts, backoff), shared by every consumer that does not set its own.
 *
 * Owns parsing the setting options, calling dq_queue_config_set/_get/_reset,
 * and printing the settings as "name value" lines or one JSON object.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

const char cli_usage_config[] =
    "usage: delayq config QUEUE [--lease DUR] [--max-attempts N]\n"
    "                    [--backoff-base DUR] [--backoff-max DUR] [--reset] [--json]\n"
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
    "  --reset              back to the defaults (before applying the others)\n"
    "  --json               {\"lease_ms\":N,\"max_attempts\":N,\"backoff_base_ms\":N,\n"
    "                       \"backoff_max_ms\":N}\n"
    "  --redis URL          the Redis server (see 'delayq --help')\n"
    "\n"
    "Prints lease_ms, max_attempts, backoff_base_ms, backoff_max_ms, one per line.\n"
    "Exit codes: 0 ok, 2 usage error, 3 Redis unreachable or erroring.\n";

static int parse_count(const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end || errno || v > INT32_MAX) {
        cli_err("config: invalid max attempts '%s': expected a whole number, 0 = no limit", text);
        return CLI_USAGE;
    }
    *out = v;
    return 0;
}

/* Reads the options into *set (DQ_QUEUE_SETTING for those not given). */
static int parse_settings(const char *lease, const char *max, const char *base, const char *cap,
                          dq_queue_config *set)
{
    set->lease_ms = set->max_attempts = DQ_QUEUE_SETTING;
    set->backoff_base_ms = set->backoff_max_ms = DQ_QUEUE_SETTING;
    if (lease && cli_parse_delay("", "lease", lease, &set->lease_ms))
        return CLI_USAGE;
    if (lease && set->lease_ms <= 0) {
        cli_err("config: invalid lease '%s': it must be longer than 0", lease);
        return CLI_USAGE;
    }
    if (max && parse_count(max, &set->max_attempts))
        return CLI_USAGE;
    if (base && cli_parse_delay("", "backoff base", base, &set->backoff_base_ms))
        return CLI_USAGE;
    if (cap && cli_parse_delay("", "backoff max", cap, &set->backoff_max_ms))
        return CLI_USAGE;
    return 0;
}

static void print_settings(const dq_queue_config *q, int json)
{
    if (json)
        printf("{\"lease_ms\":%" PRId64 ",\"max_attempts\":%" PRId64 ",\"backoff_base_ms\":%" PRId64
               ",\"backoff_max_ms\":%" PRId64 "}\n",
               q->lease_ms, q->max_attempts, q->backoff_base_ms, q->backoff_max_ms);
    else
        printf("lease_ms %" PRId64 "\nmax_attempts %" PRId64 "\nbackoff_base_ms %" PRId64
               "\nbackoff_max_ms %" PRId64 "\n",
               q->lease_ms, q->max_attempts, q->backoff_base_ms, q->backoff_max_ms);
}

int cli_cmd_config(cli_env *env, int argc, char **argv)
{
    static const char *const names[] = {"QUEUE"};
    const char *lease = NULL, *max = NULL, *base = NULL, *cap = NULL;
    int json = 0, reset = 0, npos;
    const cli_opt opts[] = {{"lease", &lease, NULL},       {"max-attempts", &max, NULL},
                            {"backoff-base", &base, NULL}, {"backoff-max", &cap, NULL},
                            {"reset", NULL, &reset},       {"json", NULL, &json},
                            {NULL, NULL, NULL}};
    dq_queue_config set, now;
    dq_client *c;

    int rc = cli_parse(env, "config", argc, argv, opts, &npos);
    if (rc == CLI_HELP)
        return cli_help(cli_usage_config);
    if (!rc)
        rc = cli_want_args("config", npos, 1, 1, names, argv);
    if (!rc)
        rc = cli_check_queue(argv[0]);
    if (!rc)
        rc = parse_settings(lease, max, base, cap, &set);
    if (!rc)
        rc = cli_connect(env, &c);
    if (rc)
        return rc;
    if (reset)
        rc = dq_queue_config_reset(c, argv[0]);
    if (rc == 0)
        rc = dq_queue_config_set(c, argv[0], &set, &now);
    if (rc < 0)
        rc = cli_fail(c, rc, "config");
    else
        print_settings(&now, json);
    dq_client_free(c);
    return rc;
}
