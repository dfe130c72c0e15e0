-- ack.lua: consumers finished items they hold leases on: remove them.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, then one
-- (id, token) pair per item: ARGV[2], ARGV[3], ARGV[4], ARGV[5], ...
-- Returns one status per pair, in order: 1 if acked, 0 if the id is not in
-- flight or the token is not the current lease's (it expired and went to
-- someone else). A batch shares the script call, the counter update, and
-- one ZREM per slot (the leases of one take share a slot).
local zs, P = KEYS[1], ARGV[1]
local now = server_now_ms()
local out, done, acked = {}, {}, 0
local zrem = {} -- slot key -> records to remove
for i = 2, #ARGV - 1, 2 do
  local id = ARGV[i]
  local status = 0
  if not done[id] then -- the same id twice in a batch: only the first counts
    done[id] = true
    local r, key, rec, ik = leased_record(P, zs, id, ARGV[i + 1], now)
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
