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
-- update, one look-up and one ZREM per slot (the leases of one take share a
-- slot: see slot_find_many).
-- Corrupt counters refuse the call before it writes (see common.lua).
-- Can fail after writing only on an OOM.
local zs, P = KEYS[1], ARGV[1]
local counts, err = read_counters(KEYS[2])
err = err or shards_refusal(counts[4], ARGV[2])
if err then return err end
local now = server_now_ms()
local out, done, acked = {}, {}, 0
local want = {} -- items in flight by the index: found in their slots below
for i = 3, #ARGV - 2, 3 do
  local id, token, bucket = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local status = 0
  local b = uint_of(bucket, 5, ID_BUCKETS - 1)
  if not b or not id_ok(id) or #token < 1 or #token > TOKEN_MAX then
    status = -1
  elseif not done[id] then -- the same id twice in a batch: only the first counts
    done[id] = true
    -- In flight: indexed at a score whose lease has not ended (now, server
    -- ms, at or past its end: ended, even if no scheduler returned it yet).
    local ik = P .. 'i:' .. bucket
    local score = id_score_in(P, ik, id)
    if score and math.floor(score / ORD) > now then
      want[#want + 1] = {at = #out + 1, id = id, token = token, ik = ik, score = score}
    end
  end
  out[#out + 1] = status
end
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
