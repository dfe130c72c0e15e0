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
#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/serve/serve.h"

#define DEFAULT_LISTEN "127.0.0.1:9777"
#define TOKEN_MIN 16
#define TOKEN_MAX 256
#define TOKEN_FILE_MAX 16384
#define ALLOW_HOST_MAX 32

const char cli_usage_serve[] =
    "usage: delayq serve [--listen ADDR:PORT] [--token-file FILE] [--allow-host NAME]...\n"
    "                    [--public-read] [QUEUE...]\n"
    "\n"
    "Serves over HTTP, until SIGINT or SIGTERM:\n"
    "  /metrics     Prometheus text: items by state, totals, lateness histogram,\n"
    "               oldest ready age, next due time, delayq_up\n"
    "  /            a dashboard (one page, no outside resources)\n"
    "  /api/...     the JSON API the page uses, and the work verbs: offer, take\n"
    "               (waiting, with or without a lease), ack, nack, extend (see\n"
    "               docs/operations.md, 'The HTTP API'); serve schedules the\n"
    "               queues taken from\n"
    "It shows every queue ever offered to (the registry offers keep) and the\n"
    "QUEUEs named here.\n"
    "\n"
    "  --listen ADDR:PORT  an IPv4 address, [IPv6] or localhost, and a port;\n"
    "                      default " DEFAULT_LISTEN "\n"
    "  --token-file FILE   lines 'ROLE TOKEN' (TOKEN: 16 to 256 characters) or\n"
    "                      'TOKEN' alone (admin): changes need one in\n"
    "                      'Authorization: Bearer TOKEN', of a ROLE that may:\n"
    "                      produce (offer, cancel), consume (take, ack, nack,\n"
    "                      extend) or admin (all, and redrive, purge); a wrong\n"
    "                      role answers 403. The file must not be readable by\n"
    "                      group or others. Without it the server is read-only:\n"
    "                      changes answer 403. Failed tokens are slowed down (429)\n"
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
static int parse_listen(const char *text, char *addr, size_t size, int *port) {
    const char *colon = strrchr(text, ':'), *a = text;
    size_t alen = colon ? (size_t)(colon - text) : 0;
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : 0;
    if (alen >= 2 && text[0] == '[' && text[alen - 1] == ']') a++, alen -= 2;
    else if (colon && memchr(text, ':', alen)) alen = 0; /* an IPv6 address needs its brackets */
    if (!colon || !alen || alen >= size || !colon[1] || *end || p < 1 || p > 65535) {
        cli_err(
            "serve: --listen: expected ADDR:PORT such as 127.0.0.1:9777, [::1]:9777 or localhost:9777, "
            "not %s",
            cli_quote(text));
        return CLI_USAGE;
    }
    memcpy(addr, a, alen);
    addr[alen] = '\0';
    if (strcmp(addr, "localhost") == 0) snprintf(addr, size, "127.0.0.1");
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
static int take_allow_hosts(int *argc, char **argv, const char **names, int *n) {
    static const char opt[] = "--allow-host";
    const size_t ol = sizeof opt - 1;
    int k = 0;
    *n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *name = NULL;
        if (strcmp(argv[i], "--") == 0) {
            while (i < *argc) argv[k++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], opt) == 0 && i + 1 < *argc) name = argv[++i];
        else if (strncmp(argv[i], opt, ol) == 0 && argv[i][ol] == '=') name = argv[i] + ol + 1;
        if (!name) {
            argv[k++] = argv[i];
            continue;
        }
        if (!*name || strlen(name) > 253 ||
            strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                         "0123456789.-:") != strlen(name) ||
            *n == ALLOW_HOST_MAX) {
            cli_err("serve: --allow-host: expected a host name or address (at most %d of them), not %s",
                    ALLOW_HOST_MAX, cli_quote(name));
            return CLI_USAGE;
        }
        names[(*n)++] = name;
    }
    *argc = k;
    return 0;
}

/* The role a token file's line names; 0 if none. */
static int role_named(const char *name, size_t len) {
    static const struct {
        const char *name;
        int role;
    } roles[] = {
        {"produce", CLI_ROLE_PRODUCE}, {"consume", CLI_ROLE_CONSUME}, {"admin", CLI_ROLE_ADMIN}};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strlen(roles[i].name) == len && memcmp(roles[i].name, name, len) == 0) return roles[i].role;
    return 0;
}

/* One line of the token file (NUL-terminated, no newline) into t; blank
 * lines and '#' comments are skipped. Returns 0 or CLI_USAGE after saying
 * why (line: its number). */
static int token_line(char *line, int lineno, cli_tokens *t) {
    size_t len = strlen(line);
    if (len && line[len - 1] == '\r') line[--len] = '\0';
    if (!len || line[0] == '#') return 0;
    char *sp = strchr(line, ' '), *tok = line;
    int role = CLI_ROLE_ADMIN;
    if (sp) {
        role = role_named(line, (size_t)(sp - line));
        tok = sp + strspn(sp, " ");
        if (!role) {
            cli_err("serve: token file line %d: the role must be produce, consume or admin", lineno);
            return CLI_USAGE;
        }
    }
    size_t tl = strlen(tok);
    if (tl < TOKEN_MIN || tl > TOKEN_MAX || strchr(tok, ' ')) {
        cli_err(
            "serve: token file line %d: the token is %zu characters long; it needs at least %d (at most %d, "
            "without spaces; e.g. 'openssl rand -hex 16')",
            lineno, tl, TOKEN_MIN, TOKEN_MAX);
        return CLI_USAGE;
    }
    if (t->n == CLI_TOKENS_MAX) {
        cli_err("serve: the token file holds more than %d tokens", CLI_TOKENS_MAX);
        return CLI_USAGE;
    }
    t->role[t->n] = role;
    t->text[t->n++] = tok;
    return 0;
}

/* The token file into t, whose texts point into buf (size bytes; the
 * caller wipes it). Returns 0 or CLI_USAGE after saying why. */
static int read_tokens(const char *path, char *buf, size_t size, cli_tokens *t) {
    size_t len;
    int rc = cli_read_secret_file("serve", "token", path, buf, size, &len);
    int lineno = 0;
    for (char *line = buf, *nl; !rc && line; line = nl) {
        if ((nl = strchr(line, '\n'))) *nl++ = '\0';
        rc = token_line(line, ++lineno, t);
    }
    if (!rc && !t->n) {
        cli_err("serve: the token file %s holds no token", cli_quote(path));
        rc = CLI_USAGE;
    }
    return rc;
}

/* The start's rules for the token and the address. Returns 0 or CLI_USAGE
 * after saying why. */
static int check_exposure(const char *addr, const char *token, int public_read) {
    if (!cli_addr_loopback(addr) && !token && !public_read) {
        cli_err(
            "serve: %s is not a loopback address: anyone who reaches it would read every queue's items "
            "and payloads; give --token-file (changes need the token) and, to serve reads to the "
            "network anyway, --public-read",
            addr);
        return CLI_USAGE;
    }
    return 0;
}

/* Serves until SIGINT or SIGTERM, the takes on taker's loop. */
static int run(cli_serve_conf *conf, dq_client *taker, const char *addr, int port) {
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    conf->work = cli_work_start(taker);
    cli_server *s = conf->work ? cli_serve_start(conf, addr, port) : NULL;
    if (!s) {
        cli_work_stop(conf->work);
        cli_work_free(conf->work);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return CLI_FAIL;
    }
    cli_err(strchr(addr, ':') ? "serving http://[%s]:%d/ (%s%s) until SIGINT or SIGTERM"
                              : "serving http://%s:%d/ (%s%s) until SIGINT or SIGTERM",
            addr, port, conf->tokens ? "changes need a token" : "read-only",
            cli_addr_loopback(addr) ? "" : "; reads are open to anyone who reaches the port");
    int sig = 0;
    sigwait(&stop, &sig);
    cli_work_stop(conf->work); /* answers the waiting takes, while the server still sends */
    cli_serve_stop(s);         /* sends those answers, then stops */
    cli_work_free(conf->work);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return CLI_OK;
}

int cli_cmd_serve(cli_env *env, int argc, char **argv) {
    const char *listen = DEFAULT_LISTEN, *token_file = NULL, *allow[ALLOW_HOST_MAX];
    int npos = 0, nallow = 0, public_read = 0;
    const cli_opt opts[] = {{"listen", &listen, NULL},
                            {"token-file", &token_file, NULL},
                            {"public-read", NULL, &public_read},
                            {NULL, NULL, NULL}};
    char addr[64], tokbuf[TOKEN_FILE_MAX];
    cli_tokens tokens = {0};
    int port = 0;
    dq_client *taker = NULL;

    int rc = take_allow_hosts(&argc, argv, allow, &nallow);
    if (!rc) rc = cli_parse(env, "serve", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    for (int i = 0; !rc && i < npos; i++) rc = cli_check_queue(argv[i]);
    if (!rc) rc = parse_listen(listen, addr, sizeof addr, &port);
    if (!rc && token_file) rc = read_tokens(token_file, tokbuf, sizeof tokbuf, &tokens);
    if (!rc) rc = check_exposure(addr, token_file ? tokens.text[0] : NULL, public_read);
    const cli_hosts hosts = {addr, allow, nallow};
    cli_serve_conf conf = {
        .tokens = token_file ? &tokens : NULL, .queues = argv, .nqueues = npos, .hosts = &hosts};
    if (!rc && !(conf.guard = cli_guard_new())) {
        cli_err("serve: out of memory");
        rc = CLI_FAIL;
    }
    if (!rc) rc = cli_connect(env, &conf.c);
    /* The takes' client, on a loop of its own that the work thread runs. */
    struct ev_loop *loop = rc ? NULL : ev_loop_new(EVFLAG_AUTO);
    if (!rc && !loop) {
        cli_err("serve: cannot make an event loop");
        rc = CLI_FAIL;
    }
    if (!rc) rc = cli_connect_on(env, loop, &taker);
    if (!rc) {
        dq_finding *findings;
        cli_doctor_start(conf.c, 0, &findings, &conf.nfindings);
        conf.findings = findings;
        cli_log_start(conf.c);
        cli_log_start(taker);
        rc = run(&conf, taker, addr, port);
        dq_findings_free(findings, conf.nfindings);
    }
    cli_close(taker);
    cli_close(conf.c);
    if (loop) ev_loop_destroy(loop);
    cli_guard_free(conf.guard);
    sodium_memzero(tokbuf, sizeof tokbuf);
    return rc;
}
