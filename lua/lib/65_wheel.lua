-- lua/lib/65_wheel.lua: the timing wheel (part of the scripts' shared code: see 00_base.lua).
-- The timing wheel -----------------------------------------------------------
--
-- Why: an offer whose due time lands inside the slots (delays of their own,
-- in no time order) must find its slot, read its millisecond's latest
-- ordinal, the slot's size, and write a ZADD of its own: about twice what an
-- offer in time order costs (docs/benchmarks.md, issue 42). Such an offer
-- instead appends its item to the list of its bucket of WHEEL_MS, in offer
-- order, with no read; the scheduler's transfer cascades each bucket into
-- the slots WHEEL_LEAD ms before the bucket's earliest due time, sorted,
-- a run per slot with one read and one ZADD (wheel_cascade).
--
-- Keys (docs/key-layout.md): P..'b:'..k LIST, bucket k = floor(due /
-- WHEEL_MS), entries '<off>|<h>|<record>' (off = due - k * WHEEL_MS, h the
-- id's index bucket, record a version 1 record), appended and never cut
-- until the list is deleted whole; P..'bz' ZSET, member k, score the lowest
-- due time any entry pushed to k had (a lower bound of its earliest live
-- item); counters field 'bcur' = '<k>:<n>' while bucket k is cascaded in
-- parts (its first n entries are in the slots).
--
-- An item in a bucket has the id index entry 'b<due>.<pos>' (pos: its
-- entry's place in the list, from 0). Its entry is live while the index says
-- exactly that: cancel and replace change only the index, and the cascade
-- drops the entries the index no longer names.
--
-- Offer order among equal due times holds because an offer goes straight
-- to the slots only while its bucket has no list (wheel_listed), and a
-- cascaded entry goes after the latest record of its millisecond: every
-- entry of a millisecond in a bucket was offered after every record of it
-- in the slots.

local WHEEL_MS, WHEEL_LEAD = 1024, 1000

local function wheel_key(P, k) return P .. 'b:' .. k end
local function wheel_index(P) return P .. 'bz' end

-- The id index entry of an item at pos of its due time's bucket.
local function wheel_ref(due, pos) return 'b' .. fmt(due) .. '.' .. fmt(pos) end

-- An id index entry as (due, pos) if it names a bucket entry, else nil.
local function wheel_ref_of(s)
  if not s or string.byte(s, 1) ~= 98 then return nil end -- 'b'
  local d, p = string.match(s, '^b(%d+)%.(%d+)$')
  if not d or #d > 13 or #p > 9 then return nil end
  d = tonumber(d)
  if d > DUE_MAX then return nil end
  return d, tonumber(p)
end

-- A bucket entry of bucket k: (due, index bucket h, record, id), or nil and
-- why it does not decode.
local function wheel_entry_of(e, k)
  local off, h, pos = string.match(e, '^(%d+)|(%d+)|()')
  if not off or #off > 4 or #h > 5 then return nil, 'undecodable wheel entry' end
  off, h = tonumber(off), tonumber(h)
  if off >= WHEEL_MS or h >= ID_BUCKETS then return nil, 'wheel entry with a number out of range' end
  local rec = string.sub(e, pos)
  local _, _, id = v1_head(rec)
  if not id then return nil, 'wheel entry with an undecodable record' end
  return k * WHEEL_MS + off, h, rec, id
end

-- The record of id where its index entry (due, pos) points, or nil when
-- it is not there (a planted or dangling entry). Read only.
local function wheel_record(P, id, due, pos)
  local k = math.floor(due / WHEEL_MS)
  local e = redis.pcall('LINDEX', wheel_key(P, k), fmt(pos))
  if type(e) ~= 'string' then return nil end
  local d, _, rec, eid = wheel_entry_of(e, k)
  if d ~= due or eid ~= id then return nil end
  return rec
end

-- An id whose index entry (at ik) names its live entry in a bucket: its
-- due time and record; else nil. Read only.
local function id_wheel_in(P, ik, id)
  local due, pos = wheel_ref_of(redis.pcall('HGET', ik, id))
  if not due then return nil end
  local rec = wheel_record(P, id, due, pos)
  if not rec then return nil end
  return due, rec
end

-- The earliest due time the buckets may hold (the first bz score), or nil.
-- A planted member whose score is no time counts as due now (the cascade
-- then drops it).
local function wheel_first(P)
  local f = redis.pcall('ZRANGE', wheel_index(P), '0', '0', 'WITHSCORES')
  if type(f) ~= 'table' or not f[2] then return nil end
  local s = tonumber(f[2])
  if not s or s ~= s then return 0 end
  return math.min(math.max(math.floor(s), 0), DUE_MAX)
end

-- Offers --------------------------------------------------------------------

-- Whether bucket k has a list (cached in w.listed for the call: an offer
-- that fills one makes it listed).
local function wheel_listed(P, w, k)
  local v = w.listed[k]
  if v == nil then
    v = redis.call('EXISTS', wheel_key(P, k)) == 1
    w.listed[k] = v
  end
  return v
end

-- A new pusher for one call: the entries held back per bucket, in the
-- order the buckets were first met.
local function wheel_pusher()
  return {listed = {}, order = {}, ents = {}, ids = {}, iks = {}, dues = {}, low = {}, n = 0}
end

-- Holds back the item (id, payload, due; ik its index key, h its index
-- bucket) for bucket k; wheel_flush writes it.
local function wheel_add(w, due, h, ik, id, payload)
  local k = math.floor(due / WHEEL_MS)
  local ents = w.ents[k]
  if not ents then
    ents = {}
    w.ents[k], w.ids[k], w.iks[k], w.dues[k] = ents, {}, {}, {}
    w.order[#w.order + 1] = k
  end
  local j = #ents + 1
  ents[j] = nstr(due - k * WHEEL_MS) .. '|' .. h .. '|' .. record_v1(id, payload)
  w.ids[k][j], w.iks[k][j], w.dues[k][j] = id, ik, due
  if not w.low[k] or due < w.low[k] then w.low[k] = due end
  w.listed[k] = true
  w.n = w.n + 1
end

-- Writes what w holds: an RPUSH per bucket, then each item's index entry
-- (the push's reply gives the positions), then one ZADD LT of the bucket
-- index.
local function wheel_flush(P, w)
  if w.n == 0 then return end
  local z = {}
  for _, k in ipairs(w.order) do
    local ents = w.ents[k]
    local len = kcall(P, 'RPUSH', wheel_key(P, k), unpack(ents))
    local base = len - #ents
    local ids, iks, dues = w.ids[k], w.iks[k], w.dues[k]
    for j = 1, #ents do id_set(P, iks[j], ids[j], wheel_ref(dues[j], base + j - 1)) end
    z[#z + 1], z[#z + 2] = fmt(w.low[k]), fmt(k)
  end
  kcall(P, 'ZADD', wheel_index(P), 'LT', unpack(z))
  w.order, w.ents, w.ids, w.iks, w.dues, w.low, w.n = {}, {}, {}, {}, {}, {}, 0
end

-- The cascade -----------------------------------------------------------------
-- Per bucket: one LRANGE of its entries not yet cascaded (up to the budget),
-- a look at each live candidate's index entry, the live ones sorted by due
-- time (offer order among equal ones: the sort key is due offset * 2^20 +
-- place) and merged into the slots as a run: the slots the run crosses are
-- found with one read of the slot index, and each slot gets its part of
-- the run with one read (the records of the run's milliseconds, for their
-- latest ordinals) and one ZADD. A slot that grows past SLOT_CAP is
-- followed by new full slots (a run past its end) or split into even pieces
-- inside Redis (a run inside it). The state of one cascade call (what it
-- knows of each slot) lives in a table made per call: nothing else writes
-- the slots meanwhile.

local WHEEL_RANK = 1048576 -- above any bucket part's size (the budget's bound)

local function cascade_state(P, zs, counters)
  return {P = P, zs = zs, counters = counters, card = {}, tail = {}, bound_of = {},
          D = {}, H = {}, R = {}, I = {}, S = {}, SS = {}, NM = {}, BD = {}, TS = {}, moved = 0}
end

-- The slots the scores [lo, hi] cross, ascending, into c.NM (names) and
-- c.BD (bounds); returns their count. A run below the first slot lowers
-- that slot's bound to lo (a queue with no slot gets one), as
-- slot_insert_anywhere does. The index is read without scores when the
-- call knows the bounds: a score in a reply costs Redis a %.17g.
local function cascade_slots_for(c, lo, hi)
  local P, zs, NM, BD, bound_of = c.P, c.zs, c.NM, c.BD, c.bound_of
  local m, off = 0, 0
  local his = fmt(hi)
  for _ = 1, 100000 do
    local s = redis.call('ZREVRANGEBYSCORE', zs, his, '-inf', 'LIMIT', fmt(off), '2')
    local b1, b2 = bound_of[s[1] or ''], bound_of[s[2] or '']
    if (s[1] and not b1) or (s[2] and not b2) then
      local w = redis.call('ZREVRANGEBYSCORE', zs, his, '-inf', 'WITHSCORES', 'LIMIT', fmt(off), '2')
      s = {w[1], w[3]}
      b1, b2 = tonumber(w[2]), tonumber(w[4])
      if w[1] then bound_of[w[1]] = b1 end
      if w[3] then bound_of[w[3]] = b2 end
    end
    if not s[1] then break end
    m = m + 1
    NM[m], BD[m] = s[1], b1
    if b1 <= lo or not s[2] then break end
    m = m + 1
    NM[m], BD[m] = s[2], b2
    if b2 <= lo then break end
    off = off + 2
  end
  for x = 1, math.floor(m / 2) do -- ascending
    NM[x], NM[m + 1 - x] = NM[m + 1 - x], NM[x]
    BD[x], BD[m + 1 - x] = BD[m + 1 - x], BD[x]
  end
  if m == 0 or BD[1] > lo then
    local first = m > 0 and NM[1] or redis.call('ZRANGE', zs, '0', '0')[1]
    if not first then
      first = fmt(redis.call('HINCRBY', c.counters, 'slots', '1'))
      local key = slot_key(P, first)
      local t = redis.call('TYPE', key)['ok']
      if t ~= 'none' then quarantine(P, key, t) end
      c.card[key], c.tail[key] = 0, -1
    end
    redis.call('ZADD', zs, fmt(lo), first)
    if m == 0 then m, NM[1] = 1, first end
    BD[1], bound_of[first] = lo, lo
  end
  NM[m + 1], BD[m + 1] = nil, nil
  return m
end

-- ZADD of the run's entries a..b into key, in parts of at most 1,000.
local function cascade_zadd(c, key, a, b)
  local Z, SS, R = {}, c.SS, c.R
  for x = a, b, 1000 do
    local e = math.min(x + 999, b)
    for j = x, e do Z[2 * (j - x) + 1], Z[2 * (j - x) + 2] = SS[j], R[j] end
    kcall(c.P, 'ZADD', key, unpack(Z, 1, 2 * (e - x + 1)))
  end
end

-- Names for cnt new slots (one HINCRBY); a key already under such a name
-- is not ours (names are issued once): renamed away.
local function cascade_new_names(c, cnt)
  local last = redis.call('HINCRBY', c.counters, 'slots', fmt(cnt))
  local names = {}
  for x = 1, cnt do
    names[x] = fmt(last - cnt + x)
    local key = slot_key(c.P, names[x])
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' then quarantine(c.P, key, t) end
  end
  return names
end

-- The run's entries a..b go past the end of slot key (n records): it fills
-- to SLOT_CAP and new slots of SLOT_CAP follow, written with one ZADD each
-- and their bounds with one ZADD of the index. No cut between equal scores.
local function cascade_append(c, key, a, b, n)
  local S = c.S
  local e = math.min(a - 1 + math.max(SLOT_CAP - n, 0), b)
  while e >= a and e < b and S[e + 1] == S[e] do e = e + 1 end
  if e >= a then
    cascade_zadd(c, key, a, e)
    c.card[key], c.tail[key] = n + e - a + 1, S[e]
  end
  local st, en, ns, j = {}, {}, 0, e + 1
  while j <= b do
    local f = math.min(j + SLOT_CAP - 1, b)
    while f < b and S[f + 1] == S[f] do f = f + 1 end
    ns = ns + 1
    st[ns], en[ns] = j, f
    j = f + 1
  end
  if ns == 0 then return end
  local names, idx = cascade_new_names(c, ns), {}
  for p = 1, ns do
    local k2 = slot_key(c.P, names[p])
    cascade_zadd(c, k2, st[p], en[p])
    c.card[k2], c.tail[k2], c.bound_of[names[p]] = en[p] - st[p] + 1, S[en[p]], S[st[p]]
    idx[2 * p - 1], idx[2 * p] = c.SS[st[p]], names[p]
  end
  redis.call('ZADD', c.zs, unpack(idx))
end

-- The run's entries a..b land inside slot key (n records before): one ZADD;
-- past SLOT_CAP the slot splits into even pieces, cut by rank and moved
-- inside Redis (ZRANGESTORE). A cut between equal scores is skipped.
local function cascade_insert(c, key, a, b, n)
  cascade_zadd(c, key, a, b)
  local total = n + b - a + 1
  c.card[key], c.tail[key] = total, nil
  if total <= SLOT_CAP or n > 4 * SLOT_CAP then return end
  local m = math.ceil(total / SLOT_CAP)
  local size = math.ceil(total / m)
  local cuts, ranks = {}, {}
  for p = 1, m - 1 do
    local t = kcall(c.P, 'ZRANGE', key, fmt(p * size - 1), fmt(p * size), 'WITHSCORES')
    if t[4] and t[2] ~= t[4] then cuts[#cuts + 1], ranks[#ranks + 1] = t[4], p * size end
  end
  if #cuts == 0 then return end
  local names, idx = cascade_new_names(c, #cuts), {}
  for p = 1, #cuts do
    local k2 = slot_key(c.P, names[p])
    redis.call('ZRANGESTORE', k2, key, cuts[p], cuts[p + 1] and '(' .. cuts[p + 1] or '+inf', 'BYSCORE')
    c.card[k2], c.tail[k2], c.bound_of[names[p]] = (ranks[p + 1] or total) - ranks[p], nil, tonumber(cuts[p])
    idx[2 * p - 1], idx[2 * p] = cuts[p], names[p]
  end
  kcall(c.P, 'ZREMRANGEBYSCORE', key, cuts[1], '+inf')
  c.card[key] = ranks[1]
  redis.call('ZADD', c.zs, unpack(idx))
end

-- Merges the run's entries a..n (sorted: c.D due times, c.R records, c.H
-- index keys, c.I ids) into the slots, and points their index entries at
-- their scores. A slot never holds more than 2 * SLOT_CAP records (Redis's
-- zset-max-listpack-entries, 128): past it a zset becomes a skiplist for
-- good, at about twice the bytes. So a run inside a slot goes in parts that
-- keep it under that, each split before the rest of the run is merged anew.
local function cascade_merge(c, a, n)
  local P, D, S, SS, NM, BD, TS = c.P, c.D, c.S, c.SS, c.NM, c.BD, c.TS
  local lo, hi = D[a] * ORD, D[n] * ORD + ORD - 1
  local m = cascade_slots_for(c, lo, hi)
  -- Per slot its last score as far as the run cares (this call's writes, or
  -- -1: nothing from lo on, math.huge: records past hi, or the last in
  -- [lo, hi]), and the latest score of each of the run's milliseconds.
  local latest = {}
  for x = 1, m do
    local key = slot_key(P, NM[x])
    local t = c.tail[key]
    local from = math.max(lo, BD[x])
    local read = t == nil or t >= from
    if t == nil then
      t = -1
      if not BD[x + 1] and kcall(P, 'ZRANGEBYSCORE', key, '(' .. fmt(hi), '+inf', 'LIMIT', '0', '1')[1] then
        t = math.huge
      end
    end
    if read then
      local to = BD[x + 1] and math.min(hi, BD[x + 1] - 1) or hi
      -- Bounded: a millisecond of more records than this reads as its
      -- first ones (its ordinals are past ORD - 1 then anyway).
      local rs = kcall(P, 'ZREVRANGEBYSCORE', key, fmt(to), fmt(from), 'WITHSCORES', 'LIMIT', '0', '4096')
      for y = 2, #rs, 2 do
        local s = tonumber(rs[y])
        local ms = math.floor(s / ORD)
        if not latest[ms] or s > latest[ms] then latest[ms] = s end
        if t ~= math.huge and s > t then t = s end
      end
    end
    TS[x] = t
  end
  -- Scores: after the latest record of the millisecond (offer order).
  local pms, plast = nil, nil
  for j = a, n do
    local ms = D[j]
    if ms ~= pms then pms, plast = ms, latest[ms] end
    local base = ms * ORD
    local s = plast and math.min(plast + 1, base + ORD - 1) or base
    S[j], SS[j], plast = s, fmt(s), s
  end
  -- Per slot, its part of the run.
  local j = a
  for x = 1, m do
    if j > n then break end
    local upper = BD[x + 1]
    local b = j - 1
    while b < n and (not upper or S[b + 1] < upper) do b = b + 1 end
    if b >= j then
      local key = slot_key(P, NM[x])
      local cnt = c.card[key] or kcall(P, 'ZCARD', key)
      local cut = false
      if TS[x] < S[j] then
        cascade_append(c, key, j, b, cnt)
      else
        if cnt + b - j + 1 > 2 * SLOT_CAP then
          b, cut = j + math.max(2 * SLOT_CAP - cnt, 1) - 1, true
        end
        cascade_insert(c, key, j, b, cnt)
      end
      for y = j, b do id_set(P, c.H[y], c.I[y], SS[y]) end
      if cut and b < n then return cascade_merge(c, b + 1, n) end
      j = b + 1
    end
  end
end

-- Cascades up to budget entries of bucket k, from its first entry not yet
-- cascaded (from: the count before it). Returns how many it took and
-- whether the bucket is done.
local function cascade_bucket(c, k, from, budget, bad)
  local P, D, H, R, I = c.P, c.D, c.H, c.R, c.I
  local key = wheel_key(P, k)
  local es = kcall(P, 'LRANGE', key, fmt(from), fmt(from + budget))
  local done = #es <= budget
  local took = done and #es or budget
  local m, keys, place = 0, {}, {}
  for x = 1, took do
    local due, h, rec, id = wheel_entry_of(es[x], k)
    if not due then
      bad[#bad + 1] = aside_entry(h .. ' in ' .. key, '', es[x])
    else
      local ik = P .. 'i:' .. nstr(h)
      -- Live only while the index names this very entry; an index bucket
      -- of another type names nothing (it is renamed away when the entry
      -- is indexed again), so its entries are kept rather than lost.
      local v = redis.pcall('HGET', ik, id)
      if v == wheel_ref(due, from + x - 1) or type(v) == 'table' then
        m = m + 1
        D[m], H[m], R[m], I[m], keys[m] = due, ik, rec, id, (due - k * WHEEL_MS) * WHEEL_RANK + m
      end
    end
  end
  for x = m + 1, #D do D[x], H[x], R[x], I[x] = nil, nil, nil, nil end
  if m > 0 then
    local sorted = true
    for j = 2, m do
      if D[j] < D[j - 1] then sorted = false break end
    end
    if not sorted then
      table.sort(keys)
      local d, h, r, i = {}, {}, {}, {}
      for j = 1, m do
        local p = keys[j] % WHEEL_RANK
        d[j], h[j], r[j], i[j] = D[p], H[p], R[p], I[p]
      end
      for j = 1, m do D[j], H[j], R[j], I[j] = d[j], h[j], r[j], i[j] end
    end
    cascade_merge(c, 1, m)
    c.moved = c.moved + m
  end
  return took, done
end

local WHEEL_STEP = 256 -- entries a bucket gives per step (the time budget is looked at between steps)

-- Cascades the buckets whose earliest due time is at most now + WHEEL_LEAD,
-- at most budget entries (live or not), in steps of at most WHEEL_STEP,
-- and no more once the server's clock passes deadline_us (us) after a step
-- (a transfer's time budget: Redis is not held long); sets aside (into
-- bad) the entries that do not decode. Returns the entries it took (the
-- caller publishes the next due time when it did any work). A bucket index
-- or bucket of another type is renamed away; a bucket index member that
-- names no bucket, dropped.
local function wheel_cascade(P, zs, counters, now, budget, bad, deadline_us)
  local bz = wheel_index(P)
  ensure_type(P, bz, 'zset')
  local c = cascade_state(P, zs, counters)
  local took = 0
  local cur = redis.call('HGET', counters, 'bcur')
  local ck, cn = nil, 0
  if cur then
    ck, cn = string.match(cur, '^(%d+):(%d+)$')
    cn = tonumber(cn) or 0
  end
  for _ = 1, 100000 do
    if took >= budget or (took > 0 and server_now_us() >= deadline_us) then break end
    local f = redis.call('ZRANGEBYSCORE', bz, '-inf', fmt(now + WHEEL_LEAD), 'LIMIT', '0', '1')
    local k = f[1]
    if not k then break end
    local kn = uint_of(k, 11, math.floor(DUE_MAX / WHEEL_MS))
    if not kn or fmt(kn) ~= k then
      redis.call('ZREM', bz, k) -- planted: names no bucket
    else
      ensure_type(P, wheel_key(P, k), 'list')
      local from = (ck == k) and cn or 0
      local n, done = cascade_bucket(c, kn, from, math.min(budget - took, WHEEL_STEP), bad)
      took = took + n
      if done then
        redis.call('DEL', wheel_key(P, k))
        redis.call('ZREM', bz, k)
        ck, cn = nil, 0
      else
        ck, cn = k, from + n
      end
    end
  end
  -- Where a bucket cut short goes on (see 'bcur' above).
  if ck then
    local now_cur = ck .. ':' .. fmt(cn)
    if now_cur ~= cur then redis.call('HSET', counters, 'bcur', now_cur) end
  elseif cur then
    redis.call('HDEL', counters, 'bcur')
  end
  return took
end
