/*
 * session.c - a client's life inside one command run.
 *
 * Owns opening the client (default options, a private loop unless the
 * command brings one, connect to the --redis URL), the library's background
 * log on stderr and closing the client quietly, turning library failures
 * into one stderr line and an exit code, and the SIGINT/SIGTERM watchers the
 * long-running commands (take, schedule, work) stop on. URLs are shown with
 * their password masked.
 */
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util.h"

/* ------------------------------------------------------------ errors */

int cli_exit_code(int dq_code)
{
    return dq_code == DQ_EINVAL || dq_code == DQ_ETOOBIG ? CLI_USAGE : CLI_FAIL;
}

/* The best words for a failure: the client's message, else the code's. */
static const char *cause(const dq_client *c, int code)
{
    const char *msg = c ? dq_client_errstr(c) : "";
    return msg[0] ? msg : dq_strerror(code);
}

int cli_fail(const dq_client *c, int code, const char *what)
{
    cli_err("%s: %s", what, cause(c, code));
    return cli_exit_code(code);
}

/* ------------------------------------------------------------ connecting */

int cli_connect(const cli_env *env, dq_client **out)
{
    return cli_connect_on(env, NULL, out);
}

int cli_connect_on(const cli_env *env, struct ev_loop *loop, dq_client **out)
{
    dq_options opts;
    char shown[DQ__URL_MASKED_MAX + 1];

    dq_options_init(&opts);
    dq_client *c = dq_client_new(loop, &opts);
    if (!c) {
        cli_err("cannot make a client: out of memory");
        return CLI_FAIL;
    }
    int rc = dq_connect(c, env->redis_url);
    if (rc == 0) {
        *out = c;
        return 0;
    }
    /* The library's message names the URL when it is about connecting. */
    const char *why = cause(c, rc);
    if (strncmp(why, "cannot connect to ", 18) == 0 ||
        strncmp(why, "invalid Redis URL", 17) == 0) {
        cli_err("%s", why);
    } else {
        dq__url_mask(env->redis_url, shown, sizeof shown);
        cli_err("cannot connect to %s: %s", shown, why);
    }
    dq_client_free(c);
    return cli_exit_code(rc);
}

/* ------------------------------------------------------------ background log */

static void log_line(void *privdata, const char *msg)
{
    (void)privdata;
    cli_err("%s", msg);
}

void cli_log_start(dq_client *c)
{
    dq_set_log(c, log_line, NULL);
}

void cli_close(dq_client *c)
{
    /* Closing cuts transfers and connections short on purpose: not news. */
    if (c)
        dq_set_log(c, NULL, NULL);
    dq_client_free(c);
}

/* ------------------------------------------------------------ signals */

static struct {
    ev_signal w[2];
    cli_signal_fn *fn;
    void *data;
} sigs;

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    sigs.fn(sigs.data, w->signum);
}

void cli_signals_start(struct ev_loop *loop, cli_signal_fn *fn, void *data)
{
    static const int nums[2] = {SIGINT, SIGTERM};

    sigs.fn = fn;
    sigs.data = data;
    for (int i = 0; i < 2; i++) {
        ev_signal_init(&sigs.w[i], on_signal, nums[i]);
        ev_signal_start(loop, &sigs.w[i]);
    }
}

void cli_signals_stop(struct ev_loop *loop)
{
    for (int i = 0; i < 2; i++)
        ev_signal_stop(loop, &sigs.w[i]);
}
