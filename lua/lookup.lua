-- lookup.lua: the state of one id.
-- KEYS[1] z, KEYS[2] ready ids, KEYS[3] dead letters
-- ARGV[1] payload bucket prefix, ARGV[2] id
-- Returns {state, due_ms, attempts}: state 0 unknown, 1 pending (due_ms is
-- its due time), 2 ready, 3 in flight (due_ms is the lease's end), 4 dead.
local z, rs, dead, prefix, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]
local s = redis.call('ZSCORE', z, id)
if s then
  local score = tonumber(s)
  local rec = redis.call('HGET', bucket_key(prefix, score), id)
  local r = rec and parse_record(rec, score)
  local at = fmt(math.floor(score / ORD))
  if r and r.token ~= '' then return {3, at, r.attempts} end
  return {1, at, r and r.attempts or 0}
end
if redis.call('SISMEMBER', rs, id) == 1 then return {2, 0, 0} end
if redis.call('HEXISTS', dead, id) == 1 then return {4, 0, 0} end
return {0, 0, 0}
