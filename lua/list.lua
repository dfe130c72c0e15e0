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
-- by lease end: both share the slots, ordered by score. A page reads at most
-- SCAN_MAX records, so a page of one state among many of the other may hold
-- fewer than limit items and still have a next cursor. Records that do not
-- decode are skipped (the scheduler sets them aside when they fall due).
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
local out, n, scanned = {''}, 0, 0
local last, last_run = nil, 0 -- the last score read, and how many records of it were read
-- With a cut, a page also ends once it has read SCAN_BYTES of records
-- (Redis copies each record it reads whole), reading a slot in batches
-- that grow from 4 records, so a page of large payloads costs Redis a few
-- MB, not limit times their size.
local SCAN_BYTES = 4 * 1024 * 1024
local bytes, bytes_max, batch, off = 0, cutting and SCAN_BYTES or math.huge, cutting and 4 or 500, 0
-- The slot holding start, or the first one.
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
      if (score ~= start or last_run > skip) and r and (r.token ~= '') == (want == 'inflight') then
        local k, whole = #out, r.whole or #r.payload
        if cutting and whole > cut then r.payload = string.sub(r.payload, 1, cut) end
        out[k + 1], out[k + 2], out[k + 3] = fmt(math.floor(score / ORD)), r.attempts, ready_entry_of(r, now)
        if cut then out[k + 4] = whole end
        if holders then out[k + 5] = seen.holder_of(P, r.token) end
        n = n + 1
      end
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
    if not name then last = nil end
  end
end
if last then
  -- More may follow: resume after the records of the last score read.
  out[1] = fmt(last) .. ':' .. nstr(last_run)
end
return out
