-- extend.lua: renews the lease of an item in flight, from now.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, ARGV[2] id,
-- ARGV[3] token, ARGV[4] lease ms, ARGV[5] wake channel, ARGV[6] the shard
-- count the client routed by (see shards_refusal).
-- Returns {1, new lease end ms}, or {0, 0} for an unknown id or a stale token.
-- A holder the take named (lib/75_holders.lua) lasts as long as the longest
-- lease of its take.
-- Reads and checks first (the lease, the counters: a new slot counts in
-- them), then writes. Can fail after writing only on an OOM.
local zs, counters, P, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local lease = tonumber(ARGV[4])
if not lease or lease < 1 or lease > DUE_MAX or lease % 1 ~= 0 then
  return redis.error_reply('ERR delayq:proto malformed extend arguments')
end
local counts, err = read_counters(counters)
err = err or shards_refusal(counts[4], ARGV[6])
if err then return err end
local now = queue_now_ms()
local r, key, rec, ik = leased_record(P, zs, id, ARGV[3], now)
if not r then return {0, 0} end
local deadline = math.min(now + lease, DUE_MAX)
local bound = recur.bound(P, zs)
lease_remove(P, key, rec, r)
-- An item of a lease record moves to a record of its own (same token).
local score = slot_insert(P, zs, counters, deadline * ORD, r.batch and record_v2(r, id) or rec, false)
id_set(P, ik, id, score)
clock_save(counters, false)
announce_if_first(ARGV[5], score, bound)
local hk = seen.holder_key_of(P, ARGV[3])
local ttl = hk and redis.call('PTTL', hk)
if ttl and ttl >= 0 and ttl < lease then redis.call('PEXPIRE', hk, nstr(lease)) end
return {1, fmt(deadline)}
