-- nack.lua: a consumer failed an item it holds a lease on: retry it after a
-- delay, or bury it among the dead letters if it has had all its attempts.
-- KEYS[1] slot index, KEYS[2] counters, KEYS[3] dead letters, KEYS[4] dead times,
-- KEYS[5] queue settings
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] id,
-- ARGV[4] token, ARGV[5] delay ms (< 0: backoff), ARGV[6] error text (kept,
-- 1000 bytes max), ARGV[7] backoff base ms, ARGV[8] backoff cap ms (each -1:
-- the queue's setting),
-- ARGV[9] a random fraction in [0, 1] for the backoff's jitter.
-- The backoff is base * 2^(attempts - 1), capped, times (1 + fraction) / 2;
-- computed here, where the attempt count is, so no extra round trip.
-- Returns {status, due_ms}: 1 retry due then, 2 buried, 0 stale token.
local zs, counters, dead, deadz = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P, chan, id = ARGV[1], ARGV[2], ARGV[3]
local now = server_now_ms()
local r, key, rec, ik = leased_record(P, zs, id, ARGV[4], now)
if not r then return {0, 0} end
redis.call('ZREM', key, rec)
redis.pcall('HINCRBY', counters, 'inflight', -1)
r.token = ''
r.err = string.sub(ARGV[6], 1, 1000)
if r.max > 0 and r.attempts >= r.max then
  bury(P, dead, deadz, r, 'failed attempt ' .. r.attempts .. ' of ' .. r.max, now)
  return {2, 0}
end
local delay = tonumber(ARGV[5])
if delay < 0 then
  local base = queue_setting(KEYS[5], 'backoff_base_ms', tonumber(ARGV[7]))
  local cap = queue_setting(KEYS[5], 'backoff_max_ms', tonumber(ARGV[8]))
  delay = base
  for _ = 2, r.attempts do
    if delay >= cap then break end
    delay = delay * 2
  end
  delay = math.floor(math.min(delay, cap) * (1 + tonumber(ARGV[9])) / 2)
end
local due = math.min(now + delay, DUE_MAX)
local bound = first_bound(zs)
local score = slot_insert(P, zs, counters, due * ORD, record_v2(r, id), true)
id_set(ik, id, score)
redis.pcall('HINCRBY', counters, 'pending', 1)
announce_if_first(chan, score, bound)
return {1, fmt(due)}
