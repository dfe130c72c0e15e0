/*
 * cmd_serve.c - "delayq serve": Prometheus metrics, a dashboard and a JSON
 * API over HTTP, until SIGINT or SIGTERM.
 *
 * Owns the command's arguments (the address, the token file, the queues to
 * show besides the registry's), the client, and the wait for a signal.
 * The signals are blocked before the server's thread starts, so only this
 * thread receives them (sigwait); the server's thread alone uses the
 * client (see serve.h).
 */
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve.h"

#define DEFAULT_LISTEN "127.0.0.1:9777"
#define TOKEN_MAX 256

const char cli_usage_serve[] =
    "usage: delayq serve [--listen ADDR:PORT] [--token-file FILE] [QUEUE...]\n"
    "\n"
    "Serves over HTTP, until SIGINT or SIGTERM:\n"
    "  /metrics     Prometheus text: items by state, totals, lateness histogram,\n"
    "               oldest ready age, next due time, delayq_up\n"
    "  /            a dashboard (one page, no outside resources)\n"
    "  /api/...     the JSON API the page uses (see README, 'The HTTP API')\n"
    "It shows every queue ever offered to (the registry offers keep) and the\n"
    "QUEUEs named here.\n"
    "\n"
    "  --listen ADDR:PORT  IPv4 address and port; default " DEFAULT_LISTEN "\n"
    "  --token-file FILE   its first line is the token that cancel, redrive and\n"
    "                      purge need (Authorization: Bearer TOKEN); the file must\n"
    "                      not be readable by group or others. Without it the\n"
    "                      server is read-only: those answer 403\n"
    "  --redis URL         the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 stopped by a signal, 2 usage error, 3 Redis unreachable at the\n"
    "start or the address not available.\n";

/* "ADDR:PORT" into addr and port. Returns 0 or CLI_USAGE after saying why. */
static int parse_listen(const char *text, char *addr, size_t size, int *port)
{
    const char *colon = strrchr(text, ':');
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == text || (size_t)(colon - text) >= size || !colon[1] || *end || p < 1 || p > 65535) {
        cli_err("serve: --listen: expected ADDR:PORT such as 127.0.0.1:9777, not %s", cli_quote(text));
        return CLI_USAGE;
    }
    memcpy(addr, text, (size_t)(colon - text));
    addr[colon - text] = '\0';
    *port = (int)p;
    return 0;
}

/* Serves until SIGINT or SIGTERM. */
static int run(cli_serve_conf *conf, const char *addr, int port)
{
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    cli_server *s = cli_serve_start(conf, addr, port);
    if (!s) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return CLI_FAIL;
    }
    cli_err("serving http://%s:%d/ (%s) until SIGINT or SIGTERM", addr, port,
            conf->token ? "changes need the token" : "read-only");
    int sig = 0;
    sigwait(&stop, &sig);
    cli_serve_stop(s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return CLI_OK;
}

int cli_cmd_serve(cli_env *env, int argc, char **argv)
{
    const char *listen = DEFAULT_LISTEN, *token_file = NULL;
    int npos;
    const cli_opt opts[] = {{"listen", &listen, NULL}, {"token-file", &token_file, NULL}, {NULL, NULL, NULL}};
    char addr[64], token[TOKEN_MAX + 1];
    int port = 0;

    int rc = cli_parse(env, "serve", argc, argv, opts, &npos);
    if (rc == CLI_HELP)
        return cli_help(cli_usage_serve);
    for (int i = 0; !rc && i < npos; i++)
        rc = cli_check_queue(argv[i]);
    if (!rc)
        rc = parse_listen(listen, addr, sizeof addr, &port);
    if (!rc && token_file)
        rc = cli_read_secret("serve", "token", token_file, token, sizeof token);
    cli_serve_conf conf = {NULL, token_file ? token : NULL, argv, npos, NULL, 0};
    if (!rc)
        rc = cli_connect(env, &conf.c);
    if (!rc) {
        dq_finding *findings;
        cli_doctor_start(conf.c, 0, &findings, &conf.nfindings);
        conf.findings = findings;
        cli_log_start(conf.c);
        rc = run(&conf, addr, port);
        cli_close(conf.c);
        dq_findings_free(findings, conf.nfindings);
    }
    sodium_memzero(token, sizeof token);
    return rc;
}
