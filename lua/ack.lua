-- ack.lua: consumers finished items they hold leases on: remove them.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, ARGV[2] the
-- shard count the client routed by (see shards_refusal), then three
-- arguments per item: id, token, and the id's index bucket (computed by the
-- client as id_key does, to spare the script a SHA-1 per item).
-- Returns one status per item, in order: 1 if acked, 0 if the id is not in
-- flight or the token is not the current lease's (it expired and went to
-- someone else), -1 if the id, token or bucket is malformed (an id that
-- breaks the id rule, say): each item is judged on its own, so one bad item
-- never sinks the others. A batch shares the script call, the counter
-- update, and per lease record (one per take) one read and one write; per
-- item, only its id index entry is removed. Items extend moved to records
-- of their own are found through the id index (see slot_find_many).
-- Corrupt counters refuse the call before it writes (see common.lua).
-- Can fail after writing only on an OOM.
local zs, P = KEYS[1], ARGV[1]
local counts, err = read_counters(KEYS[2])
err = err or shards_refusal(counts[4], ARGV[2])
if err then return err end
local now = server_now_ms()
local out, done, acked = {}, {}, 0

-- Items of lease records (the common case) are found by their tokens,
-- which name the record's score: the records at a score are read once
-- (a take's items share one), and an item is matched by its token's block
-- and that block's id. No id index read: the block proves the item is in
-- flight under this lease.
local at_score = {} -- a score (as fmt writes it) -> the lease records read there
local at_text = {} -- a token's score part, as sent -> the same
local batches = {} -- those that lose items: {key, ss, rec, b, gone, blocks}
local function lease_records_at(score, ss)
  local recs = {}
  if math.floor(score / ORD) <= now then return recs end
  local name = slot_at(zs, ss)
  if not name then return recs end
  local key = slot_key(P, name)
  for _, rec in ipairs(kcall(P, 'ZRANGEBYSCORE', key, ss, ss, 'LIMIT', '0', '16')) do
    local b = string.byte(rec, 1) == 51 and batch_parse(rec) -- '3'
    if b then
      -- The token heads of its blocks (prefix .. i -> i): one table look-up
      -- per item instead of taking each token apart.
      local blocks = {}
      for i = 1, b.n do
        if b.len[i] > 0 then blocks[b.prefix .. nstr(i)] = i end
      end
      recs[#recs + 1] = {key = key, ss = ss, rec = rec, b = b, gone = {}, blocks = blocks}
    end
  end
  return recs
end

-- Acks item (id, token, ik, at) through the lease record its token names;
-- false if none holds it (an item extend moved to a record of its own, a
-- stale token).
local function ack_in_lease_record(id, token, ik, at)
  -- The score is what follows the token's last '.' (at most 17 bytes
  -- from its end: 16 digits).
  local p = string.find(token, '.', math.max(#token - 17, 1), true)
  if not p then return false end
  for _ = 1, 17 do
    local q = string.find(token, '.', p + 1, true)
    if not q then break end
    p = q
  end
  local ts = string.sub(token, p + 1)
  local recs = at_text[ts]
  if not recs then
    -- One read, and one copy of each record, per score however a token
    -- spells it ("012" is 12): two copies would each write the record back.
    local score = uint_of(ts, 16, SCORE_MAX)
    recs = {}
    if score then
      local ss = fmt(score)
      recs = at_score[ss] or lease_records_at(score, ss)
      at_score[ss] = recs
    end
    at_text[ts] = recs
  end
  if recs[1] == nil then return false end
  local head = string.sub(token, 1, p - 1)
  for _, x in ipairs(recs) do
    local i = x.blocks[head]
    if i and not x.gone[i] and entry_id_at(x.rec, x.b.at[i], x.b.len[i]) == id then
      if not x.changed then
        x.changed = true
        batches[#batches + 1] = x
      end
      x.gone[i] = true
      id_del(P, ik, id)
      acked, out[at] = acked + 1, 1
      return true
    end
  end
  return false
end

local want = {} -- the other items in flight by the index: found in their slots below
for i = 3, #ARGV - 2, 3 do
  local id, token, bucket = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local b = uint_of(bucket, 5, ID_BUCKETS - 1)
  if not b or not id_ok(id) or #token < 1 or #token > TOKEN_MAX then
    out[#out + 1] = -1
  else
    out[#out + 1] = 0
    if not done[id] then -- the same id twice in a batch: only the first counts
      done[id] = true
      local ik = P .. 'i:' .. bucket
      if not ack_in_lease_record(id, token, ik, #out) then
        -- In flight: indexed at a score whose lease has not ended (now,
        -- server ms, at or past its end: ended, even if no scheduler
        -- returned it yet).
        local score = id_score_in(P, ik, id)
        if score and math.floor(score / ORD) > now then
          want[#want + 1] = {at = #out, id = id, token = token, ik = ik, score = score}
        end
      end
    end
  end
end
for _, x in ipairs(batches) do
  kcall(P, 'ZREM', x.key, x.rec)
  local left = batch_without(x.rec, x.b, x.gone)
  if left then kcall(P, 'ZADD', x.key, x.ss, left) end
end

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
