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
-- Keys (docs/key-layout.md): P..'m:'..due LIST, entries '<h>|<record>' (h
-- the id's index bucket, record a version 1 record), appended and never cut
-- until the list is deleted whole; P..'mz' ZSET, member and score the due
-- time, written by the push that makes the list; counters field 'mcur' =
-- '<due>:<n>' while a list is moved in parts (its first n entries are
-- ready).
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

local NEAR_POS = 100000 -- places with a numeric index entry (see near_ref)

-- Due times as digit strings, kept from call to call as the wheel keeps its
-- bucket names (lib/65_wheel.lua), and their 13-digit padded forms.
local NEAR_NAMES = 16384
local near_names, near_pads, near_named = {}, {}, 0
local function near_name(d)
  local s = near_names[d]
  if not s then
    if near_named >= NEAR_NAMES then near_names, near_pads, near_named = {}, {}, 0 end
    s = fmt(d)
    near_names[d], near_pads[d], near_named = s, string.rep('0', 13 - #s) .. s, near_named + 1
  end
  return s
end

local function near_key(P, ds) return P .. 'm:' .. ds end
local function near_index(P) return P .. 'mz' end

-- The id index entry of the item at pos of the list of due time d: the
-- 19-digit negative integer -8<d, 13 digits><pos, 5 digits>, which the hash
-- keeps as a 64-bit integer (8 bytes, not 20), and which no slot score
-- (never negative) and no wheel reference (17 characters at most) can be;
-- 'm<d>.<pos>' past NEAR_POS places. Built as text: the value is above
-- 2^53, which a Lua number would round. An older delayq reads neither: the
-- id counts as absent there (the protocol's minor 2, lua/protocol.lua).
local function near_ref(d, pos)
  near_name(d)
  if pos < NEAR_POS then return '-8' .. near_pads[d] .. string.format('%05d', pos) end
  return 'm' .. near_names[d] .. '.' .. fmt(pos)
end

-- An id index entry as (due time d, pos) if it names a list entry, else nil.
local function near_ref_of(s)
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

-- A list entry: (index bucket h, record, id), or nil and why it does not
-- decode.
local function near_entry_of(e)
  local h, at = string.match(e, '^(%d+)|()')
  if not h or #h > 5 then return nil, 'undecodable near entry' end
  h = tonumber(h)
  if h >= ID_BUCKETS then return nil, 'near entry with a bucket out of range' end
  local rec = string.sub(e, at)
  local _, _, id = v1_head(rec)
  if not id then return nil, 'near entry with an undecodable record' end
  return h, rec, id
end

-- The list moved in parts and the count of its entries already ready (the
-- counters' 'mcur'), or nil, 0. Read only.
local function near_cursor(P)
  local cur = redis.pcall('HGET', P .. 'n', 'mcur')
  if type(cur) ~= 'string' then return nil, 0 end
  local cd, cn = string.match(cur, '^(%d+):(%d+)$')
  return cd, cn and #cn <= 9 and tonumber(cn) or 0
end

-- The record of id where its index entry (d, pos) points, or nil when it
-- is not there (a planted or dangling entry, or one already moved). Read
-- only.
local function near_record(P, id, d, pos)
  local ds = near_name(d)
  local e = redis.pcall('LINDEX', near_key(P, ds), fmt(pos))
  if type(e) ~= 'string' or e == '' then return nil end
  local h, rec, eid = near_entry_of(e)
  if not h or eid ~= id then return nil end
  local cd, cn = near_cursor(P)
  if cd == ds and pos < cn then return nil end
  return rec
end

-- An id whose index entry (at ik) names its live entry in a list: its due
-- time, record and place in the list; else nil. Read only.
local function id_near_in(P, ik, id)
  local d, pos = near_ref_of(redis.pcall('HGET', ik, id))
  if not d then return nil end
  local rec = near_record(P, id, d, pos)
  if not rec then return nil end
  return d, rec, pos
end

-- Makes the entry at pos of due time d's list a tombstone (''), which the
-- transfer skips: the item was cancelled or replaced (its index entry goes
-- or changes with it). The caller found the entry there (near_record).
local function near_bury(P, d, pos)
  redis.call('LSET', near_key(P, near_name(d)), fmt(pos), '')
end

-- The earliest due time of a list (the first mz score), or nil. A planted
-- member whose score is no time counts as due now (the transfer then drops
-- it). Read only.
local function near_first(P)
  local f = redis.pcall('ZRANGE', near_index(P), '0', '0', 'WITHSCORES')
  if type(f) ~= 'table' or not f[2] then return nil end
  local s = tonumber(f[2])
  if not s or s ~= s then return 0 end
  return math.min(math.max(math.floor(s), 0), DUE_MAX)
end

-- Offers --------------------------------------------------------------------

local NEAR_RANK = 1048576 -- above the entries of a call (sort keys)

-- A new pusher for one call: the items held back, in flat arrays.
local function near_pusher()
  return {D = {}, E = {}, I = {}, IK = {}, S = {}, A = {}, n = 0}
end

-- Holds back the item (id, payload, due d; ik its index key, h its index
-- bucket) for its list; near_flush writes it.
local function near_add(w, d, h, ik, id, payload)
  local n = w.n + 1
  w.D[n], w.I[n], w.IK[n] = d, id, ik
  w.E[n] = record_v1(id, payload, h .. '|')
  w.n = n
end

-- Writes what w holds: the items grouped by due time (offer order kept
-- within one: the sort key is (due - the call's lowest) * NEAR_RANK +
-- place), an RPUSH per due time, each item's index entry (the push's reply
-- gives the places), then one ZADD of the index with each due time whose
-- list the push made (an RPUSH that replies with its own count).
local function near_flush(P, w)
  local n = w.n
  if n == 0 then return end
  local D, E, S, A = w.D, w.E, w.S, w.A
  local low = D[1]
  for j = 2, n do if D[j] < low then low = D[j] end end
  for j = 1, n do S[j] = (D[j] - low) * NEAR_RANK + j end
  for j = n + 1, #S do S[j] = nil end
  table.sort(S)
  local z, x = {}, 1
  while x <= n do
    local d = D[S[x] % NEAR_RANK]
    local na, y = 0, x
    while y <= n do
      local j = S[y] % NEAR_RANK
      if D[j] ~= d then break end
      na = na + 1
      A[na] = E[j]
      y = y + 1
    end
    local ds = near_name(d)
    local base = kcall(P, 'RPUSH', P .. 'm:' .. ds, unpack(A, 1, na)) - na
    for q = 0, na - 1 do
      local j = S[x + q] % NEAR_RANK
      id_set(P, w.IK[j], w.I[j], near_ref(d, base + q))
    end
    if base == 0 then z[#z + 1], z[#z + 2] = ds, ds end
    x = y
  end
  if #z > 0 then kcall(P, 'ZADD', near_index(P), unpack(z)) end
  w.n = 0
end

-- The transfer ----------------------------------------------------------------

-- Moves the entries of due time ds's list (d its number) into out as ready
-- entries from its place from on, at most want of them (live or not); sets
-- aside (into bad) the entries that do not decode; skips tombstones and
-- entries the index no longer points at; points each moved item's index
-- entry at its ready item. nows, dues, lat: the transfer's (see
-- ready_entry_v1, lateness_add). Returns the entries taken, the items moved
-- and whether the list is done (then deleted, and out of the index); a list
-- of another type is renamed away and counts as done.
local function near_move(P, d, ds, from, want, now, nows, dues, out, bad, lat)
  local key = near_key(P, ds)
  local es = redis.pcall('LRANGE', key, fmt(from), fmt(from + want))
  if type(es) ~= 'table' or es.err then
    quarantine(P, key, redis.call('TYPE', key)['ok'])
    redis.call('ZREM', near_index(P), ds)
    return 0, 0, true
  end
  local done = #es <= want
  local took = done and #es or want
  local moved, late, score = 0, now - d, fmt(d * ORD)
  for x = 1, took do
    local e = es[x]
    if e ~= '' then
      local h, rec, id = near_entry_of(e)
      local why = not h and rec or nil
      local re = not why and id_bytes_ok(id) and ready_entry_v1(rec, d, nows, dues)
      if not re then
        bad[#bad + 1] = aside_entry((why or 'undecodable near entry') .. ' in ' .. key, '', e)
      else
        local ik = P .. 'i:' .. nstr(h)
        if redis.pcall('HGET', ik, id) == near_ref(d, from + x - 1) then
          out[#out + 1] = re
          id_set(P, ik, id, score)
          lateness_add(lat, late)
          moved = moved + 1
        end
      end
    end
  end
  if done then
    redis.call('DEL', key)
    redis.call('ZREM', near_index(P), ds)
  end
  return took, moved, done
end
