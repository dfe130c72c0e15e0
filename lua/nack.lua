-- nack.lua: a consumer failed an item it holds a lease on: retry it after a
-- delay, or bury it among the dead letters if it has had all its attempts.
-- KEYS[1] slot index, KEYS[2] counters, KEYS[3] dead letters, KEYS[4] dead times,
-- KEYS[5] queue settings
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] id,
-- ARGV[4] token, ARGV[5] delay ms (< 0: backoff), ARGV[6] error text (kept,
-- 1000 bytes max), ARGV[7] backoff base ms, ARGV[8] backoff cap ms (each -1:
-- the queue's setting),
-- ARGV[9] a random fraction in [0, 1] for the backoff's jitter,
-- ARGV[10] the shard count the client routed by (see shards_refusal),
-- ARGV[11] '1' for a release (optional): the item goes back as it was
-- before this take (its attempts one less, its error unchanged: a release
-- is not a failure, so it never buries), after ARGV[5] ms; ARGV[6..9] are
-- then unused.
-- The backoff is base * 2^(attempts - 1), capped, times (1 + fraction) / 2;
-- computed here, where the attempt count is, so no extra round trip, and in
-- closed form (backoff_ms): the attempt count comes from Redis.
-- Returns {status, due_ms}: 1 retry due then, 2 buried, 0 stale token.
-- Reads and checks everything first (arguments, counters, the record, the
-- backoff settings it needs: a bad one refuses the call, naming it), then
-- writes. Dead-letter keys of another type are renamed away.
-- Can fail after writing only on an OOM.
local zs, counters, dead, deadz = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P, chan, id = ARGV[1], ARGV[2], ARGV[3]
local delay, gbase, gcap, frac = tonumber(ARGV[5]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
if not delay or delay > DUE_MAX or delay % 1 ~= 0 or not gbase or gbase > DUE_MAX or gbase % 1 ~= 0 or
   not gcap or gcap > DUE_MAX or gcap % 1 ~= 0 or not frac or not (frac >= 0 and frac <= 1) then
  return redis.error_reply('ERR delayq:proto malformed nack arguments')
end
local counts, err = read_counters(counters)
err = err or shards_refusal(counts[4], ARGV[10])
if err then return err end
local now = queue_now_ms()
local r, key, rec, ik = leased_record(P, zs, id, ARGV[4], now)
if not r then return {0, 0} end
r.token = ''
local release = ARGV[11] == '1'
if release then
  r.attempts = math.max(r.attempts - 1, 0)
  if delay < 0 then delay = 0 end
else
  r.err = string.sub(ARGV[6], 1, 1000)
end
local reason = nil
if not release and r.max > 0 and r.attempts >= r.max then
  reason = 'failed attempt ' .. r.attempts .. ' of ' .. r.max
elseif delay < 0 then
  local base, cap
  base, err = queue_setting(KEYS[5], 'backoff_base_ms', gbase)
  if err then return err end
  cap, err = queue_setting(KEYS[5], 'backoff_max_ms', gcap)
  if err then return err end
  delay = backoff_ms(base, cap, r.attempts, frac)
end

-- Writes.
lease_remove(P, key, rec, r)
redis.call('HINCRBY', counters, 'inflight', -1)
metric_add(counters, release and 'released' or 'nacked', 1)
if reason then
  metric_add(counters, 'dead', 1)
  ensure_type(P, dead, 'hash')
  ensure_type(P, deadz, 'zset')
  bury(P, dead, deadz, r, reason, now)
  return {2, 0}
end
local due = math.min(now + delay, DUE_MAX)
local bound = recur.bound(P, zs)
local score = slot_insert(P, zs, counters, due * ORD, record_v2(r, id), true)
id_set(P, ik, id, score)
redis.call('HINCRBY', counters, 'pending', 1)
clock_save(counters, false)
announce_if_first(chan, score, bound)
return {1, fmt(due)}
