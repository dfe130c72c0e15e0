-- offer.lua: adds or replaces pending items, one or many per call.
-- KEYS[1] z, KEYS[2] ready list, KEYS[3] ready ids, KEYS[4] wake tokens
-- ARGV[1] payload bucket prefix, ARGV[2] wake channel, then 6 fields per
-- item: id, payload, 'd' (delay) or 'a' (absolute due), ms, keep ('1': keep
-- an existing pending id instead of replacing it), fresh ('1': the id was
-- just generated, so it cannot exist).
-- Returns 4 fields per item: status (1 added, 2 replaced, 3 kept), due_ms,
-- now_ms, state of the id after the offer (1 pending, 2 ready, 3 in flight).
-- An id is never queued twice: one that is ready or in flight is kept as it
-- is, whatever 'keep' says (replacing it would break its consumer's lease).
--
-- Cost matters here (every item passes once): the fixed costs (the call,
-- TIME, the type check) are paid once per call, so batches are cheap. All
-- items are checked before the first write, and the reads of the first item
-- fail the script on a key of the wrong type, so a call never half-applies.
local z, ready, rs, sig = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, chan = ARGV[1], ARGV[2]
local n = (#ARGV - 2) / 6

-- A ready list of another type would strand every item: refuse up front.
local err = require_type(ready, 'list')
if err then return err end

local now = server_now_ms()
local dues = {}
for i = 1, n do
  local b = 2 + (i - 1) * 6
  local due = tonumber(ARGV[b + 4])
  if ARGV[b + 3] == 'd' then due = now + due end
  if due > DUE_MAX then
    return redis.error_reply('ERR delayq: due time beyond ' .. DUE_MAX .. ' ms after the epoch')
  end
  dues[i] = due
end

local out = {}
local announce = nil -- the earliest due time that became the queue's first
-- The queue's earliest score, kept up to date as items are added (removals
-- by replacement leave it too early, which is safe: see below).
local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local earliest = first[2] and tonumber(first[2]) or nil

-- Offers one item; returns its 4 reply fields.
local function offer_one(id, payload, due, keep, fresh)
  local old = nil -- the id's current score, if it is pending or in flight
  if not fresh then
    local score = redis.call('ZSCORE', z, id) -- false, not nil, when absent
    if score then
      old = tonumber(score)
      local old_due = math.floor(old / ORD)
      local rec = redis.call('HGET', bucket_key(prefix, old), id)
      if rec and string.sub(rec, 1, 1) == '2' then
        local r = parse_record(rec, old)
        if r and r.token ~= '' then return 3, old_due, 3 end
      end
      if keep then return 3, old_due, 1 end
    elseif redis.call('SISMEMBER', rs, id) == 1 then
      return 3, 0, 2
    end
  end
  local status = old and 2 or 1

  -- Due already, and nothing due waits (an earliest that is too early
  -- only sends the item through the scheduler): straight to the ready list.
  if due <= now and (earliest == nil or earliest >= (now + 1) * ORD) then
    -- Due already and nothing due is waiting: straight to the ready list.
    redis.call('RPUSH', ready, ready_entry(due, now, id, payload))
    redis.pcall('SADD', rs, id)
    redis.pcall('RPUSH', sig, '1')
    if old then
      redis.call('ZREM', z, id)
      redis.pcall('HDEL', bucket_key(prefix, old), id)
    end
    return status, due, 2
  end

  -- The latest other item of the same millisecond gives the ordinal.
  local lo = due * ORD
  local score = lo
  local prev = redis.call('ZREVRANGEBYSCORE', z, lo + ORD - 1, lo, 'WITHSCORES', 'LIMIT', 0, old and 2 or 1)
  for i = 1, #prev, 2 do
    if prev[i] ~= id then
      score = math.min(tonumber(prev[i + 1]) + 1, lo + ORD - 1)
      break
    end
  end
  local bucket = bucket_key(prefix, score)
  redis.call('HSET', bucket, id, '1' .. payload)
  if old and bucket_key(prefix, old) ~= bucket then redis.pcall('HDEL', bucket_key(prefix, old), id) end
  redis.call('ZADD', z, score, id)
  if earliest == nil or score < earliest then
    earliest = score
    announce = due -- the earliest deadline moved earlier: wake the schedulers
  end
  return status, due, 1
end

for i = 1, n do
  local b = 2 + (i - 1) * 6
  local status, due, state = offer_one(ARGV[b + 1], ARGV[b + 2], dues[i], ARGV[b + 5] == '1',
                                       ARGV[b + 6] == '1')
  local k = #out
  out[k + 1], out[k + 2], out[k + 3], out[k + 4] = status, fmt(due), fmt(now), state
end
if announce then redis.call('PUBLISH', chan, fmt(announce)) end
return out
