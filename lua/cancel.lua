-- cancel.lua: removes a pending item.
-- KEYS[1] z; ARGV[1] payload bucket prefix, ARGV[2] id.
-- Returns 1 if it was pending and is now removed, 0 if it was not pending.
local z, prefix, id = KEYS[1], ARGV[1], ARGV[2]
local score = redis.call('ZSCORE', z, id)
if not score then return 0 end
redis.call('ZREM', z, id)
redis.pcall('HDEL', bucket_key(prefix, tonumber(score)), id)
return 1
