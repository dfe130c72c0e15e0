-- lua/lib/40_leases.lua: lease records (part of the scripts' shared code: see 00_base.lua).
-- Lease records ---------------------------------------------------------------
-- A take with a lease writes one record for all the entries it hands out
-- (version 4), not one record per entry: one ZADD for the take, and an ack
-- that finds a take's items with one read. The cost a lease adds to an item
-- is then its id index entry (set by the take, removed by the ack).
--   "4|max|tlen|n|ilen|" .. token prefix .. ids .. block 1 .. ... .. block n
-- ids (ilen bytes) is the ids of the n blocks joined by single spaces (no
-- id holds a space), '' for an empty block. Block i is "<len>|" .. the i-th
-- entry the take popped, as it was in the ready list (due time, attempts
-- before this delivery, id, error, payload), or "0|" once that item is gone
-- (acked, nacked, extended: those two move it to a record of its own) or
-- was never leased (set aside, held back). The ids come first, together,
-- so that an ack of a whole take compares them with the ids it names in one
-- string comparison, and reads no block (see ack.lua). Version 3, written
-- before version 4, is the same without ilen and ids; it is still read.
-- Item i's lease token is the prefix .. i .. '.' .. the record's score, as
-- the take's reply tells the client (its first element is the score), so
-- an ack finds the record without the id index; it is in flight with attempts = its entry's + 1 and the record's
-- max attempts, until the lease's end, the record's score.
local BATCH_MAX = 1000 -- take.lua's largest count

-- A version 4 lease record: ids, the blocks' ids joined by spaces; body,
-- its blocks.
local function lease_record_v4(max, prefix, n, ids, body)
  return '4|' .. fmt(max) .. '|' .. nstr(#prefix) .. '|' .. nstr(n) .. '|' .. fmt(#ids) .. '|' .. prefix .. ids ..
         body
end

-- Whether rec is a lease record (version 3 or 4) by its first byte.
local function is_lease_record(rec)
  local v = string.byte(rec, 1)
  return v == 52 or v == 51 -- '4', '3'
end

-- A lease record's head: its version (3 or 4, as a byte), max attempts,
-- token prefix, block count n, where its ids start (version 4) and where
-- its blocks start (body), as {v, max, prefix, n, ids, body}; or nil. Reads
-- no block: an ack of a whole take needs no more (see ack.lua).
local function lease_head(rec)
  local v, m, tl, n, il, pos = string.byte(rec, 1), nil, nil, nil, '0', nil
  if v == 52 then -- '4'
    m, tl, n, il, pos = string.match(rec, '^4|(%d+)|(%d+)|(%d+)|(%d+)|()')
  elseif v == 51 then -- '3'
    m, tl, n, pos = string.match(rec, '^3|(%d+)|(%d+)|(%d+)|()')
  end
  if not m or #m > 9 or #tl > 2 or #n > 4 or #il > 6 then return nil end
  tl, n, il = tonumber(tl), tonumber(n), tonumber(il)
  if tl < 1 or tl > TOKEN_MAX or n < 1 or n > BATCH_MAX or pos + tl + il - 1 > #rec then return nil end
  return {v = v, max = tonumber(m), prefix = string.sub(rec, pos, pos + tl - 1), n = n, ids = pos + tl,
          body = pos + tl + il}
end

-- A lease record's head (lease_head) and blocks: start[i] (where block i
-- starts), at[i] and len[i] (its entry), or nil and a reason. Checks the
-- shape and lengths only; an entry is checked when it is used
-- (batch_item). Version 4 also gives idat[i] and idlen[i], where the id of
-- block i lies in its ids (idlen[i] is 0 exactly when block i is empty: a
-- record that says otherwise does not decode). Version 3 gives them only
-- with with_ids, and only for a version 1 entry (the common case), read
-- inside the block by the same match that reads the block's length (an ack
-- compares ids without parsing the entry again). head: the record's
-- lease_head, if the caller has it.
local function batch_parse(rec, with_ids, head)
  local b = head or lease_head(rec)
  if not b then return nil, 'undecodable record' end
  local start, at, len = {}, {}, {}
  b.start, b.at, b.len = start, at, len
  local n, size, v4 = b.n, #rec, b.v == 52
  local idat, idlen
  if with_ids or v4 then
    idat, idlen = {}, {}
    b.idat, b.idlen = idat, idlen
  end
  if v4 then
    -- The ids, each ended by a space but the last, by the ids' end: n - 1
    -- spaces in all.
    local pos, last = b.ids, b.body - 1
    for i = 1, n do
      local q = string.find(rec, ' ', pos, true)
      if i < n then
        if not q or q > last then return nil, 'undecodable record' end
      else
        if q and q <= last then return nil, 'undecodable record' end
        q = last + 1
      end
      if q - pos > ID_MAX then return nil, 'undecodable record' end
      idat[i], idlen[i] = pos, q - pos
      pos = q + 1
    end
  end
  local pos = b.body
  for i = 1, n do
    local l, p, il, q
    if with_ids and not v4 then l, p, il, q = string.match(rec, '^(%d+)|()1|%d+|%d+|(%d%d?%d?)|()', pos) end
    if not l then l, p = string.match(rec, '^(%d+)|()', pos) end
    if not l or #l > 9 then return nil, 'undecodable record' end
    l = small_uint(l)
    if p + l - 1 > size or (v4 and (l == 0) ~= (idlen[i] == 0)) then return nil, 'undecodable record' end
    if il then
      il = small_uint(il)
      if q + il <= p + l then idat[i], idlen[i] = q, il end
    end
    start[i], at[i], len[i] = pos, p, l
    pos = p + l
  end
  if pos ~= size + 1 then return nil, 'undecodable record' end
  return b
end

-- The block number a lease token's middle names ("1".."1000", as take.lua
-- writes them: no sign, no leading zero), or false. The valid ones are kept
-- as met (in the function library, from call to call: at most BATCH_MAX of
-- them, whatever a caller sends), as every ack names blocks 1, 2, 3...
local BLOCK_NUMBER = {}
local function block_number(mid)
  local i = BLOCK_NUMBER[mid]
  if i then return i end
  if #mid > 4 or not string.find(mid, '^[1-9]%d*$') then return false end
  i = mid + 0
  if i > BATCH_MAX then return false end
  BLOCK_NUMBER[mid] = i
  return i
end

-- The id of the entry at [at, at + len) of s, unchecked (see raw_id), or
-- nil; without copying the entry out.
local function entry_id_at(s, at, len)
  local v, il, p = string.byte(s, at), nil, nil
  if v == 49 then
    il, p = string.match(s, '^1|%d+|%d+|(%d+)|()', at)
  elseif v == 50 then
    il, p = string.match(s, '^2|%d+|%d+|%d+|(%d+)|%d+|()', at)
  end
  if not il or #il > 3 then return nil end
  il = small_uint(il)
  if il < 1 or p + il > at + len then return nil end
  return string.sub(s, p, p + il - 1)
end

-- The ids the blocks of a lease record that does not decode seem to hold
-- (read as far as the blocks decode), to clean the id index up after it.
-- Version 4's ids are not used: the blocks are what was leased.
local function batch_raw_ids(rec)
  local ids = {}
  local tl, il, pos = string.match(rec, '^4|[^|]*|(%d%d?)|[^|]*|(%d%d?%d?%d?%d?%d?)|()')
  if tl then
    pos = pos + tonumber(tl) + tonumber(il)
  else
    tl, pos = string.match(rec, '^3|[^|]*|(%d%d?)|[^|]*|()')
    if not tl then return ids end
    pos = pos + tonumber(tl)
  end
  for _ = 1, BATCH_MAX do
    local l, p = string.match(rec, '^(%d+)|()', pos)
    if not l or #l > 9 then break end
    l = tonumber(l)
    if p + l - 1 > #rec then break end
    local id = l > 0 and entry_id_at(rec, p, l)
    if id then ids[#ids + 1] = id end
    pos = p + l
  end
  return ids
end

-- Whether block i of batch b (of record rec) names id by its piece of the
-- ids (version 4), or nil when b has no ids to compare by.
local function batch_names(rec, b, i, id)
  local q = b.idat and b.idat[i]
  if not q then return nil end
  return b.idlen[i] == #id and string.sub(rec, q, q + #id - 1) == id
end

-- Whether block i of batch b (of record rec) holds id: by the record's
-- ids (version 4; with_ids for a version 1 entry of version 3), else by
-- parsing the entry.
local function batch_holds(rec, b, i, id)
  local named = batch_names(rec, b, i, id)
  if named ~= nil then return named end
  return b.len[i] > 0 and entry_id_at(rec, b.at[i], b.len[i]) == id
end

-- The block of batch b (of record rec) that holds id, or nil.
local function batch_find(rec, b, id)
  for i = 1, b.n do
    if batch_holds(rec, b, i, id) then return i end
  end
  return nil
end

-- The lease token of block i of batch b, the record at score (a number).
local function batch_token(b, i, score)
  return b.prefix .. nstr(i) .. '.' .. fmt(score)
end

-- Item i of batch b (of record rec, at score) as parse_record's table (a
-- version 2 record in flight), or nil and a reason if its entry does not
-- decode, or holds another id than its piece of the ids says (version 4).
local function batch_item(rec, b, i, score)
  local e = string.sub(rec, b.at[i], b.at[i] + b.len[i] - 1)
  local d, a, il, el, pos, id = entry_head(e)
  if not d then return nil, a end
  if batch_names(rec, b, i, id) == false then return nil, 'lease record ids disagree' end
  local t0 = pos + il
  return {attempts = tonumber(a) + 1, max = b.max, due = tonumber(d), id = id, token = batch_token(b, i, score),
          err = string.sub(e, t0, t0 + el - 1), payload = string.sub(e, t0 + el)}
end

-- Record rec (batch b) with the blocks in gone (index -> true) emptied, or
-- nil when no item is left in it. A version 4 record's ids lose the ids of
-- those blocks too, and its head gets the new length of its ids.
local function batch_without(rec, b, gone)
  local v4 = b.v == 52
  local parts, ids, left = {}, {}, 0
  for i = 1, b.n do
    if gone[i] or b.len[i] == 0 then
      parts[i], ids[i] = '0|', ''
    else
      parts[i] = string.sub(rec, b.start[i], b.at[i] + b.len[i] - 1)
      if v4 then ids[i] = string.sub(rec, b.idat[i], b.idat[i] + b.idlen[i] - 1) end
      left = left + 1
    end
  end
  if left == 0 then return nil end
  if not v4 then return string.sub(rec, 1, b.body - 1) .. table.concat(parts) end
  return lease_record_v4(b.max, b.prefix, b.n, table.concat(ids, ' '), table.concat(parts))
end

-- Whether record rec holds id (a lease record: as one of its items).
local function record_has(rec, id)
  if is_lease_record(rec) then
    local b = batch_parse(rec)
    return b ~= nil and batch_find(rec, b, id) ~= nil
  end
  return record_id(rec) == id
end

-- A record as a table, or nil and a reason if it cannot be decoded. score:
-- its score (checked by the caller: 0..SCORE_MAX). A lease record (version
-- 3) holds many items: id picks one (nil: the record reads as undecodable),
-- and the table then also has batch (its batch_parse), index (the item's
-- block) and score; an item whose entry does not decode still reads as in
-- flight (bad: the reason), so no caller removes the record for it.
local function parse_record(rec, score, id)
  local v = string.sub(rec, 1, 1)
  if v == '1' then
    local il, pos, rid = v1_head(rec)
    if not il then return nil, pos end
    return {attempts = 0, max = 0, due = math.floor(score / ORD), token = '', err = '',
            id = rid, payload = string.sub(rec, pos + il)}
  end
  if v == '4' or v == '3' then
    local b, why = batch_parse(rec)
    if not b then return nil, why end
    local i = id and batch_find(rec, b, id)
    if not i then return nil, 'undecodable record' end
    local r, bad = batch_item(rec, b, i, score)
    if not r then
      r = {attempts = 0, max = b.max, due = math.floor(score / ORD), id = id, token = batch_token(b, i, score),
           err = '', payload = '', bad = bad}
    end
    r.batch, r.index, r.score = b, i, score
    return r
  end
  if v ~= '2' then return nil, 'unknown record format' end
  local a, m, d, il, tl, el, pos, rid = v2_head(rec)
  if not a then return nil, m end
  local t0 = pos + il
  return {attempts = a, max = m, due = d, id = rid, token = string.sub(rec, t0, t0 + tl - 1),
          err = string.sub(rec, t0 + tl, t0 + tl + el - 1), payload = string.sub(rec, t0 + tl + el)}
end

