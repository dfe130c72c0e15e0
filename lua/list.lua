-- list.lua: one page of a queue's pending or in-flight items, read only.
-- KEYS[1] slot index; ARGV[1] key prefix, ARGV[2] 'pending' or 'inflight',
-- ARGV[3] cursor ('' for the first page, else '<score>:<skip>' as a page
-- returned it), ARGV[4] limit (1..1000), ARGV[5] (optional) the most
-- payload bytes an item brings: longer payloads are cut to that many here,
-- so the rest never leaves Redis (0 or absent: whole), ARGV[6] (optional,
-- with ARGV[5]) '1': each in-flight item also brings its holder, '' for
-- none (see lib/75_holders.lua).
-- Returns {next cursor or '', then per item: time, attempts, entry, and
-- with ARGV[5] the payload's whole length, with ARGV[6] the holder}: time
-- is the due time (pending) or the lease's end (in flight), in ms; entry is
-- the item as a ready entry (its id, due time, last error and payload;
-- src/util/codec.c decodes it). Pending items come by due time and in-flight ones
-- by lease end: both share the slots, ordered by score. Pending items also
-- wait in the timing wheel's buckets (lib/65_wheel.lua) and in the near
-- lists (lib/67_near.lua): a bucket entry or a near entry of due time d
-- counts as the score d * ORD + ORD - 1, and among the items of that score
-- the slot records come first, then the bucket entries, then the near
-- entries: the order of delivery (the cascade puts a millisecond's bucket
-- entries after its slot records, and the transfer moves its near list
-- after both). The page merges all three in. The cursor's skip counts the
-- items of its score already listed: slot records first, then bucket
-- entries by position, then near entries by place (a near entry at place
-- pos of its list counts as the score's slot records and bucket entries
-- plus pos + 1, tombstones included, so a page resumes inside a list
-- without reading its head again). A page reads at most SCAN_MAX records,
-- WHEEL_SCAN bucket entries (but a bucket whole: its entries are in no due
-- order) and NEAR_SCAN near entries, so a page of one state among many of
-- the other, or past many tombstones, may hold fewer than limit items and
-- still have a next cursor. Records that do not decode are skipped (the
-- scheduler sets them aside when they fall due).
local zs, P, want = KEYS[1], ARGV[1], ARGV[2]
local limit = tonumber(ARGV[4])
local cut = ARGV[5] and tonumber(ARGV[5])
local cutting = cut and cut > 0
local holders = ARGV[6] == '1' and cut ~= nil
if (want ~= 'pending' and want ~= 'inflight') or not limit or limit < 1 or limit > 1000 or
   (ARGV[5] and (not cut or cut < 0 or cut ~= math.floor(cut))) then
  return redis.error_reply('ERR delayq:proto malformed list arguments')
end
local err = require_type(zs, 'zset')
if err then return err end
local SCAN_MAX = 4000
local start, skip = -1, 0
if ARGV[3] ~= '' then
  local s, k = string.match(ARGV[3], '^(%d+):(%d+)$')
  start, skip = s and #s <= 16 and tonumber(s), k and #k <= 6 and tonumber(k)
  if not start or not skip or start > SCORE_MAX then
    return redis.error_reply('ERR delayq:input bad cursor')
  end
end
local now = server_now_ms()

-- With a cut, a record of one item (version 1 or 2) is read without a copy
-- of its whole payload: copying a string of megabytes costs Redis more
-- than reading it. The item is as parse_record's, its payload cut, with
-- whole its payload's whole length; nil for other records.
local function item_cut(rec, score)
  local v = string.byte(rec, 1)
  if v == 49 then -- '1'
    local il, pos, id = v1_head(rec)
    if not il then return nil end
    local p0 = pos + il
    return {attempts = 0, max = 0, due = math.floor(score / ORD), token = '', err = '', id = id,
            payload = string.sub(rec, p0, p0 + cut - 1), whole = #rec - p0 + 1}
  elseif v == 50 then -- '2'
    local a, m, d, il, tl, el, pos, id = v2_head(rec)
    if not a then return nil end
    local t0 = pos + il
    local p0 = t0 + tl + el
    return {attempts = a, max = m, due = d, id = id, token = string.sub(rec, t0, t0 + tl - 1),
            err = string.sub(rec, t0 + tl, p0 - 1), payload = string.sub(rec, p0, p0 + cut - 1),
            whole = #rec - p0 + 1}
  end
  return nil
end

-- What a record lists, one element per item (false for one that does not
-- decode), in a fixed order: a record holds one item, a lease record one
-- per block left (see lib/40_leases.lua). The cursor counts
-- these items, so a page may end inside a lease record.
local function items_of(rec, score)
  if not is_lease_record(rec) then
    return {(cutting and item_cut(rec, score)) or parse_record(rec, score) or false}
  end
  local b = batch_parse(rec)
  if not b then return {false} end
  local units = {}
  for j = 1, b.n do
    if b.len[j] > 0 then units[#units + 1] = batch_item(rec, b, j, score) or false end
  end
  return units
end
-- The slots' part: every unit read, in order ({score, item}), into U.
local U, n, scanned = {}, 0, 0
local last, last_run = nil, 0 -- the last score read, and how many records of it were read
-- With a cut, a page also ends once it has read SCAN_BYTES of records
-- (Redis copies each record it reads whole), reading a slot in batches
-- that grow from 4 records, so a page of large payloads costs Redis a few
-- MB, not limit times their size.
local SCAN_BYTES = 4 * 1024 * 1024
local bytes, bytes_max, batch, off = 0, cutting and SCAN_BYTES or math.huge, cutting and 4 or 500, 0
-- The slot holding start, or the first one (a cursor a bucket entry gave
-- may lie below every bound).
local name = start >= 0 and slot_at(zs, fmt(start)) or redis.call('ZRANGE', zs, '0', '0')[1]
local from = start >= 0 and fmt(start) or '-inf'
for _ = 1, 1000 do
  if not name or n >= limit or scanned >= SCAN_MAX or bytes >= bytes_max then break end
  local ask = math.min(SCAN_MAX - scanned, batch)
  local recs = redis.pcall('ZRANGEBYSCORE', slot_key(P, name), from, '+inf', 'WITHSCORES', 'LIMIT', nstr(off),
                           nstr(ask))
  if type(recs) ~= 'table' or recs.err then recs = {} end
  local i = 1
  while i < #recs and n < limit and bytes < bytes_max do
    local rec, score = recs[i], tonumber(recs[i + 1])
    local units = items_of(rec, score)
    local stopped = false
    for _, r in ipairs(units) do
      if n >= limit then
        stopped = true -- inside a lease record: the cursor resumes in it
        break
      end
      if score == last then last_run = last_run + 1 else last, last_run = score, 1 end
      U[#U + 1] = {score, r}
      if (score ~= start or last_run > skip) and r and (r.token ~= '') == (want == 'inflight') then n = n + 1 end
    end
    if stopped then break end
    scanned = scanned + 1
    bytes = bytes + #rec
    i = i + 2
  end
  -- Stopped inside the slot: the cursor resumes there.
  if i < #recs or n >= limit or scanned >= SCAN_MAX or bytes >= bytes_max then break end
  if #recs / 2 >= ask then
    -- The slot may hold more than was asked: without a cut the cursor
    -- resumes there; with one, the next batch of it is read.
    if not cutting then break end
    off, batch = off + ask, math.min(batch * 4, 500)
  else
    -- This slot is done: the next one by bound.
    local bound = redis.call('ZSCORE', zs, name)
    local nx = bound and redis.call('ZRANGEBYSCORE', zs, '(' .. bound, '+inf', 'LIMIT', '0', '1')
    name = nx and nx[1]
    from, off = '-inf', 0
  end
end
-- Every slot record below SH has been read (math.huge: all of them; with
-- none read, the listing ends here, as before the wheel).
local slots_done = not name
local SH = slots_done and math.huge or last or -1

-- The wheel's part ------------------------------------------------------------
-- Its live entries (the id index names them: see lib/65_wheel.lua) of
-- score start or more, by score, then position, as {score, position,
-- record} into W, read bucket by bucket in bucket order (bz scores lie
-- inside their buckets' ranges, so bz orders them too). Reading stops once
-- limit items past start are in hand, or before a bucket whose entries
-- all score SH or more, or once WHEEL_SCAN entries or SCAN_BYTES bytes are
-- read; WH is then the lowest score an entry not looked at may have
-- (math.huge: none), so the merge below takes no slot record past it. A
-- bucket is read whole (its entries are in offer order, not due order),
-- from its first entry the cascade did not take yet (the counters' bcur).
local WHEEL_SCAN = 4000
local W, WH = {}, math.huge

-- Reads bucket k from its entry first on, and adds its live entries of due
-- time d_lo or more to W in order, till need of them lie past start.
-- Each entry's due time alone is read first, and the entries are grouped
-- by it (in list order within a millisecond: a counting sort), so only the
-- entries W may take are decoded and checked against the id index.
-- Returns the entries read, the live ones past start added, the bytes
-- read, and (when need stopped it) the score of the first entry passed.
local function wheel_bucket(k, first, d_lo, need)
  local key = wheel_key(P, k)
  local len = redis.pcall('LLEN', key)
  if type(len) ~= 'number' then return 0, 0, 0 end -- another type: the cascade renames it
  local ents, by_off, wbytes = {}, {}, 0
  local off_lo = math.max(d_lo - k * WHEEL_MS, 0)
  for p = first, len - 1, 1000 do
    local es = redis.pcall('LRANGE', key, nstr(p), nstr(math.min(p + 999, len - 1)))
    if type(es) ~= 'table' or es.err then break end
    for x = 1, #es do
      local e = es[x]
      local n = #ents + 1
      ents[n], wbytes = e, wbytes + #e
      local off = tonumber(string.match(e, '^(%d%d?%d?%d?)|'))
      if off and off >= off_lo and off < WHEEL_MS then
        local g = by_off[off]
        if not g then
          g = {}
          by_off[off] = g
        end
        g[#g + 1] = n
      end
    end
  end
  local got, base = 0, k * WHEEL_MS
  for off = off_lo, WHEEL_MS - 1 do
    local g = by_off[off]
    if g then
      local s = (base + off) * ORD + ORD - 1
      for x = 1, #g do
        if got >= need then return #ents, got, wbytes, s end
        local pos = first + g[x] - 1
        local due, h, rec, id = wheel_entry_of(ents[g[x]], k)
        if due and redis.pcall('HGET', P .. 'i:' .. nstr(h), id) == wheel_ref(k, pos) then
          W[#W + 1] = {s, pos, rec}
          if s > start then got = got + 1 end
        end
      end
    end
  end
  return #ents, got, wbytes
end

-- Walks the members of the index key (a zset) scoring lo or more, by
-- score, 16 at a time, calling visit(member, score) (score: a number, or
-- nil) till it returns a score, which it returns. Past 1,024 members
-- (planted ones, most likely: the rest waits) it returns the score of the
-- items of the next member's due time; math.huge when none is left.
local function index_walk(key, lo, visit)
  local off = 0
  for _ = 1, 64 do
    local zr = redis.pcall('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', nstr(off), '16')
    if type(zr) ~= 'table' or zr.err or not zr[1] then return math.huge end
    for x = 1, #zr, 2 do
      local stop = visit(zr[x], tonumber(zr[x + 1]))
      if stop then return stop end
    end
    off = off + 16
  end
  return near.next_bound(key, lo, off)
end

local function wheel_read()
  local d_lo = start >= 0 and math.floor(start / ORD) or 0
  local k_lo, k_max = math.floor(d_lo / WHEEL_MS), math.floor(DUE_MAX / WHEEL_MS)
  local ck, cn = wheel_cursor(P)
  local read, got, wbytes = 0, 0, 0
  -- A bucket meeting [d_lo, ...] has its bz score at d_lo - WHEEL_MS + 1 or more.
  WH = index_walk(wheel_index(P), fmt(math.max(d_lo - WHEEL_MS + 1, 0)), function(m, low)
    if not low or low ~= low then return math.huge end
    low = math.floor(low)
    local k = uint_of(m, 11, k_max)
    -- A member that names no bucket, or scores outside its bucket: not
    -- the wheel's (the cascade drops or reaches it in its time).
    if not (k and fmt(k) == m and k >= k_lo and low >= k * WHEEL_MS and low < (k + 1) * WHEEL_MS) then return nil end
    local s = low * ORD + ORD - 1
    if s >= SH or got >= limit or (read > 0 and (read >= WHEEL_SCAN or wbytes >= SCAN_BYTES)) then return s end
    local r, g, b, stop = wheel_bucket(k, ck == m and cn or 0, d_lo, limit - got)
    read, got, wbytes = read + r, got + g, wbytes + b
    return stop
  end)
end

if want == 'pending' then wheel_read() end

-- The near lists' part --------------------------------------------------------
-- Their live entries (the id index names them: see lib/67_near.lua) of
-- score start or more as {score, rank, record} into N, list by list in due
-- order (near.walk: the groups, then their lists), each in list order;
-- rank: the entry's place among its score's items, as the cursor's skip
-- counts them (see the top). A list is read from its first entry the
-- transfer did not move yet (the counters' mcur), or from the cursor's
-- skip on, in pieces. Reading stops before a list whose score is SH or WH
-- or more (slot records or bucket entries of that score, or before it,
-- were not read, and they come first), once limit entries are in hand, or
-- once NEAR_SCAN entries or SCAN_BYTES bytes are read; NH is then the
-- lowest score an entry not looked at may have (math.huge: none). Stopped
-- inside a list after entries that are not live (tombstones), N ends with
-- the last one read as {score, rank, false}: the merge takes it without
-- listing it, so the next cursor passes them.
local NEAR_SCAN = 4000
local N, NH = {}, math.huge

-- How many slot records and bucket entries of each score that a near
-- entry may have (d * ORD + ORD - 1) U and W hold: those come before the
-- score's near entries.
local function firsts_by_score()
  local at = {}
  for _, t in ipairs({U, W}) do
    for x = 1, #t do
      local s = t[x][1]
      if s % ORD == ORD - 1 then at[s] = (at[s] or 0) + 1 end
    end
  end
  return at
end

-- Reads the list of due time d (ds its digits, s its score, base the items
-- of s before it) from place first on, adding its live entries to N, till
-- need of them are in hand or the page's budget (read and bytes so far) is
-- spent. Returns the entries read, the live ones added, the bytes read, and
-- whether it stopped before the list's end.
local function near_list(d, ds, s, base, first, need, read, nbytes)
  -- With a cut the pieces grow from 4 entries, as the slots' batches do.
  local key, got, p = near.key(P, ds), 0, first
  local piece = cutting and 4 or math.min(math.max(need, 4), 500)
  local r0, b0 = read, nbytes
  for _ = 1, 1000 do
    local es = redis.pcall('LRANGE', key, fmt(p), fmt(p + piece - 1))
    if type(es) ~= 'table' or es.err then break end -- another type: the transfer renames it
    local live = false
    for x = 1, #es do
      local e, pos = es[x], p + x - 1
      read, nbytes, live = read + 1, nbytes + #e, false
      if e ~= '' then
        local h, rec, id = near.entry_of(e)
        if h and redis.pcall('HGET', P .. 'i:' .. nstr(h), id) == near.ref(d, pos) then
          N[#N + 1] = {s, base + pos + 1, rec}
          got, live = got + 1, true
        end
      end
      if x < #es and got >= need then
        return read - r0, got, nbytes - b0, true
      end
    end
    if #es < piece then break end
    p = p + #es
    if got >= need or read >= NEAR_SCAN or nbytes >= SCAN_BYTES then
      if not live then N[#N + 1] = {s, base + p, false} end
      return read - r0, got, nbytes - b0, true
    end
    piece = math.min(piece * 4, 500)
  end
  return read - r0, got, nbytes - b0, false
end

local function near_read()
  local d_lo = start >= 0 and math.floor(start / ORD) or 0
  local cd, cn = near.cursor(P)
  local at = nil
  local read, got, nbytes = 0, 0, 0
  NH = near.walk(P, d_lo, function(m, d)
    local s = d * ORD + ORD - 1
    if s >= SH or s >= WH or got >= limit or (read > 0 and (read >= NEAR_SCAN or nbytes >= SCAN_BYTES)) then
      return s
    end
    at = at or firsts_by_score()
    local base = at[s] or 0
    local first = cd == m and cn or 0
    if s == start then first = math.max(first, skip - base) end
    local r, g, b, stopped = near_list(d, m, s, base, first, limit - got, read, nbytes)
    read, got, nbytes = read + r, got + g, nbytes + b
    return stopped and s or nil
  end)
end

if want == 'pending' then near_read() end

-- The merge: slot records, bucket entries and near entries by score, in
-- that order among equal scores. A slot record is taken up to WH and NH, a
-- bucket entry below SH and up to NH, a near entry below SH and WH (one at
-- SH or WH follows slot records or bucket entries of that score not read
-- yet).
local out, count = {''}, 0
local i, j, k, rs, run = 1, 1, 1, nil, 0 -- the last score taken and how many items of it
while count < limit do
  local u, w, v = U[i], W[j], N[k]
  local score, r
  if u and u[1] <= WH and u[1] <= NH and (not w or u[1] <= w[1]) and (not v or u[1] <= v[1]) then
    score, r, i = u[1], u[2], i + 1
    if score == rs then run = run + 1 else rs, run = score, 1 end
  elseif w and w[1] < SH and w[1] <= NH and (not u or w[1] < u[1]) and (not v or w[1] <= v[1]) then
    score, r, j = w[1], items_of(w[3], w[1])[1], j + 1
    if score == rs then run = run + 1 else rs, run = score, 1 end
  elseif v and v[1] < SH and v[1] < WH and (not u or v[1] < u[1]) and (not w or v[1] < w[1]) then
    score, r, k = v[1], v[3] and items_of(v[3], v[1])[1], k + 1
    rs, run = score, v[2]
  else
    break
  end
  if (score ~= start or run > skip) and r and (r.token ~= '') == (want == 'inflight') then
    local x, whole = #out, r.whole or #r.payload
    if cutting and whole > cut then r.payload = string.sub(r.payload, 1, cut) end
    out[x + 1], out[x + 2], out[x + 3] = fmt(math.floor(score / ORD)), r.attempts, ready_entry_of(r, now)
    if cut then out[x + 4] = whole end
    if holders then out[x + 5] = seen.holder_of(P, r.token) end
    count = count + 1
  end
end
-- Stopped short of limit at H (the next slot record is past it, or there
-- is none): every item below H has been looked at, so the next page starts
-- there, even when this one took none past the cursor (bucket entries all
-- stale, say).
local H = math.min(WH, NH)
local at_h = count < limit and H ~= math.huge and H > start and not W[j] and not N[k] and
             ((U[i] and U[i][1] > H) or (not U[i] and slots_done))
if at_h and rs ~= H then
  out[1] = fmt(H) .. ':0'
elseif not (slots_done and H == math.huge and not U[i] and not W[j] and not N[k]) and rs then
  -- More may follow: resume after the items of the last score taken (the
  -- skip of start counts the items listed before too).
  if rs == start then run = math.max(run, skip) end
  out[1] = fmt(rs) .. ':' .. nstr(run)
end
return out
