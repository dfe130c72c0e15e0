-- lua/lib/66_cascade.lua: the timing wheel's cascade into the slots (part of the scripts' shared code: see 00_base.lua).
-- The buckets and their keys, the id index entries of their items and the
-- offers into them are lua/lib/65_wheel.lua's; this file moves a bucket's
-- items into the slots ahead of their due time (the scheduler's transfer).
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

local function cascade_state(P, zs, counters)
  return {P = P, zs = zs, counters = counters, card = {}, tail = {}, bound_of = {},
          D = {}, H = {}, R = {}, I = {}, S = {}, SS = {}, NM = {}, BD = {}, TS = {}, moved = 0}
end

-- The slots found (m, ascending in c.NM, c.BD) made whole: a run below the
-- first slot lowers that slot's bound to lo (a queue with no slot gets one).
local function cascade_slots_fixup(c, lo, m)
  local P, zs, NM, BD, bound_of = c.P, c.zs, c.NM, c.BD, c.bound_of
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

-- The slots of the run's entries a..n alone, ascending, into c.NM and c.BD,
-- for a run spread thin over many slots (a step of a crowded bucket: its
-- entries land among those earlier steps put in): each millisecond of the
-- run looks up the slot of its last score, and the slot before when that
-- one begins inside the millisecond. Every entry's slot is in the list, so
-- the slot with the greatest bound at or below an entry's score is still
-- its slot. Walking every slot between made such a cascade cost the square
-- of the bucket's size (docs/benchmarks.md, issue 42). Returns the count.
local function cascade_slots_sparse(c, a, n)
  local zs, D, NM, BD, bound_of = c.zs, c.D, c.NM, c.BD, c.bound_of
  local m, pms = 0, nil
  for j = a, n do
    local ms = D[j]
    if ms ~= pms then
      pms = ms
      local r = redis.call('ZREVRANGEBYSCORE', zs, fmt(ms * ORD + ORD - 1), '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
      local b = r[1] and tonumber(r[2])
      if b then
        if b > ms * ORD then
          local r0 = redis.call('ZREVRANGEBYSCORE', zs, '(' .. r[2], '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
          local b0 = r0[1] and tonumber(r0[2])
          if b0 and NM[m] ~= r0[1] then
            m = m + 1
            NM[m], BD[m], bound_of[r0[1]] = r0[1], b0, b0
          end
        end
        if NM[m] ~= r[1] then
          m = m + 1
          NM[m], BD[m], bound_of[r[1]] = r[1], b, b
        end
      end
    end
  end
  -- The run begins below the slots it found: the queue's first slot must
  -- lead the list (it is the one lowered to the run's start below).
  if m > 0 and BD[1] > D[a] * ORD then
    local f = redis.call('ZRANGE', zs, '0', '0', 'WITHSCORES')
    local fb = f[1] and tonumber(f[2])
    if fb and f[1] ~= NM[1] then
      for x = m, 1, -1 do NM[x + 1], BD[x + 1] = NM[x], BD[x] end
      m = m + 1
      NM[1], BD[1], bound_of[f[1]] = f[1], fb, fb
    end
  end
  return m
end

-- The slots the scores [lo, hi] cross, ascending, into c.NM (names) and
-- c.BD (bounds); returns their count (or, for a run
-- spread thin, its entries' slots alone: c.sparse). A run below the first slot lowers
-- that slot's bound to lo (a queue with no slot gets one), as
-- slot_insert_anywhere does. The index is read without scores when the
-- call knows the bounds: a score in a reply costs Redis a %.17g.
local function cascade_slots_for(c, lo, hi, a, n)
  local P, zs, NM, BD, bound_of = c.P, c.zs, c.NM, c.BD, c.bound_of
  local m, off = 0, 0
  local his = fmt(hi)
  -- More than two slots an entry: spread thin. (A bounded read of the
  -- index, not ZCOUNT, which the ACL rule does not grant.)
  local lim = 2 * (n - a + 1)
  c.sparse = #redis.call('ZRANGEBYSCORE', zs, fmt(lo), his, 'LIMIT', '0', nstr(lim + 1)) > lim
  if c.sparse then
    m = cascade_slots_sparse(c, a, n)
    return cascade_slots_fixup(c, lo, m)
  end
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
  return cascade_slots_fixup(c, lo, m)
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

-- For the run's entries a..n over the m slots between (cascade_slots_for):
-- each slot's records over the run's range [lo, hi] give its tail as far
-- as the run cares (c.TS), whether it has none there (clear) and the
-- latest score of each of the run's milliseconds (latest).
local function cascade_latest_dense(c, a, n, m, lo, hi, latest, clear)
  local P, D, NM, BD, TS = c.P, c.D, c.NM, c.BD, c.TS
  local CROWD = 2 * SLOT_CAP + 1 -- more records than a listpack slot holds
  for x = 1, m do
    clear[x] = false
    local key = slot_key(P, NM[x])
    local t = c.tail[key]
    local from = math.max(lo, BD[x])
    local to = BD[x + 1] and math.min(hi, BD[x + 1] - 1) or hi
    local read = t == nil or t >= from
    if t == nil then
      t = -1
      if (not BD[x + 1] or hi < BD[x + 1] - 1) and
         kcall(P, 'ZRANGEBYSCORE', key, '(' .. fmt(hi), '+inf', 'LIMIT', '0', '1')[1] then
        t = math.huge -- records after the run's range: it goes inside
      end
    end
    if read then
      -- The records of the run's range from the top: the first of each
      -- millisecond met is its latest. A crowded range (a slot of one
      -- score, past SLOT_CAP) is read CROWD deep, then each millisecond of
      -- the run below what that reached is looked at alone.
      local rs = kcall(P, 'ZREVRANGEBYSCORE', key, fmt(to), fmt(from), 'WITHSCORES', 'LIMIT', '0', nstr(CROWD))
      clear[x] = #rs == 0
      local floor_ms = nil
      for y = 2, #rs, 2 do
        local sc = tonumber(rs[y])
        local ms = math.floor(sc / ORD)
        if not latest[ms] or sc > latest[ms] then latest[ms] = sc end
        if t ~= math.huge and sc > t then t = sc end
        floor_ms = ms
      end
      if #rs >= 2 * CROWD then
        local looked = {}
        for j = a, n do
          local ms = D[j]
          if ms < floor_ms and not looked[ms] and ms * ORD + ORD - 1 >= from and ms * ORD <= to then
            looked[ms] = true
            local r1 = kcall(P, 'ZREVRANGEBYSCORE', key, fmt(math.min(to, ms * ORD + ORD - 1)),
                             fmt(math.max(from, ms * ORD)), 'WITHSCORES', 'LIMIT', '0', '1')
            local sc = r1[2] and tonumber(r1[2])
            if sc and (not latest[ms] or sc > latest[ms]) then latest[ms] = sc end
          end
        end
      end
    end
    TS[x] = t
  end
end

-- A run spread thin (cascade_slots_sparse): each of its milliseconds
-- reads its latest score alone, in the slots that hold part of it
-- (rather than each slot's records over the whole run), and every part
-- goes inside its slot (no tail is known: no append, no cut).
local function cascade_latest_sparse(c, a, n, m, latest, clear)
  local P, D, NM, BD, TS = c.P, c.D, c.NM, c.BD, c.TS
  local x, pms = 1, nil
  for j = a, n do
    local ms = D[j]
    if ms ~= pms then
      pms = ms
      local bot, top = ms * ORD, ms * ORD + ORD - 1
      while BD[x + 1] and BD[x + 1] <= bot do x = x + 1 end
      local y = x
      while y <= m and BD[y] <= top do
        local r = kcall(P, 'ZREVRANGEBYSCORE', slot_key(P, NM[y]), fmt(top), fmt(bot), 'WITHSCORES', 'LIMIT', '0', '1')
        local sc = r[2] and tonumber(r[2])
        if sc and (not latest[ms] or sc > latest[ms]) then latest[ms] = sc end
        y = y + 1
      end
    end
  end
  for y = 1, m do TS[y], clear[y] = math.huge, false end
end

-- Merges the run's entries a..n (sorted: c.D due times, c.R records, c.H
-- index keys, c.I ids) into the slots, and points their index entries at
-- their scores. A slot never holds more than 2 * SLOT_CAP records (Redis's
-- zset-max-listpack-entries, 128): past it a zset becomes a skiplist for
-- good, at about twice the bytes. So a run inside a slot goes in parts that
-- keep it under that, each split before the rest of the run is merged anew.
-- A slot that spans the run's range with no record in it is cut there
-- first, so the run appends (new full slots) rather than going inside.
local function cascade_merge(c, a, n)
  local P, D, S, SS, NM, BD, TS = c.P, c.D, c.S, c.SS, c.NM, c.BD, c.TS
  local lo, hi = D[a] * ORD, D[n] * ORD + ORD - 1
  local m = cascade_slots_for(c, lo, hi, a, n)
  -- Per slot its last score as far as the run cares (this call's writes, or
  -- -1: nothing from lo on, math.huge: records past hi, or the last in
  -- [lo, hi]), and the latest score of each of the run's milliseconds.
  local latest, clear = {}, {}
  if c.sparse then
    cascade_latest_sparse(c, a, n, m, latest, clear)
  else
    cascade_latest_dense(c, a, n, m, lo, hi, latest, clear)
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
      if TS[x] == math.huge and clear[x] then
        -- Records after the run's range and none in it (a slot of few
        -- records over a long span): the slot is cut after the range (one
        -- copy inside Redis), and the run appends.
        local name = cascade_new_names(c, 1)[1]
        local nkey = slot_key(P, name)
        redis.call('ZRANGESTORE', nkey, key, '(' .. fmt(hi), '+inf', 'BYSCORE')
        kcall(P, 'ZREMRANGEBYSCORE', key, '(' .. fmt(hi), '+inf')
        redis.call('ZADD', c.zs, fmt(hi + 1), name)
        c.bound_of[name], c.card[nkey], c.tail[nkey] = hi + 1, nil, nil
        cnt = kcall(P, 'ZCARD', key)
        cascade_append(c, key, j, b, cnt)
      elseif TS[x] < S[j] then
        cascade_append(c, key, j, b, cnt)
      else
        -- (A slot already past it, of one score, takes its part whole.)
        if cnt <= 2 * SLOT_CAP and cnt + b - j + 1 > 2 * SLOT_CAP then
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

-- Reads up to budget entries of bucket k from place from (the entries
-- before it are cascaded) into the run (c.D, c.H, c.R, c.I from c.m + 1 on,
-- with sort keys in c.KS: due time less c.base, * WHEEL_RANK + place in the
-- run, so equal due times keep offer order). Skips tombstones (''): the
-- entries of items cancelled or replaced. An entry that does not decode is
-- set aside (into bad). Returns how many entries it took and whether the
-- bucket is done; nil when the list is of another type (renamed away: the
-- bucket counts as done).
local function cascade_read(c, k, from, budget, bad)
  local P = c.P
  local key = wheel_key(P, k)
  local es = redis.pcall('LRANGE', key, fmt(from), fmt(from + budget))
  if type(es) ~= 'table' or es.err then
    quarantine(P, key, redis.call('TYPE', key)['ok'])
    return 0, true
  end
  local done = #es <= budget
  local took = done and #es or budget
  local m, D, H, R, I, KS, iks = c.m, c.D, c.H, c.R, c.I, c.KS, c.iks
  local find, sub, byte = string.find, string.sub, string.byte
  local kbase = k * WHEEL_MS
  for x = 1, took do
    local e = es[x]
    if e ~= '' then
      -- wheel_entry_of without its patterns (each costs more than the
      -- rest of the item's parse): 'off|h|1|idlen|id..', checked as there.
      local p1 = find(e, '|', 1, true)
      local p2 = p1 and p1 <= 5 and find(e, '|', p1 + 1, true)
      local off = p2 and p2 - p1 <= 6 and tonumber(sub(e, 1, p1 - 1))
      local h = off and tonumber(sub(e, p1 + 1, p2 - 1))
      local p3 = h and byte(e, p2 + 1) == 49 and byte(e, p2 + 2) == 124 and find(e, '|', p2 + 3, true)
      local il = p3 and p3 - p2 <= 6 and tonumber(sub(e, p2 + 3, p3 - 1))
      local id = il and il == il and il >= 1 and il <= ID_MAX and il % 1 == 0 and p3 + il <= #e and
                 off == off and off >= 0 and off < WHEEL_MS and off % 1 == 0 and
                 h == h and h >= 0 and h < ID_BUCKETS and h % 1 == 0 and sub(e, p3 + 1, p3 + il)
      if not id or not id_bytes_ok(id) then
        local _, why = wheel_entry_of(e, k)
        bad[#bad + 1] = aside_entry((why or 'undecodable wheel entry') .. ' in ' .. key, '', e)
      else
        m = m + 1
        local due = kbase + off
        c.base = c.base or kbase
        local ik = iks[h]
        if not ik then
          ik = P .. 'i:' .. nstr(h)
          iks[h] = ik
        end
        D[m], H[m], R[m], I[m] = due, ik, sub(e, p2 + 1), id
        KS[m] = (due - c.base) * WHEEL_RANK + m
        if due < c.base then c.unordered = true end
      end
    end
  end
  c.m = m
  return took, done
end

-- Sorts the run's c.m entries by due time (offer order among equal ones)
-- unless they are in order already.
local function cascade_sort(c)
  local n, D, H, R, I, KS = c.m, c.D, c.H, c.R, c.I, c.KS
  local sorted = not c.unordered
  for j = 2, n do
    if not sorted or D[j] < D[j - 1] then sorted = false break end
  end
  if sorted then return end
  for j = n + 1, #KS do KS[j] = nil end
  if c.unordered then
    -- A due time below the run's base (a bucket out of order): keys anew.
    local low = D[1]
    for j = 2, n do if D[j] < low then low = D[j] end end
    for j = 1, n do KS[j] = (D[j] - low) * WHEEL_RANK + j end
  end
  table.sort(KS)
  local d, h, r, i = c.TD, c.TH, c.TR, c.TI
  for j = 1, n do
    local p = KS[j] % WHEEL_RANK
    d[j], h[j], r[j], i[j] = D[p], H[p], R[p], I[p]
  end
  for j = 1, n do D[j], H[j], R[j], I[j] = d[j], h[j], r[j], i[j] end
end

local WHEEL_STEP = 64 -- entries one step gathers (the time budget is looked at between steps)
local WHEEL_SPAN = 64 -- buckets one step may gather
local WHEEL_FAR = 4294967296 -- ms: a run spans less (its sort keys stay exact)

-- Cascades the buckets whose earliest due time is at most now + WHEEL_LEAD,
-- at most budget entries (live or not), and no more once the server's
-- clock passes deadline_us (us) after a step (a transfer's time budget:
-- Redis is not held long); sets aside (into bad) the entries that do not
-- decode. A step gathers up to WHEEL_STEP entries of up to WHEEL_SPAN
-- buckets into one run, sorted, so buckets of a few items each share the
-- slots' reads and writes. Returns the entries it took (the caller
-- publishes the next due time when it did any work). A bucket index or
-- bucket of another type is renamed away; a bucket index member that names
-- no bucket, dropped.
local function wheel_cascade(P, zs, counters, now, budget, bad, deadline_us)
  local bz = wheel_index(P)
  local cur = redis.call('HGET', counters, 'bcur')
  local ck, cn = nil, 0
  if cur then
    ck, cn = string.match(cur, '^(%d+):(%d+)$')
    cn = tonumber(cn) or 0
  end
  local took = 0
  local c = cascade_state(P, zs, counters)
  c.KS, c.iks, c.TD, c.TH, c.TR, c.TI = {}, {}, {}, {}, {}, {}
  for _ = 1, 100000 do
    if took >= budget or (took > 0 and server_now_us() >= deadline_us) then break end
    local ks = redis.pcall('ZRANGEBYSCORE', bz, '-inf', fmt(now + WHEEL_LEAD), 'LIMIT', '0', nstr(WHEEL_SPAN))
    if type(ks) ~= 'table' or ks.err then
      quarantine(P, bz, redis.call('TYPE', bz)['ok'])
      break
    end
    if #ks == 0 then break end
    local step = math.min(budget - took, WHEEL_STEP)
    local gone, planted, first_k = {}, {}, nil
    c.m, c.base, c.unordered = 0, nil, nil
    for _, k in ipairs(ks) do
      if step <= 0 then break end
      local kn = uint_of(k, 11, math.floor(DUE_MAX / WHEEL_MS))
      if not kn or fmt(kn) ~= k then
        planted[#planted + 1] = k -- names no bucket
      elseif first_k and (kn - first_k) * WHEEL_MS >= WHEEL_FAR then
        break -- the next step's
      else
        first_k = first_k or kn
        local from = (ck == k) and cn or 0
        local n, done = cascade_read(c, kn, from, step, bad)
        took, step = took + n, step - n
        if done then
          gone[#gone + 1] = k
          if ck == k then ck, cn = nil, 0 end
        else
          ck, cn = k, from + n
          break
        end
      end
    end
    if c.m > 0 then
      cascade_sort(c)
      cascade_merge(c, 1, c.m)
      c.moved = c.moved + c.m
    end
    for x = c.m + 1, #c.D do c.D[x], c.H[x], c.R[x], c.I[x] = nil, nil, nil, nil end
    if #gone > 0 then
      local keys = {}
      for x, k in ipairs(gone) do keys[x] = wheel_key(P, k) end
      redis.call('DEL', unpack(keys))
      redis.call('ZREM', bz, unpack(gone))
    end
    if #planted > 0 then redis.call('ZREM', bz, unpack(planted)) end
    if #gone == 0 and #planted == 0 and ck == nil then break end -- nothing moved on
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
