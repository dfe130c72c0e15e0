-- lookup.lua: the state of one id.
-- KEYS[1] z; ARGV[1] id. Returns {1, due_ms} if pending, else {0, 0}.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return {0, 0} end
return {1, fmt(math.floor(tonumber(score) / ORD))}
