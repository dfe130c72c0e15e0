-- shards.lua: one step of changing a queue's shard count (src/shardconf.c),
-- on one shard's keys (the queue's own keys when it has one shard).
-- KEYS[1] counters, KEYS[2] ready list, KEYS[3] dead-letter times
-- ARGV[1] 'lock': ARGV[2] is the count the change starts from. Refuses with
--   'DQSHARDS n' when the keys say another, and with an error naming what
--   the shard holds when it holds anything (pending, in flight, ready or
--   dead); else sets the count to 0, which refuses every call routed by a
--   count (offers included) until 'set'. Returns 1.
-- ARGV[1] 'set': ARGV[2] is the count to write (1..SHARDS_MAX): the end of
--   a change, or the undoing of a lock. Returns 1.
-- A change is allowed only on an empty queue, so no item is ever in a shard
-- the new count does not have; the lock makes that hold while it is made.
local counters, ready, deadz = KEYS[1], KEYS[2], KEYS[3]
local op, arg = ARGV[1], ARGV[2]
local n = tonumber(arg)
if (op ~= 'lock' and op ~= 'set') or not n or n % 1 ~= 0 or n < 1 or n > SHARDS_MAX then
  return redis.error_reply('ERR delayq: malformed shard count arguments')
end
local counts, err = read_counters(counters)
if err then return err end
if op == 'set' then
  redis.call('HSET', counters, 'shards', nstr(n))
  return 1
end
err = shards_refusal(counts[4], arg) or require_type(ready, 'list') or require_type(deadz, 'zset')
if err then return err end
local held = {}
if counts[1] > 0 then held[#held + 1] = fmt(counts[1]) .. ' pending' end
if counts[2] > 0 then held[#held + 1] = fmt(counts[2]) .. ' in flight' end
local r = redis.call('LLEN', ready)
if r > 0 then held[#held + 1] = fmt(r) .. ' ready' end
local d = redis.call('ZCARD', deadz)
if d > 0 then held[#held + 1] = fmt(d) .. ' dead' end
if #held > 0 then
  return redis.error_reply('ERR delayq: the shard count changes only on an empty queue; ' ..
                           counters .. ' holds ' .. table.concat(held, ', '))
end
redis.call('HSET', counters, 'shards', '0')
return 1
