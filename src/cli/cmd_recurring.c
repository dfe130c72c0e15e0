/*
 * cmd_recurring.c - recurring schedules: "delayq every" and "delayq cron"
 * set one, "delayq schedules" lists them and removes, pauses or resumes one.
 *
 * Owns parsing a schedule's arguments (interval, --start/--end times,
 * --missed), reading its payload (the argument, else stdin, as offer),
 * and printing the listing as text lines or JSON. The schedules are data
 * in Redis (src/ops/recurring.c): nothing here runs them; 'delayq schedule'
 * (any number of them) does.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

const char cli_usage_every[] =
    "usage: delayq every QUEUE NAME INTERVAL [PAYLOAD] [--missed skip|one|all]\n"
    "                    [--start TIME] [--end TIME]\n"
    "\n"
    "Sets the recurring schedule NAME of QUEUE (replacing one of that name): an\n"
    "item every INTERVAL, made by whichever 'delayq schedule' runs for QUEUE,\n"
    "exactly one per tick, with id NAME@<tick ms> and due time the tick (the\n"
    "Redis server's clock). Without PAYLOAD the payload is all of stdin. Prints\n"
    "the first tick (epoch ms; -1: none before --end).\n"
    "\n"
    "  NAME          1 to 64 of A-Z a-z 0-9 _ . : -\n"
    "  INTERVAL      a duration of at least 1s (1s, 90s, 5m, 1h, 1d, or ms)\n"
    "  --missed P    the ticks that pass while no scheduler runs (or while\n"
    "                paused): one (default) makes one item for them, the first\n"
    "                missed tick's, then goes on schedule; all makes an item\n"
    "                for each (of the last 1000 at most); skip makes none\n"
    "                (nor for a tick over 60 s late)\n"
    "  --start TIME  the first tick; later ticks are TIME + k * INTERVAL;\n"
    "                default: INTERVAL from now\n"
    "  --end TIME    no tick after TIME\n"
    "  --redis URL   the Redis server (see 'delayq --help')\n"
    "\n"
    "TIME: epoch milliseconds, or UTC as 2026-11-27T10:00:00Z.\n"
    "On a sharded queue a schedule lives in the shard its NAME picks; the\n"
    "shard count does not change while the queue has schedules. With\n"
    "--key-file the payload is sealed once, bound to the queue and NAME.\n"
    "Exit codes: 0 ok, 2 usage error or bad input, 3 Redis unreachable or\n"
    "erroring, or stdout could not be written.\n";

const char cli_usage_cron[] =
    "usage: delayq cron QUEUE NAME EXPR [PAYLOAD] [--tz ZONE] [--missed skip|one|all]\n"
    "                   [--start TIME] [--end TIME]\n"
    "\n"
    "Sets the recurring schedule NAME of QUEUE by a cron expression, as 'every'\n"
    "does by an interval (see 'delayq every --help' for NAME, PAYLOAD, --missed,\n"
    "TIME). Prints the first tick (epoch ms).\n"
    "\n"
    "  EXPR        five fields: minute (0-59) hour (0-23) day-of-month (1-31)\n"
    "              month (1-12, jan-dec) day-of-week (0-7, sun-sat; 0 and 7\n"
    "              are Sunday), each *, a value, a range a-b, a list a,b,c,\n"
    "              with /step; a day matches either day field when both are\n"
    "              restricted. Or @hourly, @daily, @weekly, @monthly, @yearly.\n"
    "  --tz ZONE   the IANA zone of the expression's wall clock; default UTC.\n"
    "              A time a DST change skips runs at the end of the gap, once;\n"
    "              a time that comes twice runs at its first occurrence.\n"
    "  --start TIME  no tick before TIME\n"
    "\n"
    "Exit codes: 0 ok, 2 usage error or bad input (a bad expression names its\n"
    "field), 3 Redis unreachable or erroring, or stdout could not be written.\n";

const char cli_usage_schedules[] =
    "usage: delayq schedules QUEUE [--json]\n"
    "       delayq schedules QUEUE remove|pause|resume NAME\n"
    "\n"
    "Lists QUEUE's recurring schedules, one line each:\n"
    "NAME<TAB>SPEC<TAB>ZONE<TAB>NEXT<TAB>LAST<TAB>STATE<TAB>MISSED, where NEXT and\n"
    "LAST are ticks in epoch ms (-1: none), ZONE is - for 'every', STATE is\n"
    "active, paused, ended or waiting (a cron schedule short of ticks: set it\n"
    "again). --json prints one object per line.\n"
    "remove deletes a schedule and its pending tick's item; pause makes no\n"
    "items until resume, whose --missed policy then applies to the ticks that\n"
    "passed.\n"
    "Exit codes: 0 ok, 1 no schedule NAME, 2 usage error, 3 Redis unreachable\n"
    "or erroring, or stdout could not be written.\n";

/* TIME: epoch ms, or "YYYY-MM-DDTHH:MM:SSZ" (UTC). */
static int parse_time(const char *cmd, const char *what, const char *text, int64_t *ms) {
    struct tm tm;
    char *end;

    memset(&tm, 0, sizeof tm);
    if (text[0] >= '0' && text[0] <= '9') {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (!*end && !errno && v >= 0 && v <= DQ_DUE_MAX_MS) {
            *ms = v;
            return 0;
        }
        end = strptime(text, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (end && !*end) {
            time_t t = timegm(&tm);
            if (t >= 0 && (int64_t)t <= DQ_DUE_MAX_MS / 1000) {
                *ms = (int64_t)t * 1000;
                return 0;
            }
        }
    }
    cli_err("%s: invalid %s time '%s': expected epoch ms or UTC as 2026-11-27T10:00:00Z", cmd, what,
            cli_quote(text));
    return CLI_USAGE;
}

static int parse_missed(const char *cmd, const char *text, int *missed) {
    static const char *const names[] = {"one", "skip", "all"};
    for (int i = 0; i < 3; i++)
        if (strcmp(text, names[i]) == 0) {
            *missed = i;
            return 0;
        }
    cli_err("%s: invalid --missed '%s': expected skip, one or all", cmd, cli_quote(text));
    return CLI_USAGE;
}

static int check_name(const char *cmd, const char *name) {
    size_t n = strlen(name);
    if (n >= 1 && n <= DQ_RECURRING_NAME_MAX &&
        strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-") == n)
        return 0;
    cli_err("%s: invalid schedule name '%s': use 1 to %d of A-Z a-z 0-9 _ . : -", cmd, cli_quote(name),
            DQ_RECURRING_NAME_MAX);
    return CLI_USAGE;
}

/* The options of every and cron (cmd), and QUEUE and NAME, into *sp. */
static int parse_common(const char *cmd, char **argv, const char *missed, const char *start,
                        const char *end, dq_recurring_spec *sp) {
    int rc = cli_check_queue(argv[0]);
    if (!rc) rc = check_name(cmd, argv[1]);
    if (!rc && missed) rc = parse_missed(cmd, missed, &sp->missed);
    if (!rc && start) rc = parse_time(cmd, "--start", start, &sp->start_ms);
    if (!rc && end) rc = parse_time(cmd, "--end", end, &sp->end_ms);
    if (!rc && sp->end_ms && sp->start_ms > sp->end_ms) {
        cli_err("%s: --start is after --end", cmd);
        rc = CLI_USAGE;
    }
    return rc;
}

/* Reads the payload (argv[at] when given, else stdin), sets the schedule
 * and prints its first tick. */
static int set_schedule(const cli_env *env, const char *cmd, char **argv, int npos, int at,
                        dq_recurring_spec *sp) {
    char *owned = NULL;
    char where[24];

    if (npos > at) {
        sp->payload = argv[at];
        sp->payload_len = strlen(argv[at]);
    } else if (cli_read_all(0, DQ_PAYLOAD_DEFAULT_MAX, &owned, &sp->payload_len) != 0) {
        cli_err("%s: cannot read the payload from stdin: %s", cmd, strerror(errno));
        return CLI_USAGE;
    } else {
        sp->payload = owned;
    }
    snprintf(where, sizeof where, "%s: ", cmd);
    int rc = cli_check_payload(where, sp->payload_len, DQ_PAYLOAD_DEFAULT_MAX);
    dq_client *c = NULL;
    if (!rc) rc = cli_connect(env, &c);
    if (!rc) {
        int64_t next = -1;
        int code = dq_recurring_set(c, argv[0], argv[1], sp, &next);
        if (code < 0 && code != DQ_ENOTDURABLE) {
            rc = cli_fail(c, code, cmd);
        } else {
            char line[32];
            int n = snprintf(line, sizeof line, "%" PRId64 "\n", next);
            rc = cli_write_out(line, (size_t)n);
            if (!rc && code == DQ_ENOTDURABLE) rc = cli_fail(c, code, cmd);
        }
        dq_client_free(c);
    }
    free(owned);
    return rc;
}

int cli_cmd_every(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE", "NAME", "INTERVAL"};
    const char *missed = NULL, *start = NULL, *end = NULL;
    const cli_opt opts[] = {
        {"missed", &missed, NULL}, {"start", &start, NULL}, {"end", &end, NULL}, {NULL, NULL, NULL}};
    dq_recurring_spec sp = {.missed = DQ_MISSED_ONE};
    int npos;

    int rc = cli_parse(env, "every", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("every", npos, 3, 4, names, argv);
    if (!rc) rc = parse_common("every", argv, missed, start, end, &sp);
    if (!rc) rc = cli_parse_delay("every: ", "interval", argv[2], &sp.every_ms);
    if (!rc && sp.every_ms < DQ_RECURRING_EVERY_MIN_MS) {
        cli_err("every: invalid interval '%s': it must be at least 1s", cli_quote(argv[2]));
        rc = CLI_USAGE;
    }
    return rc ? rc : set_schedule(env, "every", argv, npos, 3, &sp);
}

int cli_cmd_cron(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE", "NAME", "EXPR"};
    const char *missed = NULL, *start = NULL, *end = NULL, *tz = NULL;
    const cli_opt opts[] = {{"missed", &missed, NULL},
                            {"start", &start, NULL},
                            {"end", &end, NULL},
                            {"tz", &tz, NULL},
                            {NULL, NULL, NULL}};
    dq_recurring_spec sp = {.missed = DQ_MISSED_ONE};
    int npos;

    int rc = cli_parse(env, "cron", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("cron", npos, 3, 4, names, argv);
    if (!rc) rc = parse_common("cron", argv, missed, start, end, &sp);
    if (rc) return rc;
    sp.cron = argv[2];
    sp.zone = tz;
    return set_schedule(env, "cron", argv, npos, 3, &sp);
}

/* ------------------------------------------------------------ listing */

static int print_schedule(const dq_recurring *s, int json) {
    if (json) return cli_write_json(cli_json_schedule(s), "a schedule");
    char line[256];
    int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%" PRId64 "\t%" PRId64 "\t%s\t%s\n", s->name,
                     s->spec, s->zone[0] ? s->zone : "-", s->next_ms, s->last_ms, cli_schedule_state(s),
                     cli_missed_name(s->missed));
    return cli_write_out(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int list_schedules(dq_client *c, const char *queue, int json) {
    dq_recurring *list;
    size_t n;
    int rc = dq_recurring_list(c, queue, &list, &n);
    if (rc < 0) return cli_fail(c, rc, "schedules");
    rc = 0;
    for (size_t i = 0; i < n && !rc; i++) rc = print_schedule(&list[i], json);
    dq_recurring_list_free(list, n);
    return rc;
}

/* remove, pause or resume NAME: exit 1 for no such schedule. */
static int change_schedule(dq_client *c, const char *queue, const char *op, const char *name) {
    int rc = strcmp(op, "remove") == 0  ? dq_recurring_remove(c, queue, name)
             : strcmp(op, "pause") == 0 ? dq_recurring_pause(c, queue, name)
                                        : dq_recurring_resume(c, queue, name);
    if (rc < 0 && rc != DQ_ENOTDURABLE) return cli_fail(c, rc, "schedules");
    if (rc == 0) {
        cli_err("schedules: %s has no schedule %s", cli_quote(queue), cli_quote(name));
        return CLI_NONE;
    }
    return rc == DQ_ENOTDURABLE ? cli_fail(c, rc, "schedules") : 0;
}

int cli_cmd_schedules(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE", "OPERATION", "NAME"};
    int json = 0, npos;
    const cli_opt opts[] = {{"json", NULL, &json}, {NULL, NULL, NULL}};
    dq_client *c;

    int rc = cli_parse(env, "schedules", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("schedules", npos, npos == 2 ? 3 : 1, 3, names, argv);
    if (!rc) rc = cli_check_queue(argv[0]);
    if (!rc && npos == 3 && strcmp(argv[1], "remove") != 0 && strcmp(argv[1], "pause") != 0 &&
        strcmp(argv[1], "resume") != 0) {
        cli_err("schedules: unknown operation '%s': expected remove, pause or resume",
                cli_quote(argv[1]));
        rc = CLI_USAGE;
    }
    if (!rc && npos == 3) rc = check_name("schedules", argv[2]);
    if (!rc) rc = cli_connect(env, &c);
    if (rc) return rc;
    rc = npos == 3 ? change_schedule(c, argv[0], argv[1], argv[2]) : list_schedules(c, argv[0], json);
    dq_client_free(c);
    return rc;
}
