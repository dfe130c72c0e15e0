-- ack.lua: consumers finished items they hold leases on: remove them.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, ARGV[2] the
-- shard count the client routed by (see shards_refusal), then the items in
-- groups: a group is three arguments, its token prefix, its token suffix
-- and its item count k (1..1000), then three per item: the middle of the
-- item's token, its id, and the id's index bucket (computed by the client
-- as id_key does, to spare the script a SHA-1 per item). An item's token is
-- prefix .. middle .. suffix. src/util/ackargs.c cuts a lease record's tokens
-- ("<request>.<i>.<score>") into prefix "<request>.", middle i and suffix
-- ".<score>", and puts the items of one record, one after the other, in one
-- group; any other token is a group of its own (the whole token as prefix).
-- A group whose items are blocks 1..k in that order (a worker's ack of a
-- whole take, the usual case) may come packed instead: its count is '*k',
-- and two arguments follow it, not three per item: the k ids joined by
-- single spaces (ids hold none), and their k buckets joined the same way.
-- Item j of it is block j: its token's middle is j. One argument per item
-- costs Redis a string to make and the script a check to run, some 15% of
-- an ack; packed, a whole take is checked by one comparison of its ids with
-- the record's (see ack_packed). A packed group that is not acked whole is
-- taken apart, and each item judged on its own as in any other group.
-- Returns one status per item, in order: 1 if acked, 0 if the id is not in
-- flight or the token is not the current lease's (it expired and went to
-- someone else), -1 if the id, token or bucket is malformed (an id that
-- breaks the id rule, say): each item is judged on its own, so one bad item
-- never sinks the others. Groups that do not add up (a count past the
-- arguments) refuse the call before it writes.
-- A group's lease record (the one at the suffix's score whose token prefix
-- is the group's) is read once. A group that acks all of a version 4
-- record's items in block order (a worker's ack of a handled take) is
-- checked by one comparison of its ids with the record's (see ack_whole),
-- and the record goes whole. Otherwise an item costs a look at its block
-- (the middle is the block's number). Either way an item costs the removal
-- of its id index entry. A batch shares the script call, the counter
-- update, and per lease record one read and one write. Items extend moved
-- to records of their own (same token) are found through the id index (see
-- slot_find_many).
-- Corrupt counters refuse the call before it writes (see lib/20_counters.lua).
-- Can fail after writing only on an OOM.
local zs, P = KEYS[1], ARGV[1]
local n_args = #ARGV
-- The groups add up: every count is a number and no group runs past the end.
-- A group's item count k and whether it is packed (count '*k'), or nil.
local function group_count(c)
  local packed = c ~= nil and string.byte(c, 1) == 42 -- '*'
  local k = uint_of(packed and string.sub(c, 2) or c, 4, BATCH_MAX)
  if not k or k < 1 then return nil end
  return k, packed
end
-- The arguments a group of k items takes after its three.
local function group_args(k, packed) return packed and 2 or 3 * k end
local g = 3
for _ = 1, n_args do
  if g > n_args then break end
  local k, packed = group_count(ARGV[g + 2])
  if not k or g + 2 + group_args(k, packed) > n_args then
    return redis.error_reply('ERR delayq:proto malformed ack arguments')
  end
  g = g + 3 + group_args(k, packed)
end
if g ~= n_args + 1 then return redis.error_reply('ERR delayq:proto malformed ack arguments') end
local counts, err = read_counters(KEYS[2])
err = err or shards_refusal(counts[4], ARGV[2])
if err then return err end
-- The queue's clock, read only: an ack only compares lease ends with it.
local now = queue_now_ms()
local out, acked = {}, 0

-- The lease records at a token suffix's score (".<score>"), read once per
-- score however a suffix spells it ("012" is 12): two copies of a record
-- would each write it back. None when the lease has ended (now, server ms,
-- at or past its end: ended, even if no scheduler returned it yet). Each
-- is {key, ss, rec, h, gone}: h its lease_head; its blocks are read
-- (blocks_of) only when an ack needs them.
local at_score = {} -- a score (as fmt writes it) -> {key, ss, rec, h, gone}, ...
local changed = {} -- those that lose items
local function lease_records_at(suffix)
  if string.byte(suffix, 1) ~= 46 then return {} end -- '.'
  local score = uint_of(string.sub(suffix, 2), 16, SCORE_MAX)
  if not score or math.floor(score / ORD) <= now then return {} end
  local ss = fmt(score)
  local recs = at_score[ss]
  if recs then return recs end
  recs = {}
  at_score[ss] = recs
  local found, key = records_at(P, zs, ss)
  for _, rec in ipairs(found) do
    local h = lease_head(rec)
    if h then recs[#recs + 1] = {key = key, ss = ss, rec = rec, h = h, gone = {}} end
  end
  return recs
end

-- The lease record of a group: the one at its suffix's score with its
-- prefix, or nil.
local function group_record(prefix, suffix)
  if #suffix < 2 then return nil end
  for _, x in ipairs(lease_records_at(suffix)) do
    if x.h.prefix == prefix then return x end
  end
  return nil
end

-- The blocks of lease record x (batch_parse, ids included), read on first
-- use; nil when they do not decode, or when the whole record went already.
local function blocks_of(x)
  if x.all then return nil end
  if x.b == nil then x.b = batch_parse(x.rec, true, x.h) or false end
  return x.b or nil
end

local function mark_changed(x)
  if not x.changed then
    x.changed = true
    changed[#changed + 1] = x
  end
end

-- Whether a bucket is a number 0..ID_BUCKETS - 1 as the client writes it
-- (digit strings of one length compare as their numbers do: no tonumber,
-- which reads a string twice through strtod).
local function bucket_ok(s)
  local n = #s
  return n >= 1 and n <= 5 and string.find(s, '^%d+$') ~= nil and (n < 5 or s <= '32767')
end

-- Whether an item's arguments have their shapes: a token of tlen bytes, an
-- id of 1..ID_MAX bytes and a bucket (the id rule is checked only where an
-- id is looked up, not where the record's own ids match it).
local function item_shaped(tlen, id, bucket)
  return tlen >= 1 and tlen <= TOKEN_MAX and #id >= 1 and #id <= ID_MAX and bucket_ok(bucket)
end

-- Whether a group of k items may ack all of lease record x at once: x is
-- version 4, has k blocks, and no item of this call changed it yet.
local function whole_fits(x, k) return not x.changed and x.h.v == 52 and k == x.h.n end

-- The ids of lease record x, joined as the record keeps them.
local function record_ids(x) return string.sub(x.rec, x.h.ids, x.h.body - 1) end

-- Acks every item of lease record x at once (the caller has checked that
-- its k ids are the record's): the record goes whole, and item j (id
-- ids[j], in bucket buckets[j]) leaves the id index. Sets the k results
-- from at.
local function ack_record(x, ids, buckets, k, at)
  x.all = true
  mark_changed(x)
  for j = 1, k do
    id_del(P, P .. 'i:' .. buckets[j], ids[j])
    out[at + j] = 1
  end
  acked = acked + k
end

-- A group that acks every item of its version 4 lease record x, in block
-- order (the usual ack of a worker: a whole take, handled), at arguments
-- g + 3 .. g + 3 * k: its items' ids, joined as the record's ids are, are
-- the record's ids, so every block is in flight under this lease with the
-- id named, and the record goes whole; no block is read. Returns false,
-- having changed nothing, for any other group (the caller then judges each
-- item on its own). Sets the k results from at.
local function ack_whole(x, g, k, at)
  if not whole_fits(x, k) then return false end
  local tlen0 = #ARGV[g] + #ARGV[g + 1]
  local ids, buckets = {}, {}
  for j = 1, k do
    local a = g + 3 * j
    local mid, id, bucket = ARGV[a], ARGV[a + 1], ARGV[a + 2]
    if block_number(mid) ~= j or not item_shaped(tlen0 + #mid, id, bucket) then return false end
    ids[j], buckets[j] = id, bucket
  end
  if table.concat(ids, ' ') ~= record_ids(x) then return false end
  ack_record(x, ids, buckets, k, at)
  return true
end

-- The words of s (split at single spaces) as a list, if there are exactly
-- k of them and each passes ok (nil: any); else nil.
local function words(s, k, ok)
  local t, n = {}, 0
  for w in string.gmatch(s, '[^ ]+') do
    n = n + 1
    if n > k or (ok and not ok(w)) then return nil end
    t[n] = w
  end
  return n == k and t or nil
end

-- A packed group (see the arguments) of k items whose ids and buckets are
-- joined in ids and buckets, acked whole as ack_whole does: when ids is
-- the ids of x, a version 4 lease record of k blocks, every block is in
-- flight under this lease with the id named, so one comparison stands for
-- a check per item. The buckets are checked, all of them, before anything
-- is written. Returns false, having changed nothing, for any other group.
-- Sets the k results from at. suffix: the group's token suffix (its tokens
-- must keep to TOKEN_MAX, as item_shaped checks them one by one).
local function ack_packed(x, suffix, k, ids, buckets, at)
  if not whole_fits(x, k) or #x.h.prefix + #suffix + #nstr(k) > TOKEN_MAX or ids ~= record_ids(x) then
    return false
  end
  local bs, is = words(buckets, k, bucket_ok), words(ids, k)
  if not bs or not is then return false end
  ack_record(x, is, bs, k, at)
  return true
end

local items = 0 -- items read so far (out's length)
local done = {} -- ids looked up through the index: only the first counts
local want = {} -- the other items in flight by the index: found in their slots below

-- One item judged on its own: token prefix .. mid .. suffix, id and bucket,
-- and x, its group's lease record (or nil). Its result goes next in out.
local function ack_item(x, prefix, mid, suffix, id, bucket)
  items = items + 1
  local at = items
  if not item_shaped(#prefix + #mid + #suffix, id, bucket) then
    out[at] = -1
    return
  end
  local b = x and blocks_of(x)
  local i = b and block_number(mid)
  local ik = P .. 'i:' .. bucket
  if i and i <= b.n and not x.gone[i] and batch_holds(x.rec, b, i, id) then
    -- The block proves the item is in flight under this lease (take.lua
    -- let in only entries whose id keeps the rule): no id index read.
    -- An id twice in a batch finds its block gone the second time.
    mark_changed(x)
    x.gone[i] = true
    id_del(P, ik, id)
    acked, out[at] = acked + 1, 1
  elseif not id_ok(id) then
    out[at] = -1
  elseif done[id] then
    out[at] = 0
  else
    -- In flight: indexed at a score whose lease has not ended.
    out[at], done[id] = 0, true
    local score = id_score_in(P, ik, id)
    if score and math.floor(score / ORD) > now then
      want[#want + 1] = {at = at, id = id, token = prefix .. mid .. suffix, ik = ik, score = score}
    end
  end
end

g = 3
while g <= n_args do
  local prefix, suffix = ARGV[g], ARGV[g + 1]
  local k, packed = group_count(ARGV[g + 2])
  local x = group_record(prefix, suffix)
  if packed then
    local ids, buckets = ARGV[g + 3], ARGV[g + 4]
    if x and ack_packed(x, suffix, k, ids, buckets, items) then
      items = items + k
    else
      -- Taken apart: item j is block j, with the j-th id and bucket ('' for
      -- one missing: malformed).
      local next_id, next_bucket = string.gmatch(ids, '[^ ]+'), string.gmatch(buckets, '[^ ]+')
      for j = 1, k do ack_item(x, prefix, nstr(j), suffix, next_id() or '', next_bucket() or '') end
    end
  elseif x and ack_whole(x, g, k, items) then
    items = items + k
  else
    for j = g + 3, g + 3 * k, 3 do ack_item(x, prefix, ARGV[j], suffix, ARGV[j + 1], ARGV[j + 2]) end
  end
  g = g + 3 + group_args(k, packed)
end
local emptied = {} -- the scores of the records that went whole: out of the lease registry
for _, x in ipairs(changed) do
  kcall(P, 'ZREM', x.key, x.rec)
  local left = not x.all and batch_without(x.rec, x.b, x.gone)
  if left then
    kcall(P, 'ZADD', x.key, x.ss, left)
  else
    emptied[#emptied + 1] = x.ss
  end
end
registry_drop(P, emptied)

-- Items in records of their own (version 2).
slot_find_many(P, zs, want)
local done_items = {}
for _, w in ipairs(want) do
  local _, token = nil, nil
  if w.rec then
    token = w.lease
    if token == nil then _, token = record_lease(w.rec) end
  end
  if token == w.token then
    if w.run then w.run.acked = (w.run.acked or 0) + 1 end
    done_items[#done_items + 1] = w
    id_del(P, w.ik, w.id)
    acked, out[w.at] = acked + 1, 1
  end
end
-- A range read whose records are all acked (the common case: a take's
-- leases, in one slot, acked together) goes with one ZREMRANGEBYSCORE; ZREM
-- of each record would search the slot's listpack once per record.
local zrem = {} -- slot key -> records to remove one by one
for _, w in ipairs(done_items) do
  local run = w.run
  if run and run.acked == run.n then
    if not run.removed then
      redis.call('ZREMRANGEBYSCORE', run.key, run.lo, run.hi)
      run.removed = true
    end
  else
    local recs = zrem[w.key]
    if not recs then
      recs = {}
      zrem[w.key] = recs
    end
    recs[#recs + 1] = w.rec
  end
end
for key, recs in pairs(zrem) do redis.call('ZREM', key, unpack(recs)) end
if acked > 0 then redis.call('HINCRBY', KEYS[2], 'inflight', nstr(-acked)) end
metric_add(KEYS[2], 'acked', acked)
return out
