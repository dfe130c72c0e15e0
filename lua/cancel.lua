-- cancel.lua: removes a pending item (not one in flight: that belongs to
-- its consumer until ack, nack or the end of its lease), in the slots, in
-- a bucket of the timing wheel or in a near list.
-- KEYS[1] slot index, KEYS[2] counters; ARGV[1] key prefix, ARGV[2] id,
-- ARGV[3] the shard count the client routed by (see shards_refusal).
-- Returns 1 if it was pending and is now removed, 0 if it was not pending.
-- A record of the id that does not decode is set aside (with its reason)
-- rather than removed, and the answer is 0. Reads and checks first (the
-- counters too), then writes. Can fail after writing only on an OOM.
local zs, P, id = KEYS[1], ARGV[1], ARGV[2]
local counts, err = read_counters(KEYS[2])
err = err or shards_refusal(counts[4], ARGV[3]) or require_type(zs, 'zset')
if err then return err end
local score, ik = id_score(P, id)
if not score then
  -- In a bucket of the timing wheel: its entry becomes a tombstone, which
  -- the cascade skips, and its index entry goes (lib/65_wheel.lua).
  local wdue, _, wpos = id_wheel_in(P, ik, id)
  if wdue then
    wheel_bury(P, wdue, wpos)
  else
    -- In a near list: the same, skipped by the transfer (lib/67_near.lua).
    local ndue, _, npos = near.id_in(P, ik, id)
    if not ndue then return 0 end
    near.bury(P, ndue, npos)
  end
  id_del(P, ik, id)
  redis.call('HINCRBY', KEYS[2], 'pending', -1)
  return 1
end
local key, rec = slot_find(P, zs, id, score)
if not key then return 0 end -- ready
local r, why = parse_record(rec, score, id)
if r and r.token ~= '' then return 0 end
kcall(P, 'ZREM', key, rec)
id_del(P, ik, id)
if not r then
  set_aside(P, {aside_entry(why, id, rec)})
  return 0
end
redis.call('HINCRBY', KEYS[2], 'pending', -1)
return 1
