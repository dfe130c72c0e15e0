-- shards.lua: one step of changing a queue's shard count (src/ops/shardconf.c),
-- on one shard's keys (the queue's own keys when it has one shard).
-- KEYS[1] counters, KEYS[2] ready list, KEYS[3] dead-letter times
-- ARGV[1] 'lock': ARGV[2] is the count the change starts from. Refuses with
--   'DQSHARDS n' when the keys say another, and with an error naming what
--   the shard holds when it holds anything (pending, in flight, ready or
--   dead); else sets the count to 0, which refuses every call routed by a
--   count (offers included) until 'set'. Returns 1.
-- ARGV[1] 'set': ARGV[2] is the count to write (1..SHARDS_MAX): the end of
--   a change, or the undoing of a lock. Returns 1.
-- The journal, on the queue's own keys (its home), which every change
-- goes through, so a change whose client died can be finished or undone:
-- ARGV[1] 'begin': ARGV[2] is the count wanted. With no change recorded,
--   records one from the home's count to ARGV[2], started now, not locked
--   yet, and returns {1, from}. A change recorded less than STALE_MS ago is
--   under way: refused, naming it. One recorded earlier was cut off: this
--   caller takes it over (its time becomes now) and gets {2, from, to,
--   locked} to finish it (locked: every shard of `from` was locked, so none
--   holds an item and it may go forward) or undo it (not locked: some old
--   shard may hold items, so back to `from`).
-- ARGV[1] 'locked': every shard of the recorded change's `from` is locked.
-- ARGV[1] 'end': the change is done; the record goes. Both return 1.
-- A change is allowed only on an empty queue (and one without recurring
-- schedules), so no item is ever in a shard the new count does not have; the lock makes that hold while it is made.
local counters, ready, deadz = KEYS[1], KEYS[2], KEYS[3]
local op, arg = ARGV[1], ARGV[2]
-- A change takes milliseconds; one recorded this long ago lost its client.
local STALE_MS = 60000
local n = tonumber(arg)
local ops = {lock = true, set = true, begin = true, locked = true, ['end'] = true}
if not ops[op] or not n or n % 1 ~= 0 or n < 1 or n > SHARDS_MAX then
  return redis.error_reply('ERR delayq:proto malformed shard count arguments')
end
local counts, err = read_counters(counters)
if err then return err end
if op == 'set' then
  redis.call('HSET', counters, 'shards', nstr(n))
  return 1
end
if op == 'locked' then
  redis.call('HSET', counters, 'chg_locked', '1')
  return 1
end
if op == 'end' then
  redis.call('HDEL', counters, 'chg_from', 'chg_to', 'chg_ms', 'chg_locked')
  return 1
end
if op == 'begin' then
  local f = redis.call('HMGET', counters, 'chg_from', 'chg_to', 'chg_ms', 'chg_locked')
  local now = server_now_ms()
  if f[1] or f[2] or f[3] or f[4] then
    local from, to = uint_of(f[1], 2, SHARDS_MAX), uint_of(f[2], 2, SHARDS_MAX)
    local at = uint_of(f[3], 15, DUE_MAX)
    if not from or from < 1 or not to or to < 1 or not at or (f[4] ~= '0' and f[4] ~= '1') then
      local function shown(s) return s and quoted(s) or 'none' end
      return redis.error_reply('ERR delayq:corrupt corrupt shard change record in ' .. counters .. ': from ' ..
                               shown(f[1]) .. ', to ' .. shown(f[2]) .. ', at ' .. shown(f[3]) ..
                               ', locked ' .. shown(f[4]) .. ' (HDEL chg_from chg_to chg_ms' ..
                               ' chg_locked to drop it)')
    end
    if now - at < STALE_MS then
      return redis.error_reply('ERR delayq:state a change of the shard count from ' .. nstr(from) .. ' to ' ..
                               nstr(to) .. ' began ' .. nstr(now - at) .. ' ms ago and is under way' ..
                               ' (if its client died, it is taken over ' .. nstr(STALE_MS / 1000) ..
                               ' s after it began)')
    end
    redis.call('HSET', counters, 'chg_ms', nstr(now))
    return {2, from, to, f[4] == '1' and 1 or 0}
  end
  if counts[4] < 1 then
    return redis.error_reply('ERR delayq:corrupt ' .. counters .. ' says 0 shards with no change recorded')
  end
  redis.call('HSET', counters, 'chg_from', nstr(counts[4]), 'chg_to', nstr(n), 'chg_ms', nstr(now),
             'chg_locked', '0')
  return {1, counts[4]}
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
-- Recurring schedules live in the shard their name picks by the count:
-- they would be left behind (lib/80_recurring.lua; the keys' prefix is
-- the counters' key without its 'n').
local sc = recur.count(string.sub(counters, 1, #counters - 1))
if sc > 0 then held[#held + 1] = fmt(sc) .. ' recurring schedules (remove them first)' end
if #held > 0 then
  return redis.error_reply('ERR delayq:state the shard count changes only on an empty queue; ' ..
                           counters .. ' holds ' .. table.concat(held, ', '))
end
-- Nothing pending: the timing wheel's buckets hold only entries cancelled
-- or replaced, which the change would leave behind in a shard it drops
-- (lib/65_wheel.lua).
local P = string.sub(counters, 1, #counters - 1)
local ks = redis.pcall('ZRANGE', wheel_index(P), '0', '999')
if type(ks) == 'table' and #ks > 0 then
  for _, k in ipairs(ks) do redis.call('DEL', wheel_key(P, k)) end
  redis.call('ZREM', wheel_index(P), unpack(ks))
end
-- The near lists likewise, group by group (lib/67_near.lua).
local gr = redis.pcall('ZRANGE', near.index(P), '0', '999')
if type(gr) == 'table' and #gr > 0 then
  for _, gs in ipairs(gr) do
    local gk = near.group_key(P, gs)
    local ms = redis.pcall('ZRANGE', gk, '0', '999')
    if type(ms) == 'table' and not ms.err then
      for _, m in ipairs(ms) do redis.call('DEL', near.key(P, m)) end
    end
    redis.call('DEL', gk)
  end
  redis.call('ZREM', near.index(P), unpack(gr))
end
redis.call('HDEL', counters, 'bcur', 'mcur')
redis.call('HSET', counters, 'shards', '0')
return 1
