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
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve.h"

#define DEFAULT_LISTEN "127.0.0.1:9777"
#define TOKEN_MIN 16
#define TOKEN_MAX 256
#define ALLOW_HOST_MAX 32

const char cli_usage_serve[] =
    "usage: delayq serve [--listen ADDR:PORT] [--token-file FILE] [--allow-host NAME]...\n"
    "                    [--public-read] [QUEUE...]\n"
    "\n"
    "Serves over HTTP, until SIGINT or SIGTERM:\n"
    "  /metrics     Prometheus text: items by state, totals, lateness histogram,\n"
    "               oldest ready age, next due time, delayq_up\n"
    "  /            a dashboard (one page, no outside resources)\n"
    "  /api/...     the JSON API the page uses (see README, 'The HTTP API')\n"
    "It shows every queue ever offered to (the registry offers keep) and the\n"
    "QUEUEs named here.\n"
    "\n"
    "  --listen ADDR:PORT  an IPv4 address, [IPv6] or localhost, and a port;\n"
    "                      default " DEFAULT_LISTEN "\n"
    "  --token-file FILE   its first line (16 to 256 characters) is the token that\n"
    "                      cancel, redrive and purge need (Authorization: Bearer\n"
    "                      TOKEN); the file must not be readable by group or\n"
    "                      others. Without it the server is read-only: those\n"
    "                      answer 403. Failed tokens are slowed down (429)\n"
    "  --allow-host NAME   also answer requests whose Host header is NAME (as a\n"
    "                      proxy or DNS name reaches the server); repeatable.\n"
    "                      Others answer 421 (DNS rebinding), except localhost\n"
    "                      and the listen address\n"
    "  --public-read       needed to listen on an address other than loopback\n"
    "                      without --token-file: anyone who reaches the port\n"
    "                      reads every queue's items and payloads\n"
    "  --redis URL         the Redis server (see 'delayq --help')\n"
    "\n"
    "Exit codes: 0 stopped by a signal, 2 usage error, 3 Redis unreachable at the\n"
    "start or the address not available.\n";

/* "ADDR:PORT", "[IPV6]:PORT" or "localhost:PORT" into addr (an address
 * literal: localhost is 127.0.0.1) and port. Returns 0 or CLI_USAGE after
 * saying why. */
static int parse_listen(const char *text, char *addr, size_t size, int *port)
{
    const char *colon = strrchr(text, ':'), *a = text;
    size_t alen = colon ? (size_t)(colon - text) : 0;
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : 0;
    if (alen >= 2 && text[0] == '[' && text[alen - 1] == ']')
        a++, alen -= 2;
    else if (colon && memchr(text, ':', alen))
        alen = 0; /* an IPv6 address needs its brackets */
    if (!colon || !alen || alen >= size || !colon[1] || *end || p < 1 || p > 65535) {
        cli_err("serve: --listen: expected ADDR:PORT such as 127.0.0.1:9777, [::1]:9777 or localhost:9777, "
                "not %s",
                cli_quote(text));
        return CLI_USAGE;
    }
    memcpy(addr, a, alen);
    addr[alen] = '\0';
    if (strcmp(addr, "localhost") == 0)
        snprintf(addr, size, "127.0.0.1");
    unsigned char ip[16];
    if (inet_pton(AF_INET, addr, ip) != 1 && inet_pton(AF_INET6, addr, ip) != 1) {
        cli_err("serve: --listen: %s is not an IPv4 or IPv6 address, nor localhost", cli_quote(addr));
        return CLI_USAGE;
    }
    *port = (int)p;
    return 0;
}

/* Moves every "--allow-host NAME" and "--allow-host=NAME" before a "--" out
 * of argv[0..*argc) into names (cli_parse keeps only an option's last
 * value). Returns 0 or CLI_USAGE after saying why. */
static int take_allow_hosts(int *argc, char **argv, const char **names, int *n)
{
    static const char opt[] = "--allow-host";
    const size_t ol = sizeof opt - 1;
    int k = 0;
    *n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *name = NULL;
        if (strcmp(argv[i], "--") == 0) {
            while (i < *argc)
                argv[k++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], opt) == 0 && i + 1 < *argc)
            name = argv[++i];
        else if (strncmp(argv[i], opt, ol) == 0 && argv[i][ol] == '=')
            name = argv[i] + ol + 1;
        if (!name) {
            argv[k++] = argv[i];
            continue;
        }
        if (!*name || strlen(name) > 253 || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                          "0123456789.-:") != strlen(name) || *n == ALLOW_HOST_MAX) {
            cli_err("serve: --allow-host: expected a host name or address (at most %d of them), not %s",
                    ALLOW_HOST_MAX, cli_quote(name));
            return CLI_USAGE;
        }
        names[(*n)++] = name;
    }
    *argc = k;
    return 0;
}

/* The start's rules for the token and the address. Returns 0 or CLI_USAGE
 * after saying why. */
static int check_exposure(const char *addr, const char *token, int public_read)
{
    if (token && strlen(token) < TOKEN_MIN) {
        cli_err("serve: the token is %zu characters long; it needs at least %d (e.g. 'openssl rand -hex 16')",
                strlen(token), TOKEN_MIN);
        return CLI_USAGE;
    }
    if (!cli_addr_loopback(addr) && !token && !public_read) {
        cli_err("serve: %s is not a loopback address: anyone who reaches it would read every queue's items "
                "and payloads; give --token-file (changes need the token) and, to serve reads to the "
                "network anyway, --public-read",
                addr);
        return CLI_USAGE;
    }
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
    cli_err(strchr(addr, ':') ? "serving http://[%s]:%d/ (%s%s) until SIGINT or SIGTERM"
                              : "serving http://%s:%d/ (%s%s) until SIGINT or SIGTERM",
            addr, port, conf->token ? "changes need the token" : "read-only",
            cli_addr_loopback(addr) ? "" : "; reads are open to anyone who reaches the port");
    int sig = 0;
    sigwait(&stop, &sig);
    cli_serve_stop(s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return CLI_OK;
}

int cli_cmd_serve(cli_env *env, int argc, char **argv)
{
    const char *listen = DEFAULT_LISTEN, *token_file = NULL, *allow[ALLOW_HOST_MAX];
    int npos = 0, nallow = 0, public_read = 0;
    const cli_opt opts[] = {{"listen", &listen, NULL},
                            {"token-file", &token_file, NULL},
                            {"public-read", NULL, &public_read},
                            {NULL, NULL, NULL}};
    char addr[64], token[TOKEN_MAX + 1];
    int port = 0;

    int rc = take_allow_hosts(&argc, argv, allow, &nallow);
    if (!rc)
        rc = cli_parse(env, "serve", argc, argv, opts, &npos);
    if (rc == CLI_HELP)
        return cli_help(cli_usage_serve);
    for (int i = 0; !rc && i < npos; i++)
        rc = cli_check_queue(argv[i]);
    if (!rc)
        rc = parse_listen(listen, addr, sizeof addr, &port);
    if (!rc && token_file)
        rc = cli_read_secret("serve", "token", token_file, token, sizeof token);
    if (!rc)
        rc = check_exposure(addr, token_file ? token : NULL, public_read);
    const cli_hosts hosts = {addr, allow, nallow};
    cli_serve_conf conf = {.token = token_file ? token : NULL, .queues = argv, .nqueues = npos, .hosts = &hosts};
    if (!rc && !(conf.guard = cli_guard_new())) {
        cli_err("serve: out of memory");
        rc = CLI_FAIL;
    }
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
    cli_guard_free(conf.guard);
    sodium_memzero(token, sizeof token);
    return rc;
}
