-- beat.lua: a consumer of the queue says it is alive, or that it is gone
-- (see Consumers in lib/75_holders.lua).
-- KEYS[1] the consumers (P..'c'), KEYS[2] their details (P..'ci');
-- ARGV[1] 'beat' or 'bye', ARGV[2] the consumer's name (1..64 bytes, no
-- control byte), ARGV[3] (beat) items in hand (0..999999999), ARGV[4]
-- (beat) how long the beat counts, in ms (1..3600000).
-- A beat keeps the consumer's start (the server's time of its first beat
-- since it was last pruned), sets its items in hand and last seen (the
-- server's TIME), and prunes at most 100 consumers whose beats ran out.
-- Both keys expire a minute after the last beat of any consumer, so a
-- queue nobody consumes any more keeps nothing. Returns 1, or an error for
-- bad arguments (nothing written).
local live, info = KEYS[1], KEYS[2]
local op, name = ARGV[1], ARGV[2] or ''
-- A control byte is refused here too, not only by the client: a queue
-- user may call this with any bytes (see dq__holder_valid).
if #name < 1 or #name > seen.HOLDER_MAX or string.find(name, '[%z\1-\31\127]') then
  return redis.error_reply('ERR delayq:input bad consumer name')
end
if op == 'bye' then
  redis.call('ZREM', live, name)
  redis.call('HDEL', info, name)
  return 1
end
local hand, lasts = tonumber(ARGV[3] or ''), tonumber(ARGV[4] or '')
if op ~= 'beat' or not hand or hand < 0 or hand > 999999999 or hand % 1 ~= 0 or not lasts or lasts < 1 or lasts > 3600000 then
  return redis.error_reply('ERR delayq:input bad consumer beat')
end
local now = server_now_ms()
local started = now
local old = redis.call('HGET', info, name)
if type(old) == 'string' then started = uint_of(string.match(old, '^(%d+)|'), 15, now) or now end
redis.call('ZADD', live, fmt(now + lasts), name)
redis.call('HSET', info, name, fmt(started) .. '|' .. fmt(hand) .. '|' .. fmt(now))
local gone = redis.call('ZRANGEBYSCORE', live, '-inf', '(' .. fmt(now), 'LIMIT', 0, 100)
for _, g in ipairs(gone) do
  redis.call('ZREM', live, g)
  redis.call('HDEL', info, g)
end
redis.call('PEXPIRE', live, fmt(lasts + 60000))
redis.call('PEXPIRE', info, fmt(lasts + 60000))
return 1
