-- extend.lua: renews the lease of an item in flight, from now.
-- KEYS[1] z; ARGV[1] payload bucket prefix, ARGV[2] id, ARGV[3] token,
-- ARGV[4] lease ms, ARGV[5] wake channel. Returns {1, new lease end ms}, or
-- {0, 0} for an unknown id or a stale token.
local z, prefix, id = KEYS[1], ARGV[1], ARGV[2]
local now = server_now_ms()
local r, score, bucket = leased_record(z, prefix, id, ARGV[3], now)
if not r then return {0, 0} end
local deadline = math.min(now + tonumber(ARGV[4]), DUE_MAX)
local new_score = deadline * ORD
local new_bucket = bucket_key(prefix, new_score)
if new_bucket ~= bucket then
  redis.call('HDEL', bucket, id)
  redis.call('HSET', new_bucket, id, record_v2(r))
end
redis.call('ZADD', z, new_score, id)
if new_score < score then announce_if_first(z, ARGV[5], new_score, fmt(deadline)) end
return {1, fmt(deadline)}
