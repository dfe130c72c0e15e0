/*
 * annotate_pool.c - the resource pool of the annotation demo (seeds/000):
 * seeding it, and checking it at the end.
 *
 * The use case: on a data-annotation platform each annotator holds at most
 * one resource at a time; every task has its own time limit; a resource not
 * finished within it goes back to the pool by itself. Here the pool IS the
 * delayq queue "annotation-pool": a free resource is a ready item (id "r1",
 * payload its description), a claimed one is in flight under a lease, and
 * the lease is the task's time limit (see annotator.c). There is no pool
 * state besides the queue, and no release task: when a lease runs out, a
 * scheduler puts the item back in the ready list.
 *
 * usage: annotate_pool URL seed N [--fresh]
 *          offers r1..rN with delay 0. Offering an id that is ready or in
 *          flight keeps the existing copy, so seeding twice never makes a
 *          second copy of a resource. --fresh: the pool must be empty; also
 *          clears the demo's ledger (annot:claims, annot:claim, annot:last,
 *          annot:nclaim).
 *        annotate_pool URL check N [ABANDONED]
 *          runs a scheduler for the pool until every resource is back (at
 *          most 8 s), then checks the queue and the annotators' ledger (see
 *          annotator.c) and exits 0 iff every invariant holds. ABANDONED:
 *          how many claims are expected never to end (annotators killed).
 *          Lines starting with '[' belong to the timeline; the rest is the
 *          summary.
 * URL is redis://HOST:PORT. Timeline lines are stamped relative to
 * $DEMO_T0_MS (epoch ms), else to the program's start.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "annotate_common.h"
#include "delayq.h"

#define QUEUE "annotation-pool"
#define MAX_RES 64
#define MAX_CLAIMS 1024
#define SETTLE_MS 8000 /* check: longest wait for the resources to come back */

static const char *const DESCRIPTIONS[] = {
    "40 street photos: box every car",    "12 min of call audio: transcribe",
    "300 product reviews: tag sentiment", "25 chest X-rays: mark anomalies",
    "80 receipts: extract totals",        "500 tweets: flag hate speech",
};

/* ------------------------------------------------------------------ the ledger (see annotator.c) */

static int released(const struct claim *k) { return strcmp(k->outcome, "released") == 0; }
static int refused(const struct claim *k) { return strcmp(k->outcome, "refused") == 0; }
/* Never ended: its annotator died while holding it (or while releasing it). */
static int abandoned(const struct claim *k) { return !released(k) && !refused(k); }

/* When the resource stopped being k's: at the release that gave it back (no
 * earlier than rel_start, taken just before it), else at the lease's end. */
static int64_t hold_end(const struct claim *k) { return released(k) ? k->rel_start : k->lease_end; }

static dq_client *dq_open(const char *url) {
    dq_client *c = dq_client_new(NULL, NULL);
    if (!c) {
        fprintf(stderr, "annotate_pool: out of memory\n");
        return NULL;
    }
    int rc = dq_connect(c, url);
    if (rc < 0) {
        fprintf(stderr, "annotate_pool: %s: %s\n", dq_strerror(rc), dq_client_errstr(c));
        dq_client_free(c);
        return NULL;
    }
    return c;
}

/* ------------------------------------------------------------------ seed */

/* Appends text to the string in buf (size bytes), as much as fits. */
static void append(char *buf, size_t size, const char *text) {
    size_t used = strlen(buf), n = strlen(text);
    if (n > size - 1 - used) n = size - 1 - used;
    memcpy(buf + used, text, n);
    buf[used + n] = '\0';
}

static int cmd_seed(redisContext *app, const char *url, int n, int fresh) {
    dq_client *c = dq_open(url);
    if (!c) return 3;
    int rc = 0;
    if (fresh) {
        dq_stats st;
        rc = dq_get_stats(c, QUEUE, &st);
        if (rc < 0) {
            fprintf(stderr, "annotate_pool: stats: %s\n", dq_client_errstr(c));
            dq_client_free(c);
            return 3;
        }
        if (st.pending + st.ready + st.in_flight + st.dead + st.set_aside > 0) {
            fprintf(stderr,
                    "annotate_pool: queue %s is not empty; --fresh wants an empty one "
                    "(use a Redis of its own)\n",
                    QUEUE);
            dq_client_free(c);
            return 3;
        }
        redisReply *rep =
            must(app, redisCommand(app, "DEL annot:claims annot:claim annot:last annot:nclaim"), "DEL");
        if (!rep) {
            dq_client_free(c);
            return 3;
        }
        freeReplyObject(rep);
    }

    dq_item items[MAX_RES];
    dq_offer_result res[MAX_RES];
    char ids[MAX_RES][16], pay[MAX_RES][96];
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "r%d", i + 1);
        int d = i % (int)(sizeof DESCRIPTIONS / sizeof DESCRIPTIONS[0]);
        snprintf(pay[i], sizeof pay[i], "%s", DESCRIPTIONS[d]);
        items[i] =
            (dq_item){.id = ids[i], .payload = pay[i], .payload_len = strlen(pay[i]), .delay_ms = 0};
    }
    /* One pipeline; each offer is atomic on its own. */
    rc = dq_offer_many(c, QUEUE, items, (size_t)n, res);
    if (rc != n) {
        fprintf(stderr, "annotate_pool: offer: %s\n", dq_client_errstr(c));
        dq_client_free(c);
        return 3;
    }
    int64_t at = server_ms(app);
    char added[MAX_RES * 8] = "", kept[MAX_RES * 48] = "";
    for (int i = 0; i < n; i++) {
        if (res[i].status == DQ_ADDED) {
            append(added, sizeof added, added[0] ? " " : "");
            append(added, sizeof added, ids[i]);
            continue;
        }
        append(kept, sizeof kept, kept[0] ? ", " : "");
        append(kept, sizeof kept, ids[i]);
        append(kept, sizeof kept,
               res[i].status == DQ_REPLACED         ? " was on its way back (pending): replaced"
               : res[i].state == DQ_STATE_IN_FLIGHT ? " claimed: kept"
                                                    : " free: kept");
    }
    if (added[0]) say_at(at, "seeded: %s offered with delay 0, ready to claim", added);
    if (kept[0]) say_at(at, "seeded again: %s. Still one copy of each", kept);
    dq_client_free(c);
    return 0;
}

/* ------------------------------------------------------------------ check */

static int by_res_then_take(const void *a, const void *b) {
    const struct claim *x = a, *y = b;
    int r = strcmp(x->res, y->res);
    if (r) return r;
    return (x->take_ms > y->take_ms) - (x->take_ms < y->take_ms);
}

static int by_who_then_take(const void *a, const void *b) {
    const struct claim *x = a, *y = b;
    int r = strcmp(x->who, y->who);
    if (r) return r;
    return (x->take_ms > y->take_ms) - (x->take_ms < y->take_ms);
}

/* Reads the whole ledger into ks (at most MAX_CLAIMS). Returns the count or -1. */
static int read_ledger(redisContext *app, struct claim *ks) {
    redisReply *toks = must(app, redisCommand(app, "LRANGE annot:claims 0 -1"), "LRANGE");
    if (!toks) return -1;
    int n = 0;
    for (size_t i = 0; i < toks->elements && n < MAX_CLAIMS; i++) {
        redisReply *rec =
            must(app, redisCommand(app, "HGET annot:claim %s", toks->element[i]->str), "HGET");
        if (!rec || rec->type != REDIS_REPLY_STRING || claim_parse(rec->str, &ks[n]) < 0) {
            fprintf(stderr, "annotate_pool: ledger entry %s unreadable\n", toks->element[i]->str);
            if (rec) freeReplyObject(rec);
            freeReplyObject(toks);
            return -1;
        }
        freeReplyObject(rec);
        n++;
    }
    freeReplyObject(toks);
    return n;
}

static int cmd_check(redisContext *app, const char *url, int n, int expect_abandoned) {
    dq_client *c = dq_open(url);
    if (!c) return 3;
    /* This process is the pool's scheduler now: the annotators (the other
     * schedulers) are gone, and a resource just given back, or whose lease
     * runs out only now, needs one to become ready. */
    if (dq_schedule(c, QUEUE) != 0) {
        fprintf(stderr, "annotate_pool: schedule: %s\n", dq_client_errstr(c));
        dq_client_free(c);
        return 3;
    }
    dq_stats st = {0};
    int64_t deadline = wall_ms() + SETTLE_MS;
    int rc;
    for (;;) {
        rc = dq_get_stats(c, QUEUE, &st);
        if (rc < 0) {
            fprintf(stderr, "annotate_pool: stats: %s\n", dq_client_errstr(c));
            dq_client_free(c);
            return 3;
        }
        if ((st.pending == 0 && st.in_flight == 0) || wall_ms() >= deadline) break;
        idle(c, 50);
    }
    int states[MAX_RES + 1] = {0};
    for (int i = 1; i <= n; i++) {
        char id[16];
        dq_item_info info;
        snprintf(id, sizeof id, "r%d", i);
        rc = dq_lookup(c, QUEUE, id, &info);
        if (rc < 0) {
            fprintf(stderr, "annotate_pool: lookup: %s\n", dq_client_errstr(c));
            dq_client_free(c);
            return 3;
        }
        states[i] = info.state;
    }
    dq_client_free(c);

    static struct claim ks[MAX_CLAIMS];
    int nk = read_ledger(app, ks);
    if (nk < 0) return 3;

    int ok = 1;
#define EXPECT(cond, ...)                   \
    do {                                    \
        if (!(cond)) {                      \
            printf("FAILED: " __VA_ARGS__); \
            printf("\n");                   \
            ok = 0;                         \
        }                                   \
    } while (0)

    /* One resource at a time: in claim order, each claim of a resource
     * starts after the previous one ended (its release, or its lease's end);
     * and the resource became ready again no earlier than that. The pool
     * lines of the timeline come from here: when a lease ran out, the next
     * claim tells when a scheduler made the resource free again. */
    qsort(ks, (size_t)nk, sizeof ks[0], by_res_then_take);
    int overlaps = 0, timeouts = 0, late_accepted = 0, plan_broken = 0;
    char b1[32], b2[32], b3[32];
    for (int i = 0; i < nk; i++) {
        const struct claim *a = &ks[i];
        const struct claim *b = i + 1 < nk && strcmp(ks[i + 1].res, a->res) == 0 ? &ks[i + 1] : NULL;
        if (b && (b->take_ms < hold_end(a) || b->ready_ms < hold_end(a))) {
            overlaps++;
            printf("FAILED: %s claimed by %s at %s while %s still held it (until %s)\n", b->res, b->who,
                   fmt_at(b1, sizeof b1, b->take_ms), a->who, fmt_at(b2, sizeof b2, hold_end(a)));
        }
        if (released(a)) {
            /* Accepted work must have been handed in within the lease. */
            if (a->rel_start > a->lease_end) {
                late_accepted++;
                printf("FAILED: %s's release of %s was accepted %lld ms after the lease ended\n", a->who,
                       a->res, (long long)(a->rel_start - a->lease_end));
            }
            if (strcmp(a->plan, "overrun") == 0) plan_broken++;
            continue;
        }
        timeouts++;
        if (strcmp(a->plan, "overrun") != 0) plan_broken++;
        const char *why = refused(a) ? "asleep, handed in too late" : "killed, never came back";
        fmt_dur(b3, sizeof b3, a->limit);
        if (b)
            say_at(b->ready_ms,
                   "%s back in the pool: %s's lease (%s) ran out at %s, a scheduler "
                   "returned it %lld ms later (%s: %s)",
                   a->res, a->who, b3, fmt_at(b1, sizeof b1, a->lease_end),
                   (long long)(b->ready_ms - a->lease_end), a->who, why);
        else
            say_at(a->lease_end,
                   "%s: %s's lease (%s) runs out now; a scheduler puts %s back in "
                   "the pool (%s: %s)",
                   a->res, a->who, b3, a->res, a->who, why);
    }
    /* One resource per annotator: each claim starts after the annotator's
     * previous one ended (it released or was refused: either way it let go). */
    qsort(ks, (size_t)nk, sizeof ks[0], by_who_then_take);
    int two_at_once = 0, nabandoned = 0, nreleased = 0, nrefused = 0, extended = 0;
    for (int i = 0; i < nk; i++) {
        const struct claim *a = &ks[i];
        nabandoned += abandoned(a);
        nreleased += released(a);
        nrefused += refused(a);
        extended += strcmp(a->plan, "extend") == 0;
        if (i + 1 < nk && strcmp(ks[i + 1].who, a->who) == 0 &&
            (a->rel_start == 0 || ks[i + 1].take_ms < a->rel_start)) {
            two_at_once++;
            printf("FAILED: %s claimed %s before letting go of %s\n", a->who, ks[i + 1].res, a->res);
        }
    }

    int back = 0;
    for (int i = 1; i <= n; i++) back += states[i] == DQ_STATE_READY;
    printf("summary: %d claims: %d finished in time (%d after dq_extend); %d timed out: %d "
           "handed in too late and refused, %d abandoned (annotator killed)\n",
           nk, nreleased, extended, timeouts, nrefused, nabandoned);
    printf("         queue %s: %lld ready, %lld pending, %lld in flight, %lld dead, %lld set "
           "aside; %d/%d resources free\n",
           QUEUE, (long long)st.ready, (long long)st.pending, (long long)st.in_flight,
           (long long)st.dead, (long long)st.set_aside, back, n);

    EXPECT(st.ready == n && st.pending == 0 && st.in_flight == 0 && st.dead == 0 && st.set_aside == 0,
           "the pool holds every resource exactly once (ready == %d, nothing else)", n);
    EXPECT(back == n, "every resource r1..r%d is free (ready)", n);
    EXPECT(overlaps == 0, "no resource was ever held by two annotators at once");
    EXPECT(two_at_once == 0, "no annotator ever held two resources at once");
    EXPECT(late_accepted == 0, "no work handed in after its lease ran out was accepted");
    EXPECT(plan_broken == 0, "every task planned in time was accepted, every overrun discarded");
    EXPECT(nabandoned == expect_abandoned, "%d abandoned claim(s) expected, %d found", expect_abandoned,
           nabandoned);
#undef EXPECT
    if (ok)
        printf("invariants: each resource in the pool exactly once; never two holders; never "
               "two resources per annotator; every timed-out claim's work discarded: OK\n");
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

static int usage(void) {
    fprintf(stderr, "usage: annotate_pool URL seed N [--fresh] | check N [ABANDONED]\n");
    return 2;
}

int main(int argc, char **argv) {
    init_t0();
    if (argc < 4 || argc > 5) return usage();
    signal(SIGPIPE, SIG_IGN);
    const char *url = argv[1];
    int n = atoi(argv[3]);
    if (n < 1 || n > MAX_RES) return usage();
    int fresh = 0, expect_abandoned = 0;
    if (strcmp(argv[2], "seed") == 0) {
        if (argc == 5 && strcmp(argv[4], "--fresh") != 0) return usage();
        fresh = argc == 5;
    } else if (strcmp(argv[2], "check") == 0) {
        if (argc == 5 && (expect_abandoned = atoi(argv[4])) < 0) return usage();
    } else {
        return usage();
    }
    tl_who = "pool";
    snprintf(err_who, sizeof err_who, "annotate_pool");
    redisContext *app = app_connect(url, "annotate_pool");
    if (!app) return 3;
    int rc = strcmp(argv[2], "seed") == 0 ? cmd_seed(app, url, n, fresh)
                                          : cmd_check(app, url, n, expect_abandoned);
    redisFree(app);
    return rc;
}
