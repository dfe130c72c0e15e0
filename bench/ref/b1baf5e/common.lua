-- common.lua: prepended to every delayq script at build time.
--
-- Data layout of queue Q (all keys share the hash tag {Q}, one cluster slot;
-- P below is the prefix "dq:{Q}:", passed to the scripts that need it):
--   dq:{Q}:zs       ZSET  the slot index: slot name -> the slot's lower bound
--   P..q:<name>     ZSET  a slot: timed entries (member = the whole record,
--                         see below), score = due_ms * ORD + ordinal for
--                         pending items, lease end * ORD + ordinal in flight
--   P..i:<h>        HASH  the id index, h = a hash of the id: id -> score of
--                         the id's record; an id whose record is in no slot
--                         is in the ready list
--   dq:{Q}:r        LIST  ready entries, oldest first
--   dq:{Q}:s        LIST  wake tokens, one per ready entry: a waiting consumer
--                         BLPOPs one, so each entry wakes one waiter, not all
--   dq:{Q}:x        LIST  set-aside entries "1|reason|idlen|<id><raw>"
--   dq:{Q}:d        HASH  dead letters: id -> dead record
--   dq:{Q}:dz       ZSET  dead letters by time of death (ms)
--   dq:{Q}:n        HASH  counters: pending, inflight, slots (names issued)
--   dq:{Q}:t:<req> STRING a take's result, until its taker has the reply
--                         (60 s at most): a retried take replays it
--   dq:{Q}:cfg      HASH  the queue's settings: lease_ms, max_attempts,
--                         backoff_base_ms, backoff_max_ms (absent: defaults)
--   dq:{Q}:w        channel: the earliest due time in the slots (ms), or -1
--
-- Why slots: one big zset costs about 125 bytes an entry (skiplist node,
-- dict entry, member string). Small zsets of at most SLOT_CAP entries stay
-- listpacks (Redis's default zset-max-listpack-entries is 128), where an
-- entry costs its bytes plus two or three. Slot i holds the scores in
-- [bound i, bound i+1): a slot that grows past SLOT_CAP splits in two, so
-- any spread of due times (a burst in one second, a trickle over a year)
-- gives slots of SLOT_CAP / 2 .. SLOT_CAP entries. The record is the member,
-- so a transfer moves whole ranks of a slot with a few calls per chunk and
-- none per item. Emptied slots leave the index when a transfer reaches them.
-- The ordinal (0..ORD-1) keeps equal due times in offer order.
--
-- Formats (the first byte is the format version):
--   record v1  "1|idlen|" .. id .. payload               never delivered yet
--   record v2  "2|attempts|max|due|idlen|tlen|elen|" .. id .. token .. err .. payload
--              token ~= '': in flight (score = lease end); else a retry
--   ready v1   "1|due|ready|idlen|" .. id .. payload          attempts 0
--   ready v2   "2|due|ready|attempts|idlen|elen|" .. id .. err .. payload
--   dead       "1|died|attempts|due|rlen|elen|" .. reason .. err .. payload
-- Numbers are formatted with fmt (%d): Lua 5.1's tostring keeps only 14
-- digits, and %d formats the integers used here (all below 2^53) exactly and
-- several times faster than %.0f or the %.17g that redis.call applies to a
-- number argument, so hot paths pass scores to Redis as strings.
local ORD = 2048
local DUE_MAX = 4398046511103
local SLOT_CAP = 64
local ID_BUCKETS = 32768

local function fmt(n) return string.format('%d', n) end

-- fmt for the small numbers (lengths, counts) of records: cached per call.
-- Never concatenate a number directly: Lua formats it with %.14g, through
-- the C library's floating-point printer, several times slower.
local small_num = {}
local function nstr(n)
  local s = small_num[n]
  if not s then
    s = fmt(n)
    small_num[n] = s
  end
  return s
end

local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function server_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Fails the script before it writes anything if key holds another type.
local function require_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    return redis.error_reply('WRONGTYPE delayq: key ' .. key .. ' holds a ' .. got .. ', expected a ' .. want)
  end
  return nil
end

-- The id index bucket of an id. SHA-1 rather than a few of the id's bytes:
-- ids made by applications ("order-17", "order-18") must spread too.
local function id_key(P, id)
  return P .. 'i:' .. fmt(tonumber(string.sub(redis.sha1hex(id), 1, 4), 16) % ID_BUCKETS)
end

local function ready_entry(due, ready, id, payload)
  return '1|' .. fmt(due) .. '|' .. fmt(ready) .. '|' .. nstr(#id) .. '|' .. id .. payload
end

local function aside_entry(reason, id, raw)
  return '1|' .. reason .. '|' .. nstr(#id) .. '|' .. id .. (raw or '')
end

-- The queue's settings, for the arguments given as -1 ("the queue's").
local CFG_DEFAULTS = {lease_ms = 30000, max_attempts = 16, backoff_base_ms = 1000,
                      backoff_max_ms = 600000}
local function queue_setting(cfg, field, given)
  if given >= 0 then return given end
  local v = redis.call('HGET', cfg, field)
  return v and tonumber(v) or CFG_DEFAULTS[field]
end

-- Pushes n wake tokens (one per entry made ready).
local function signal(sig, n)
  while n > 0 do
    local k = math.min(n, 100)
    local t = {}
    for i = 1, k do t[i] = '1' end
    redis.call('RPUSH', sig, unpack(t))
    n = n - k
  end
end

-- Records ------------------------------------------------------------------

local function record_v1(id, payload)
  return '1|' .. nstr(#id) .. '|' .. id .. payload
end

local function record_v2(r, id)
  return '2|' .. nstr(r.attempts) .. '|' .. nstr(r.max) .. '|' .. fmt(r.due) .. '|' .. nstr(#id) ..
         '|' .. nstr(#r.token) .. '|' .. nstr(#r.err) .. '|' .. id .. r.token .. r.err .. r.payload
end

-- The id length and id position of a version 1 record, or nil if rec is
-- not one that decodes.
local function v1_head(rec)
  if string.byte(rec, 1) ~= 49 then return nil end -- '1'
  local il, pos = string.match(rec, '^1|(%d+)|()')
  if not il then return nil end
  il = tonumber(il)
  if il < 1 or pos + il - 1 > #rec then return nil end
  return il, pos
end

-- The id of a record, or nil if it cannot be decoded.
local function record_id(rec)
  local il, pos = v1_head(rec)
  if not il then
    il, pos = string.match(rec, '^2|%d+|%d+|%d+|(%d+)|%d+|%d+|()')
    if not il then return nil end
    il = tonumber(il)
    if il < 1 or pos + il - 1 > #rec then return nil end
  end
  return string.sub(rec, pos, pos + il - 1)
end

-- A record as a table, or nil if it cannot be decoded. score: its score.
local function parse_record(rec, score)
  local v = string.sub(rec, 1, 1)
  if v == '1' then
    local il, pos = v1_head(rec)
    if not il then return nil end
    return {attempts = 0, max = 0, due = math.floor(score / ORD), token = '', err = '',
            id = string.sub(rec, pos, pos + il - 1), payload = string.sub(rec, pos + il)}
  end
  if v ~= '2' then return nil end
  local a, m, d, il, tl, el, pos = string.match(rec, '^2|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  if not a then return nil end
  il, tl, el = tonumber(il), tonumber(tl), tonumber(el)
  if il < 1 or pos + il + tl + el - 1 > #rec then return nil end
  local t0 = pos + il
  return {attempts = tonumber(a), max = tonumber(m), due = tonumber(d),
          id = string.sub(rec, pos, t0 - 1), token = string.sub(rec, t0, t0 + tl - 1),
          err = string.sub(rec, t0 + tl, t0 + tl + el - 1),
          payload = string.sub(rec, t0 + tl + el)}
end

-- The ready entry of a version 1 record (never delivered) that becomes
-- ready at nows (fmt of now), or nil for any other record: the record with
-- the due and ready times put in after its version. dues: a per-call cache
-- of formatted due times (neighbours in a slot often share one).
local function ready_entry_v1(rec, score, nows, dues)
  if not v1_head(rec) then return nil end
  local due = math.floor(score / ORD)
  local ds = dues[due]
  if not ds then
    ds = fmt(due)
    dues[due] = ds
  end
  return '1|' .. ds .. '|' .. nows .. string.sub(rec, 2)
end

-- The ready entry of a record that becomes ready now.
local function ready_entry_of(r, now)
  if r.attempts == 0 and r.err == '' then return ready_entry(r.due, now, r.id, r.payload) end
  return '2|' .. fmt(r.due) .. '|' .. fmt(now) .. '|' .. nstr(r.attempts) .. '|' .. nstr(#r.id) ..
         '|' .. nstr(#r.err) .. '|' .. r.id .. r.err .. r.payload
end

-- The head of a ready entry, as strings: due, attempts (before this
-- delivery), then as numbers the id length, the error length and the
-- position of the id; nil if it cannot be decoded. Checks what the client's
-- decoder (src/codec.c) checks, so an entry the script hands out decodes:
-- numbers of at most 15 digits (attempts 9), an id of 1..128 bytes,
-- lengths that fit.
local function entry_head(e)
  local v = string.sub(e, 1, 1)
  local d, rd, a, il, el, pos
  if v == '1' then
    d, rd, il, pos = string.match(e, '^1|(%d+)|(%d+)|(%d+)|()')
    a, el = '0', '0'
  elseif v == '2' then
    d, rd, a, il, el, pos = string.match(e, '^2|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  end
  if not d or #d > 15 or #rd > 15 or #a > 9 or #il > 3 or #el > 15 then return nil end
  il, el = tonumber(il), tonumber(el)
  if il < 1 or il > 128 or pos + il + el - 1 > #e then return nil end
  return d, a, il, el, pos
end

local function dead_record(r, reason, now)
  return '1|' .. fmt(now) .. '|' .. nstr(r.attempts) .. '|' .. fmt(r.due) .. '|' .. nstr(#reason) ..
         '|' .. nstr(#r.err) .. '|' .. reason .. r.err .. r.payload
end

-- Moves a record to the dead letters of the queue (the caller has taken it
-- out of its slot).
local function bury(P, dead, deadz, r, reason, now)
  redis.call('HSET', dead, r.id, dead_record(r, reason, now))
  redis.call('ZADD', deadz, now, r.id)
  redis.call('HDEL', id_key(P, r.id), r.id)
end

-- Slots ----------------------------------------------------------------------

local function slot_key(P, name) return P .. 'q:' .. name end

-- The slot whose range holds score: (name, lower bound), or nil if score is
-- below every bound (or there is no slot).
local function slot_at(zs, score)
  local s = redis.call('ZREVRANGEBYSCORE', zs, score, '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if s[1] == nil then return nil end
  return s[1], tonumber(s[2])
end

-- The highest score in [lo, hi] over all slots, or nil, starting from the
-- slot (name, bound) that holds hi. Usually that slot alone; a split bound
-- inside [lo, hi] makes it look one slot further down.
local function last_score_in(P, zs, lo, hi, name, bound)
  for _ = 1, 64 do
    local s = redis.call('ZREVRANGEBYSCORE', slot_key(P, name), hi, lo, 'WITHSCORES', 'LIMIT', '0', '1')
    if s[2] then return tonumber(s[2]) end
    if bound <= lo then return nil end
    hi = bound - 1
    name, bound = slot_at(zs, hi)
    if not name then return nil end
  end
  return nil
end

-- Splits a slot that grew past SLOT_CAP: the upper half moves to a new slot.
-- Tried at SLOT_CAP + 1 entries and every 32 more, so a slot that cannot
-- split (one score, more than ORD offers in one millisecond) is not
-- re-examined on every offer.
local function split_if_full(P, zs, counters, key)
  local card = redis.call('ZCARD', key)
  if card <= SLOT_CAP or (card - SLOT_CAP - 1) % 32 ~= 0 then return end
  local mid = tonumber(redis.call('ZRANGE', key, math.floor(card / 2), math.floor(card / 2), 'WITHSCORES')[2])
  local low = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
  if mid == low then
    -- The lower half is all one score: split above it.
    local nx = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(mid), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if nx[2] == nil then return end
    mid = tonumber(nx[2])
  end
  local upper = redis.call('ZRANGEBYSCORE', key, mid, '+inf', 'WITHSCORES', 'LIMIT', '0', fmt(4 * SLOT_CAP))
  if #upper / 2 >= 4 * SLOT_CAP then return end -- one score dominates: leave it
  local args = {}
  for i = 1, #upper, 2 do
    args[#args + 1] = upper[i + 1]
    args[#args + 1] = upper[i]
  end
  local new = fmt(redis.call('HINCRBY', counters, 'slots', '1'))
  redis.call('ZADD', slot_key(P, new), unpack(args))
  redis.call('ZREMRANGEBYSCORE', key, mid, '+inf')
  redis.call('ZADD', zs, mid, new)
end

-- slot_insert's general case: [lo, hi] straddles a slot bound, or lies
-- below the first slot, or there is no slot yet.
local function slot_insert_anywhere(P, zs, counters, lo, hi, rec, ordinal)
  local score = lo
  local name, bound = slot_at(zs, hi)
  if ordinal and name then
    local l = last_score_in(P, zs, lo, hi, name, bound)
    if l then score = math.min(l + 1, hi) end
  end
  name = slot_at(zs, score)
  if not name then
    name = redis.call('ZRANGE', zs, '0', '0')[1] or fmt(redis.call('HINCRBY', counters, 'slots', '1'))
    redis.call('ZADD', zs, score, name) -- a new slot, or the first one now starts lower
  end
  local key = slot_key(P, name)
  redis.call('ZADD', key, score, rec)
  split_if_full(P, zs, counters, key)
  return score
end

-- Whether the slot in hint h can take a record for [lo, hi]: hi lies in
-- the slot's range, and the highest score in [lo, hi] over all slots is
-- known. It is when the slot starts at or below lo, or when the slot's last
-- score lies in [lo, hi] (a millisecond whose ordinals run across a slot
-- bound: every slot below holds lower scores). The next bound is read only
-- when hi passes the highest score the slot was looked up for.
local function hint_fits(zs, h, lo, hi, ordinal)
  if not h.name or hi < h.bound then return false end
  if not (h.bound <= lo or (ordinal and h.last and h.last >= lo and h.last <= hi)) then
    return false
  end
  if hi <= h.seen then return true end
  if h.upper == nil then
    local nx = redis.call('ZRANGEBYSCORE', zs, '(' .. fmt(h.bound), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    h.upper = nx[2] and tonumber(nx[2]) or math.huge
  end
  return hi < h.upper
end

-- Writes the records slot_insert held back in hint (see slot_insert); a
-- nil hint holds nothing.
local function slot_flush(hint)
  local n = hint and hint.np
  if n and n > 0 then
    redis.call('ZADD', hint.pkey, unpack(hint.pend, 1, n))
    hint.np = 0
  end
end

-- Adds rec with score ss (a string) to the slot key: at once, or held back
-- in hint when one is given (one ZADD then writes a run of records).
local function slot_add(hint, key, ss, rec)
  if not hint then
    redis.call('ZADD', key, ss, rec)
    return
  end
  local n = hint.np or 0
  if n > 0 and hint.pkey ~= key then
    slot_flush(hint)
    n = 0
  end
  hint.pend = hint.pend or {}
  hint.pend[n + 1], hint.pend[n + 2], hint.pkey, hint.np = ss, rec, key, n + 2
end

-- Adds a record with a score in [lo, lo + ORD - 1]: the first free ordinal
-- after the latest record of the same millisecond if ordinal, else lo
-- itself. Returns the score, and the score as a string (fmt). The caller
-- announces a score below the first bound it read before (see first_bound).
-- hint: nil, or a table the caller keeps across the inserts of one run: the
-- last slot used (name, bound, seen = the highest score it was looked up
-- for, upper = the next bound once read, last score, card), so a batch
-- that stays in one slot looks the slot up once, and records held back to
-- be written with one ZADD a slot. With a hint, call slot_flush(hint)
-- before reading or changing a slot, and before the script ends.
-- Time mostly moves forward, so the common insert lands at or after the end
-- of its slot: the slot's last score then gives the ordinal (no scan of the
-- listpack), and a full slot is not split but followed by a new one that
-- starts with this record (nothing moves, and slots stay full).
local function slot_insert(P, zs, counters, lo, rec, ordinal, hint)
  local hi = ordinal and lo + ORD - 1 or lo
  local h = hint or {}
  if not hint_fits(zs, h, lo, hi, ordinal) then
    slot_flush(hint)
    local name, bound = slot_at(zs, hi)
    h.name = nil
    if name then
      local key = slot_key(P, name)
      local tail = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
      h.name, h.key, h.bound, h.seen, h.upper = name, key, bound, hi, nil
      h.last, h.card = tail[2] and tonumber(tail[2]) or nil, redis.call('ZCARD', key)
    end
    if not hint_fits(zs, h, lo, hi, ordinal) then
      h.name = nil
      local score = slot_insert_anywhere(P, zs, counters, lo, hi, rec, ordinal)
      return score, fmt(score)
    end
  end
  local key = h.key
  local score = lo
  if ordinal and h.last and h.last >= lo then
    if h.last <= hi then
      score = math.min(h.last + 1, hi)
    else
      slot_flush(hint)
      local s = redis.call('ZREVRANGEBYSCORE', key, hi, lo, 'WITHSCORES', 'LIMIT', '0', '1')
      if s[2] then score = math.min(tonumber(s[2]) + 1, hi) end
    end
  end
  if h.card >= SLOT_CAP and h.last and score > h.last then
    -- Appending to a full slot: start the next one here. It ends where
    -- the full one ended (h.upper and h.seen stay true).
    local name, ss = fmt(redis.call('HINCRBY', counters, 'slots', '1')), fmt(score)
    redis.call('ZADD', zs, ss, name)
    key = slot_key(P, name)
    slot_add(hint, key, ss, rec)
    h.name, h.key, h.bound, h.last, h.card = name, key, score, score, 1
    return score, ss
  end
  local ss = fmt(score)
  slot_add(hint, key, ss, rec)
  h.card = h.card + 1
  if not h.last or score > h.last then h.last = score end
  if h.card > SLOT_CAP then
    slot_flush(hint)
    split_if_full(P, zs, counters, key)
    h.name = nil -- the slot may have split: look it up again next time
  end
  return score, ss
end

-- The record of id at score: (slot key, record), or nil if it is in no
-- slot. Equal scores are rare (more than ORD records in a millisecond), so
-- the scan is usually over one member.
-- cache: nil, or a table kept across the look-ups of one call: the last
-- slot found and its range, so records that share a slot (the leases of one
-- take) look it up once.
local function slot_find(P, zs, id, score, cache)
  local ss = fmt(score) -- a number argument would be formatted with %.17g
  local name
  if cache and cache.name and score >= cache.bound and score < cache.upper then
    name = cache.name
  else
    local bound
    name, bound = slot_at(zs, ss)
    if not name then return nil end
    if cache then
      local nx = redis.call('ZRANGEBYSCORE', zs, '(' .. fmt(bound), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
      cache.name, cache.bound, cache.upper = name, bound, nx[2] and tonumber(nx[2]) or math.huge
    end
  end
  local key = slot_key(P, name)
  local off = 0
  while true do
    local recs = redis.call('ZRANGEBYSCORE', key, ss, ss, 'LIMIT', nstr(off), '100')
    for _, rec in ipairs(recs) do
      if record_id(rec) == id then return key, rec end
    end
    if #recs < 100 then return nil end
    off = off + 100
  end
end

-- The score of an id's record (pending, in flight, or ready when it is in
-- no slot), or nil for an id the queue does not hold; and the id's index
-- key (ik), for the id_set or id_del that usually follows, so the SHA-1 is
-- computed once.
local function id_score_in(ik, id)
  local s = redis.call('HGET', ik, id)
  return s and tonumber(s) or nil
end

local function id_score(P, id)
  local ik = id_key(P, id)
  return id_score_in(ik, id), ik
end

-- score: a number, or a number already formatted with fmt.
local function id_set(ik, id, score)
  redis.call('HSET', ik, id, type(score) == 'string' and score or fmt(score))
end

local function id_del(ik, id)
  redis.call('HDEL', ik, id)
end

-- The lower bound of the first slot: at or before the earliest score, and a
-- time every scheduler has heard of (offers announce a new first score,
-- transfers publish the score they raise it to), so announcing only scores
-- below it is enough. nil if there is no slot.
local function first_bound(zs)
  local f = redis.call('ZRANGE', zs, '0', '0', 'WITHSCORES')
  return f[2] and tonumber(f[2]) or nil
end

-- The earliest score in the slots, or nil; drops emptied slots from the
-- front of the index and raises the first bound to the earliest score.
local function earliest_score(P, zs)
  for _ = 1, 1000 do
    local f = redis.call('ZRANGE', zs, '0', '0', 'WITHSCORES')
    if f[1] == nil then return nil end
    local e = redis.call('ZRANGE', slot_key(P, f[1]), '0', '0', 'WITHSCORES')
    if e[2] then
      local score = tonumber(e[2])
      if score > tonumber(f[2]) then redis.call('ZADD', zs, score, f[1]) end
      return score
    end
    redis.call('ZREM', zs, f[1])
  end
  return first_bound(zs)
end

local function earliest_due(P, zs)
  local s = earliest_score(P, zs)
  if s == nil then return -1 end
  return math.floor(s / ORD)
end

-- The record of a leased id if token matches, as (record table, slot key,
-- raw record, id index key); nil if the id is unknown, not in flight, or the token is
-- stale: another lease's, or one that has ended (now, server ms, is at or
-- past its end), even if no scheduler has returned the item yet. ik: the
-- id's index key when the caller has it (the client sends the bucket), else
-- nil; cache: see slot_find.
local function leased_record(P, zs, id, token, now, ik, cache)
  ik = ik or id_key(P, id)
  local score = id_score_in(ik, id)
  if not score or math.floor(score / ORD) <= now then return nil end
  local key, rec = slot_find(P, zs, id, score, cache)
  if not key then return nil end
  local r = parse_record(rec, score)
  if not r or r.token == '' or r.token ~= token then return nil end
  return r, key, rec, ik
end

-- Publishes the new earliest due time if score is before the first bound.
local function announce_if_first(chan, score, bound_before)
  if bound_before == nil or score < bound_before then
    redis.call('PUBLISH', chan, fmt(math.floor(score / ORD)))
  end
end
