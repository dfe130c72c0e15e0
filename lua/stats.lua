-- stats.lua: counts of one queue, all O(1) but one O(log N) look-up.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] set-aside list,
-- KEYS[4] counters, KEYS[5] dead times; ARGV[1] key prefix.
-- Returns {pending, ready, next_due_in_ms or -1, set_aside, inflight, dead,
-- shard count, schedulers, overdue_ms} (the count as these keys' counters
-- hold it: a client learns a queue's count from its stats too; schedulers,
-- those alive by their beats, see lib/75_holders.lua; overdue_ms, how long
-- the earliest due event has waited, 0 when none is past due);
-- next_due_in_ms counts lease ends too (they are due events of the slots).
-- A tenth element, 1 when any of the queue's keys exists or it has a
-- recurring schedule (0: a queue never used, or wiped), follows.
-- A key of another type, or a counter that is no integer, is an error that
-- names it.
local c, err = read_counters(KEYS[4])
err = err or require_type(KEYS[1], 'zset') or require_type(KEYS[2], 'list') or
      require_type(KEYS[3], 'list') or require_type(KEYS[5], 'zset')
if err then return err end
local ready = redis.call('LLEN', KEYS[2])
local aside = redis.call('LLEN', KEYS[3])
local dead = redis.call('ZCARD', KEYS[5])
local next_due = recur.earliest(ARGV[1], KEYS[1], true) -- read only: a no-writes function; the ticks count
local next_in, now = -1, queue_now_ms()
if next_due >= 0 then next_in = math.max(0, next_due - now) end
local overdue = next_due >= 0 and math.max(0, now - next_due) or 0
return {math.max(c[1], 0), ready, fmt(next_in), aside, math.max(c[2], 0), dead, c[4],
        seen.schedulers_live(ARGV[1], now), fmt(overdue),
        (redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]) > 0 or recur.count(ARGV[1]) > 0) and 1 or 0}
