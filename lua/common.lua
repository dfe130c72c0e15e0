-- common.lua: prepended to every delayq script at build time.
--
-- Data layout of queue Q (all keys share the hash tag {Q}, one cluster slot):
--   dq:{Q}:z        ZSET  timed ids: pending items (score = due_ms * ORD +
--                         ordinal) and items in flight (score = lease end * ORD)
--   dq:{Q}:p:<n>    HASH  id -> record, n = (due + ordinal) % BUCKETS
--   dq:{Q}:r        LIST  ready entries, oldest first
--   dq:{Q}:rs       SET   ids in the ready list (so an id is never queued twice)
--   dq:{Q}:s        LIST  wake tokens, one per ready entry: a waiting consumer
--                         BLPOPs one, so each entry wakes one waiter, not all
--   dq:{Q}:x        LIST  set-aside entries "1|reason|idlen|<id><raw>"
--   dq:{Q}:d        HASH  dead letters: id -> dead record
--   dq:{Q}:dz       ZSET  dead letters by time of death (ms)
--   dq:{Q}:n        HASH  counters: inflight
--   dq:{Q}:t:<req> STRING a take's result, until its taker has the reply
--                         (60 s at most): a retried take replays it
--   dq:{Q}:cfg      HASH  the queue's settings: lease_ms, max_attempts,
--                         backoff_base_ms, backoff_max_ms (absent: defaults)
--   dq:{Q}:w        channel: the earliest due time in z (ms), or -1
-- The ordinal (0..ORD-1) keeps equal due times in offer order; it costs no
-- key and no member bytes. Records are bucketed so each hash stays a small
-- listpack (about 45 bytes an item instead of 100 for one big hash).
--
-- Formats (the first byte is the format version):
--   record v1  "1" .. payload                      never delivered yet
--   record v2  "2|attempts|max|due|tlen|elen|" .. token .. err .. payload
--              token ~= '': in flight (score = lease end); else a retry
--   ready v1   "1|due|ready|idlen|" .. id .. payload          attempts 0
--   ready v2   "2|due|ready|attempts|idlen|elen|" .. id .. err .. payload
--   dead       "1|died|attempts|due|rlen|elen|" .. reason .. err .. payload
-- Numbers are formatted with %.0f: Lua 5.1's tostring keeps only 14 digits
-- (numbers passed to redis.call are converted exactly, with %.17g).
local ORD = 2048
local BUCKETS = 8192
local DUE_MAX = 4398046511103

local function fmt(n) return string.format('%.0f', n) end

local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function server_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Fails the script before it writes anything if key holds another type.
local function require_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    return redis.error_reply('WRONGTYPE delayq: key ' .. key .. ' holds a ' .. got .. ', expected a ' .. want)
  end
  return nil
end

-- The payload bucket of a score: (due + ordinal) % BUCKETS, which spreads
-- consecutive milliseconds over consecutive buckets. (Not score % BUCKETS:
-- ORD divides BUCKETS, so that would use only BUCKETS / ORD buckets.)
local function bucket_key(prefix, score)
  return prefix .. fmt((math.floor(score / ORD) + score % ORD) % BUCKETS)
end

local function ready_entry(due, ready, id, payload)
  return '1|' .. fmt(due) .. '|' .. fmt(ready) .. '|' .. #id .. '|' .. id .. payload
end

local function aside_entry(reason, id, raw)
  return '1|' .. reason .. '|' .. #id .. '|' .. id .. (raw or '')
end

-- The queue's settings, for the arguments given as -1 ("the queue's").
local CFG_DEFAULTS = {lease_ms = 30000, max_attempts = 16, backoff_base_ms = 1000,
                      backoff_max_ms = 600000}
local function queue_setting(cfg, field, given)
  if given >= 0 then return given end
  local v = redis.call('HGET', cfg, field)
  return v and tonumber(v) or CFG_DEFAULTS[field]
end

-- Pushes n wake tokens (one per entry made ready).
local function signal(sig, n)
  while n > 0 do
    local k = math.min(n, 100)
    local t = {}
    for i = 1, k do t[i] = '1' end
    redis.call('RPUSH', sig, unpack(t))
    n = n - k
  end
end

local function earliest_due(z)
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if first[2] == nil then return -1, nil end
  local score = tonumber(first[2])
  return math.floor(score / ORD), score
end

-- Records and entries ------------------------------------------------------

-- A record as a table, or nil if it cannot be decoded. score: its z score.
local function parse_record(rec, score)
  local v = string.sub(rec, 1, 1)
  if v == '1' then
    return {attempts = 0, max = 0, due = math.floor(score / ORD), token = '', err = '',
            payload = string.sub(rec, 2)}
  end
  if v ~= '2' then return nil end
  local a, m, d, tl, el, pos = string.match(rec, '^2|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  if not a then return nil end
  tl, el = tonumber(tl), tonumber(el)
  if pos + tl + el - 1 > #rec then return nil end
  return {attempts = tonumber(a), max = tonumber(m), due = tonumber(d),
          token = string.sub(rec, pos, pos + tl - 1),
          err = string.sub(rec, pos + tl, pos + tl + el - 1),
          payload = string.sub(rec, pos + tl + el)}
end

local function record_v2(r)
  return '2|' .. r.attempts .. '|' .. r.max .. '|' .. fmt(r.due) .. '|' .. #r.token .. '|' ..
         #r.err .. '|' .. r.token .. r.err .. r.payload
end

-- The ready entry of a record that becomes ready now.
local function ready_entry_of(r, id, now)
  if r.attempts == 0 and r.err == '' then return ready_entry(r.due, now, id, r.payload) end
  return '2|' .. fmt(r.due) .. '|' .. fmt(now) .. '|' .. r.attempts .. '|' .. #id .. '|' ..
         #r.err .. '|' .. id .. r.err .. r.payload
end

-- A ready entry as a table, or nil if it cannot be decoded.
local function parse_entry(e)
  local v = string.sub(e, 1, 1)
  local d, rd, a, il, el, pos
  if v == '1' then
    d, rd, il, pos = string.match(e, '^1|(%d+)|(%d+)|(%d+)|()')
    a, el = 0, 0
  elseif v == '2' then
    d, rd, a, il, el, pos = string.match(e, '^2|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  end
  if not d then return nil end
  il, el = tonumber(il), tonumber(el)
  if il < 1 or pos + il + el - 1 > #e then return nil end
  return {due = tonumber(d), ready = tonumber(rd), attempts = tonumber(a),
          id = string.sub(e, pos, pos + il - 1), err = string.sub(e, pos + il, pos + il + el - 1),
          payload = string.sub(e, pos + il + el)}
end

local function dead_record(r, reason, now)
  return '1|' .. fmt(now) .. '|' .. r.attempts .. '|' .. fmt(r.due) .. '|' .. #reason .. '|' ..
         #r.err .. '|' .. reason .. r.err .. r.payload
end

-- Moves a record to the dead letters of the queue.
local function bury(dead, deadz, id, r, reason, now)
  redis.call('HSET', dead, id, dead_record(r, reason, now))
  redis.call('ZADD', deadz, now, id)
end

-- The record of a leased id if token matches, as (record, score, bucket);
-- nil if the id is unknown, not in flight, or the token is stale: another
-- lease's, or one that has ended (now, server ms, is at or past its end),
-- even if no scheduler has returned the item yet.
local function leased_record(z, prefix, id, token, now)
  local s = redis.call('ZSCORE', z, id)
  if not s then return nil end
  local score = tonumber(s)
  if math.floor(score / ORD) <= now then return nil end
  local bucket = bucket_key(prefix, score)
  local rec = redis.call('HGET', bucket, id)
  local r = rec and parse_record(rec, score)
  if not r or r.token == '' or r.token ~= token then return nil end
  return r, score, bucket
end

-- Publishes the new earliest due time if score is now the first in z.
local function announce_if_first(z, chan, score, due)
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) >= score then redis.call('PUBLISH', chan, due) end
end
