-- offer.lua: adds or replaces one pending item.
-- KEYS[1] z, KEYS[2] ready list, KEYS[3] ready ids
-- ARGV[1] payload bucket prefix, ARGV[2] wake channel, ARGV[3] id,
-- ARGV[4] payload, ARGV[5] 'd' (delay) or 'a' (absolute due), ARGV[6] ms,
-- ARGV[7] '1' to keep an existing pending id instead of replacing it,
-- ARGV[8] '1' if the id was just generated (so it cannot be pending).
-- Returns {status, due_ms, now_ms, state}; status 1 added, 2 replaced,
-- 3 kept; state of the item now: 1 pending, 2 ready, 3 in flight.
-- An id is never queued twice: an id that is ready or in flight is kept as
-- it is whatever ARGV[7] says (replacing would break its consumer's lease).
--
-- Cost matters here (every item passes once), so the script makes as few
-- calls as it can: reads come first, so a key of the wrong type fails the
-- script before anything is written.
local z, ready, rs = KEYS[1], KEYS[2], KEYS[3]
local prefix, chan, id, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- A ready list of another type would strand every item: refuse up front.
local err = require_type(ready, 'list')
if err then return err end

local now = server_now_ms()
local due = tonumber(ARGV[6])
if ARGV[5] == 'd' then due = now + due end
if due > DUE_MAX then
  return redis.error_reply('ERR delayq: due time beyond ' .. DUE_MAX .. ' ms after the epoch')
end

local old = nil -- the id's current score, if it is pending
if ARGV[8] ~= '1' then
  local score = redis.call('ZSCORE', z, id) -- false, not nil, when absent
  if score then
    old = tonumber(score)
    local old_due = math.floor(old / ORD)
    local rec = redis.call('HGET', bucket_key(prefix, old), id)
    if rec and string.sub(rec, 1, 1) == '2' then
      local r = parse_record(rec, old)
      if r and r.token ~= '' then return {3, old_due, now, 3} end
    end
    if ARGV[7] == '1' then return {3, old_due, now, 1} end
  elseif redis.call('SISMEMBER', rs, id) == 1 then
    return {3, 0, now, 2}
  end
end
local status = old and 2 or 1

-- The latest other item due no later than this one (or than now, if this
-- one is due already) tells at once: the ordinal to use, whether this item
-- becomes the earliest, and whether anything due is still waiting.
local lo = due * ORD
local hi = math.max(due, now) * ORD + ORD - 1
local prev = redis.call('ZREVRANGEBYSCORE', z, hi, '-inf', 'WITHSCORES', 'LIMIT', 0, old and 2 or 1)
local prev_score = nil
for i = 1, #prev, 2 do
  if prev[i] ~= id then
    prev_score = tonumber(prev[i + 1])
    break
  end
end

if due <= now and prev_score == nil then
  -- Due already and nothing due is waiting: straight to the ready list.
  redis.call('RPUSH', ready, ready_entry(due, now, id, payload))
  redis.pcall('SADD', rs, id)
  if old then
    redis.call('ZREM', z, id)
    redis.pcall('HDEL', bucket_key(prefix, old), id)
  end
  return {status, due, now, 2}
end

local score = lo
if prev_score and prev_score >= lo then score = math.min(prev_score + 1, lo + ORD - 1) end
local bucket = bucket_key(prefix, score)
redis.call('HSET', bucket, id, '1' .. payload)
if old and bucket_key(prefix, old) ~= bucket then redis.pcall('HDEL', bucket_key(prefix, old), id) end
redis.call('ZADD', z, score, id)
if prev_score == nil and (old == nil or score < old) then
  -- The earliest deadline moved earlier: wake the schedulers.
  redis.call('PUBLISH', chan, due)
end
return {status, due, now, 1}
