-- stats.lua: counts of one queue, all O(1) but one O(log N) look-up.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] set-aside list,
-- KEYS[4] counters, KEYS[5] dead times; ARGV[1] key prefix.
-- Returns {pending, ready, next_due_in_ms or -1, set_aside, inflight, dead,
-- shard count} (the count as these keys' counters hold it: a client learns
-- a queue's count from its stats too);
-- next_due_in_ms counts lease ends too (they are due events of the slots).
-- A key of another type, or a counter that is no integer, is an error that
-- names it.
local c, err = read_counters(KEYS[4])
err = err or require_type(KEYS[1], 'zset') or require_type(KEYS[2], 'list') or
      require_type(KEYS[3], 'list') or require_type(KEYS[5], 'zset')
if err then return err end
local ready = redis.call('LLEN', KEYS[2])
local aside = redis.call('LLEN', KEYS[3])
local dead = redis.call('ZCARD', KEYS[5])
local next_due = earliest_due(ARGV[1], KEYS[1], true) -- read only: a no-writes function
local next_in = -1
if next_due >= 0 then next_in = math.max(0, next_due - queue_now_ms()) end
return {math.max(c[1], 0), ready, fmt(next_in), aside, math.max(c[2], 0), dead, c[4]}
