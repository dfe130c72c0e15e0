-- lua/lib/67_near.lua: the near lists (part of the scripts' shared code: see 00_base.lua).
-- The near lists --------------------------------------------------------------
--
-- Why: an offer due sooner than the wheel's horizon (WHEEL_NEAR, 40 s) went
-- inside the slots: its slot looked up, its millisecond's latest ordinal
-- read, the slot's size read, a ZADD of its own and a split now and then,
-- four to five calls an offer where the wheel makes one and a half; delays
-- of 0 to 10 s made 0.4 of one delay's offers/s (docs/benchmarks.md, issue
-- 42). Such an offer instead appends its item to the list of its
-- millisecond: a list is in offer order already, so there is no ordinal to
-- read and no slot to find. The transfer moves a millisecond's list whole
-- into the ready list once it is due, after the slots' records of that
-- millisecond (lua/transfer.lua).
--
-- Keys (docs/key-layout.md): P..'m:'..due LIST, entries <h><record> (h
-- the id's index bucket in two bytes, see near.head; record a version 1
-- record), appended and never cut
-- until the list is deleted whole; an index in two levels, written by the
-- push that makes the list: P..'mg:'..g ZSET, the lists of group g (due
-- times g * near.G .. g * near.G + near.G - 1), member and score the due
-- time, and P..'mz' ZSET, member g, score the group's earliest due time
-- (exact: offers lower it, the transfer raises it). Why two levels: one
-- index of due times is a skiplist past 128 members, about 105 bytes a
-- list (6 bytes an item offered with delays of 0 to 10 s, as much as the
-- slot index costs, twice); a group's index stays a listpack, about 16
-- bytes a list. Counters field 'mcur' = '<due>:<n>' while a list is moved
-- in parts (its first n entries are ready).
--
-- An item in a list has the id index entry near_ref(due, pos) (pos: its
-- entry's place in the list, from 0). Cancel and replace make its entry a
-- tombstone ('', near_bury), which the transfer skips; the transfer moves
-- only the entries the index points at, and points the index at the ready
-- item (its due time's score, as an offer straight to the ready list does).
--
-- Offer order among equal due times holds because every record of a
-- millisecond in the slots or the wheel was offered 40 s or more before it
-- (an offer goes to a list when due sooner than that, to the slots or the
-- wheel otherwise), so before every entry of its list; the transfer moves
-- a millisecond's slot records first, and waits for the wheel's cascade.
-- A nack's or an expired lease's retry goes to the slots as before: among
-- items due in one millisecond, a retry may come before a fresh offer.
--
-- Its functions, constants and caches live in the table near (near.first,
-- near.move, ...): the scripts' main chunk may hold at most 200 locals, and
-- the shared code is close to that.
local near = {}
near.POS = 100000 -- places with a numeric index entry (see near.ref)

-- A due time's digits padded to 13 (the id index entry's width). Not kept
-- from call to call: a table of thousands of strings costs Lua's
-- collector more than the formatting (docs/benchmarks.md, issue 42).
function near.pad(ds) return string.rep('0', 13 - #ds) .. ds end


function near.key(P, ds) return P .. 'm:' .. ds end
function near.index(P) return P .. 'mz' end
function near.group_key(P, gs) return P .. 'mg:' .. gs end

-- A group's span in ms, so its index holds at most 32 lists: a listpack
-- (zset-max-listpack-entries is 128), which a ZADD searches from its start:
-- offers 7 % cheaper than with 128 a group, and no more bytes (32 ms is 312
-- groups for 10 s of due times: docs/benchmarks.md, issue 42).
near.G = 32

-- The group number of a group index member, or nil when it names none.
function near.group_of(gs)
  local g = uint_of(gs, 13, math.floor(DUE_MAX / near.G))
  if not g or fmt(g) ~= gs then return nil end
  return g
end

-- The due time of a group's member if it names a list of group g, else nil.
function near.due_of(ds, g)
  local d = uint_of(ds, 13, DUE_MAX)
  if not d or fmt(d) ~= ds or math.floor(d / near.G) ~= g then return nil end
  return d
end

-- For a walk through the index key (a zset scored by due times) from score
-- lo that stopped after off members: the score d * ORD + ORD - 1 of the
-- next member's due time, the lowest an item not looked at may have (as
-- list.lua's cursor counts them); math.huge when none is left. Also
-- list.lua's for the wheel's index. Read only.
function near.next_bound(key, lo, off)
  local zr = redis.pcall('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', nstr(off), '1')
  local low = type(zr) == 'table' and tonumber(zr[2])
  if not low then return math.huge end
  return math.min(math.max(math.floor(low), 0), DUE_MAX) * ORD + ORD - 1
end

-- Walks the lists of due time lo or more in due order, calling visit(ds, d)
-- (ds: the digits) till it returns a value, which it returns; math.huge
-- once none is left. Reads at most 64 groups of 16 at a time (planted
-- members, most likely, past that: the rest waits), then returns the score
-- d * ORD + ORD - 1 of the next group's earliest due time (see list.lua's
-- cursor). Members that name no group or list are passed over. Read only.
function near.walk(P, lo, visit)
  local mz, off = near.index(P), 0
  -- A group holding lo or more has its earliest due time past lo - G.
  local from = fmt(math.max(lo - near.G + 1, 0))
  for _ = 1, 64 do
    local gr = redis.pcall('ZRANGEBYSCORE', mz, from, '+inf', 'LIMIT', nstr(off), '16')
    if type(gr) ~= 'table' or gr.err or not gr[1] then return math.huge end
    for _, gs in ipairs(gr) do
      local g = near.group_of(gs)
      local ms = g and redis.pcall('ZRANGEBYSCORE', near.group_key(P, gs), fmt(lo), '+inf', 'LIMIT', '0', '256')
      if type(ms) == 'table' and not ms.err then
        for _, ds in ipairs(ms) do
          local d = near.due_of(ds, g)
          if d then
            local stop = visit(ds, d)
            if stop then return stop end
          end
        end
      end
    end
    off = off + 16
  end
  return near.next_bound(mz, from, off)
end

-- The id index entry of the item at pos of the list of due time d: the
-- 19-digit negative integer -8<d, 13 digits><pos, 5 digits>, which the hash
-- keeps as a 64-bit integer (8 bytes, not 20), and which no slot score
-- (never negative) and no wheel reference (17 characters at most) can be;
-- 'm<d>.<pos>' past near.POS places. Built as text: the value is above
-- 2^53, which a Lua number would round. An older delayq reads neither: the
-- id counts as absent there (the protocol's minor 2, lua/protocol.lua).
function near.ref(d, pos)
  local ds = fmt(d)
  local rf = near.refs(ds, pos)
  if rf then return string.format(rf, pos) end
  return 'm' .. ds .. '.' .. fmt(pos)
end

-- The format (string.format, the place its one argument) of the numeric
-- index entries of due time ds's list up to place last, or nil when last
-- is past them: a list's entries share it.
function near.refs(ds, last)
  if last >= near.POS then return nil end
  return '-8' .. near.pad(ds) .. '%05d'
end

-- An id index entry as (due time d, pos) if it names a list entry, else nil.
function near.ref_of(s)
  if not s then return nil end
  local c, d, pos = string.byte(s, 1), nil, nil
  if c == 45 then -- '-'
    if #s ~= 20 then return nil end
    d, pos = string.match(s, '^%-8(%d%d%d%d%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d)$')
  elseif c == 109 then -- 'm'
    d, pos = string.match(s, '^m(%d+)%.(%d+)$')
    if d and (#d > 13 or #pos > 9) then return nil end
  end
  if not d then return nil end
  d, pos = tonumber(d), tonumber(pos)
  if d > DUE_MAX then return nil end
  return d, pos
end

-- The head of a list entry for index bucket h (a number or its digits):
-- h in two bytes, high first. Two bytes, not h's digits and a '|' (up to 6
-- bytes): 4 bytes an item less, about what an item's share of its list's
-- key costs at 20 items a millisecond (docs/benchmarks.md, issue 42).
function near.head(h)
  h = tonumber(h)
  return string.char(math.floor(h / 256), h % 256)
end

-- A list entry: (index bucket h, record, id), or nil and why it does not
-- decode.
function near.entry_of(e)
  local b1, b2 = string.byte(e, 1, 2)
  if not b2 then return nil, 'undecodable near entry' end
  local h = b1 * 256 + b2
  if h >= ID_BUCKETS then return nil, 'near entry with a bucket out of range' end
  local rec = string.sub(e, 3)
  local _, _, id = v1_head(rec)
  if not id then return nil, 'near entry with an undecodable record' end
  return h, rec, id
end

-- The list moved in parts and the count of its entries already ready (the
-- counters' 'mcur'), or nil, 0. Read only.
function near.cursor(P)
  return near.cursor_of(redis.pcall('HGET', P .. 'n', 'mcur'))
end

-- The (due time digits, count) a counters' 'mcur' value cur names, or nil,
-- 0 (none, or one that does not parse).
function near.cursor_of(cur)
  if type(cur) ~= 'string' then return nil, 0 end
  local cd, cn = string.match(cur, '^(%d+):(%d+)$')
  return cd, cn and #cn <= 9 and tonumber(cn) or 0
end

-- The record of id where its index entry (d, pos) points, or nil when it
-- is not there (a planted or dangling entry, or one already moved). Read
-- only.
function near.record(P, id, d, pos)
  local ds = fmt(d)
  local e = redis.pcall('LINDEX', near.key(P, ds), fmt(pos))
  if type(e) ~= 'string' or e == '' then return nil end
  local h, rec, eid = near.entry_of(e)
  if not h or eid ~= id then return nil end
  local cd, cn = near.cursor(P)
  if cd == ds and pos < cn then return nil end
  return rec
end

-- An id whose index entry (at ik) names its live entry in a list: its due
-- time, record and place in the list; else nil. Read only.
function near.id_in(P, ik, id)
  local d, pos = near.ref_of(redis.pcall('HGET', ik, id))
  if not d then return nil end
  local rec = near.record(P, id, d, pos)
  if not rec then return nil end
  return d, rec, pos
end

-- Makes the entry at pos of due time d's list a tombstone (''), which the
-- transfer skips: the item was cancelled or replaced (its index entry goes
-- or changes with it). The caller found the entry there (near_record).
function near.bury(P, d, pos)
  redis.call('LSET', near.key(P, fmt(d)), fmt(pos), '')
end

-- The earliest due time of a list (the first mz score), or nil. A planted
-- member whose score is no time counts as due now (the transfer then drops
-- it). Read only.
function near.first(P)
  local f = redis.pcall('ZRANGE', near.index(P), '0', '0', 'WITHSCORES')
  if type(f) ~= 'table' or not f[2] then return nil end
  local s = tonumber(f[2])
  if not s or s ~= s then return 0 end
  return math.min(math.max(math.floor(s), 0), DUE_MAX)
end

-- The earliest due time of a list with a live entry (not a tombstone) from
-- the cursor on, for stats and metrics: near.first counts a list whose
-- items were all cancelled until the transfer drops it. Looks at 8 lists
-- at most, each up to 4,096 entries; past that a list's due time stands (a
-- lower bound). nil: no list. Read only.
function near.first_due(P)
  local cd, cn = near.cursor(P)
  local looked, found = 0, nil
  near.walk(P, 0, function(ds, d)
    looked = looked + 1
    if looked > 8 then
      found = d
      return true
    end
    local from = cd == ds and cn or 0
    local es = redis.pcall('LRANGE', near.key(P, ds), fmt(from), fmt(from + 4095))
    if type(es) ~= 'table' or es.err or #es >= 4096 then
      found = d
      return true
    end
    for x = 1, #es do
      if es[x] ~= '' then
        found = d
        return true
      end
    end
    return nil
  end)
  return found
end

-- Offers --------------------------------------------------------------------

-- The lists this Lua state indexed, by due time (see indexed_of in
-- lib/65_wheel.lua), at most near.INDEXED. A list deleted and made again is
-- indexed by the push that makes it, whatever this says.
near.INDEXED = 65536
near.indexed = {n = 0, by = {}}

near.RANK = 1048576 -- above the entries of a call (sort keys)

-- A new pusher for one call: the items held back, in flat arrays.
function near.pusher()
  return {D = {}, E = {}, I = {}, IK = {}, S = {}, A = {}, n = 0}
end

-- Holds back the item (id, payload, due d; ik its index key, h its index
-- bucket) for its list; near_flush writes it.
function near.add(w, d, h, ik, id, payload)
  local n = w.n + 1
  w.D[n], w.I[n], w.IK[n] = d, id, ik
  w.E[n] = record_v1(id, payload, near.head(h))
  w.n = n
end

-- Writes what w holds: the items grouped by due time (offer order kept
-- within one: the sort key is (due - the call's lowest) * near.RANK +
-- place), an RPUSH per due time, each item's index entry (the push's reply
-- gives the places), then a ZADD per group of the lists pushed to and one
-- of the group index. A list is indexed when the push made it (an RPUSH
-- that replies with its own count) and when this Lua state has not indexed
-- it before (near.indexed): a list without its index entry (planted, or an
-- OOM between two writes) would never be moved, and a ZADD of a list
-- already there costs an offer 20 % (the group's listpack searched:
-- docs/benchmarks.md, issue 42). A list the push made is new: a cursor
-- naming its due time is left from another and goes (its list was deleted
-- by something else).
function near.flush(P, w)
  local n = w.n
  if n == 0 then return end
  local D, E, S, A, IK, I = w.D, w.E, w.S, w.A, w.IK, w.I
  local RANK, pcall, fmt5 = near.RANK, redis.pcall, string.format
  local low = D[1]
  for j = 2, n do if D[j] < low then low = D[j] end end
  for j = 1, n do S[j] = (D[j] - low) * RANK + j end
  for j = n + 1, #S do S[j] = nil end
  table.sort(S)
  local ix = indexed_of(near.indexed, P, n, near.INDEXED)
  local z, groups, keys, made, x = {}, {}, {}, nil, 1
  while x <= n do
    local d = D[S[x] % RANK]
    local na, y = 0, x
    while y <= n do
      local j = S[y] % RANK
      if D[j] ~= d then break end
      na = na + 1
      A[na] = E[j]
      y = y + 1
    end
    local ds = fmt(d)
    local key = P .. 'm:' .. ds
    -- The hot path: the calls made directly (kcall and id_set, which
    -- renames a key of another type, only when one fails).
    local len = pcall('RPUSH', key, unpack(A, 1, na))
    if type(len) ~= 'number' then len = kcall(P, 'RPUSH', key, unpack(A, 1, na)) end
    local base = len - na
    local refh = near.refs(ds, len - 1)
    for q = 0, na - 1 do
      local j = S[x + q] % RANK
      local ref = refh and fmt5(refh, base + q) or near.ref(d, base + q)
      local r = pcall('HSET', IK[j], I[j], ref)
      if r ~= 0 and r ~= 1 then id_set(P, IK[j], I[j], ref) end
    end
    if base == 0 then
      made = made or {}
      made[ds] = true
    end
    if base == 0 or not ix[d] then
      -- The lists come in due order: a group's first is its earliest.
      local g = math.floor(d / near.G)
      local gz = z[g]
      if not gz then
        gz = {}
        z[g] = gz
        groups[#groups + 1] = g
      end
      gz[#gz + 1], gz[#gz + 2] = ds, ds
      keys[#keys + 1] = d
    end
    x = y
  end
  local top = {}
  for q, g in ipairs(groups) do
    local gs = fmt(g)
    local gz = z[g]
    kcall(P, 'ZADD', near.group_key(P, gs), unpack(gz))
    top[2 * q - 1], top[2 * q] = gz[1], gs
  end
  -- LT: a group's score only falls (its earliest list).
  if #top > 0 then kcall(P, 'ZADD', near.index(P), 'LT', unpack(top)) end
  -- Indexed: noted once both writes are done.
  note_indexed(near.indexed, ix, keys)
  if made then
    local cd = near.cursor(P)
    if cd and made[cd] then redis.call('HDEL', P .. 'n', 'mcur') end
  end
  w.n = 0
end

-- The transfer ----------------------------------------------------------------

-- A transfer's state for the lists it moves: the lists done (deleted by
-- near.drop; the caller takes them out of their group's index), the id
-- index keys by bucket.
function near.mover()
  return {keys = {}, iks = {}}
end

-- Deletes the lists m has done.
function near.drop(m)
  if #m.keys == 0 then return end
  redis.call('DEL', unpack(m.keys))
  m.keys = {}
end

-- After the transfer took the lists gone (due time digits) of group gs out
-- of it: the group's index entry follows its earliest list left, or goes
-- with the group.
function near.regroup(P, gs, gone)
  local gk = near.group_key(P, gs)
  if #gone > 0 then redis.call('ZREM', gk, unpack(gone)) end
  local f = redis.call('ZRANGE', gk, '0', '0', 'WITHSCORES')
  if f[1] then
    redis.call('ZADD', near.index(P), f[2], gs)
  else
    redis.call('DEL', gk)
    redis.call('ZREM', near.index(P), gs)
  end
end

-- Moves the entries of due time ds's list (d its number) into out as ready
-- entries from its place from on, at most want of them (live or not); sets
-- aside (into bad) the entries that do not decode; skips tombstones and
-- entries the index no longer points at; points each moved item's index
-- entry at its ready item. m: near_mover's state (a list done goes into it
-- for near_drop); nows, lat: the transfer's (see ready_entry_v1,
-- lateness_add). Returns the entries taken and whether the list is done; a
-- list of another type is renamed away and counts as done.
function near.move(P, m, d, ds, from, want, now, nows, out, bad, lat)
  local key = near.key(P, ds)
  local es = redis.pcall('LRANGE', key, fmt(from), fmt(from + want))
  if type(es) ~= 'table' or es.err then
    quarantine(P, key, redis.call('TYPE', key)['ok'])
    return 0, true
  end
  local done = #es <= want
  local took = done and #es or want
  local late, score, iks = now - d, fmt(d * ORD), m.iks
  local head = '1|' .. ds .. '|' .. nows
  local refh = near.refs(ds, from + took - 1)
  local find, sub, byte, fmt5 = string.find, string.sub, string.byte, string.format
  for x = 1, took do
    local e = es[x]
    if e ~= '' then
      -- near.entry_of without its patterns (each costs more than the rest
      -- of the item's parse, as in the wheel's cascade): two bytes of h,
      -- then '1|idlen|id..'.
      local b1, b2, v, bar = byte(e, 1, 4)
      local h = bar == 124 and v == 49 and b1 * 256 + b2
      local p3 = h and h < ID_BUCKETS and find(e, '|', 5, true)
      local il = p3 and p3 <= 8 and tonumber(sub(e, 5, p3 - 1))
      local id = il and il == il and il >= 1 and il <= ID_MAX and il % 1 == 0 and p3 + il <= #e and
                 sub(e, p3 + 1, p3 + il)
      if not id or not id_bytes_ok(id) then
        local _, why = near.entry_of(e)
        bad[#bad + 1] = aside_entry((why or 'undecodable near entry') .. ' in ' .. key, '', e)
      else
        local ik = iks[h]
        if not ik then
          ik = P .. 'i:' .. nstr(h)
          iks[h] = ik
        end
        local pos = from + x - 1
        local ref = refh and fmt5(refh, pos) or near.ref(d, pos)
        if redis.pcall('HGET', ik, id) == ref then
          -- The record's ready entry: its version, the two times, the rest.
          out[#out + 1] = head .. sub(e, 4)
          id_set(P, ik, id, score)
          lateness_add(lat, late)
        end
      end
    end
  end
  if done then m.keys[#m.keys + 1] = key end
  return took, done
end
