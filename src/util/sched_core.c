/*
 * sched_core.c - the scheduler's decisions (see util.h, "a scheduler's decisions", for the model).
 */
#include "util.h"

static int64_t earliest(int64_t a, int64_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    return a < b ? a : b;
}

void dq__sched_core_init(dq__sched_core *s) {
    s->next_due = DQ__NONE;
    s->in_flight = 0;
    s->fired_for = DQ__NONE;
    s->heard_min = DQ__NONE;
    s->stagger_ms = 0;
}

int dq__sched_core_heard(dq__sched_core *s, int64_t due) {
    if (s->in_flight) {
        /* The reply may describe an older state: keep the earliest. */
        s->heard_min = earliest(s->heard_min, due);
        return 0;
    }
    /* Announcements come in publish order: the latest one is the truth. */
    s->next_due = due < 0 ? DQ__NONE : due;
    return 1;
}

void dq__sched_core_begin(dq__sched_core *s, int64_t fired_for) {
    s->in_flight = 1;
    s->fired_for = fired_for;
    s->heard_min = DQ__NONE;
}

static void adapt_stagger(dq__sched_core *s, int64_t moved, int64_t next_due) {
    if (s->fired_for < 0) return;
    if (moved > 0) {
        s->stagger_ms /= 2;
    } else if (next_due < 0 || next_due > s->fired_for) {
        /* Someone else served the deadline we woke up for. */
        if (s->stagger_ms < DQ__STAGGER_MAX_MS) s->stagger_ms++;
    }
}

int dq__sched_core_finish(dq__sched_core *s, int64_t moved, int64_t next_due, int more_due) {
    adapt_stagger(s, moved, next_due);
    s->in_flight = 0;
    s->next_due = earliest(next_due < 0 ? DQ__NONE : next_due, s->heard_min);
    s->fired_for = DQ__NONE;
    s->heard_min = DQ__NONE;
    return more_due ? 1 : 0;
}

void dq__sched_core_failed(dq__sched_core *s) {
    s->in_flight = 0;
    s->next_due = earliest(s->next_due, s->heard_min);
    s->fired_for = DQ__NONE;
    s->heard_min = DQ__NONE;
}

int64_t dq__sched_core_fire_at(const dq__sched_core *s) {
    if (s->next_due < 0) return DQ__NONE;
    return s->next_due + s->stagger_ms;
}
