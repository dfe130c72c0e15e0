/*
 * session.c - a client's life inside one command run.
 *
 * Owns opening the client (default options, a private loop unless the
 * command brings one, connect to the --redis URL), the library's background
 * log on stderr and closing the client quietly, turning library failures
 * into one stderr line and an exit code, and the SIGINT/SIGTERM watchers the
 * long-running commands (take, schedule, work) stop on. URLs are shown with
 * their password masked; the passwords of --password-file and
 * --sentinel-password-file are read here and wiped once the client has its
 * copies.
 */
#include <ev.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "util.h"

/* ------------------------------------------------------------ errors */

int cli_exit_code(int dq_code) { return cli_exit_for(dq_code, DQ_REFUSAL_NONE); }

int cli_exit_for(int dq_code, enum dq_refusal class) {
    /* A value the caller gave, refused by a script: bad input, not a
     * failing Redis. Values Redis holds that break the rules are no input
     * of ours and stay CLI_FAIL. */
    if (dq_code == DQ_EREDIS && class == DQ_REFUSAL_INPUT) return CLI_USAGE;
    switch (dq_code) {
        case DQ_ENOTDURABLE: return CLI_NOT_DURABLE;
        case DQ_EINVAL:
        case DQ_ETOOBIG: return CLI_USAGE;
        default: return CLI_FAIL;
    }
}

/* --wait-replicas and --wait-timeout into opts. Returns 0 or CLI_USAGE. */
static int durability_options(const cli_env *env, dq_options *opts) {
    if (env->wait_replicas && strcmp(env->wait_replicas, "all") == 0) {
        opts->wait_replicas = DQ_WAIT_ALL;
    } else if (env->wait_replicas) {
        char *end;
        long n = strtol(env->wait_replicas, &end, 10);
        if (!*env->wait_replicas || *end || n < 0 || n > 1000 || env->wait_replicas[0] == '-') {
            cli_err("--wait-replicas: expected a number of replicas from 0 to 1000, or all");
            return CLI_USAGE;
        }
        opts->wait_replicas = (int)n;
    }
    if (env->wait_timeout) {
        int64_t ms;
        if (dq_parse_duration(env->wait_timeout, &ms) != 0 || ms > INT_MAX) {
            cli_err("--wait-timeout: expected a duration such as 200ms or 2s");
            return CLI_USAGE;
        }
        opts->wait_timeout_ms = (int)ms;
    }
    return 0;
}

/* --plaintext into opts. Returns 0 or CLI_USAGE. */
static int plaintext_option(const cli_env *env, dq_options *opts) {
    const char *v = env->plaintext;

    if (!v || !*v || strcmp(v, "refuse") == 0) return 0;
    if (strcmp(v, "allow") != 0) {
        cli_err("--plaintext: expected allow or refuse, not '%s'", cli_quote(v));
        return CLI_USAGE;
    }
    opts->allow_plaintext = 1;
    return 0;
}

/* The best words for a failure: the client's message, else the code's. */
static const char *cause(const dq_client *c, int code) {
    const char *msg = c ? dq_client_errstr(c) : "";
    return msg[0] ? msg : dq_strerror(code);
}

int cli_fail(const dq_client *c, int code, const char *what) {
    const char *why = cause(c, code);

    cli_err("%s: %s", what, why);
    return cli_exit_for(code, dq_client_refusal(c));
}

/* ------------------------------------------------------------ connecting */

int cli_connect(const cli_env *env, dq_client **out) { return cli_connect_on(env, NULL, out); }

/* The password of the file at path (a global option's value, NULL or ""
 * for none) into buf for *field. Returns 0 or CLI_USAGE after saying why. */
static int read_password(const char *option, const char *path, char *buf, size_t size,
                         const char **field) {
    if (!path || !*path) return 0;
    if (cli_read_secret(option, "password", path, buf, size) != 0) return CLI_USAGE;
    *field = buf;
    return 0;
}

/* The TLS options into opts ("" is unset, as an empty environment variable
 * is); warns when verification is off. */
static void tls_options(const cli_env *env, dq_options *opts) {
    opts->tls_ca = env->tls_ca && *env->tls_ca ? env->tls_ca : NULL;
    opts->tls_cert = env->tls_cert && *env->tls_cert ? env->tls_cert : NULL;
    opts->tls_key = env->tls_key && *env->tls_key ? env->tls_key : NULL;
    opts->tls_server_name = env->tls_server_name && *env->tls_server_name ? env->tls_server_name : NULL;
    opts->tls_insecure_skip_verify = env->tls_insecure && strcmp(env->tls_insecure, "1") == 0;
    if (opts->tls_insecure_skip_verify)
        cli_err("warning: --tls-insecure-skip-verify: the servers' certificates and names are "
                "not verified; anyone in the path can read and change the traffic");
}

/* cli_connect_on, but a failure to reach Redis (DQ_ECONNECT,
 * DQ_ETIMEDOUT) is not printed when quiet: its text goes to why (whysize
 * bytes) and *unreachable is set. */
static int connect_try(const cli_env *env, struct ev_loop *loop, dq_client **out, int quiet, char *why,
                       size_t whysize, int *unreachable);

int cli_connect_on(const cli_env *env, struct ev_loop *loop, dq_client **out) {
    int unreachable;
    return connect_try(env, loop, out, 0, NULL, 0, &unreachable);
}

int cli_connect_wait(const cli_env *env, struct ev_loop *loop, int64_t wait_ms, dq_client **out) {
    char why[512] = "", shown[DQ__URL_MASKED_MAX + 1];
    double waited = 0, pause = 0.1;
    int said = 0;

    dq__url_mask(env->redis_url, shown, sizeof shown);
    for (;;) {
        int unreachable = 0;
        int rc = connect_try(env, loop, out, wait_ms != 0, why, sizeof why, &unreachable);
        if (rc == 0) {
            if (said) cli_err("connected to %s after %.1f s", shown, waited);
            return 0;
        }
        if (!unreachable || wait_ms == 0) return rc; /* said already */
        if (wait_ms >= 0 && waited * 1000.0 >= (double)wait_ms) {
            cli_err("%s (waited %.1f s: --connect-wait)", why, waited);
            return rc;
        }
        if (!said) cli_err("%s; waiting for it (--connect-wait)", why);
        said = 1;
        /* Backoff from 100 ms to 5 s, the last pause cut to the deadline. */
        double left = wait_ms >= 0 ? (double)wait_ms / 1000.0 - waited : pause;
        double s = pause < left ? pause : left;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
        waited += s;
        pause = pause * 2 < 5 ? pause * 2 : 5;
    }
}

static int connect_try(const cli_env *env, struct ev_loop *loop, dq_client **out, int quiet,
                       char *why_out, size_t whysize, int *unreachable) {
    dq_options opts;
    char shown[DQ__URL_MASKED_MAX + 1];
    /* The URL's fields hold 255 bytes; the client copies them. */
    char pw[256], spw[256];

    dq_options_init(&opts);
    if (durability_options(env, &opts) != 0 || plaintext_option(env, &opts) != 0) return CLI_USAGE;
    opts.key_file = env->key_file && *env->key_file ? env->key_file : NULL;
    if (read_password("--password-file", env->password_file, pw, sizeof pw, &opts.password) ||
        read_password("--sentinel-password-file", env->sentinel_password_file, spw, sizeof spw,
                      &opts.sentinel_password)) {
        sodium_memzero(pw, sizeof pw);
        return CLI_USAGE;
    }
    tls_options(env, &opts);
    /* $DELAYQ_CONSUMER_BEAT_MS: the consumers' beat, shortened by tests
     * (100 ms to 60 s; anything else keeps the default). */
    const char *beat = getenv("DELAYQ_CONSUMER_BEAT_MS");
    long beat_ms = beat ? strtol(beat, NULL, 10) : 0;
    if (beat_ms >= 100 && beat_ms <= 60000) opts.consumer_beat_ms = (int)beat_ms;
    dq_client *c = dq_client_new(loop, &opts);
    int rc = c ? dq_connect(c, env->redis_url) : DQ_ENOMEM;
    sodium_memzero(pw, sizeof pw);
    sodium_memzero(spw, sizeof spw);
    if (!c) {
        cli_err("cannot make a client: out of memory");
        return CLI_FAIL;
    }
    if (rc == 0) {
        *out = c;
        return 0;
    }
    /* The library's message names the URL when it is about connecting. */
    const char *why = cause(c, rc);
    char line[512];
    if (strncmp(why, "cannot connect to ", 18) == 0 || strncmp(why, "invalid Redis URL", 17) == 0 ||
        strncmp(why, "key file ", 9) == 0 || strncmp(why, "cannot read key file ", 21) == 0) {
        snprintf(line, sizeof line, "%s", why);
    } else {
        dq__url_mask(env->redis_url, shown, sizeof shown);
        snprintf(line, sizeof line, "cannot connect to %s: %s", shown, why);
    }
    *unreachable = rc == DQ_ECONNECT || rc == DQ_ETIMEDOUT;
    if (quiet && *unreachable) snprintf(why_out, whysize, "%s", line);
    else cli_err("%s", line);
    dq_client_free(c);
    return cli_exit_code(rc);
}

/* ------------------------------------------------------------ background log */

static void log_line(void *privdata, const char *msg) {
    (void)privdata;
    cli_err("%s", msg);
}

void cli_log_start(dq_client *c) { dq_set_log(c, log_line, NULL); }

void cli_close(dq_client *c) {
    /* Closing cuts transfers and connections short on purpose: not news. */
    if (c) dq_set_log(c, NULL, NULL);
    dq_client_free(c);
}

/* ------------------------------------------------------------ signals */

static struct {
    ev_signal w[2];
    cli_signal_fn *fn;
    void *data;
} sigs;

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents) {
    (void)loop;
    (void)revents;
    sigs.fn(sigs.data, w->signum);
}

void cli_signals_start(struct ev_loop *loop, cli_signal_fn *fn, void *data) {
    static const int nums[2] = {SIGINT, SIGTERM};

    sigs.fn = fn;
    sigs.data = data;
    for (int i = 0; i < 2; i++) {
        ev_signal_init(&sigs.w[i], on_signal, nums[i]);
        ev_signal_start(loop, &sigs.w[i]);
    }
}

void cli_signals_stop(struct ev_loop *loop) {
    for (int i = 0; i < 2; i++) ev_signal_stop(loop, &sigs.w[i]);
}
