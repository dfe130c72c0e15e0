/*
 * args.c - the argument rules every command shares.
 *
 * Owns cli_parse(), the one option parser: GNU-style long options anywhere
 * among the positional arguments, "--opt=value" or "--opt value", "--" to end
 * options, "-h"/"--help", and the global "--redis URL" accepted after the
 * command name too; and its variant cli_parse_ids() for commands whose
 * arguments are ids or lease tokens, which may start with '-'. Also owns the
 * checks of positional counts and of the values commands take (queue names,
 * ids, delays, counts, lease tokens), so every command words the same
 * mistake the same way before anything touches Redis.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "util.h"

/* ------------------------------------------------------------ options */

static const cli_opt *find_opt(const cli_opt *opts, const char *name, size_t len) {
    for (; opts->name; opts++)
        if (strlen(opts->name) == len && memcmp(opts->name, name, len) == 0) return opts;
    return NULL;
}

int cli_global_opt(cli_env *env, const char *name, size_t len, const char ***value) {
    const struct {
        const char *name;
        const char **value;
    } globals[] = {{"redis", &env->redis_url},
                   {"wait-replicas", &env->wait_replicas},
                   {"wait-timeout", &env->wait_timeout},
                   {"key-file", &env->key_file},
                   {"password-file", &env->password_file},
                   {"sentinel-password-file", &env->sentinel_password_file},
                   {"plaintext", &env->plaintext},
                   {"tls-ca", &env->tls_ca},
                   {"tls-cert", &env->tls_cert},
                   {"tls-key", &env->tls_key},
                   {"tls-server-name", &env->tls_server_name}};

    for (size_t k = 0; k < sizeof globals / sizeof globals[0]; k++) {
        if (strlen(globals[k].name) == len && memcmp(globals[k].name, name, len) == 0) {
            *value = globals[k].value;
            return 1;
        }
    }
    return 0;
}

int cli_global_flag(cli_env *env, const char *name, size_t len) {
    static const char insecure[] = "tls-insecure-skip-verify";
    if (len != sizeof insecure - 1 || memcmp(name, insecure, len) != 0) return 0;
    env->tls_insecure = "1";
    return 1;
}

/* Returned by parse_long for an unknown option taken as an argument. */
#define POSITIONAL 1

/* Handles argv[*i], a "--name[=value]" argument; may consume the next one.
 * Returns 0, CLI_HELP, CLI_USAGE, or with loose POSITIONAL for a name that
 * is no option. */
static int parse_long(cli_env *env, const char *cmd, int argc, char **argv, int *i, const cli_opt *opts,
                      int loose) {
    cli_opt global = {NULL, NULL, NULL};
    const char *name = argv[*i] + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);

    if (len == 4 && memcmp(name, "help", 4) == 0 && !eq) return CLI_HELP;
    const cli_opt *o = find_opt(opts, name, len);
    if (!o && !eq && cli_global_flag(env, name, len)) return 0;
    if (!o && cli_global_opt(env, name, len, &global.value)) {
        global.name = name;
        o = &global;
    }
    if (!o && loose) return POSITIONAL;
    if (!o) {
        cli_err("%s: unknown option '--%s' (see 'delayq %s --help')", cmd, cli_quote_n(name, len), cmd);
        return CLI_USAGE;
    }
    if (o->flag) {
        if (eq) {
            cli_err("%s: option '--%s' takes no value", cmd, o->name);
            return CLI_USAGE;
        }
        *o->flag = 1;
        return 0;
    }
    if (!eq && *i + 1 >= argc) {
        cli_err("%s: option '--%s' needs a value", cmd, o->name);
        return CLI_USAGE;
    }
    *o->value = eq ? eq + 1 : argv[++*i];
    return 0;
}

static int parse(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts, int *npos,
                 int loose) {
    int n = 0, only_pos = 0;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == '\0') {
            argv[n++] = argv[i];
        } else if (strcmp(a, "--") == 0) {
            only_pos = 1;
        } else if (strcmp(a, "-h") == 0) {
            return CLI_HELP;
        } else if (a[1] == '-') {
            int rc = parse_long(env, cmd, argc, argv, &i, opts, loose);
            if (rc == POSITIONAL) argv[n++] = argv[i];
            else if (rc) return rc;
        } else if (loose) {
            argv[n++] = argv[i];
        } else {
            cli_err("%s: unknown option '%s' (put '--' before an argument that starts "
                    "with '-')",
                    cmd, cli_quote(a));
            return CLI_USAGE;
        }
    }
    *npos = n;
    return 0;
}

int cli_parse(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts, int *npos) {
    return parse(env, cmd, argc, argv, opts, npos, 0);
}

int cli_parse_ids(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts, int *npos) {
    return parse(env, cmd, argc, argv, opts, npos, 1);
}

int cli_want_args(const char *cmd, int npos, int min, int max, const char *const *names, char **argv) {
    if (npos < min) {
        cli_err("%s: missing %s (see 'delayq %s --help')", cmd, names[npos], cmd);
        return CLI_USAGE;
    }
    if (max >= 0 && npos > max) {
        cli_err("%s: unexpected argument '%s' (see 'delayq %s --help')", cmd, cli_quote(argv[max]), cmd);
        return CLI_USAGE;
    }
    return 0;
}

/* ------------------------------------------------------------ values */

int cli_check_queue(const char *queue) {
    if (dq__queue_valid(queue)) return 0;
    cli_err("invalid queue name '%s': expected 1 to %d characters of A-Z a-z 0-9 _ . : -",
            cli_quote(queue), DQ_QUEUE_MAX);
    return CLI_USAGE;
}

int cli_check_id(const char *where, const char *id, size_t len) {
    const char *nul = memchr(id, '\0', len);

    if (!nul && dq__id_valid(id)) return 0;
    if (nul)
        cli_err("%sinvalid id: a NUL byte at byte %zu of it ('%s'); expected 1 to %d "
                "printable ASCII characters, no spaces",
                where, (size_t)(nul - id) + 1, cli_quote_n(id, len), DQ_ID_MAX);
    else
        cli_err("%sinvalid id '%s': expected 1 to %d printable ASCII characters, no spaces", where,
                cli_quote_n(id, len), DQ_ID_MAX);
    return CLI_USAGE;
}

int cli_parse_delay(const char *where, const char *what, const char *text, int64_t *ms) {
    if (dq_parse_duration(text, ms) == 0) return 0;
    cli_err("%sinvalid %s '%s': expected 250ms, 30s, 5m, 2h, 1d or milliseconds", where, what,
            cli_quote(text));
    return CLI_USAGE;
}

/* The server's clock is read inside the scripts; the local one stands in for
 * it here, bounded to years a server clock can sanely show. */
#define NOW_MIN_MS INT64_C(1577836800000) /* 2020-01-01T00:00:00Z */
#define NOW_MAX_MS INT64_C(4102444800000) /* 2100-01-01T00:00:00Z */

int64_t cli_delay_max(void) {
    struct timespec ts;
    int64_t now = NOW_MIN_MS;

    if (clock_gettime(CLOCK_REALTIME, &ts) == 0) now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    now = now < NOW_MIN_MS ? NOW_MIN_MS : now > NOW_MAX_MS ? NOW_MAX_MS : now;
    return DQ_DUE_MAX_MS - now;
}

int cli_check_due(const char *where, const char *text, int64_t delay_ms, int64_t max_ms) {
    if (delay_ms <= max_ms) return 0;
    cli_err("%sinvalid delay '%s': the due time would be past the latest there is "
            "(%" PRId64 " ms after the epoch, in 2109); at most %" PRId64 "d from now",
            where, cli_quote(text), DQ_DUE_MAX_MS, max_ms / 86400000);
    return CLI_USAGE;
}

int cli_check_payload(const char *where, size_t len, size_t limit) {
    if (len <= limit) return 0;
    cli_err("%spayload is %zu bytes, limit is %zu", where, len, limit);
    return CLI_USAGE;
}

int cli_parse_connect_wait(const char *text, int64_t *ms) {
    if (strcmp(text, "forever") == 0) {
        *ms = -1;
        return 0;
    }
    return cli_parse_delay("", "connect-wait", text, ms) ? CLI_USAGE : 0;
}

int cli_parse_count(const char *text, int64_t *count) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end || errno || v > INT64_MAX) {
        cli_err("invalid count '%s': expected a whole number, 0 for no limit", cli_quote(text));
        return CLI_USAGE;
    }
    *count = (int64_t)v;
    return 0;
}

int cli_token_valid(const char *token) {
    size_t len = strlen(token);
    int ok = len >= 1 && len <= 64;

    for (size_t i = 0; ok && i < len; i++) ok = token[i] > 0x20 && token[i] < 0x7f;
    return ok;
}

int cli_check_token(const char *token) {
    if (cli_token_valid(token)) return 0;
    cli_err("invalid lease token '%s': expected 1 to 64 printable ASCII characters, "
            "as 'delayq take --ack manual' prints them",
            cli_quote(token));
    return CLI_USAGE;
}
