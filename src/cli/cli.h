/*
 * cli.h - what the files of the delayq command-line tool share.
 *
 * main.c dispatches to one cmd_*.c per command group; each command parses its
 * own arguments with cli_parse() (args.c), opens a client with cli_connect()
 * (session.c), prints with the output.c helpers and returns an exit code.
 * Every error goes to stderr as exactly one line starting with "delayq: ".
 * Internal to the CLI: cli_ prefix, never installed.
 */
#ifndef DQ_CLI_H
#define DQ_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "delayq.h"

struct ev_loop;

/* ------------------------------------------------------------ exit codes */

enum cli_exit {
    CLI_OK = 0,    /* done                                                 */
    CLI_NONE = 1,  /* nothing there: timeout, id not pending, unknown or
                      stale lease token, no such dead letter               */
    CLI_USAGE = 2, /* bad arguments, bad input, payload too big, a value
                      Redis refused as out of range or inconsistent        */
    CLI_FAIL = 3,  /* Redis unreachable or erroring, or stdout failed      */
    CLI_NOT_DURABLE = 4 /* written on the master, but fewer replicas than
                           --wait-replicas confirmed it in --wait-timeout  */
};

/* Returned by cli_parse() when --help (or -h) was given, and by a command
 * to main.c, which prints the command's usage. Not an exit code. */
#define CLI_HELP (-1)

/* Settings that hold for the whole run, whatever the command. */
typedef struct cli_env {
    const char *redis_url; /* from --redis, $DELAYQ_REDIS or the default   */
    const char *wait_replicas; /* --wait-replicas N, or NULL (0)           */
    const char *wait_timeout;  /* --wait-timeout DUR, or NULL (1s)         */
    const char *key_file;      /* --key-file FILE or $DELAYQ_KEY_FILE, or NULL */
    const char *plaintext;     /* --plaintext allow|refuse or $DELAYQ_PLAINTEXT, or NULL */
    const char *password_file; /* --password-file FILE or $DELAYQ_PASSWORD_FILE,
                                  or NULL: the data nodes' password        */
    const char *sentinel_password_file; /* --sentinel-password-file FILE or
                                  $DELAYQ_SENTINEL_PASSWORD_FILE, or NULL  */
    const char *tls_ca;        /* --tls-ca FILE or $DELAYQ_TLS_CA, or NULL  */
    const char *tls_cert;      /* --tls-cert FILE or $DELAYQ_TLS_CERT       */
    const char *tls_key;       /* --tls-key FILE or $DELAYQ_TLS_KEY         */
    const char *tls_server_name; /* --tls-server-name NAME or
                                  $DELAYQ_TLS_SERVER_NAME                   */
    const char *tls_insecure;  /* "1": --tls-insecure-skip-verify, or
                                  $DELAYQ_TLS_INSECURE_SKIP_VERIFY=1        */
} cli_env;

/* The options every command takes, before or after its name: --redis,
 * --wait-replicas, --wait-timeout, --key-file, --password-file,
 * --sentinel-password-file, --plaintext. Returns 1 and where the value goes in
 * *value when name (len bytes) is one of them, else 0. */
int cli_global_opt(cli_env *env, const char *name, size_t len, const char ***value);
/* The same for the global options that take no value
 * (--tls-insecure-skip-verify): returns 1 and sets it when name is one. */
int cli_global_flag(cli_env *env, const char *name, size_t len);

/* ------------------------------------------------------------ errors (output.c) */

/* Prints "delayq: <message>\n" to stderr, bytes that are no printable ASCII
 * as \xHH. Outside input in the message goes through cli_quote first. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Input bytes a quote shows at most; "..." marks the rest. */
#define CLI_QUOTE_MAX 64

/* Outside input (a queue name, an id, a duration, a path, an argument) as a
 * message may quote it: escaped by dq__escape (printable ASCII as is, '\'
 * doubled, other bytes \xHH) and cut to CLI_QUOTE_MAX bytes. Input that may
 * hold a URL or a credential (an '@', "://" or "password" in it, any case)
 * is first masked as URLs are (dq__url_redact: user info, sentinel
 * passwords and what may be their tails become "***"), so a URL typed
 * where it does not belong never shows its secrets. Returns a static
 * buffer, one of 4 used in turn: valid until the 4th next call. */
const char *cli_quote(const char *text);
const char *cli_quote_n(const void *text, size_t len);

/* ------------------------------------------------------------ arguments (args.c) */

/* One long option of a command: "--name" for a flag, "--name VALUE" or
 * "--name=VALUE" for an option with a value. Exactly one of value and flag is
 * set. A table ends with an entry whose name is NULL. */
typedef struct cli_opt {
    const char *name;   /* without the leading "--"                        */
    const char **value; /* receives the value (the last one given wins)    */
    int *flag;          /* set to 1 when the flag is given                 */
} cli_opt;

/* Parses the arguments of command cmd (argv[0..argc), the command name not
 * included). Options may come before, between or after positional
 * arguments; "--" ends options; a lone "-" is positional. "--redis URL" is
 * accepted everywhere and stored in env. The positional arguments are moved,
 * in order, to argv[0..*npos). Returns 0, CLI_HELP for --help/-h, or
 * CLI_USAGE after printing why. */
int cli_parse(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts, int *npos);

/* As cli_parse, except that an argument starting with '-' that is no option
 * of cmd (nor --redis, --help, -h) is positional: for commands whose
 * arguments are ids or lease tokens, which may start with '-' (generated
 * ones are base64url). A mistyped option then shows as an extra or invalid
 * argument. */
int cli_parse_ids(cli_env *env, const char *cmd, int argc, char **argv, const cli_opt *opts, int *npos);

/* Checks that cmd got between min and max positional arguments (max < 0:
 * no limit); names the first missing one (names[i] for argument i) or the
 * first extra one. Returns 0 or CLI_USAGE after printing why. */
int cli_want_args(const char *cmd, int npos, int min, int max, const char *const *names, char **argv);

/* Validators: return 0, or print the error and return CLI_USAGE. where
 * starts the message (e.g. "batch.tsv line 3: ", or ""). */
int cli_check_queue(const char *queue);
/* id is len bytes long (a NUL inside makes it invalid). */
int cli_check_id(const char *where, const char *id, size_t len);
/* what names the value: "delay", "timeout". */
int cli_parse_delay(const char *where, const char *what, const char *text, int64_t *ms);
/* The longest delay an offer made now can have: DQ_DUE_MAX_MS minus the
 * local clock (taken as 2020 if earlier, as 2100 if later), which stands in
 * for the Redis server's. */
int64_t cli_delay_max(void);
/* Checks that a delay (parsed from text) is at most max_ms (from
 * cli_delay_max), so the due time stays in range. */
int cli_check_due(const char *where, const char *text, int64_t delay_ms, int64_t max_ms);
/* A payload of len bytes against the client's limit. */
int cli_check_payload(const char *where, size_t len, size_t limit);
int cli_parse_count(const char *text, int64_t *count);
/* A lease token as ack, nack and extend take it: 1 to 64 printable ASCII
 * characters (what a take hands out always is). */
int cli_check_token(const char *token);
/* 1 if token is such a token, saying nothing. */
int cli_token_valid(const char *token);

/* ------------------------------------------------------------ input (input.c) */

/* Reads fd to its end, or until more than limit bytes came, into a malloc'ed
 * buffer (*data, always followed by a NUL byte that is not counted; the
 * caller frees). *len is what was read: limit + 1 bytes at most, so *len >
 * limit means "more than limit", and nothing past that is read. Returns 0 or
 * -1 (errno set). */
int cli_read_all(int fd, size_t limit, char **data, size_t *len);

/* ------------------------------------------------------------ batches (batch.c) */

/* Lines and bytes of one chunk: checked, then sent in one dq_offer_many. */
#define BATCH_CHUNK_ITEMS 16384
#define BATCH_CHUNK_BYTES (4 * 1024 * 1024)
/* The longest line there is: a delay (64 bytes), an id, a payload, the two
 * tabs and a "\r". */
#define BATCH_LINE_MAX (64 + 1 + DQ_ID_MAX + 1 + (int)DQ_PAYLOAD_DEFAULT_MAX + 1)

/* A batch file being read a chunk at a time: after cli_batch_next, items[i]
 * came from line lines[i] and points into buf, until the next call. */
typedef struct cli_batch {
    dq_item *items;
    size_t *lines;
    size_t n;             /* items in the chunk; 0 at the end of the input */
    /* private */
    int fd;
    int eof;
    unsigned flags;       /* DQ_OFFER_* of every item                      */
    int64_t delay_max;    /* cli_delay_max() at the start                  */
    char name[4 * CLI_QUOTE_MAX + 8]; /* "stdin" or the quoted path        */
    char *buf;            /* the chunk's lines, then what follows them     */
    size_t start;         /* where the next line starts                    */
    size_t scan;          /* no "\n" in [start, scan)                      */
    size_t end;           /* bytes read into buf                           */
    size_t lineno;        /* lines taken so far                            */
} cli_batch;

/* Opens the batch file at path ('-' = stdin), giving every item the
 * DQ_OFFER_* flags. Returns 0, or prints why and returns CLI_USAGE (cannot
 * open it) or CLI_FAIL (out of memory). Close with cli_batch_close(). */
int cli_batch_open(const char *path, unsigned flags, cli_batch *b);

/* Reads and checks the next chunk: up to BATCH_CHUNK_ITEMS non-blank lines
 * and about BATCH_CHUNK_BYTES bytes. Returns 0 with b->n items (0: the
 * input is over), or prints the first problem, naming its line (a line
 * longer than BATCH_LINE_MAX as soon as it is), and returns CLI_USAGE; the
 * chunk is then empty. Memory stays at about BATCH_CHUNK_BYTES +
 * BATCH_LINE_MAX whatever the input. */
int cli_batch_next(cli_batch *b);
void cli_batch_close(cli_batch *b);

/* ------------------------------------------------------------ client (session.c) */

/* Makes a client with default options and connects it to env->redis_url.
 * Returns 0 and sets *out, or prints the cause and returns CLI_USAGE (bad
 * URL) or CLI_FAIL (unreachable, refused). */
int cli_connect(const cli_env *env, dq_client **out);

/* As cli_connect, on loop (NULL: a private loop, as cli_connect). */
int cli_connect_on(const cli_env *env, struct ev_loop *loop, dq_client **out);
/* cli_connect_on, trying again while Redis cannot be reached (refused,
 * timed out), with a backoff from 100 ms to 5 s, for up to wait_ms (< 0:
 * forever; 0: once): says so once on stderr, and once more when it
 * connects. Other failures end it at once. Returns as cli_connect_on. */
int cli_connect_wait(const cli_env *env, struct ev_loop *loop, int64_t wait_ms, dq_client **out);
/* Parses --connect-wait's value (a duration, or "forever": -1) into *ms.
 * Returns 0 or CLI_USAGE. */
int cli_parse_connect_wait(const char *text, int64_t *ms);

/* Reports what the client's background work has to say (scheduler
 * failures, reconnects, refused acks) on stderr, one "delayq: " line each. */
void cli_log_start(dq_client *c);

/* Frees a client made by cli_connect without reporting what closing it
 * interrupts. Safe with NULL. */
void cli_close(dq_client *c);

/* Exit code for a DQ_E* code: CLI_USAGE for DQ_EINVAL and DQ_ETOOBIG,
 * CLI_NOT_DURABLE for DQ_ENOTDURABLE, CLI_FAIL for everything else. */
int cli_exit_code(int dq_code);
/* The one map from a failure to an exit code: cli_exit_code's, except that
 * a DQ_EREDIS the queue's functions refused as DQ_REFUSAL_INPUT (a value
 * given to them: a due time beyond DQ_DUE_MAX_MS, a backoff base above its
 * max) is CLI_USAGE. The other classes are Redis's side: CLI_FAIL. */
int cli_exit_for(int dq_code, enum dq_refusal class);

/* Prints "delayq: <what>: <cause>" where the cause is the client's last
 * error (or the code's name) and returns cli_exit_for(code, the client's
 * dq_client_refusal). what is the CLI's own words: quote outside input in
 * it with cli_quote. */
int cli_fail(const dq_client *c, int code, const char *what);

/* Called when SIGINT or SIGTERM arrives while cli_signals_start() is on. */
typedef void cli_signal_fn(void *data, int signum);

/* Watches SIGINT and SIGTERM on loop, calling fn(data, signum) from the loop.
 * Stop with cli_signals_stop() before the loop goes away. */
void cli_signals_start(struct ev_loop *loop, cli_signal_fn *fn, void *data);
void cli_signals_stop(struct ev_loop *loop);

/* ------------------------------------------------------------ output (output.c) */

/* Writes len bytes to stdout and flushes. Returns 0, or CLI_FAIL after
 * printing why (e.g. the reader went away, a full disk); once a write has
 * failed, every later one fails without a word. */
int cli_write_out(const void *data, size_t len);

/* Writes JSON value v as one line and frees it; NULL (out of memory while
 * building it) prints "cannot print WHAT: out of memory". Returns 0, or
 * CLI_FAIL after saying why. */
struct json_t;
int cli_write_json(struct json_t *v, const char *what);
struct dq__buf;
/* Appends v as one compact JSON line to b and frees v (NULL: out of memory
 * already). Returns 0, or -1 when out of memory. */
int cli_json_line(struct dq__buf *b, struct json_t *v);
/* A taken message as one JSON object, the one form of 'take --json' and of
 * serve's take answers: "queue" (with_queue 1), "id" or "id_base64",
 * "payload" or "payload_base64" (bytes that are not valid UTF-8 go out as
 * base64), "due_ms", "ready_ms", and for a leased delivery "attempt" and
 * "token". A new reference, or NULL when out of memory. */
struct json_t *cli_msg_json(const dq_msg *msg, int with_queue);

/* Reopens any of descriptors 0-2 that is closed on /dev/null, first thing
 * in main(): else a socket would land there. */
void cli_std_fds_hold(void);

/* 0 if stdout can take records; CLI_USAGE (after saying why) if it was
 * closed when the process started: a command that removes what it prints
 * (take) checks it before it takes anything. */
int cli_out_usable(const char *what);

/* Flushes and closes stdout at the end of a run (main.c). Returns 0, or
 * CLI_FAIL after printing why, unless a write failed and said so before. */
int cli_out_close(void);

/* Prints taken messages msgs[0..n-1] in one write: each as the raw payload
 * and "\n", or with json one JSON object per line. A leased delivery (msg->token set) prints as
 * "ID<TAB>TOKEN<TAB>PAYLOAD\n" (an id that breaks the id rules escaped),
 * and its JSON object adds "attempt" and "token". An id or payload that is
 * not valid UTF-8 goes in "id_base64" or "payload_base64" instead. Flushes
 * once, at the end. Returns 0 or CLI_FAIL after printing why. */
int cli_print_msgs(dq_msg *const *msgs, size_t n, int json);

/* Prints a queue's stats as text lines or one JSON object. Returns 0 or
 * CLI_FAIL after printing why. */
int cli_print_stats(const dq_stats *st, int json);

/* Prints a queue's settings as "name value" lines or one JSON object.
 * Returns 0 or CLI_FAIL after printing why. */
int cli_print_settings(const dq_queue_config *q, int json);

/* Prints a dead letter as one "ID<TAB>ATTEMPTS<TAB>REASON<TAB>ERROR<TAB>
 * PAYLOAD" line or one JSON object per line. Flushes. Returns 0 or CLI_FAIL
 * after printing why. */
int cli_print_dead(const dq_dead_letter *d, int json);

/* Reads the first line of path (without its "\n" or "\r\n") into out
 * (size bytes with the NUL): what (e.g. "password") names it in errors,
 * after "cmd: ". A file that group or others may read is refused. Returns
 * 0, or CLI_USAGE after saying why (secret.c). */
int cli_read_secret(const char *cmd, const char *what, const char *path, char *out, size_t size);
/* All of such a file into buf (size bytes, NUL-terminated; *len its
 * length). 0, or CLI_USAGE after saying why. The caller wipes buf. */
int cli_read_secret_file(const char *cmd, const char *what, const char *path, char *buf, size_t size,
                         size_t *len);

/* "pending", "ready", "inflight", "dead" or "unknown" for an enum dq_state. */
const char *cli_state_name(int state);

/* A listed item as the JSON object of 'list --json' and the HTTP API:
 * id, state, due_ms, lease_end_ms, ready_ms, died_ms (null where they do not
 * apply), attempts, payload (null unless UTF-8 text and not sealed),
 * payload_base64, payload_bytes, sealed, reason, error (null if none).
 * A new reference, or NULL when out of memory. */
struct json_t;
struct json_t *cli_json_listed(const dq_listed *it);

/* Prints a listed item: one JSON object per line (json), or
 * "ID<TAB>STATE<TAB>TIME<TAB>ATTEMPTS<TAB>ERROR-OR-REASON<TAB>PAYLOAD", TIME
 * being the due time, lease end or death (ms), by state. Returns 0 or
 * CLI_FAIL after printing why. */
int cli_print_listed(const dq_listed *it, int json);

/* A look-up as JSON: id, state, due_ms (pending), lease_end_ms (in flight),
 * attempts. A new reference, or NULL when out of memory. */
struct json_t *cli_json_lookup(const char *id, const dq_item_info *info);

/* A live consumer of queue as JSON: name, queue, started_ms, in_hand,
 * last_seen_ms, last_seen_ago_ms (cmd_consumers.c). A new reference, or
 * NULL when out of memory. */
struct json_t *cli_consumer_json(const char *queue, const dq_consumer_info *ci);

/* Registers the running command as a consumer of queue named name (NULL:
 * host:pid) into *out; a failure is said on stderr and leaves *out NULL
 * (the command goes on, unseen). dq_consumer_stop or dq_client_free ends
 * it (cmd_consumers.c). */
void cli_consumer_start(dq_client *c, const char *queue, const char *name, dq_consumer **out);
/* 1 if name is a valid consumer --name of cmd; else says why on stderr and
 * returns 0. cli_name_ok: the same check, saying nothing. */
int cli_name_valid(const char *cmd, const char *name);
int cli_name_ok(const char *name);

/* A recurring schedule's state as listed: active, paused, ended, waiting
 * (a cron schedule short of ticks) or bad (its spec does not decode); its
 * --missed policy's name. Static strings. */
const char *cli_schedule_state(const dq_recurring *s);
const char *cli_missed_name(int missed);

/* A recurring schedule as the JSON object of 'schedules --json' and the
 * HTTP API: name, spec, zone (null for 'every'), every_ms, start_ms,
 * end_ms, missed, paused, next_ms, last_ms, state, payload_bytes. A new
 * reference, or NULL when out of memory. */
struct json_t *cli_json_schedule(const dq_recurring *s);

/* Prints a look-up as "state S", "due_ms N" or "lease_end_ms N" (when they
 * apply), "attempts N" lines, or one JSON object. Returns 0 or CLI_FAIL. */
int cli_print_lookup(const char *id, const dq_item_info *info, int json);

/* ------------------------------------------------------------ doctor (doctor.c) */

/* At the start of a long-running command (take, work, schedule, serve):
 * examines the deployment (dq_doctor with flags: DQ_DOCTOR_QUICK, or 0 for
 * every finding) and prints each unsafe one as one "delayq: unsafe: CHECK:
 * DETAIL" line on stderr.
 * Never fails the run: a doctor that cannot examine says nothing. out may
 * be NULL; else it receives the findings (free with dq_findings_free), or
 * NULL and *n = 0. */
void cli_doctor_start(dq_client *c, unsigned flags, dq_finding **out, size_t *n);

/* ------------------------------------------------------------ commands */

/* Each takes the arguments after its name and returns an exit code, or
 * CLI_HELP for --help (main.c prints the command's usage). */
int cli_cmd_offer(cli_env *env, int argc, char **argv);    /* cmd_offer.c */
int cli_cmd_cancel(cli_env *env, int argc, char **argv);   /* cmd_offer.c */
int cli_cmd_take(cli_env *env, int argc, char **argv);     /* cmd_take.c */
int cli_cmd_schedule(cli_env *env, int argc, char **argv); /* cmd_schedule.c */
int cli_cmd_stats(cli_env *env, int argc, char **argv);    /* cmd_stats.c */
int cli_cmd_consumers(cli_env *env, int argc, char **argv); /* cmd_consumers.c */
int cli_cmd_ack(cli_env *env, int argc, char **argv);      /* cmd_lease.c */
int cli_cmd_nack(cli_env *env, int argc, char **argv);     /* cmd_lease.c */
int cli_cmd_release(cli_env *env, int argc, char **argv);  /* cmd_lease.c */
int cli_cmd_extend(cli_env *env, int argc, char **argv);   /* cmd_lease.c */
int cli_cmd_dead(cli_env *env, int argc, char **argv);     /* cmd_dead.c */
int cli_cmd_work(cli_env *env, int argc, char **argv);     /* cmd_work.c */
int cli_cmd_config(cli_env *env, int argc, char **argv);   /* cmd_config.c */
int cli_cmd_acl(cli_env *env, int argc, char **argv);      /* cmd_acl.c */
int cli_cmd_functions(cli_env *env, int argc, char **argv); /* cmd_functions.c */
int cli_cmd_keygen(cli_env *env, int argc, char **argv);   /* cmd_keygen.c */
int cli_cmd_lookup(cli_env *env, int argc, char **argv);   /* cmd_browse.c */
int cli_cmd_list(cli_env *env, int argc, char **argv);     /* cmd_browse.c */
int cli_cmd_serve(cli_env *env, int argc, char **argv);    /* cmd_serve.c */
int cli_cmd_doctor(cli_env *env, int argc, char **argv);   /* cmd_doctor.c */
int cli_cmd_every(cli_env *env, int argc, char **argv);    /* cmd_recurring.c */
int cli_cmd_schedules(cli_env *env, int argc, char **argv);
int cli_cmd_cron(cli_env *env, int argc, char **argv);

/* Usage text of each command, printed by its --help and by "delayq help". */
extern const char cli_usage_offer[];
extern const char cli_usage_cancel[];
extern const char cli_usage_take[];
extern const char cli_usage_schedule[];
extern const char cli_usage_stats[];
extern const char cli_usage_consumers[];
extern const char cli_usage_ack[];
extern const char cli_usage_nack[];
extern const char cli_usage_release[];
extern const char cli_usage_extend[];
extern const char cli_usage_dead[];
extern const char cli_usage_work[];
extern const char cli_usage_config[];
extern const char cli_usage_acl[];
extern const char cli_usage_functions[];
extern const char cli_usage_keygen[];
extern const char cli_usage_lookup[];
extern const char cli_usage_list[];
extern const char cli_usage_serve[];
extern const char cli_usage_doctor[];
extern const char cli_usage_every[];
extern const char cli_usage_schedules[];
extern const char cli_usage_cron[];

/* Prints text to stdout; returns CLI_OK (for --help), or CLI_FAIL when
 * stdout cannot be written (output.c). */
int cli_help(const char *text);

#endif
