/*
 * bench.h - what the files of dqbench share (see dqbench.c for what the
 * program measures). One file per concern: dqbench.c (main, the header and
 * the summary), harness.c (helpers, server control, filling queues),
 * children.c (the forked consumers and producers), refs.c (the references
 * and the machine factor), lateness.c (the run figures 4 and 7 share), and
 * one fig_*.c per phase, each owning its measurement.
 */
#ifndef DQ_BENCH_DQBENCH_H
#define DQ_BENCH_DQBENCH_H

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <hiredis/hiredis.h>

#include "callgrind.h"
#include "core0.h"
#include "delayq.h"
#include "hist.h"
#include "scripts.h"

#define MAXP 20               /* children at once                              */
#define PAYLOAD_LEN 16
#define CONSUMER_CONC 8       /* takes in flight per consumer process (lateness) */
#define DRAIN_CONC 32         /* takes in flight per consumer process (backlogs) */

typedef struct slot {
    int ready, done, failed;
    uint64_t delivered;
    int64_t first_recv_us, last_recv_us; /* server clock (local + offset)    */
    double t_end;                        /* CLOCK_MONOTONIC s (producers)     */
    int64_t clock_offset_us, clock_rtt_us;
    dq_sched_counters sc;
    char err[200];
    hist recv, ready_lat;
} slot;

typedef struct shared {
    int stop, go;
    slot s[MAXP];
} shared;

typedef struct bench_globals {
    double t_start, budget; /* mono() at start; seconds the whole run may take */
    int port;
    char url[64];
    double scale;
    unsigned only;
    const char *rbench;
    int cg_pid;         /* --callgrind: the server runs under callgrind (phase drainir) */
    const char *cg_out; /* --callgrind-out: its --callgrind-out-file                     */
} bench_globals;

/* The brief's targets in absolute units (items/s, us, s of CPU) were set on
 * a machine where redis-benchmark runs the offer script at about 130k/s
 * (-P64 -c1). factor = this machine's rate for a frozen stand-in / 130k;
 * both verdicts are printed. */
#define BRIEF_EVALSHA_RATE 130000.0

enum {
    PH_OFFER = 1,
    PH_MEM = 2,
    PH_LAT = 4,
    PH_BACKLOG = 8,
    PH_DEADLINE = 16,
    PH_DRAIN_IR = 32,
    PH_PARTS = 64,
    PH_SPREAD = 128
};

typedef struct row {
    char fig[6], what[72], ours[32], ref[44], ratio[16], target[34], norm[34];
    int verdict; /* 1 PASS, 0 MISS, -1 information only */
    int nverdict; /* the same against the machine-normalized target; -1 n/a */
} row;

/* What the server has done so far: CPU seconds and per-command totals. */
typedef struct cmdstat {
    char name[40];
    double calls, usec;
} cmdstat;

typedef struct snap {
    double core0_busy_s, core0_total_s; /* /proc/stat cpu0 (the server's core) */
    double cpu_s;     /* used_cpu_sys + used_cpu_user */
    double t;         /* mono() when taken            */
    int n;
    cmdstat cs[96];
} snap;

#define TAKE_MANY_MAX 64

/* CONS_TAKE_MANY: dq_take_many in a loop, no lease; CONS_TAKE_LEASED: the
 * same with a 30 s lease and no ack (figure 5g only). For both, conc is the
 * count a call asks for (0: TAKE_MANY_MAX). */
enum cons_mode { CONS_WORKER, CONS_SCHED_ONLY, CONS_TAKE_MANY, CONS_TAKE_LEASED };

typedef struct cons_args {
    const char *queue;
    int mode;
    int conc;
    unsigned wflags;
} cons_args;

typedef struct cons_ctx {
    dq_client *c;
    slot *s;
    int need_sched;
} cons_ctx;

typedef struct offer_args {
    const char *queue;
    int64_t n;
    int64_t delay_ms;
} offer_args;

typedef struct fill_spec {
    int64_t delay_ms, delay_span; /* delay = delay_ms + rand % delay_span      */
    int64_t due_ms, due_span;     /* if due_ms > 0: due = due_ms + rand % span */
} fill_spec;

typedef struct filler {
    const char *queue;
    const fill_spec *fs;
    int window;
    int64_t n, sent, done, failed, inflight;
    char err[200];
} filler;

typedef struct lat_res {
    int64_t offered, delivered;
    double rate;
    hist recv, ready_lat;
    double cpu_us, fcall_calls, block_calls;
    dq_sched_counters sc;
    int64_t max_offset_rtt;
} lat_res;

#define LAT_RATE 5000.0
#define LAT_MAX_DELAY 10000

extern shared *S;
extern pid_t kids[MAXP];
extern int nkids;
extern bench_globals G;
extern redisContext *ctl;
extern double factor;
extern row rows[64];
extern int nrows;
extern dq_client *P;

/* harness.c, children.c, refs.c */
double mono(void);
int64_t real_us(void);
double max2(double a, double b);
double min2(double a, double b);
double cpu_of(int who);
void sleep_s(double s);
void sleep_until(double t);
uint64_t rnd(void);
void rnd_seed(uint64_t s);
int64_t scaled(int64_t n);
const char *scaled_tag(void);
void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A progress line on stderr (the figures go to stdout). */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void on_signal(int sig);
const char *commas(char *buf, size_t size, double v);
void add_row(const char *fig, const char *what, const char *ours, const char *ref, const char *ratio,
             const char *target, int verdict);
void row_norm(const char *target, int verdict);
const char *verdict_text(int v);
redisContext *connect_sync(void);
redisReply *rcmd(redisContext *c, const char *fmt, ...);
void rdo(const char *fmt, ...);
long long rint_cmd(const char *fmt, ...);
long long pending_count(const char *queue);
const char *info_field(const char *section, const char *field, char *buf, size_t size);
double info_num(const char *section, const char *field);
int64_t server_ms(void);
/* The server's CPU so far, s (INFO cpu: used_cpu_sys + used_cpu_user). */
double server_cpu_s(void);
void take_snap(snap *s);
double d_cpu_us(const snap *a, const snap *b);
void print_core0(const snap *a, const snap *b);
double d_calls(const snap *a, const snap *b, const char *name);
double d_usec(const snap *a, const snap *b, const char *name);
void print_breakdown(const snap *a, const snap *b, double per_n, const char *per_what);
long long slowlog_max(const char *fn, long long *count);
void flushall(void);
void make_payload(char *buf, uint64_t seq);
void reset_slots(void);
pid_t spawn_consumer(int idx, const cons_args *a);
pid_t spawn_offerer(int idx, const offer_args *a);
void check_kids_failed(int n);
void wait_ready(int n, double secs);
void stop_kids(void);
uint64_t total_delivered(int n);
void P_touch(void);
double fill(const char *queue, int64_t n, const fill_spec *fs, int window, const char *label);
double redis_benchmark(int64_t n, int c, int p, const char *args, double *cpu_us, double *client_us);
double mover_reference(int64_t n, double *cpu_item);
double lpop_reference(int64_t n, int clients);
double redisson_move(int64_t n);
/* The machine factor (see BRIEF_EVALSHA_RATE), measured once, then cached. */
double machine_factor(void);

/* lateness.c */
#define LAT_Q "lat" /* the queue of the lateness runs (figures 3, 4 and 7) */
void print_quantiles(const char *label, const hist *h);
void lateness_run(const char *queue, int consumers, double rate, double secs, int max_delay_ms,
                  const char *label, lat_res *res);
void lateness_rows(const char *pending, int consumers, const lat_res *r);
double lat_secs(void);

/* The phases (fig_*.c). */
void phase_offer(void);
void phase_offer_spread(void); /* fig_offer.c: 1r, one delay against delays of their own */
void phase_mem(void);
void phase_lat(void);
void phase_backlog(void);
void phase_deadline(void);
void phase_drain_ir(void); /* fig_backlog.c: 5d, 5e in instructions (--callgrind) */
void phase_parts(void);    /* fig_backlog.c: 5g, dq_worker's drain taken apart by the clock */

#endif
