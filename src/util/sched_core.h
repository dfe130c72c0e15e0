/*
 * sched_core.h - the decisions of one queue's scheduler, free of any event
 * loop or Redis, so they are unit-tested with made-up times.
 *
 * It answers: for which server due time should the timer be armed, and with
 * how much stagger? Inputs are the announcements heard on the wake channel
 * (each one the queue's earliest pending due time at the moment it was
 * published, or -1 for none; they arrive in publish order) and the results
 * of our own transfer runs (whose replies may overtake announcements
 * published after them, so while a run is in flight every announcement is
 * remembered and the earliest wins).
 *
 * Stagger: each scheduler of a queue fires at due + stagger_ms. A run that
 * moved items halves the stagger; a run fired for a due time that someone
 * else already served adds 1 ms (up to DQ__STAGGER_MAX_MS). One process then
 * keeps stagger 0 and serves every deadline; the others hear its announcement
 * before their own timers fire and skip, so N schedulers cost about what one
 * costs. If the leader dies, the next one takes over within the stagger.
 */
#ifndef DQ_SCHED_CORE_H
#define DQ_SCHED_CORE_H

#include <stdint.h>

#define DQ__STAGGER_MAX_MS 4
#define DQ__NONE ((int64_t)-1)

typedef struct dq__sched_core {
    int64_t next_due;   /* earliest pending due (server ms) known, or -1   */
    int in_flight;      /* a transfer run is outstanding                   */
    int64_t fired_for;  /* due time the running transfer was fired for, -1 */
    int64_t heard_min;  /* earliest due announced during the run, or -1    */
    int stagger_ms;
} dq__sched_core;

void dq__sched_core_init(dq__sched_core *s);

/* An announcement: the queue's earliest pending due is now `due` (-1: none).
 * Returns 1 if the timer should be re-armed (see dq__sched_core_fire_at). */
int dq__sched_core_heard(dq__sched_core *s, int64_t due);

/* A transfer run starts. fired_for: the due time the timer fired for, or -1
 * for catch-up and safety runs. */
void dq__sched_core_begin(dq__sched_core *s, int64_t fired_for);

/* A run finished: it moved `moved` items, and the server reported next_due
 * (-1: none). Returns 1 if another run should start at once (more_due). */
int dq__sched_core_finish(dq__sched_core *s, int64_t moved, int64_t next_due, int more_due);

/* A run failed without an answer: forget it; keep what is known. */
void dq__sched_core_failed(dq__sched_core *s);

/* Server time (ms) at which the timer should fire, or -1 for no timer. */
int64_t dq__sched_core_fire_at(const dq__sched_core *s);

#endif
