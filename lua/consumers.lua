-- consumers.lua: the live consumers of a queue, read only (see Consumers
-- in lib/75_holders.lua).
-- KEYS[1] the consumers (P..'c'), KEYS[2] their details (P..'ci').
-- Returns {now_ms, then name, started_ms, in_hand, last_seen_ms for each
-- consumer whose beat still counts (at most 1000, by name)}: one whose
-- beats stopped is left out at once, whether or not a beat pruned it yet.
-- What a writer planted is left out too: a name no beat takes (over 64
-- bytes; the client leaves out one of bad bytes), details that are not
-- three numbers of 1..15 digits. So the reply stays small, and one planted
-- entry hides no other.
-- A key of another type is an error that names it.
local bad = require_type(KEYS[1], 'zset') or require_type(KEYS[2], 'hash')
if bad then return bad end
local now = server_now_ms()
local names = redis.call('ZRANGEBYSCORE', KEYS[1], fmt(now), '+inf', 'LIMIT', 0, 1000)
table.sort(names)
local out = {fmt(now)}
if #names == 0 then return out end
local details = redis.call('HMGET', KEYS[2], unpack(names))
for i, name in ipairs(names) do
  local d = details[i]
  local started, hand, last = nil, nil, nil
  if type(d) == 'string' and #name <= seen.HOLDER_MAX then
    started, hand, last = string.match(d, '^(%d+)|(%d+)|(%d+)$')
  end
  if started and uint_of(started, 15, DUE_MAX) and uint_of(hand, 15, DUE_MAX) and uint_of(last, 15, DUE_MAX) then
    out[#out + 1] = name
    out[#out + 1] = started
    out[#out + 1] = hand
    out[#out + 1] = last
  end
end
return out
