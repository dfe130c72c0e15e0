-- lua/lib/60_slots.lua: slots (part of the scripts' shared code: see 00_base.lua).
-- Slots ----------------------------------------------------------------------

local function slot_key(P, name) return P .. 'q:' .. name end

-- The slot whose range holds score: (name, lower bound), or nil if score is
-- below every bound (or there is no slot).
local function slot_at(zs, score)
  -- A number argument would go out through %.17g: fmt is exact, and cheaper.
  if type(score) == 'number' then score = fmt(score) end
  local s = redis.call('ZREVRANGEBYSCORE', zs, score, '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if s[1] == nil then return nil end
  return s[1], tonumber(s[2])
end

-- The highest score in [lo, hi] of the slot key (a millisecond's latest
-- ordinal), or nil. lo and hi: numbers, or their fmt strings.
local function latest_in(P, key, lo, hi)
  if type(hi) == 'number' then hi, lo = fmt(hi), fmt(lo) end
  local s = kcall(P, 'ZREVRANGEBYSCORE', key, hi, lo, 'WITHSCORES', 'LIMIT', '0', '1')
  return s[2] and tonumber(s[2])
end

-- The highest score in [lo, hi] over all slots, or nil, starting from the
-- slot (name, bound) that holds hi. Usually that slot alone; a split bound
-- inside [lo, hi] makes it look one slot further down.
local function last_score_in(P, zs, lo, hi, name, bound)
  for _ = 1, 64 do
    local last = latest_in(P, slot_key(P, name), lo, hi)
    if last then return last end
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
  local card = kcall(P, 'ZCARD', key)
  if card <= SLOT_CAP or (card - SLOT_CAP - 1) % 32 ~= 0 then return end
  local half = nstr(math.floor(card / 2))
  local mid = kcall(P, 'ZRANGE', key, half, half, 'WITHSCORES')[2]
  local low = kcall(P, 'ZRANGE', key, '0', '0', 'WITHSCORES')[2]
  if mid == low then
    -- The lower half is all one score: split above it.
    local nx = kcall(P, 'ZRANGEBYSCORE', key, '(' .. mid, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if nx[2] == nil then return end
    mid = nx[2]
  end
  -- The upper half moves to a new slot inside Redis (ZRANGESTORE): no score
  -- is formatted for Lua and parsed back, as a read and a ZADD would.
  local new = fmt(redis.call('HINCRBY', counters, 'slots', '1'))
  local nkey = slot_key(P, new)
  -- A key already there is not ours (slot names are issued once): a zset is
  -- left alone and the split waits for later; another type is renamed away.
  local got = redis.call('TYPE', nkey)['ok']
  if got == 'zset' then return end
  if got ~= 'none' then quarantine(P, nkey, got) end
  local moved = redis.call('ZRANGESTORE', nkey, key, mid, '+inf', 'BYSCORE', 'LIMIT', '0', fmt(4 * SLOT_CAP))
  if moved >= 4 * SLOT_CAP then -- one score dominates: leave it
    redis.call('DEL', nkey)
    return
  end
  kcall(P, 'ZREMRANGEBYSCORE', key, mid, '+inf')
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
  kcall(P, 'ZADD', key, fmt(score), rec)
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
    kcall(hint.P, 'ZADD', hint.pkey, unpack(hint.pend, 1, n))
    hint.np = 0
  end
end

-- Adds rec with score ss (a string) to the slot key: at once, or held back
-- in hint when one is given (one ZADD then writes a run of records).
local function slot_add(P, hint, key, ss, rec)
  if not hint then
    kcall(P, 'ZADD', key, ss, rec)
    return
  end
  local n = hint.np or 0
  if n > 0 and hint.pkey ~= key then
    slot_flush(hint)
    n = 0
  end
  hint.pend = hint.pend or {}
  hint.pend[n + 1], hint.pend[n + 2], hint.pkey, hint.np, hint.P = ss, rec, key, n + 2, P
end

-- slot_insert once a run's inserts land inside their slots, not at their
-- ends: offers that each carry their own delay, in no time order. Such an
-- insert needs the slot, the latest score of its millisecond (its
-- ordinal: one read, and in the usual empty millisecond no score to
-- format) and the slot's size; the slot's last score, which only offers in
-- time order put to use, is not read. The hint then knows its millisecond
-- only (h.ms, with h.mlast its latest score or nil), so offers of one due
-- time that follow each other (a batch with one delay, in a slot that holds
-- later items) add to one ZADD with no read. A millisecond whose ordinals
-- run across a slot bound (a split fell inside it) stays in the upper slot
-- while that slot holds a score of it; else it goes to slot_insert_anywhere.
local function slot_insert_spread(P, zs, counters, lo, hi, rec, h)
  if not (h.name and h.ms == lo) then
    slot_flush(h)
    -- Each bound printed once (a 16-digit number costs the C library's
    -- printf about 1,800 instructions): hi for both look-ups, lo for the
    -- second and, in an empty millisecond, the score.
    local his, los = fmt(hi), fmt(lo)
    local name, bound = slot_at(zs, his)
    h.name = nil
    local key = name and slot_key(P, name)
    local last = key and latest_in(P, key, los, his)
    -- The millisecond's latest score is known when the slot starts at or
    -- below it, or holds a score of it (the slots below hold lower ones).
    if not key or (bound > lo and not last) then
      local score = slot_insert_anywhere(P, zs, counters, lo, hi, rec, true)
      return score, fmt(score)
    end
    h.name, h.key, h.ms, h.mlast, h.card = name, key, lo, last, kcall(P, 'ZCARD', key)
    h.los = los
  end
  local score = h.mlast and math.min(h.mlast + 1, hi) or lo
  local ss = score == lo and h.los or fmt(score)
  slot_add(P, h, h.key, ss, rec)
  h.mlast, h.card = score, h.card + 1
  if h.card > SLOT_CAP then
    slot_flush(h)
    split_if_full(P, zs, counters, h.key)
    h.name = nil -- the slot may have split: look it up again next time
  end
  return score, ss
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
-- starts with this record (nothing moves, and slots stay full). Once an
-- insert with a hint lands inside its slot, the rest of the run goes by
-- slot_insert_spread (h.spread).
local function slot_insert(P, zs, counters, lo, rec, ordinal, hint)
  local hi = ordinal and lo + ORD - 1 or lo
  local h = hint or {}
  if h.spread and ordinal then return slot_insert_spread(P, zs, counters, lo, hi, rec, h) end
  if not hint_fits(zs, h, lo, hi, ordinal) then
    slot_flush(hint)
    local name, bound = slot_at(zs, hi)
    h.name = nil
    if name then
      local key = slot_key(P, name)
      local tail = kcall(P, 'ZRANGE', key, '-1', '-1', 'WITHSCORES')
      h.name, h.key, h.bound, h.seen, h.upper = name, key, bound, hi, nil
      h.last, h.card = tail[2] and tonumber(tail[2]) or nil, kcall(P, 'ZCARD', key)
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
      local last = latest_in(P, key, lo, hi)
      if last then score = math.min(last + 1, hi) end
    end
  end
  if h.card >= SLOT_CAP and h.last and score > h.last then
    -- Appending to a full slot: start the next one here. It ends where
    -- the full one ended (h.upper and h.seen stay true).
    local name, ss = fmt(redis.call('HINCRBY', counters, 'slots', '1')), fmt(score)
    redis.call('ZADD', zs, ss, name)
    key = slot_key(P, name)
    slot_add(P, hint, key, ss, rec)
    h.name, h.key, h.bound, h.last, h.card = name, key, score, score, 1
    return score, ss
  end
  local ss = fmt(score)
  slot_add(P, hint, key, ss, rec)
  h.card = h.card + 1
  local at_end = not h.last or score > h.last
  if at_end then h.last = score end
  if hint and ordinal and not at_end then
    -- Inside the slot: the next inserts look their slots up as
    -- slot_insert_spread does (its hint fields, from a fresh look-up).
    h.spread, h.name = true, nil
  end
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
  -- Bounded: past 100,000 records of one score (ORD offers in one
  -- millisecond, and 98,000 more), an id counts as in no slot.
  for i = 0, 999 do
    local recs = kcall(P, 'ZRANGEBYSCORE', key, ss, ss, 'LIMIT', nstr(i * 100), '100')
    for _, rec in ipairs(recs) do
      if record_has(rec, id) then return key, rec end
    end
    if #recs < 100 then return nil end
  end
  return nil
end

-- The lower bound of the first slot: at or before the earliest score, and a
-- time every scheduler has heard of (offers announce a new first score,
-- transfers publish the score they raise it to), so announcing only scores
-- below it is enough. nil if there is no slot.
local function first_bound(P, zs)
  local f = kcall(P, 'ZRANGE', zs, '0', '0', 'WITHSCORES')
  return f[2] and tonumber(f[2]) or nil
end

-- The earliest score in the slots, or nil; drops emptied slots from the
-- front of the index and raises the first bound to the earliest score.
local function earliest_score(P, zs)
  for _ = 1, 1000 do
    local f = redis.call('ZRANGE', zs, '0', '0', 'WITHSCORES')
    if f[1] == nil then return nil end
    local e = kcall(P, 'ZRANGE', slot_key(P, f[1]), '0', '0', 'WITHSCORES')
    if e[2] then
      local score = tonumber(e[2])
      if score > tonumber(f[2]) then redis.call('ZADD', zs, score, f[1]) end
      return score
    end
    redis.call('ZREM', zs, f[1])
  end
  return first_bound(P, zs)
end

-- earliest_score without its repairs, for the scripts that only read (a
-- no-writes function may not ZADD or ZREM): empty slots are skipped, not
-- dropped; a slot of another type counts as empty. Bounded as the other.
local function earliest_score_ro(P, zs)
  for i = 0, 999 do
    local f = redis.call('ZRANGE', zs, fmt(i), fmt(i))
    if f[1] == nil then return nil end
    local e = redis.pcall('ZRANGE', slot_key(P, f[1]), '0', '0', 'WITHSCORES')
    if type(e) == 'table' and e[2] then return tonumber(e[2]) end
  end
  return nil
end

local function earliest_due(P, zs, read_only)
  local s
  if read_only then s = earliest_score_ro(P, zs) else s = earliest_score(P, zs) end
  if s == nil then return -1 end
  return math.min(math.max(math.floor(s / ORD), 0), DUE_MAX) -- a planted score may be anything
end

-- The score a take's lease token names ("<request>.<i>.<score>": its lease
-- record's), or nil.
local function token_score(token)
  local ss = string.match(token, '%.(%d+)$')
  return ss and uint_of(ss, 16, SCORE_MAX) or nil
end

-- leased_record's look at one score: the record there that holds id under
-- token, with a lease not ended, as (record table, slot key, raw record).
local function leased_at(P, zs, id, token, now, score, cache)
  if not score or math.floor(score / ORD) <= now then return nil end
  local key, rec = slot_find(P, zs, id, score, cache)
  if not key then return nil end
  local r = parse_record(rec, score, id)
  if not r or r.bad or r.token == '' or r.token ~= token then return nil end
  return r, key, rec
end

-- The record of a leased id if token matches, as (record table, slot key,
-- raw record, id index key); nil if the id is unknown, not in flight, or the token is
-- stale: another lease's, or one that has ended (now, server ms, is at or
-- past its end), even if no scheduler has returned the item yet. ik: the
-- id's index key when the caller has it (the client sends the bucket), else
-- nil; cache: see slot_find. An item in a record of its own is found by
-- its index entry; one a take leased (lease record v4) by the record its
-- token names, as the take left the id's index entry as it was (see The
-- lease registry). An id with no index entry is not in flight.
local function leased_record(P, zs, id, token, now, ik, cache)
  ik = ik or id_key(P, id)
  local score = id_score_in(P, ik, id)
  if not score then return nil end
  local r, key, rec = leased_at(P, zs, id, token, now, score, cache)
  if not r then
    local ts = token_score(token)
    if ts and ts ~= score then r, key, rec = leased_at(P, zs, id, token, now, ts, cache) end
  end
  if not r then return nil end
  return r, key, rec, ik
end

