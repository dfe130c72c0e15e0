/*
 * main.c - the delayq command: global options, dispatch, usage.
 *
 * Owns what comes before the command name (--redis URL, --help, --version),
 * the default Redis URL ($DELAYQ_REDIS, else redis://127.0.0.1:6379), the
 * table of commands, "delayq help [COMMAND]", every command's --help (a
 * command returns CLI_HELP; its usage is printed here, the one place) and
 * the overall usage text. Each command lives in its own cmd_*.c and returns
 * the process's exit code; a stdout that fails at the last flush turns
 * success into exit 3.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#define DEFAULT_URL "redis://127.0.0.1:6379"

static const char usage_main[] =
    "usage: delayq [--redis URL] COMMAND [ARGS...]\n"
    "\n"
    "A Redis-backed delay queue: offer items now, take them when they are due.\n"
    "\n"
    "Commands:\n"
    "  offer QUEUE DELAY [PAYLOAD] [--id ID] [--nx]\n"
    "                       add an item (payload from stdin when omitted); prints its id\n"
    "  offer QUEUE --batch FILE [--nx]\n"
    "                       add the DELAY<TAB>ID<TAB>PAYLOAD lines of FILE ('-' = stdin)\n"
    "  cancel QUEUE ID      remove a pending item (exit 1 if it was not pending)\n"
    "  take QUEUE [--count N] [--timeout DUR] [--json] [--no-scheduler]\n"
    "             [--ack manual [--lease DUR] [--holder NAME] [--batch N]]\n"
    "                       wait for due items and print them (with --ack manual:\n"
    "                       with a lease, each to be acked or nacked)\n"
    "  ack QUEUE ID TOKEN   done with a delivery of 'take --ack manual'\n"
    "  nack QUEUE ID TOKEN [--delay DUR] [--error TEXT]\n"
    "                       failed it: retry later, or bury it after its last attempt\n"
    "  release QUEUE ID TOKEN [--delay DUR]\n"
    "                       give it back unfailed: ready again, no attempt counted\n"
    "  extend QUEUE ID TOKEN DUR\n"
    "                       still working on it: the lease ends DUR from now\n"
    "  work QUEUE --exec CMD [--concurrency N] [--lease DUR] [--max-attempts N]\n"
    "                       run CMD for each item (payload on stdin) until SIGTERM;\n"
    "                       exit status 0 acks, anything else retries\n"
    "  schedule QUEUE...    move due items to their ready lists until SIGINT/SIGTERM\n"
    "  every QUEUE NAME INTERVAL [PAYLOAD] [--missed skip|one|all] [--start TIME]\n"
    "        [--end TIME]   a recurring schedule: one item per tick, whatever the\n"
    "                       number of schedulers\n"
    "  cron QUEUE NAME EXPR [PAYLOAD] [--tz ZONE] [--missed P] [--start T] [--end T]\n"
    "                       a recurring schedule by a cron expression in a zone\n"
    "  schedules QUEUE [--json] | schedules QUEUE remove|pause|resume NAME\n"
    "                       list or change a queue's recurring schedules\n"
    "  stats QUEUE [--json] pending, ready, next_due_in_ms, inflight, dead of a queue\n"
    "  consumers QUEUE [--json]\n"
    "                       the live consumers of a queue: name, items in hand\n"
    "  dead QUEUE list [--json] | count | redrive [ID] | purge\n"
    "                       the items that ran out of attempts\n"
    "  config QUEUE [--lease DUR] [--max-attempts N] [--backoff-base DUR]\n"
    "               [--backoff-max DUR] [--reset] [--json]\n"
    "                       the queue's own settings, for consumers that set none\n"
    "  acl QUEUE... --user NAME [--password-file FILE] [--read-only]\n"
    "                       print the ACL SETUSER rule that lets NAME use these\n"
    "                       queues and nothing else\n"
    "  functions load | status\n"
    "                       load delayq's function library on every master (an\n"
    "                       administrator's act), or show which masters hold it\n"
    "  keygen               print a new key line for --key-file (sealed payloads)\n"
    "  lookup QUEUE ID [--json]\n"
    "                       the state, due time or lease end, and attempts of ID\n"
    "  list QUEUE [--state S] [--limit N] [--cursor C] [--json]\n"
    "                       a page of the items in a state (pending, ready,\n"
    "                       inflight, dead)\n"
    "  serve [--listen ADDR:PORT] [--token-file FILE] [QUEUE...]\n"
    "                       HTTP: Prometheus /metrics, a dashboard at /, a JSON API\n"
    "  doctor [--json]      what in the Redis deployment breaks delayq's promises\n"
    "                       (eviction, persistence, replicas, clocks, version, ACL)\n"
    "  help [COMMAND]       this text, or a command's\n"
    "\n"
    "Options:\n"
    "  --redis URL    redis://[[user:]password@]host[:port][/db],\n"
    "                 unix:///path/to/redis.sock[?db=N],\n"
    "                 redis-sentinel://[[user:]password@]host[:port][,...][/db]\n"
    "                   [?sentinel_user=U&sentinel_password=P]#MASTER, or\n"
    "                 redis-cluster://[[user:]password@]host[:port][,...];\n"
    "                 rediss://, rediss-sentinel:// (?sentinel_tls=no: plain\n"
    "                 sentinels), rediss-cluster://: the same over TLS;\n"
    "                 default $DELAYQ_REDIS, else " DEFAULT_URL "\n"
    "                 (also accepted after COMMAND)\n"
    "  --wait-replicas N\n"
    "                 durable writes: each write waits until N replicas have it\n"
    "                 (Redis WAIT); exit 4 if fewer confirm in time; 'all':\n"
    "                 every replica the master lists (at least one)\n"
    "  --wait-timeout DUR\n"
    "                 how long --wait-replicas waits; default 1s\n"
    "  --key-file FILE\n"
    "                 seal payloads: offers (and schedules' payloads, once) are\n"
    "                 encrypted with the first key of\n"
    "                 FILE, takes and dead-letter lists open them with any of its\n"
    "                 keys (see 'delayq keygen'); default $DELAYQ_KEY_FILE\n"
    "  --password-file FILE\n"
    "                 the data nodes' password: the first line of FILE (mode 600),\n"
    "                 in place of the URL's, so it shows in no argv or\n"
    "                 environment; default $DELAYQ_PASSWORD_FILE\n"
    "  --sentinel-password-file FILE\n"
    "                 the same for the sentinels of a redis-sentinel:// URL (in\n"
    "                 place of sentinel_password); default\n"
    "                 $DELAYQ_SENTINEL_PASSWORD_FILE\n"
    "  --plaintext allow|refuse\n"
    "                 with --key-file, what becomes of a payload taken that is\n"
    "                 not sealed: refuse (default) sets it aside with its reason,\n"
    "                 as a forged one; allow delivers it as it is (while\n"
    "                 producers move to sealing); default $DELAYQ_PLAINTEXT\n"
    "  --tls-ca FILE  the CAs (PEM) that sign the servers' certificates, for\n"
    "                 rediss URLs; default $DELAYQ_TLS_CA, else the system's store\n"
    "  --tls-cert FILE, --tls-key FILE\n"
    "                 a client certificate and its key (PEM), for servers with\n"
    "                 tls-auth-clients; default $DELAYQ_TLS_CERT, $DELAYQ_TLS_KEY\n"
    "  --tls-server-name NAME\n"
    "                 the name sent as SNI and required in the servers'\n"
    "                 certificates; default each node's host\n"
    "                 ($DELAYQ_TLS_SERVER_NAME)\n"
    "  --tls-insecure-skip-verify\n"
    "                 INSECURE: accept any server certificate and name (prints\n"
    "                 a warning); or $DELAYQ_TLS_INSECURE_SKIP_VERIFY=1\n"
    "  --help, -h     usage (also after any command)\n"
    "  --version      the version\n"
    "\n"
    "Durations: 250ms, 30s, 5m, 2h, 1d, or bare milliseconds; 0 = now.\n"
    "Exit codes: 0 ok, 1 nothing there (timeout, not pending, unknown or stale\n"
    "token), 2 usage error or bad input, 3 Redis unreachable or erroring, or\n"
    "stdout could not be written, 4 written but not confirmed by\n"
    "--wait-replicas replicas in time.\n";

typedef struct command {
    const char *name;
    int (*run)(cli_env *env, int argc, char **argv);
    const char *usage;
} command;

static const command commands[] = {
    {"offer", cli_cmd_offer, cli_usage_offer},
    {"cancel", cli_cmd_cancel, cli_usage_cancel},
    {"take", cli_cmd_take, cli_usage_take},
    {"schedule", cli_cmd_schedule, cli_usage_schedule},
    {"stats", cli_cmd_stats, cli_usage_stats},
    {"consumers", cli_cmd_consumers, cli_usage_consumers},
    {"ack", cli_cmd_ack, cli_usage_ack},
    {"nack", cli_cmd_nack, cli_usage_nack},
    {"release", cli_cmd_release, cli_usage_release},
    {"extend", cli_cmd_extend, cli_usage_extend},
    {"work", cli_cmd_work, cli_usage_work},
    {"dead", cli_cmd_dead, cli_usage_dead},
    {"config", cli_cmd_config, cli_usage_config},
    {"acl", cli_cmd_acl, cli_usage_acl},
    {"functions", cli_cmd_functions, cli_usage_functions},
    {"keygen", cli_cmd_keygen, cli_usage_keygen},
    {"lookup", cli_cmd_lookup, cli_usage_lookup},
    {"list", cli_cmd_list, cli_usage_list},
    {"serve", cli_cmd_serve, cli_usage_serve},
    {"doctor", cli_cmd_doctor, cli_usage_doctor},
    {"every", cli_cmd_every, cli_usage_every},
    {"schedules", cli_cmd_schedules, cli_usage_schedules},
    {"cron", cli_cmd_cron, cli_usage_cron},
    {NULL, NULL, NULL},
};

static const command *find_command(const char *name) {
    for (const command *c = commands; c->name; c++)
        if (strcmp(c->name, name) == 0) return c;
    return NULL;
}

/* "delayq help [COMMAND]". */
static int run_help(int argc, char **argv) {
    if (argc == 0) return cli_help(usage_main);
    const command *c = find_command(argv[0]);
    if (!c) {
        cli_err("help: unknown command '%s' (see 'delayq --help')", cli_quote(argv[0]));
        return CLI_USAGE;
    }
    return cli_help(c->usage);
}

/* Consumes the options before the command name; returns how many arguments
 * they took, or -1 - exit code when the run ends here. */
static int global_options(cli_env *env, int argc, char **argv) {
    int i = 1;

    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1 - cli_help(usage_main);
        if (strcmp(a, "--version") == 0) return -1 - cli_help("delayq " DQ_VERSION "\n");
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a) - 2;
        const char **value;
        if (a[1] == '-' && !eq && cli_global_flag(env, a + 2, len)) continue;
        if (a[1] != '-' || !cli_global_opt(env, a + 2, len, &value)) {
            /* The name only: a mistyped --redis may carry a password. */
            cli_err("unknown option '%s' (see 'delayq --help')",
                    cli_quote_n(a, eq ? (size_t)(eq - a) : strlen(a)));
            return -1 - CLI_USAGE;
        }
        if (eq) {
            *value = eq + 1;
        } else if (i + 1 < argc) {
            *value = argv[++i];
        } else {
            cli_err("option '%s' needs a value", cli_quote(a));
            return -1 - CLI_USAGE;
        }
    }
    return i;
}

/* Runs the command argv names; returns its exit code. */
static int dispatch(int argc, char **argv) {
    const char *url = getenv("DELAYQ_REDIS");
    cli_env env = {.redis_url = url && *url ? url : DEFAULT_URL,
                   .key_file = getenv("DELAYQ_KEY_FILE"),
                   .plaintext = getenv("DELAYQ_PLAINTEXT"),
                   .password_file = getenv("DELAYQ_PASSWORD_FILE"),
                   .sentinel_password_file = getenv("DELAYQ_SENTINEL_PASSWORD_FILE"),
                   .tls_ca = getenv("DELAYQ_TLS_CA"),
                   .tls_cert = getenv("DELAYQ_TLS_CERT"),
                   .tls_key = getenv("DELAYQ_TLS_KEY"),
                   .tls_server_name = getenv("DELAYQ_TLS_SERVER_NAME"),
                   .tls_insecure = getenv("DELAYQ_TLS_INSECURE_SKIP_VERIFY")};

    int i = global_options(&env, argc, argv);
    if (i < 0) return -1 - i;
    if (i >= argc) {
        cli_err("missing command (see 'delayq --help')");
        return CLI_USAGE;
    }
    if (strcmp(argv[i], "help") == 0) return run_help(argc - i - 1, argv + i + 1);
    const command *c = find_command(argv[i]);
    if (!c) {
        cli_err("unknown command '%s' (see 'delayq --help')", cli_quote(argv[i]));
        return CLI_USAGE;
    }
    /* Help is answered here, for every command: a command seeing --help
     * only returns CLI_HELP. */
    int rc = c->run(&env, argc - i - 1, argv + i + 1);
    return rc == CLI_HELP ? cli_help(c->usage) : rc;
}

int main(int argc, char **argv) {
    cli_std_fds_hold();
    /* A closed stdout or socket is an error to report, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    int rc = dispatch(argc, argv);
    /* Output that could not be written fails a run that would succeed. */
    if (cli_out_close() && rc < CLI_USAGE) rc = CLI_FAIL;
    return rc;
}
