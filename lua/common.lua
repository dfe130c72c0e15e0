-- common.lua: prepended to every delayq script at build time.
--
-- Data layout of queue Q (all keys share the hash tag {Q}, one cluster slot):
--   dq:{Q}:z        ZSET  pending ids; score = due_ms * ORD + ordinal
--   dq:{Q}:p:<n>    HASH  id -> "1" .. payload, n = score % BUCKETS
--   dq:{Q}:r        LIST  ready entries "1|due|ready|idlen|<id><payload>"
--   dq:{Q}:x        LIST  set-aside entries "1|reason|idlen|<id><raw>"
--   dq:{Q}:w        channel: the earliest pending due time (ms) or -1
-- The ordinal (0..ORD-1) keeps equal due times in offer order; it costs no
-- key and no member bytes. Payload hashes are bucketed so each stays a small
-- listpack (about 45 bytes an item instead of 100 for one big hash).
-- Every value starts with the format version "1".
-- Numbers are formatted with %.0f: Lua 5.1's tostring keeps only 14 digits.
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

local function bucket_key(prefix, score) return prefix .. fmt(score % BUCKETS) end

local function ready_entry(due, ready, id, payload)
  return '1|' .. fmt(due) .. '|' .. fmt(ready) .. '|' .. #id .. '|' .. id .. payload
end

local function aside_entry(reason, id, raw)
  return '1|' .. reason .. '|' .. #id .. '|' .. id .. (raw or '')
end

local function earliest_due(z)
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if first[2] == nil then return -1, nil end
  local score = tonumber(first[2])
  return math.floor(score / ORD), score
end
