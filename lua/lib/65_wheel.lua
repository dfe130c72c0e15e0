-- lua/lib/65_wheel.lua: the timing wheel (part of the scripts' shared code: see 00_base.lua).
-- The timing wheel -----------------------------------------------------------
--
-- Why: an offer whose due time lands inside the slots (delays of their own,
-- in no time order) must find its slot, read its millisecond's latest
-- ordinal, the slot's size, and write a ZADD of its own: about twice what an
-- offer in time order costs (docs/benchmarks.md, issue 42). Such an offer
-- instead appends its item to the list of its bucket of WHEEL_MS, in offer
-- order, with no read; the scheduler's transfer cascades each bucket into
-- the slots up to WHEEL_LEAD ms before the bucket's earliest due time, sorted,
-- a run per slot with one read and one ZADD (wheel_cascade, lib/66_cascade.lua).
--
-- Keys (docs/key-layout.md): P..'b:'..k LIST, bucket k = floor(due /
-- WHEEL_MS), entries '<off>|<h>|<record>' (off = due - k * WHEEL_MS, h the
-- id's index bucket, record a version 1 record), appended and never cut
-- until the list is deleted whole; P..'bz' ZSET, member k, score the
-- bucket's start k * WHEEL_MS, written by the push that makes the list
-- (older versions wrote the lowest due time pushed, also inside the bucket:
-- either is a lower bound of its items; keeping the lowest cost each push a
-- ZADD member and a printed number, 5 % of an offer: docs/benchmarks.md,
-- issue 42); counters field 'bcur' = '<k>:<n>' while bucket k is cascaded
-- in parts (its first n entries are in the slots).
--
-- An item in a bucket has the id index entry wheel_ref(k, pos) (pos: its
-- entry's place in the list, from 0). Cancel and replace make its entry a
-- tombstone ('', wheel_bury), which the cascade skips; the index entry is
-- what finds the item (lookup, cancel, replace, keep), and the cascade
-- points it at the item's slot score.
--
-- Offer order among equal due times holds because an offer goes straight
-- to the slots only while its bucket has no list (wheel_listed), and a
-- cascaded entry goes after the latest record of its millisecond: every
-- entry of a millisecond in a bucket was offered after every record of it
-- in the slots.

-- WHEEL_NEAR: an offer due sooner goes to the slots (unless its bucket has
-- a list). WHEEL_LEAD: a bucket is cascaded this long before its earliest
-- due time. Both are far from now because a bucket of many items (a burst
-- of offers with delays of seconds) needs time to cascade, in steps, and a
-- record due after the wheel's earliest time waits for it: with both at
-- 1 s, 100,000 offers at once with delays of 3 to 10 s came seconds late
-- (docs/benchmarks.md, issue 42). Between the two a bucket gathers at least
-- 10 s of offers before its cascade starts.
local WHEEL_MS, WHEEL_NEAR, WHEEL_LEAD = 4096, 40000, 30000

-- Bucket numbers as digit strings, kept from call to call: a bucket takes
-- offers in many calls, and formatting a number costs Lua more than an
-- offer's push (a number concatenated goes through %.14g, the C library's
-- floating-point printer: docs/benchmarks.md, issue 42). Emptied when it
-- holds WHEEL_NAMES, so it stays small whatever the due times.
local WHEEL_NAMES = 16384
local bucket_names, bucket_named = {}, 0
local function bucket_name(k)
  local s = bucket_names[k]
  if not s then
    if bucket_named >= WHEEL_NAMES then bucket_names, bucket_named = {}, 0 end
    s = fmt(k)
    bucket_names[k], bucket_named = s, bucket_named + 1
  end
  return s
end

-- Bucket entries' offsets (due - k * WHEEL_MS, 0 .. WHEEL_MS - 1) as
-- digits, kept from call to call as bucket names are (filled by
-- wheel_add): a random offset seldom repeats within a call, and printing it
-- was an offer's one formatted number besides its index entry
-- (docs/benchmarks.md, issue 42). At most WHEEL_MS entries.
local wheel_offs = {}

-- Bucket k's list (k a number, or its digits as a bucket index member).
local function wheel_key(P, k)
  if type(k) == 'string' then return P .. 'b:' .. k end
  return P .. 'b:' .. bucket_name(k)
end
local function wheel_index(P) return P .. 'bz' end

-- The id index entry of the item at pos of bucket k: the negative integer
-- -(k * WHEEL_POS + pos), which the hash keeps as a number, as it keeps a
-- slot score (the string 'b<due>.<pos>' cost 10 bytes an item more: see
-- docs/benchmarks.md, issue 42); 'b<k>.<pos>' for a place past WHEEL_POS.
-- An older delayq reads neither as a score: the id counts as absent there.
-- k <= DUE_MAX / WHEEL_MS (< 2^31), so the number stays below 2^53, exact.
local WHEEL_POS = 2097152
local function wheel_ref(k, pos)
  if pos < WHEEL_POS then return string.format('-%d', k * WHEEL_POS + pos) end
  return 'b' .. fmt(k) .. '.' .. fmt(pos)
end

-- An id index entry as (bucket k, pos) if it names a bucket entry, else nil.
local function wheel_ref_of(s)
  if not s then return nil end
  local c, k, pos = string.byte(s, 1), nil, nil
  if c == 45 then -- '-'
    if #s > 17 or not string.find(s, '^%-%d+$') then return nil end
    local v = tonumber(string.sub(s, 2))
    k = math.floor(v / WHEEL_POS)
    pos = v - k * WHEEL_POS
  elseif c == 98 then -- 'b'
    k, pos = string.match(s, '^b(%d+)%.(%d+)$')
    if not k or #k > 10 or #pos > 9 then return nil end
    k, pos = tonumber(k), tonumber(pos)
  else
    return nil
  end
  if k > DUE_MAX / WHEEL_MS then return nil end
  return k, pos
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

-- The record and due time of id where its index entry (k, pos) points,
-- or nil when it is not there (a planted or dangling entry). Read only.
local function wheel_record(P, id, k, pos)
  local e = redis.pcall('LINDEX', wheel_key(P, k), fmt(pos))
  if type(e) ~= 'string' then return nil end
  local due, _, rec, eid = wheel_entry_of(e, k)
  if eid ~= id then return nil end
  return rec, due
end

-- An id whose index entry (at ik) names its live entry in a bucket: its
-- due time, record and place in the bucket; else nil. Read only.
local function id_wheel_in(P, ik, id)
  local k, pos = wheel_ref_of(redis.pcall('HGET', ik, id))
  if not k then return nil end
  local rec, due = wheel_record(P, id, k, pos)
  if not rec then return nil end
  return due, rec, pos
end

-- Makes the entry at pos of due's bucket a tombstone (''), which the
-- cascade skips: the item was cancelled or replaced (its index entry goes
-- or changes with it). The caller found the entry there (wheel_record).
local function wheel_bury(P, due, pos)
  redis.call('LSET', wheel_key(P, math.floor(due / WHEEL_MS)), fmt(pos), '')
end

-- The earliest due time the buckets may hold (the first bz score: a lower
-- bound, see wheel_first_due), or nil.
-- A planted member whose score is no time counts as due now (the cascade
-- then drops it).
local function wheel_first(P)
  local f = redis.pcall('ZRANGE', wheel_index(P), '0', '0', 'WITHSCORES')
  if type(f) ~= 'table' or not f[2] then return nil end
  local s = tonumber(f[2])
  if not s or s ~= s then return 0 end
  return math.min(math.max(math.floor(s), 0), DUE_MAX)
end

-- The bucket cascaded in parts and the count of its entries already in the
-- slots (the counters' 'bcur'), or nil, 0. Read only.
local function wheel_cursor(P)
  local cur = redis.pcall('HGET', P .. 'n', 'bcur')
  if type(cur) ~= 'string' then return nil, 0 end
  local ck, cn = string.match(cur, '^(%d+):(%d+)$')
  return ck, cn and #cn <= 9 and tonumber(cn) or 0
end

-- The earliest due time of an item in the buckets if it is before cap (a
-- due time; -1: no cap), else nil; for stats and metrics. The bucket index
-- scores a bucket by its start, up to WHEEL_MS early, so the first buckets'
-- entries not yet cascaded are read, tombstones skipped, while a bucket
-- starts before cap and holds at most WHEEL_PEEK of them; past that its
-- score stands (a lower bound). Read only.
local WHEEL_PEEK = 4096
local function wheel_first_due(P, cap)
  local f = redis.pcall('ZRANGE', wheel_index(P), '0', '3', 'WITHSCORES')
  if type(f) ~= 'table' or not f[2] then return nil end
  local ck, cn = wheel_cursor(P)
  local low, last = nil, nil
  for x = 1, #f, 2 do
    local s = tonumber(f[x + 1])
    if not s or s ~= s then return 0 end -- planted: due now, as wheel_first says
    s = math.min(math.max(math.floor(s), 0), DUE_MAX)
    if (low and s >= low) or (cap >= 0 and s >= cap) then return low end
    local k = uint_of(f[x], 11, math.floor(DUE_MAX / WHEEL_MS))
    local key = k and wheel_key(P, f[x])
    local len = key and redis.pcall('LLEN', key)
    local from = ck == f[x] and cn or 0
    if type(len) ~= 'number' or len - from > WHEEL_PEEK or s < k * WHEEL_MS or s >= (k + 1) * WHEEL_MS then
      return s -- not read: its score bounds it
    end
    local es = redis.pcall('LRANGE', key, nstr(from), '-1')
    local m = nil
    if type(es) == 'table' and not es.err then
      for j = 1, #es do
        local off = tonumber(string.match(es[j], '^(%d%d?%d?%d?)|'))
        if off and off < WHEEL_MS and (not m or off < m) then m = off end
      end
    end
    if m and (not low or k * WHEEL_MS + m < low) then low = k * WHEEL_MS + m end
    last = s
  end
  -- Only tombstones read: the buckets not read bound what is left.
  if not low and #f >= 8 then return last end
  return low
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

local WHEEL_RANK = 1048576 -- above the entries of a call, and of a bucket's part (sort keys)

-- Lists a Lua state has indexed, kept from call to call (a list takes
-- offers in many calls): a cache {n = 0, by = {}}, by[P] a table per key
-- prefix of list numbers (numbers, not strings: a table of thousands of
-- strings made every offer 10 % slower, its collector marking them:
-- docs/benchmarks.md, issue 42), n of them in all. A list without its
-- index entry (planted, or left by an OOM between the push and the index's
-- write) would never be moved, its offers stranded: an offer indexes a list
-- its push made and one this state has not indexed, since an index write of
-- a list already there is not free. indexed_of returns prefix P's table,
-- emptying the cache first when n more would pass cap; note_indexed notes
-- keys once their index writes are done.
local function indexed_of(cache, P, n, cap)
  if cache.n + n > cap then cache.n, cache.by = 0, {} end
  local ix = cache.by[P]
  if not ix then
    ix = {}
    cache.by[P] = ix
  end
  return ix
end

local function note_indexed(cache, ix, keys)
  for _, k in ipairs(keys) do ix[k] = true end
  cache.n = cache.n + #keys
end

-- The wheel's buckets this Lua state indexed (see indexed_of).
local wheel_indexed = {n = 0, by = {}}

-- A new pusher for one call: the items held back, in flat arrays (a table
-- per bucket would cost more than the item: items of random delays seldom
-- share a bucket within a call).
local function wheel_pusher()
  return {listed = {}, K = {}, E = {}, I = {}, IK = {}, S = {}, A = {}, n = 0}
end

-- Holds back the item (id, payload, due; ik its index key, h its index
-- bucket) for its bucket; wheel_flush writes it.
local function wheel_add(w, due, h, ik, id, payload)
  local k = math.floor(due / WHEEL_MS)
  local off = due - k * WHEEL_MS
  local offs = wheel_offs[off]
  if not offs then
    offs = fmt(off)
    wheel_offs[off] = offs
  end
  local n = w.n + 1
  w.K[n], w.I[n], w.IK[n] = k, id, ik
  w.E[n] = record_v1(id, payload, offs .. '|' .. h .. '|')
  w.listed[k] = true
  w.n = n
end

-- Writes what w holds: the items grouped by bucket (offer order kept
-- within one: the sort key is bucket * WHEEL_RANK + place), an RPUSH per
-- bucket, each item's index entry (the push's reply gives the positions),
-- then one ZADD LT of the bucket index with the start of each bucket whose
-- list the push made (an RPUSH that replies with its own count) or that
-- this Lua state has not indexed before (wheel_indexed).
local function wheel_flush(P, w)
  local n = w.n
  if n == 0 then return end
  local K, E, S, A = w.K, w.E, w.S, w.A
  for j = 1, n do S[j] = K[j] * WHEEL_RANK + j end
  for j = n + 1, #S do S[j] = nil end
  table.sort(S)
  local ix = indexed_of(wheel_indexed, P, n, WHEEL_NAMES)
  local z, keys, x = {}, {}, 1
  while x <= n do
    local k = K[S[x] % WHEEL_RANK]
    local na, y = 0, x
    while y <= n do
      local j = S[y] % WHEEL_RANK
      if K[j] ~= k then break end
      na = na + 1
      A[na] = E[j]
      y = y + 1
    end
    local ks = bucket_name(k)
    local base = kcall(P, 'RPUSH', P .. 'b:' .. ks, unpack(A, 1, na)) - na
    for q = 0, na - 1 do
      local j = S[x + q] % WHEEL_RANK
      id_set(P, w.IK[j], w.I[j], wheel_ref(k, base + q))
    end
    if base == 0 or not ix[k] then
      z[#z + 1], z[#z + 2] = fmt(k * WHEEL_MS), ks
      keys[#keys + 1] = k
    end
    x = y
  end
  if #z > 0 then kcall(P, 'ZADD', wheel_index(P), 'LT', unpack(z)) end
  note_indexed(wheel_indexed, ix, keys)
  w.n = 0
end
