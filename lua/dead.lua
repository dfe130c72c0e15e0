-- dead.lua: the dead letters of a queue.
-- KEYS[1] dead letters, KEYS[2] dead times, KEYS[3] ready list, KEYS[4] wake
-- tokens; ARGV[1] key prefix, ARGV[2] operation, then:
--   'list' offset limit  -> flat {id, died, attempts, due, reason, err, payload}*
--   'count'              -> n
--   'redrive' id         -> 1 if moved back to the ready list, else 0
--   'redrive_all' limit  -> {looked at, moved} (call again until 0 looked at)
--   'purge' limit        -> {looked at, deleted} (call again until 0)
-- A redriven item starts over: attempts 0, due now. An id that is active
-- again (pending, ready or in flight) is dropped from the dead letters
-- instead, so redrive never makes a second copy.
local dead, deadz, ready, sig = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P, op = ARGV[1], ARGV[2]

local function parse_dead(rec)
  local died, a, d, rl, el, pos = string.match(rec, '^1|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  if not died then return nil end
  rl, el = tonumber(rl), tonumber(el)
  return {died = died, attempts = a, due = d, reason = string.sub(rec, pos, pos + rl - 1),
          err = string.sub(rec, pos + rl, pos + rl + el - 1), payload = string.sub(rec, pos + rl + el)}
end

local function redrive(id, now)
  local rec = redis.call('HGET', dead, id)
  redis.call('HDEL', dead, id)
  redis.call('ZREM', deadz, id)
  if not rec then return 0 end
  local r = parse_dead(rec)
  if not r then return 0 end
  local active, ik = id_score(P, id)
  if active then return 0 end
  redis.call('RPUSH', ready, ready_entry(now, now, id, r.payload))
  id_set(ik, id, now * ORD)
  redis.pcall('RPUSH', sig, '1')
  return 1
end

if op == 'count' then return redis.call('ZCARD', deadz) end
if op == 'list' then
  local off, lim = tonumber(ARGV[3]), tonumber(ARGV[4])
  local ids = redis.call('ZRANGE', deadz, off, off + lim - 1)
  local out = {}
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', dead, id)
    local r = rec and parse_dead(rec)
    if r then
      local k = #out
      out[k + 1], out[k + 2], out[k + 3], out[k + 4] = id, r.died, r.attempts, r.due
      out[k + 5], out[k + 6], out[k + 7] = r.reason, r.err, r.payload
    end
  end
  return out
end
local err = require_type(ready, 'list')
if err then return err end
if op == 'redrive' then return redrive(ARGV[3], server_now_ms()) end
if op == 'redrive_all' or op == 'purge' then
  local ids = redis.call('ZRANGE', deadz, 0, tonumber(ARGV[3]) - 1)
  local now, n = server_now_ms(), 0
  for _, id in ipairs(ids) do
    if op == 'purge' then
      redis.call('HDEL', dead, id)
      redis.call('ZREM', deadz, id)
      n = n + 1
    else
      n = n + redrive(id, now)
    end
  end
  return {#ids, n}
end
return redis.error_reply('ERR delayq: unknown dead-letter operation ' .. tostring(op))
