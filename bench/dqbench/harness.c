/*
 * harness.c - dqbench, what every figure shares: small helpers, the summary
 * rows, control of the server (INFO, commandstats and SLOWLOG snapshots) and
 * filling queues. The forked children are in children.c, the references in
 * refs.c.
 */
#include "bench.h"

shared *S;
pid_t kids[MAXP];
int nkids;

bench_globals G;

redisContext *ctl; /* the parent's control connection */

double factor; /* 0 until measured */

/* ------------------------------------------------------------ small helpers */

double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t real_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double max2(double a, double b) { return a > b ? a : b; }
double min2(double a, double b) { return a < b ? a : b; }

/* CPU seconds used by this process (who = RUSAGE_SELF) or by its reaped
 * children (RUSAGE_CHILDREN). */
double cpu_of(int who) {
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

void sleep_until(double t) { sleep_s(t - mono()); }

static uint64_t rng = 88172645463325252ULL;
uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}
void rnd_seed(uint64_t s) { rng = s ? s * 0x9E3779B97F4A7C15ULL : 1; }

int64_t scaled(int64_t n) {
    int64_t v = (int64_t)llround((double)n * G.scale);
    return v < 1 ? 1 : v;
}

const char *scaled_tag(void) { return G.scale != 1.0 ? " [SCALED]" : ""; }

void out(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void progress(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  .. ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static void kill_kids(void) {
    for (int i = 0; i < nkids; i++)
        if (kids[i] > 0) kill(kids[i], SIGKILL);
    for (int i = 0; i < nkids; i++)
        if (kids[i] > 0) waitpid(kids[i], NULL, 0);
    nkids = 0;
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dqbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    kill_kids();
    exit(1);
}

void on_signal(int sig) {
    for (int i = 0; i < nkids; i++)
        if (kids[i] > 0) kill(kids[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* "1,234,567" */
const char *commas(char *buf, size_t size, double v) {
    char raw[32];
    snprintf(raw, sizeof raw, "%.0f", v);
    size_t len = strlen(raw), j = 0;
    int neg = raw[0] == '-';
    for (size_t i = 0; i < len && j + 2 < size; i++) {
        buf[j++] = raw[i];
        size_t left = len - i - 1;
        if (left > 0 && left % 3 == 0 && !(neg && i == 0)) buf[j++] = ',';
    }
    buf[j] = '\0';
    return buf;
}

/* ------------------------------------------------------------ summary rows */

row rows[64];
int nrows;

void add_row(const char *fig, const char *what, const char *ours, const char *ref, const char *ratio,
             const char *target, int verdict) {
    if (nrows >= (int)(sizeof rows / sizeof rows[0])) return;
    row *r = &rows[nrows++];
    snprintf(r->fig, sizeof r->fig, "%s", fig);
    snprintf(r->what, sizeof r->what, "%s", what);
    snprintf(r->ours, sizeof r->ours, "%s", ours);
    snprintf(r->ref, sizeof r->ref, "%s", ref);
    snprintf(r->ratio, sizeof r->ratio, "%s", ratio);
    snprintf(r->target, sizeof r->target, "%s", target);
    r->verdict = verdict;
    r->nverdict = -1;
    r->norm[0] = '\0';
}

/* The last row also gets a verdict against the machine-normalized target. */
void row_norm(const char *target, int verdict) {
    if (nrows == 0) return;
    snprintf(rows[nrows - 1].norm, sizeof rows[nrows - 1].norm, "%s", target);
    rows[nrows - 1].nverdict = verdict;
}

const char *verdict_text(int v) { return v > 0 ? "PASS" : v == 0 ? "MISS" : "info"; }

/* ------------------------------------------------------------ Redis control */

redisContext *connect_sync(void) {
    struct timeval tv = {30, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", G.port, tv);
    if (!c || c->err) die("cannot connect to 127.0.0.1:%d: %s", G.port, c ? c->errstr : "oom");
    redisSetTimeout(c, tv);
    return c;
}

redisReply *rcmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) die("redis: %s", c->errstr);
    if (r->type == REDIS_REPLY_ERROR) die("redis: %s", r->str);
    return r;
}

void rdo(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctl, fmt, ap);
    va_end(ap);
    if (!r) die("redis: %s", ctl->errstr);
    if (r->type == REDIS_REPLY_ERROR) die("redis: %s", r->str);
    freeReplyObject(r);
}

long long rint_cmd(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctl, fmt, ap);
    va_end(ap);
    if (!r) die("redis: %s", ctl->errstr);
    if (r->type != REDIS_REPLY_INTEGER) die("redis: unexpected reply to %s", fmt);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Items pending in queue (in its slots, not in flight): the counter the
 * scripts keep in dq:{Q}:n (lua/lib/20_counters.lua). */
long long pending_count(const char *queue) {
    redisReply *r = rcmd(ctl, "HGET dq:{%s}:n pending", queue);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

/* A field of an INFO section, as text (into buf); "" if absent. */
const char *info_field(const char *section, const char *field, char *buf, size_t size) {
    redisReply *r = rcmd(ctl, "INFO %s", section);
    buf[0] = '\0';
    size_t fl = strlen(field);
    for (const char *p = r->str; p && *p;) {
        const char *eol = strstr(p, "\r\n");
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > fl && strncmp(p, field, fl) == 0 && p[fl] == ':') {
            size_t vl = len - fl - 1;
            if (vl >= size) vl = size - 1;
            memcpy(buf, p + fl + 1, vl);
            buf[vl] = '\0';
            break;
        }
        p = eol ? eol + 2 : NULL;
    }
    freeReplyObject(r);
    return buf;
}

double info_num(const char *section, const char *field) {
    char buf[64];
    return atof(info_field(section, field, buf, sizeof buf));
}

int64_t server_ms(void) {
    redisReply *r = rcmd(ctl, "TIME");
    int64_t ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

double server_cpu_s(void) { return info_num("cpu", "used_cpu_sys") + info_num("cpu", "used_cpu_user"); }

void take_snap(snap *s) {
    memset(s, 0, sizeof *s);
    core0_times(&s->core0_busy_s, &s->core0_total_s);
    s->cpu_s = server_cpu_s();
    redisReply *r = rcmd(ctl, "INFO commandstats");
    for (const char *p = r->str; p && *p && s->n < 96;) {
        const char *eol = strstr(p, "\r\n");
        if (strncmp(p, "cmdstat_", 8) == 0) {
            const char *colon = strchr(p, ':');
            if (colon && (!eol || colon < eol)) {
                cmdstat *c = &s->cs[s->n++];
                size_t nl = (size_t)(colon - p - 8);
                if (nl >= sizeof c->name) nl = sizeof c->name - 1;
                memcpy(c->name, p + 8, nl);
                c->name[nl] = '\0';
                const char *cl = strstr(colon, "calls="), *us = strstr(colon, "usec=");
                c->calls = cl ? atof(cl + 6) : 0;
                c->usec = us ? atof(us + 5) : 0;
            }
        }
        p = eol ? eol + 2 : NULL;
    }
    freeReplyObject(r);
    s->t = mono();
}

static cmdstat snap_cmd(const snap *s, const char *name) {
    cmdstat z = {{0}, 0, 0};
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->cs[i].name, name) == 0) return s->cs[i];
    return z;
}

double d_cpu_us(const snap *a, const snap *b) { return (b->cpu_s - a->cpu_s) * 1e6; }

/* Interference on the server's core in a window: the share of core 0 that
 * was busy with something other than redis-server. */
static double other_on_core0(const snap *a, const snap *b) {
    double total = b->core0_total_s - a->core0_total_s;
    if (total <= 0) return 0;
    double other = (b->core0_busy_s - a->core0_busy_s) - (b->cpu_s - a->cpu_s);
    return other > 0 ? other / total : 0;
}

void print_core0(const snap *a, const snap *b) {
    double total = b->core0_total_s - a->core0_total_s;
    if (total <= 0) return;
    char la[64] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(la, sizeof la, f)) la[0] = '\0';
        fclose(f);
        la[strcspn(la, "\n")] = '\0';
    }
    out("   core 0 (redis-server's) in this window: redis-server %.0f%%, anything else %.0f%%\n"
        "   (interference); /proc/loadavg %s\n",
        100 * (b->cpu_s - a->cpu_s) / total, 100 * other_on_core0(a, b), la);
}
double d_calls(const snap *a, const snap *b, const char *name) {
    return snap_cmd(b, name).calls - snap_cmd(a, name).calls;
}
double d_usec(const snap *a, const snap *b, const char *name) {
    return snap_cmd(b, name).usec - snap_cmd(a, name).usec;
}

/* The commands that cost Redis the most between two snapshots (commands
 * run inside scripts are counted both on their own and in FCALL). */
void print_breakdown(const snap *a, const snap *b, double per_n, const char *per_what) {
    int idx[96], n = 0;
    double us[96];
    for (int i = 0; i < b->n && n < 96; i++) {
        cmdstat pa = snap_cmd(a, b->cs[i].name);
        us[n] = b->cs[i].usec - pa.usec;
        if (us[n] > 0 && strncmp(b->cs[i].name, "info", 4) != 0) idx[n++] = i;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && us[j] > us[j - 1]; j--) {
            double t = us[j];
            us[j] = us[j - 1], us[j - 1] = t;
            int k = idx[j];
            idx[j] = idx[j - 1], idx[j - 1] = k;
        }
    out("   commandstats in the window (usec per call; usec per %s):", per_what);
    for (int i = 0; i < n && i < 9; i++) {
        const cmdstat *c = &b->cs[idx[i]];
        double calls = c->calls - snap_cmd(a, c->name).calls;
        out("%s %s %.0f x %.2f = %.2f", i % 3 == 0 ? "\n     " : ";", c->name, calls,
            us[i] / (calls ? calls : 1), us[i] / per_n);
    }
    out("\n");
}

/* Longest FCALL of a library function (by name) in the slow log, in us; -1
 * if none over the threshold was logged. *count gets how many were. */
long long slowlog_max(const char *fn, long long *count) {
    redisReply *r = rcmd(ctl, "SLOWLOG GET -1");
    long long mx = -1, n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4) continue;
        redisReply *argv = e->element[3];
        if (argv->type != REDIS_REPLY_ARRAY || argv->elements < 2) continue;
        if (strcasecmp(argv->element[0]->str, "fcall") != 0) continue;
        if (strcmp(argv->element[1]->str, fn) != 0) continue;
        n++;
        if (e->element[2]->integer > mx) mx = e->element[2]->integer;
    }
    freeReplyObject(r);
    if (count) *count = n;
    return mx;
}

void flushall(void) {
    rdo("FLUSHALL");
    rdo("SLOWLOG RESET");
}

/* ------------------------------------------------------------ producing */

dq_client *P; /* the parent's delayq client */

/* Refreshes the loop's cached time before using P after a pause. Up to
 * 776a577 src/conn.c took a command's deadline from a stale ev_now(), so the
 * first synchronous call after more than command_timeout_ms outside the
 * loop timed out at once (fixed in 759d230); kept so the benchmark also
 * runs against those versions. */
void P_touch(void) { ev_now_update(dq_client_loop(P)); }

static void fill_send(filler *f);

static void fill_cb(dq_client *c, int status, const dq_offer_result *res, void *privdata) {
    (void)res;
    filler *f = privdata;
    f->inflight--;
    f->done++;
    if (status != 0 && !f->failed++) snprintf(f->err, sizeof f->err, "%s", dq_client_errstr(c));
    fill_send(f);
}

static void fill_send(filler *f) {
    char payload[PAYLOAD_LEN];
    while (f->inflight < f->window && f->sent < f->n) {
        const fill_spec *fs = f->fs;
        make_payload(payload, (uint64_t)f->sent);
        dq_item it = {.payload = payload, .payload_len = PAYLOAD_LEN};
        if (fs->due_ms > 0)
            it.due_ms = fs->due_ms + (fs->due_span ? (int64_t)(rnd() % (uint64_t)fs->due_span) : 0);
        else
            it.delay_ms =
                fs->delay_ms + (fs->delay_span ? (int64_t)(rnd() % (uint64_t)fs->delay_span) : 0);
        int rc = dq_offer_async(P, f->queue, &it, fill_cb, f);
        if (rc != 0) die("dq_offer_async: %s", dq_client_errstr(P));
        f->inflight++;
        f->sent++;
    }
}

/* Offers n items with dq_offer_async, `window` in flight. Returns seconds. */
double fill(const char *queue, int64_t n, const fill_spec *fs, int window, const char *label) {
    filler f = {queue, fs, window, n, 0, 0, 0, 0, ""};
    P_touch();
    double t0 = mono(), next = t0 + 2;
    fill_send(&f);
    while (f.done < n) {
        ev_run(dq_client_loop(P), EVRUN_ONCE);
        if (label && mono() > next) {
            next += 2;
            progress("%s: offered %" PRId64 " of %" PRId64 " (%.0f/s)", label, f.done, n,
                     (double)f.done / (mono() - t0));
        }
    }
    if (f.failed) die("%s: %" PRId64 " offers failed: %s", label ? label : "fill", f.failed, f.err);
    return mono() - t0;
}
