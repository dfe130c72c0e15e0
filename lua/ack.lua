-- ack.lua: consumers finished items they hold leases on: remove them.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, then three
-- arguments per item: id, token, and the id's index bucket (computed by the
-- client as id_key does, to spare the script a SHA-1 per item).
-- Returns one status per item, in order: 1 if acked, 0 if the id is not in
-- flight or the token is not the current lease's (it expired and went to
-- someone else). A batch shares the script call, the counter update, and
-- one ZREM per slot (the leases of one take share a slot).
local zs, P = KEYS[1], ARGV[1]
local now = server_now_ms()
local out, done, acked = {}, {}, 0
local zrem = {} -- slot key -> records to remove
local cache = {} -- the slot last found (see slot_find)
for i = 2, #ARGV - 2, 3 do
  local id = ARGV[i]
  local status = 0
  if not done[id] then -- the same id twice in a batch: only the first counts
    done[id] = true
    local r, key, rec, ik = leased_record(P, zs, id, ARGV[i + 1], now, P .. 'i:' .. ARGV[i + 2], cache)
    if r then
      local recs = zrem[key]
      if not recs then
        recs = {}
        zrem[key] = recs
      end
      recs[#recs + 1] = rec
      id_del(ik, id)
      acked, status = acked + 1, 1
    end
  end
  out[#out + 1] = status
end
for key, recs in pairs(zrem) do redis.call('ZREM', key, unpack(recs)) end
if acked > 0 then redis.pcall('HINCRBY', KEYS[2], 'inflight', nstr(-acked)) end
return out
