-- cancel.lua: removes a pending item (not one in flight: that belongs to
-- its consumer until ack, nack or the end of its lease).
-- KEYS[1] z; ARGV[1] payload bucket prefix, ARGV[2] id.
-- Returns 1 if it was pending and is now removed, 0 if it was not pending.
local z, prefix, id = KEYS[1], ARGV[1], ARGV[2]
local s = redis.call('ZSCORE', z, id)
if not s then return 0 end
local score = tonumber(s)
local bucket = bucket_key(prefix, score)
local rec = redis.pcall('HGET', bucket, id)
if type(rec) == 'string' and string.sub(rec, 1, 1) == '2' then
  local r = parse_record(rec, score)
  if r and r.token ~= '' then return 0 end
end
redis.call('ZREM', z, id)
redis.pcall('HDEL', bucket, id)
return 1
