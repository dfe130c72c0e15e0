-- metrics.lua: what /metrics shows of one queue, read only.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] set-aside list,
-- KEYS[4] counters, KEYS[5] dead times; ARGV[1] key prefix.
-- Returns {pending, ready, next_due_in_ms or -1, set_aside, inflight, dead,
-- oldest_ready_age_ms or -1, then the metric fields as stored (a string, or
-- nil when absent): offered, delivered, acked, nacked, dead, expired,
-- lat_sum, lat:1 .. lat:<#LAT_MS + 1>, then the shard count these keys'
-- counters hold (a sharded queue's metrics are the sums over its shards and
-- its own keys: the client learns the count here), then the queue's epoch
-- (0: none; see lib/20_counters.lua), then the live schedulers and
-- overdue_ms as stats.lua gives them, then the number of recurring
-- schedules (lib/80_recurring.lua)}. The next due time counts the
-- schedules' next ticks too. The client checks the metric
-- fields (they are written with pcall and may hold anything someone put
-- there); the counts are checked here as stats.lua does.
local c, err = read_counters(KEYS[4])
err = err or require_type(KEYS[1], 'zset') or require_type(KEYS[2], 'list') or
      require_type(KEYS[3], 'list') or require_type(KEYS[5], 'zset')
if err then return err end
local now = queue_now_ms()
local ready = redis.call('LLEN', KEYS[2])
local next_due = recur.earliest(ARGV[1], KEYS[1], true)
local next_in = -1
if next_due >= 0 then next_in = math.max(0, next_due - now) end
-- The head of the ready list waited longest: its ready time is the third
-- field of either entry version.
local age = -1
local head = redis.call('LINDEX', KEYS[2], '0')
if head then
  local t = string.match(head, '^[12]|%d+|(%d+)|')
  if t and #t <= 13 then age = math.max(0, now - tonumber(t)) end
end
local fields = {'offered', 'delivered', 'acked', 'nacked', 'dead', 'expired', 'lat_sum'}
for b = 1, #LAT_MS + 1 do fields[#fields + 1] = 'lat:' .. nstr(b) end
local out = {math.max(c[1], 0), ready, fmt(next_in), redis.call('LLEN', KEYS[3]), math.max(c[2], 0),
             redis.call('ZCARD', KEYS[5]), fmt(age)}
local v = redis.call('HMGET', KEYS[4], unpack(fields))
for i = 1, #fields do out[#out + 1] = v[i] or false end
out[#out + 1] = c[4]
out[#out + 1] = queue_epoch()
out[#out + 1] = seen.schedulers_live(ARGV[1], now)
out[#out + 1] = fmt(next_due >= 0 and math.max(0, now - next_due) or 0)
out[#out + 1] = recur.count(ARGV[1])
return out
