-- offer.lua: adds or replaces one pending item.
-- KEYS[1] z, KEYS[2] ready list
-- ARGV[1] payload bucket prefix, ARGV[2] wake channel, ARGV[3] id,
-- ARGV[4] payload, ARGV[5] 'd' (delay) or 'a' (absolute due), ARGV[6] ms,
-- ARGV[7] '1' to keep an existing pending id instead of replacing it.
-- Returns {status, due_ms, now_ms}; status 1 added, 2 replaced, 3 kept.
local z, ready = KEYS[1], KEYS[2]
local prefix, chan, id, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local err = require_type(z, 'zset') or require_type(ready, 'list')
if err then return err end

local now = server_now_ms()
local due = tonumber(ARGV[6])
if ARGV[5] == 'd' then due = now + due end
if due > DUE_MAX then
  return redis.error_reply('ERR delayq: due time beyond ' .. DUE_MAX .. ' ms after the epoch')
end

local status = 1
local old = redis.call('ZSCORE', z, id)
if old then
  old = tonumber(old)
  if ARGV[7] == '1' then return {3, fmt(math.floor(old / ORD)), fmt(now)} end
  status = 2
end

local first_due, first_score = earliest_due(z)
if old and first_score == old then
  -- Replacing the earliest item: judge "earlier" against the next one.
  local two = redis.call('ZRANGE', z, 1, 1, 'WITHSCORES')
  first_score = two[2] and tonumber(two[2]) or nil
end

local lo = due * ORD
local score = lo
-- The latest ordinal used in this millisecond, not counting the id itself.
local top = redis.call('ZREVRANGEBYSCORE', z, fmt(lo + ORD - 1), fmt(lo), 'WITHSCORES', 'LIMIT', 0, 2)
for i = 1, #top, 2 do
  if top[i] ~= id then
    score = math.min(tonumber(top[i + 1]) + 1, lo + ORD - 1)
    break
  end
end
local bucket = bucket_key(prefix, score)
err = require_type(bucket, 'hash')
if err then return err end

if old then
  redis.call('ZREM', z, id)
  redis.pcall('HDEL', bucket_key(prefix, old), id)
end

if due <= now and (first_score == nil or first_score >= (now + 1) * ORD) then
  -- Due already and nothing older is waiting: straight to the ready list.
  redis.call('RPUSH', ready, ready_entry(due, now, id, payload))
  return {status, fmt(due), fmt(now)}
end

redis.call('ZADD', z, fmt(score), id)
redis.call('HSET', bucket, id, '1' .. payload)
if first_score == nil or score < first_score then
  redis.call('PUBLISH', chan, fmt(due))
end
return {status, fmt(due), fmt(now)}
