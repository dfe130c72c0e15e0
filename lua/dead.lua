-- dead.lua: the dead letters of a queue.
-- KEYS[1] dead letters, KEYS[2] dead times, KEYS[3] ready list, KEYS[4] wake
-- tokens, KEYS[5] counters (optional: with ARGV[5], the shard count the
-- client routed by, checked as shards_refusal does); ARGV[1] key prefix,
-- ARGV[2] operation, then (padded with '' to ARGV[4] when ARGV[5] is given):
--   'list' offset limit  -> flat {id, died, attempts, due, reason, err, payload}*,
--                           one per member of the dead times examined, in
--                           order (so a caller pages by offset + entries):
--                           a dead letter that does not decode comes as
--                           {id, 0, 0, 0, 'undecodable', '', raw bytes},
--                           one whose record is missing with reason
--                           'missing record' and no bytes
--   'count'              -> n
--   'redrive' id         -> 1 if moved back to the ready list, else 0
--   'redrive_all' limit  -> {looked at, moved} (call again until 0 looked at)
--   'purge' limit        -> {looked at, deleted} (call again until 0)
-- A redriven item starts over: attempts 0, due now. An id that is active
-- again (pending, ready or in flight) is dropped from the dead letters
-- instead, so redrive never makes a second copy. A dead letter is never
-- dropped otherwise: one that does not decode, or whose id breaks the id
-- rule, goes to the set-aside list (P..'x') with a reason and its raw bytes
-- instead of back to the ready list. Each redrive reads and checks first,
-- then writes; dead-letter keys of another type are an error (nothing
-- written), a ready list of another type is renamed away. Bounded: limit
-- is an argument (1..100000), never a number read from Redis.
-- Can fail after writing only on an OOM.
local dead, deadz, ready, sig = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P, op = ARGV[1], ARGV[2]
if KEYS[5] then
  local shards, serr = read_shard_count(KEYS[5])
  serr = serr or shards_refusal(shards, ARGV[5])
  if serr then return serr end
end

-- A dead record as a table, or nil if it does not decode.
local function parse_dead(rec)
  local died, a, d, rl, el, pos = string.match(rec, '^1|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  if not died or #rl > 4 or #el > 9 then return nil end
  died, a, d = uint_of(died, 13, DUE_MAX), uint_of(a, 9, ATTEMPTS_MAX), uint_of(d, 13, DUE_MAX)
  rl, el = tonumber(rl), tonumber(el)
  if not died or not a or not d or pos + rl + el - 1 > #rec then return nil end
  return {died = fmt(died), attempts = fmt(a), due = fmt(d), reason = string.sub(rec, pos, pos + rl - 1),
          err = string.sub(rec, pos + rl, pos + rl + el - 1), payload = string.sub(rec, pos + rl + el)}
end

local function forget(id)
  redis.call('HDEL', dead, id)
  redis.call('ZREM', deadz, id)
end

local function redrive(id, now)
  -- Reads.
  local rec = redis.call('HGET', dead, id)
  if not rec then
    redis.call('ZREM', deadz, id) -- a time without a letter: nothing to keep
    return 0
  end
  local r = parse_dead(rec)
  local why = (not r and 'undecodable dead letter') or (not id_ok(id) and 'dead letter with an invalid id')
  local active, ik
  if not why then
    active, ik = id_score(P, id)
    active = active or id_wheel_in(P, ik, id) -- pending in the timing wheel
    active = active or near.id_in(P, ik, id) -- pending in a near list
  end
  -- Writes.
  forget(id)
  if why then
    set_aside(P, {aside_entry(why, id, rec)})
    return 0
  end
  if active then return 0 end
  redis.call('RPUSH', ready, ready_entry(now, now, id, r.payload))
  id_set(P, ik, id, now * ORD)
  kcall(P, 'RPUSH', sig, '1')
  return 1
end

local err = require_type(dead, 'hash') or require_type(deadz, 'zset')
if err then return err end
if op == 'count' then return redis.call('ZCARD', deadz) end
if op == 'list' then
  local off, lim = uint_of(ARGV[3], 10, 2147483647), uint_of(ARGV[4], 6, 100000)
  if not off or not lim or lim < 1 then
    return redis.error_reply('ERR delayq:proto malformed dead-letter list arguments')
  end
  local ids = redis.call('ZRANGE', deadz, fmt(off), fmt(off + lim - 1))
  local out = {}
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', dead, id)
    local r = rec and parse_dead(rec)
    local k = #out
    if r then
      out[k + 1], out[k + 2], out[k + 3], out[k + 4] = id, r.died, r.attempts, r.due
      out[k + 5], out[k + 6], out[k + 7] = r.reason, r.err, r.payload
    else
      out[k + 1], out[k + 2], out[k + 3], out[k + 4] = id, '0', '0', '0'
      out[k + 5], out[k + 6], out[k + 7] = rec and 'undecodable' or 'missing record', '', rec or ''
    end
  end
  return out
end
if op == 'redrive' then
  ensure_type(P, ready, 'list')
  return redrive(ARGV[2 + 1], server_now_ms())
end
if op == 'redrive_all' or op == 'purge' then
  local lim = uint_of(ARGV[3], 6, 100000)
  if not lim or lim < 1 then return redis.error_reply('ERR delayq:proto malformed dead-letter arguments') end
  ensure_type(P, ready, 'list')
  local ids = redis.call('ZRANGE', deadz, '0', fmt(lim - 1))
  local now, n = server_now_ms(), 0
  for _, id in ipairs(ids) do
    if op == 'purge' then
      forget(id)
      n = n + 1
    else
      n = n + redrive(id, now)
    end
  end
  return {#ids, n}
end
return redis.error_reply('ERR delayq:proto unknown dead-letter operation ' .. quoted(tostring(op)))
