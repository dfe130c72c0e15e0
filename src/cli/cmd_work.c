/*
 * cmd_work.c - "delayq work": run a shell command for every item of a queue.
 *
 * Owns the worker of the CLI: a dq_worker with a lease (and the queue's
 * scheduler) on libev's default loop, whose handler starts "/bin/sh -c CMD"
 * for each message with the payload on its stdin and DELAYQ_QUEUE,
 * DELAYQ_ID, DELAYQ_ATTEMPT and DELAYQ_TOKEN in its environment, and none
 * of the worker's credentials (DELAYQ_REDIS, the password and key files)
 * unless --pass-credentials hands them on. The payload
 * is written from the loop through a non-blocking pipe (an ev_io watcher),
 * so a command that never reads its stdin holds up nothing but itself; an
 * ev_child watcher (hence the default loop) sees the exit: status 0 acks
 * the message, anything else nacks it with the client's backoff.
 *
 * Stopping: the first SIGINT/SIGTERM stops taking and lets running commands
 * finish; the second sends them SIGTERM and the third SIGKILL (each command
 * runs in a process group of its own, so a signal meant for the worker does
 * not cut them short by itself). The run ends, exit 0, once nothing is in
 * hand and the last acks and nacks have been answered. Nothing goes to
 * stdout but what the commands write; stderr gets a start line, a line per
 * failed command, the library's background problems and a summary.
 */
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"

extern char **environ;

#define SHELL "/bin/sh"
#define CONCURRENCY_MAX 10000

const char cli_usage_work[] =
    "usage: delayq work QUEUE --exec CMD [--concurrency N] [--lease DUR]\n"
    "                  [--max-attempts N] [--pass-credentials] [--connect-wait DUR]\n"
    "                  [--name NAME]\n"
    "\n"
    "Runs CMD (with /bin/sh -c) once for every item of QUEUE as it becomes due,\n"
    "until SIGINT or SIGTERM. Also moves due items of QUEUE to its ready list\n"
    "(as 'delayq schedule' does).\n"
    "\n"
    "CMD gets the payload on its stdin, and in its environment:\n"
    "  DELAYQ_QUEUE     the queue\n"
    "  DELAYQ_ID        the item's id\n"
    "  DELAYQ_ATTEMPT   1 on first delivery, then 2, 3, ...\n"
    "  DELAYQ_TOKEN     the delivery's lease token\n"
    "and not the worker's credentials: DELAYQ_REDIS, DELAYQ_PASSWORD_FILE,\n"
    "DELAYQ_SENTINEL_PASSWORD_FILE and DELAYQ_KEY_FILE are removed from it\n"
    "(the payload it gets is already opened), unless --pass-credentials.\n"
    "Its stdout and stderr are the worker's. Exit status 0 acks the item (done);\n"
    "any other status, or death by a signal, sends it back for another attempt\n"
    "after a backoff (1s doubling with each attempt, up to 10m, with jitter), or,\n"
    "after its last attempt, makes it a dead letter (see 'delayq dead').\n"
    "\n"
    "  --exec CMD          the command (required)\n"
    "  --concurrency N     commands running at once, 1 to 10000; default 1\n"
    "  --lease DUR         how long an item may stay in hand before it is\n"
    "                      delivered again elsewhere (250ms, 30s, 5m, 2h, 1d,\n"
    "                      milliseconds); default: the queue's (delayq config),\n"
    "                      else 30s. A command running longer than this (or a\n"
    "                      worker paused past it) may see its item delivered\n"
    "                      twice: its late ack or nack is refused as stale (a\n"
    "                      line on stderr names the item; the summary counts\n"
    "                      it stale, not succeeded or failed).\n"
    "  --max-attempts N    deliveries before an item becomes a dead letter;\n"
    "                      0 = no limit; default: the queue's, else 16\n"
    "  --pass-credentials  give CMD the worker's connection settings, as\n"
    "                      DELAYQ_REDIS (the URL, password included),\n"
    "                      DELAYQ_PASSWORD_FILE, DELAYQ_SENTINEL_PASSWORD_FILE\n"
    "                      and DELAYQ_KEY_FILE (those the worker has), for a\n"
    "                      CMD that runs delayq itself\n"
    "  --name NAME         the worker's name in 'delayq consumers' and the holder\n"
    "                      of its items (lookup, list); 1 to 64 bytes of UTF-8;\n"
    "                      default: host:pid (consumers), no holder\n"
    "  --connect-wait DUR  while Redis cannot be reached at the start, try again\n"
    "                      (backoff 100ms to 5s) for up to DUR (0: exit 3 at\n"
    "                      once); default: forever\n"
    "  --redis URL         the Redis server (see 'delayq --help')\n"
    "\n"
    "The first SIGINT or SIGTERM stops taking items and waits for the running\n"
    "commands to finish (each is acked or nacked as usual); a second one sends\n"
    "them SIGTERM, a third SIGKILL (they are then nacked). Nothing is printed on\n"
    "stdout but what the commands print.\n"
    "Exit codes: 0 stopped by a signal, 2 usage error, 3 Redis unreachable,\n"
    "refusing the user (ACL: exits at the first refusal) or erroring.\n";

typedef struct work_run work_run;

/* One running command and the message it works on. */
typedef struct job {
    struct job *next;
    work_run *r;
    dq_msg *msg;       /* owned until dq_worker_done/fail                 */
    pid_t pid;         /* the shell; also its process group               */
    ev_child child;
    ev_io input;       /* writes the payload into the command's stdin     */
    int fd;            /* our end of that pipe; -1 once closed            */
    size_t written;    /* payload bytes written so far                    */
} job;

struct work_run {
    dq_client *c;
    struct ev_loop *loop; /* libev's default loop: ev_child needs it      */
    dq_worker *w;         /* valid while a message is in hand             */
    const char *queue;
    const char *cmd;
    int max_attempts;
    char **env;           /* environ without our variables, the passed
                             credentials, then 4 slots                    */
    size_t nenv;          /* entries before the slots                     */
    char *creds[4];       /* --pass-credentials: the variables, owned     */
    job *jobs;
    int running;          /* commands started and not yet reaped          */
    int signals;          /* SIGINT/SIGTERM received                      */
    int refused;          /* Redis's ACL refused a take: stop, exit 3     */
    uint64_t handled;     /* messages the worker handed us                */
    uint64_t succeeded, failed;
    uint64_t stale;       /* settled after the lease ran out: not counted
                             in succeeded or failed                       */
};

/* ------------------------------------------------------------ environment */

static const char *const our_vars[4] = {
    "DELAYQ_QUEUE=", "DELAYQ_ID=", "DELAYQ_ATTEMPT=", "DELAYQ_TOKEN="};

/* The worker's credentials: a command gets them only with
 * --pass-credentials. The key file too: the payload a command gets is
 * already opened, and a command that offers sealed items can be given it. */
static const char *const cred_vars[4] = {
    "DELAYQ_REDIS=", "DELAYQ_PASSWORD_FILE=", "DELAYQ_SENTINEL_PASSWORD_FILE=", "DELAYQ_KEY_FILE="};

static int starts_with_any(const char *entry, const char *const *vars, int n) {
    for (int k = 0; k < n; k++)
        if (strncmp(entry, vars[k], strlen(vars[k])) == 0) return 1;
    return 0;
}

/* With pass, the worker's own settings (whatever they came from: options
 * or variables) as cred_vars, into r->creds. Returns 0 or -1. */
static int creds_init(work_run *r, const cli_env *env, int pass) {
    const char *values[4] = {env->redis_url, env->password_file, env->sentinel_password_file,
                             env->key_file};
    int n = 0;

    for (int k = 0; pass && k < 4; k++) {
        if (!values[k] || !*values[k]) continue;
        if (asprintf(&r->creds[n], "%s%s", cred_vars[k], values[k]) < 0) {
            r->creds[n] = NULL;
            return -1;
        }
        n++;
    }
    return 0;
}

/* Copies environ, leaving out the variables each command gets from us and
 * the worker's credentials, then adds those of r->creds. */
static int env_init(work_run *r, const cli_env *env, int pass) {
    size_t n = 0;

    while (environ && environ[n]) n++;
    r->env = calloc(n + 4 + 5, sizeof *r->env);
    if (!r->env || creds_init(r, env, pass)) return -1;
    for (size_t i = 0; i < n; i++)
        if (!starts_with_any(environ[i], our_vars, 4) && !starts_with_any(environ[i], cred_vars, 4))
            r->env[r->nenv++] = environ[i];
    for (int k = 0; k < 4 && r->creds[k]; k++) r->env[r->nenv++] = r->creds[k];
    return 0;
}

static void env_free(work_run *r) {
    for (int k = 0; k < 4; k++) {
        if (r->creds[k]) explicit_bzero(r->creds[k], strlen(r->creds[k])); /* a URL's password */
        free(r->creds[k]);
    }
    free(r->env);
}

/* Fills the 4 slots for msg; release with env_clear. Returns 0 or -1. */
static int env_set(work_run *r, const dq_msg *msg) {
    char **slot = r->env + r->nenv;
    int bad = asprintf(&slot[0], "DELAYQ_QUEUE=%s", msg->queue) < 0;
    bad |= asprintf(&slot[1], "DELAYQ_ID=%s", msg->id) < 0;
    bad |= asprintf(&slot[2], "DELAYQ_ATTEMPT=%d", msg->attempt) < 0;
    bad |= asprintf(&slot[3], "DELAYQ_TOKEN=%s", msg->token ? msg->token : "") < 0;
    return bad ? -1 : 0;
}

static void env_clear(work_run *r) {
    for (size_t i = r->nenv; i < r->nenv + 4; i++) {
        free(r->env[i]);
        r->env[i] = NULL;
    }
}

/* ------------------------------------------------------------ a command */

/* Starts the shell for j->msg with the read end of a new pipe as its stdin;
 * j->fd gets the write end (non-blocking). Returns 0 or an errno value. */
static int spawn(work_run *r, job *j) {
    char *const argv[] = {(char *)SHELL, (char *)"-c", (char *)r->cmd, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    int p[2], e;

    if (env_set(r, j->msg)) {
        env_clear(r);
        return ENOMEM;
    }
    if (pipe2(p, O_CLOEXEC) < 0) {
        e = errno;
        env_clear(r);
        return e;
    }
    /* main() ignores SIGPIPE, which exec would pass on; the signals libev
     * handles go back to their defaults by themselves. */
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    e = posix_spawn_file_actions_init(&fa);
    if (!e) e = posix_spawnattr_init(&at);
    if (!e) {
        e = posix_spawn_file_actions_adddup2(&fa, p[0], 0);
        /* The client's sockets and libev's fds are not the command's. */
        if (!e) e = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        if (!e) e = posix_spawnattr_setsigmask(&at, &none);
        if (!e) e = posix_spawnattr_setsigdefault(&at, &dfl);
        if (!e) e = posix_spawnattr_setpgroup(&at, 0);
        if (!e)
            e = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                  POSIX_SPAWN_SETPGROUP);
        if (!e) e = posix_spawn(&j->pid, SHELL, &fa, &at, argv, r->env);
        posix_spawnattr_destroy(&at);
        posix_spawn_file_actions_destroy(&fa);
    }
    env_clear(r);
    close(p[0]);
    if (e) {
        close(p[1]);
        return e;
    }
    j->fd = p[1];
    fcntl(j->fd, F_SETFL, fcntl(j->fd, F_GETFL) | O_NONBLOCK);
    return 0;
}

static void close_input(job *j) {
    if (j->fd < 0) return;
    ev_io_stop(j->r->loop, &j->input);
    close(j->fd);
    j->fd = -1;
}

/* Writes what the pipe takes of the rest of the payload; closes it when all
 * is written or the command will not read more (EPIPE: its exit status
 * decides, as for any command). */
static void feed(job *j) {
    const char *data = j->msg->payload;
    size_t len = j->msg->payload_len;

    while (j->written < len) {
        ssize_t n = write(j->fd, data + j->written, len - j->written);
        if (n > 0) {
            j->written += (size_t)n;
        } else if (n < 0 && errno == EAGAIN) {
            if (!ev_is_active(&j->input)) ev_io_start(j->r->loop, &j->input);
            return;
        } else if (!(n < 0 && errno == EINTR)) {
            break;
        }
    }
    close_input(j);
}

static void on_input(struct ev_loop *loop, ev_io *w, int revents) {
    (void)loop;
    (void)revents;
    feed(w->data);
}

static void unlink_job(work_run *r, job *j) {
    for (job **p = &r->jobs; *p; p = &(*p)->next) {
        if (*p == j) {
            *p = j->next;
            break;
        }
    }
    r->running--;
}

/* The command ended: ack or nack its message. */
static void on_child(struct ev_loop *loop, ev_child *w, int revents) {
    job *j = w->data;
    work_run *r = j->r;
    int st = w->rstatus;
    char why[64];

    (void)revents;
    ev_child_stop(loop, w);
    close_input(j);
    unlink_job(r, j);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        r->succeeded++;
        dq_worker_done(r->w, j->msg, 0);
    } else {
        if (WIFSIGNALED(st)) snprintf(why, sizeof why, "killed by signal %d", WTERMSIG(st));
        else snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(st));
        int last = r->max_attempts > 0 && j->msg->attempt >= r->max_attempts;
        cli_err("work: %s (attempt %d) failed: %s%s", cli_quote_n(j->msg->id, j->msg->id_len),
                j->msg->attempt, why, last ? "; that was its last attempt: now a dead letter" : "");
        r->failed++;
        dq_worker_fail(r->w, j->msg, why);
    }
    free(j);
    if ((r->signals || r->refused) && r->running == 0) dq_stop(r->c);
}

/* The worker's handler: start the command for msg. */
static void on_msg(dq_worker *w, dq_msg *msg, void *privdata) {
    work_run *r = privdata;
    const char *why = "the worker was stopping";
    int e = 0;

    r->handled++;
    job *j = r->signals >= 2 ? NULL : calloc(1, sizeof *j);
    if (j) {
        j->r = r;
        j->msg = msg;
        j->fd = -1;
        e = spawn(r, j);
        why = "cannot run " SHELL;
    }
    if (!j || e) {
        /* Taken while stopping hard, or no command: try again later. */
        if (e || r->signals < 2)
            cli_err("work: %s: cannot run the command: %s", cli_quote_n(msg->id, msg->id_len),
                    strerror(e ? e : ENOMEM));
        free(j);
        r->failed++;
        dq_worker_fail(w, msg, why);
        return;
    }
    j->next = r->jobs;
    r->jobs = j;
    r->running++;
    ev_child_init(&j->child, on_child, j->pid, 0);
    j->child.data = j;
    ev_child_start(r->loop, &j->child);
    ev_io_init(&j->input, on_input, j->fd, EV_WRITE);
    j->input.data = j;
    feed(j);
}

/* ------------------------------------------------------------ stopping */

static void on_signal(void *data, int signum) {
    work_run *r = data;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";

    if (++r->signals == 1) {
        if (r->running)
            cli_err("work: %s: waiting for %d running command%s (send it again to stop "
                    "them)",
                    name, r->running, r->running == 1 ? "" : "s");
        dq_worker_stop(r->w);
        if (r->running == 0) dq_stop(r->c);
        return;
    }
    int sig = r->signals == 2 ? SIGTERM : SIGKILL;
    if (r->running)
        cli_err("work: %s again: sending %s to %d running command%s", name,
                sig == SIGTERM ? "SIGTERM" : "SIGKILL", r->running, r->running == 1 ? "" : "s");
    for (job *j = r->jobs; j; j = j->next) kill(-j->pid, sig);
}

/* A command's ack or nack came after the item's lease ran out (the worker
 * was paused, or the command outlived --lease): the library logged which;
 * the item went to another consumer, so it counts as neither. */
static void on_stale(dq_worker *w, const dq_msg *msg, int acked, void *privdata) {
    work_run *r = privdata;

    (void)w, (void)msg;
    r->stale++;
    if (acked) r->succeeded--;
    else r->failed--;
}

/* Redis's ACL refused the worker's takes (the line is on stderr already):
 * retrying cannot help, so stop as on a first signal, then exit 3. */
static void on_refused(void *data, const char *msg) {
    work_run *r = data;

    (void)msg;
    if (r->refused++ || r->signals) return;
    dq_worker_stop(r->w);
    if (r->running == 0) dq_stop(r->c);
}

/* After the last command: the worker's cancelled takes may still bring a
 * message, and its acks and nacks are still on their way. A command on the
 * client's connection answers after all of them. Returns 1 when the run is
 * over, 0 when a message came meanwhile (run the loop again). */
static int settled(work_run *r) {
    dq_stats st;
    uint64_t seen = r->handled;

    if (dq_get_stats(r->c, r->queue, &st) < 0)
        return 1; /* Redis is away: the leases will bring the items back */
    return r->running == 0 && r->handled == seen;
}

/* Frees what an unexpected end leaves: the messages go back when their
 * leases run out. */
static void drop_jobs(work_run *r) {
    while (r->jobs) {
        job *j = r->jobs;
        r->jobs = j->next;
        ev_child_stop(r->loop, &j->child);
        close_input(j);
        dq_msg_free(j->msg);
        free(j);
    }
}

/* The summary's count of stale settles, into out: "" when none. */
static const char *stale_note(const work_run *r, char *out, size_t size) {
    out[0] = '\0';
    if (r->stale)
        snprintf(out, size, ", %" PRIu64 " stale (done after their lease ran out: delivered again)",
                 r->stale);
    return out;
}

static int run(work_run *r, int concurrency, const dq_take_opts *opts) {
    char stale[96];
    cli_doctor_start(r->c, DQ_DOCTOR_QUICK, NULL, NULL);
    r->w = dq_worker_start_ex(r->c, r->queue, concurrency, 0, opts, on_msg, r);
    if (!r->w) {
        cli_err("work: %s", dq_client_errstr(r->c));
        return CLI_FAIL;
    }
    cli_log_start(r->c);
    dq_worker_set_on_stale(r->w, on_stale, r);
    dq_set_on_refused(r->c, on_refused, r);
    cli_err("work: running the command for items of %s, up to %d at once, until SIGINT "
            "or SIGTERM",
            r->queue, concurrency);
    cli_signals_start(r->loop, on_signal, r);
    for (;;) {
        dq_run(r->c);
        if (!(r->signals || r->refused) || (r->running == 0 && settled(r))) break;
    }
    cli_signals_stop(r->loop);
    dq_set_on_refused(r->c, NULL, NULL);
    if (r->refused && !r->signals) {
        cli_err("work: stopped: refused by Redis's ACL (%" PRIu64 " succeeded, %" PRIu64 " failed%s)",
                r->succeeded, r->failed, stale_note(r, stale, sizeof stale));
        return CLI_FAIL;
    }
    if (!r->signals) {
        drop_jobs(r);
        return cli_fail(r->c, DQ_ECLOSED, "work");
    }
    cli_err("work: stopped: %" PRIu64 " succeeded, %" PRIu64 " failed%s", r->succeeded, r->failed,
            stale_note(r, stale, sizeof stale));
    return CLI_OK;
}

/* ------------------------------------------------------------ the command */

/* A command's stdin must not become one of ours by accident: a pipe made
 * while fd 0 is closed would be fd 0 itself. */
static void open_std_fds(void) {
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF &&
            open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
            return;
}

/* A whole number of at least min and at most max for option what. Returns 0
 * or CLI_USAGE. */
static int parse_int(const char *what, const char *text, int min, int max, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end || errno || v < min || v > max) {
        cli_err("work: invalid %s '%s': expected a whole number from %d to %d", what, cli_quote(text),
                min, max);
        return CLI_USAGE;
    }
    *out = (int)v;
    return 0;
}

/* Checks the options into *opts and *concurrency. Returns 0 or CLI_USAGE. */
static int parse_options(const char *conc, const char *lease, const char *max, dq_take_opts *opts,
                         int *concurrency) {
    dq_take_opts_init(opts); /* the queue's lease and max attempts, unless given */
    if (conc && parse_int("concurrency", conc, 1, CONCURRENCY_MAX, concurrency)) return CLI_USAGE;
    if (lease) {
        if (cli_parse_delay("", "lease", lease, &opts->lease_ms)) return CLI_USAGE;
        if (opts->lease_ms <= 0) {
            cli_err("work: invalid lease '%s': it must be longer than 0", cli_quote(lease));
            return CLI_USAGE;
        }
    }
    if (max && parse_int("max attempts", max, 0, INT_MAX, &opts->max_attempts)) return CLI_USAGE;
    return 0;
}

int cli_cmd_work(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    const char *exec = NULL, *conc = NULL, *lease = NULL, *max = NULL, *wait = NULL, *name = NULL;
    int64_t wait_ms = -1;
    int pass = 0;
    const cli_opt opts[] = {{"exec", &exec, NULL},        {"pass-credentials", NULL, &pass},
                            {"concurrency", &conc, NULL}, {"lease", &lease, NULL},
                            {"max-attempts", &max, NULL}, {"connect-wait", &wait, NULL},
                            {"name", &name, NULL},        {NULL, NULL, NULL}};
    work_run r = {0};
    dq_take_opts take_opts;
    int concurrency = 1, npos;

    int rc = cli_parse(env, "work", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("work", npos, 1, 1, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc && (!exec || !*exec)) {
        cli_err("work: missing --exec CMD (see 'delayq work --help')");
        rc = CLI_USAGE;
    }
    if (!rc) rc = parse_options(conc, lease, max, &take_opts, &concurrency);
    if (!rc && wait) rc = cli_parse_connect_wait(wait, &wait_ms);
    if (!rc && name && !cli_name_valid("work", name)) rc = CLI_USAGE;
    if (rc) return rc;
    take_opts.holder = name; /* the worker's consumer name too */
    open_std_fds();
    r.queue = argv[0];
    r.cmd = exec;
    r.max_attempts = take_opts.max_attempts;
    r.loop = ev_default_loop(0);
    if (!r.loop || env_init(&r, env, pass)) {
        cli_err("work: cannot set up: %s", r.loop ? "out of memory" : "no event loop");
        env_free(&r);
        return CLI_FAIL;
    }
    rc = cli_connect_wait(env, r.loop, wait_ms, &r.c);
    if (!rc && r.max_attempts < 0) {
        /* For the "last attempt" line: the queue's setting. */
        dq_queue_config qc;
        if (dq_queue_config_get(r.c, r.queue, &qc) == 0) r.max_attempts = (int)qc.max_attempts;
    }
    if (!rc) {
        rc = run(&r, concurrency, &take_opts);
        cli_close(r.c);
    }
    env_free(&r);
    ev_loop_destroy(r.loop);
    return rc;
}
