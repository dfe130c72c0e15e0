-- lookup.lua: the state of one id.
-- KEYS[1] slot index, KEYS[2] dead letters, KEYS[3] counters; ARGV[1] key
-- prefix, ARGV[2] id, ARGV[3] the shard count the client routed by (see
-- shards_refusal), ARGV[4] (optional) the most payload bytes the reply
-- brings
-- Returns {state, due_ms, attempts}: state 0 unknown, 1 pending (due_ms is
-- its due time), 2 ready, 3 in flight (due_ms is the lease's
-- end, and a 4th element the holder its take named, '' for none: see
-- lib/75_holders.lua), 4 dead; pending and in flight add a 5th, how long
-- ago the due time or lease end passed (ms, 0 if it has not): what waits
-- for a scheduler. An id whose index entry is in no slot is ready unless a
-- lease record the lease registry names holds it (see
-- lib/70_registry.lua), and if the ready list holds its entry (else
-- unknown: see in_ready). Read only: a key of another type is an error. A record of
-- the id that does not decode reads as pending with 0 attempts (the
-- scheduler sets it aside when it falls due).
-- With ARGV[4], two more elements end the reply: the item's payload cut to
-- ARGV[4] bytes here (so the rest never leaves Redis; 0: whole) and its whole length,
-- or '' and -1 when it was not read (an unknown id, a record that does not
-- decode, a ready list too long to scan).
local zs, dead, P, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local shards, err = read_shard_count(KEYS[3])
err = err or shards_refusal(shards, ARGV[3]) or require_type(zs, 'zset') or
      require_type(dead, 'hash') or require_type(lease_registry(P), 'zset') or require_type(P .. 'r', 'list')
if err then return err end
local cut = ARGV[4] and tonumber(ARGV[4])
if ARGV[4] and (not cut or cut < 0 or cut ~= math.floor(cut)) then
  return redis.error_reply('ERR delayq:proto malformed lookup arguments')
end
-- The reply t, with the payload when ARGV[4] asks for it (r.bad: a lease
-- record's item whose entry does not decode has none).
local function answer(t, payload)
  if not cut then return t end
  t[#t + 1] = payload and (cut > 0 and string.sub(payload, 1, cut) or payload) or ''
  t[#t + 1] = payload and #payload or -1
  return t
end
-- The payload of a ready entry or dead letter, or nil if it does not decode.
local function entry_payload(e)
  local _, _, il, el, pos = entry_head(e)
  return il and string.sub(e, pos + il + el)
end
local function dead_payload(d)
  local rl, el, pos = string.match(d, '^1|%d+|%d+|%d+|(%d+)|(%d+)|()')
  if not rl or #rl > 4 or #el > 9 or pos + tonumber(rl) + tonumber(el) - 1 > #d then return nil end
  return string.sub(d, pos + tonumber(rl) + tonumber(el))
end
local now = queue_now_ms()
local function ago(t) return fmt(math.max(0, now - t)) end
-- Whether the ready list holds an entry of id (the id index says so, but
-- the list may have gone: evicted, deleted). A list longer than READY_SCAN
-- is not read (too long for a look-up to block Redis): the index is
-- believed.
local READY_SCAN = 10000
local function in_ready(ready, id)
  local n = redis.call('LLEN', ready)
  if n > READY_SCAN then return true end
  for at = 0, n - 1, 500 do
    for _, e in ipairs(redis.call('LRANGE', ready, fmt(at), fmt(at + 499))) do
      if string.find(e, id, 1, true) then
        local _, _, _, _, _, eid = entry_head(e)
        if eid == id then return true, e end
      end
    end
  end
  return false
end

local ik = id_key(P, id)
local s = redis.call('HGET', ik, id)
local score = s and uint_of(s, 16, SCORE_MAX)
if score then
  local at = fmt(math.floor(score / ORD))
  local key, rec = slot_find(P, zs, id, score)
  if not key then
    -- Ready, or in flight under a take's lease (see
    -- lib/70_registry.lua).
    local r, rs = registry_find(P, zs, id)
    if r then
      local ends = math.floor(rs / ORD)
      return answer({3, fmt(ends), r.attempts, seen.holder_of(P, r.token), ago(ends)}, not r.bad and r.payload)
    end
    local found, e = in_ready(P .. 'r', id)
    if found then return answer({2, 0, 0}, e and entry_payload(e)) end
    return answer({0, 0, 0}) -- its entry is gone (an evicted or deleted ready list)
  end
  local r = parse_record(rec, score, id)
  if r and r.token ~= '' then
    return answer({3, at, r.attempts, seen.holder_of(P, r.token), ago(tonumber(at))}, not r.bad and r.payload)
  end
  return answer({1, at, r and r.attempts or 0, '', ago(tonumber(at))}, r and r.payload)
end
-- Pending in a bucket of the timing wheel (lib/65_wheel.lua).
local wdue, wrec = id_wheel_in(P, ik, id)
if wdue then
  local r = parse_record(wrec, wdue * ORD, id)
  return answer({1, fmt(wdue), 0, '', ago(wdue)}, r and r.payload)
end
-- Pending in a near list (lib/67_near.lua).
local ndue, nrec = near.id_in(P, ik, id)
if ndue then
  local r = parse_record(nrec, ndue * ORD, id)
  return answer({1, fmt(ndue), 0, '', ago(ndue)}, r and r.payload)
end
if redis.call('HEXISTS', dead, id) == 1 then
  return answer({4, 0, 0}, cut and dead_payload(redis.call('HGET', dead, id)))
end
return answer({0, 0, 0})
