-- offer.lua: adds or replaces pending items, one or many per call.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] counters, KEYS[4] wake tokens
-- ARGV[1] key prefix, ARGV[2] wake channel, then 6 fields per item: id,
-- payload, 'd' (delay) or 'a' (absolute due), ms, keep ('1': keep an
-- existing pending id instead of replacing it), fresh ('1': the id was just
-- generated, so it cannot exist).
-- Returns 4 fields per item: status (1 added, 2 replaced, 3 kept), due_ms,
-- now_ms, state of the id after the offer (1 pending, 2 ready, 3 in flight).
-- An id is never queued twice: one that is ready or in flight is kept as it
-- is, whatever 'keep' says (replacing it would break its consumer's lease).
--
-- Cost matters here (every item passes once): the fixed costs (the call,
-- TIME, the type check) are paid once per call, so batches are cheap. All
-- items are checked before the first write, and the reads of the first item
-- fail the script on a key of the wrong type, so a call never half-applies.
local zs, ready, counters, sig = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P, chan = ARGV[1], ARGV[2]
local n = (#ARGV - 2) / 6

-- A ready list or counters of another type would fail half way: refuse up front.
local err = require_type(ready, 'list') or require_type(counters, 'hash')
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
local bound = first_bound(zs) -- at or before every score (see first_bound)
local added = 0 -- net change of the pending count
local hint = {} -- the slot of the last insert (see slot_insert)

-- Offers one item; returns its 4 reply fields.
local function offer_one(id, payload, due, keep, fresh)
  local replaced, ik = false, nil
  if not fresh then
    local old
    old, ik = id_score(P, id)
    if old then
      local key, rec = slot_find(P, zs, id, old)
      if not key then return 3, 0, 2 end -- ready
      if string.sub(rec, 1, 1) == '2' then
        local r = parse_record(rec, old)
        if r and r.token ~= '' then return 3, math.floor(old / ORD), 3 end
      end
      if keep then return 3, math.floor(old / ORD), 1 end
      redis.call('ZREM', key, rec)
      hint.name = nil -- its card and last score may have changed
      added, replaced = added - 1, true
    end
  end
  local status = replaced and 2 or 1
  ik = ik or id_key(P, id)

  -- Due already, and nothing due waits (a bound that is too early only
  -- sends the item through the scheduler): straight to the ready list.
  if due <= now and (bound == nil or bound >= (now + 1) * ORD) then
    redis.call('RPUSH', ready, ready_entry(due, now, id, payload))
    redis.pcall('RPUSH', sig, '1')
    id_set(ik, id, due * ORD)
    return status, due, 2
  end

  local score = slot_insert(P, zs, counters, due * ORD, record_v1(id, payload), true, hint)
  id_set(ik, id, score)
  added = added + 1
  if bound == nil or score < bound then
    bound = score
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
if added ~= 0 then redis.call('HINCRBY', counters, 'pending', added) end
if announce then redis.call('PUBLISH', chan, fmt(announce)) end
return out
