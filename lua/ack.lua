-- ack.lua: a consumer finished an item it holds a lease on: remove it.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, ARGV[2] id,
-- ARGV[3] token. Returns 1 if acked, 0 if the id is not in flight or the
-- token is not the current lease's (it expired and went to someone else).
local P, id = ARGV[1], ARGV[2]
local r, key, rec, ik = leased_record(P, KEYS[1], id, ARGV[3], server_now_ms())
if not r then return 0 end
redis.call('ZREM', key, rec)
id_del(ik, id)
redis.pcall('HINCRBY', KEYS[2], 'inflight', -1)
return 1
