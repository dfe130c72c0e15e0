-- take.lua: pops up to N ready entries for a consumer, atomically.
-- KEYS[1] z, KEYS[2] ready list, KEYS[3] ready ids, KEYS[4] set-aside list,
-- KEYS[5] counters, KEYS[6] wake tokens, KEYS[7] queue settings
-- ARGV[1] payload bucket prefix, ARGV[2] wake channel, ARGV[3] N,
-- ARGV[4] lease ms (0: no lease, the entries are simply handed out; -1: the
-- queue's setting),
-- ARGV[5] token prefix (unique per call; the token of entry i is prefix..i),
-- ARGV[6] max attempts recorded with a lease (0: no limit; -1: the queue's),
-- ARGV[7] '1' if the caller was woken by a token it popped (BLPOP),
-- ARGV[8] the call's result key (dq:{Q}:t:<token prefix>): the result is kept
-- there for 60 s, and a call repeated with the same key (its reply was lost
-- with the connection) gets the same result back instead of popping more, so
-- a take whose reply is lost loses nothing. The caller deletes the key once
-- it has the reply.
-- One wake token goes with each entry taken (the caller's own counts), so
-- the tokens left match the entries left.
-- With a lease each entry goes into z, scored by the lease's end, with a
-- record holding its token; the scheduler returns it to the ready list when
-- the lease runs out, unless ack, nack or extend comes first with the token.
-- Returns a flat array, six fields per message:
--   id, payload, due_ms, ready_ms, attempt, token ('' without a lease).
local z, ready, rs, aside, counters, sig = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, chan = ARGV[1], ARGV[2]
local count, lease, tprefix, max = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])

-- Everything this script writes after the LPOP must not fail half way.
local err = require_type(rs, 'set') or require_type(z, 'zset')
if err then return err end
local replay = redis.call('GET', ARGV[8])
if replay then return cmsgpack.unpack(replay) end
local entries = redis.call('LPOP', ready, count)
if not entries then
  -- Nothing ready, so no token is owed: drop strays (from takes that
  -- found their entry taken by a caller that was not woken).
  redis.pcall('DEL', sig)
  return {}
end
local owed = #entries - (ARGV[7] == '1' and 1 or 0)
if owed > 0 then redis.pcall('LPOP', sig, owed) end

local now = server_now_ms()
lease = queue_setting(KEYS[7], 'lease_ms', lease)
if lease > 0 then max = queue_setting(KEYS[7], 'max_attempts', max) end
local deadline = now + lease
local score = deadline * ORD
local first_before = nil
if lease > 0 then first_before = select(2, earliest_due(z)) end
local out, ids, bad, leased = {}, {}, {}, 0
for i, e in ipairs(entries) do
  local m = parse_entry(e)
  if not m then
    bad[#bad + 1] = aside_entry('undecodable ready entry', '', e)
  else
    ids[#ids + 1] = m.id
    m.attempts = m.attempts + 1
    local token = ''
    if lease > 0 then
      token = tprefix .. i
      redis.call('HSET', bucket_key(prefix, score), m.id, record_v2({attempts = m.attempts,
        max = max, due = m.due, token = token, err = m.err, payload = m.payload}))
      redis.call('ZADD', z, score, m.id)
      leased = leased + 1
    end
    local k = #out
    out[k + 1], out[k + 2], out[k + 3] = m.id, m.payload, fmt(m.due)
    out[k + 4], out[k + 5], out[k + 6] = fmt(m.ready), m.attempts, token
  end
end
if #ids > 0 then redis.call('SREM', rs, unpack(ids)) end
if #bad > 0 then redis.pcall('RPUSH', aside, unpack(bad)) end
if leased > 0 then
  redis.pcall('HINCRBY', counters, 'inflight', leased)
  if first_before == nil or score < first_before then redis.call('PUBLISH', chan, fmt(deadline)) end
end
if #out > 0 then redis.call('SET', ARGV[8], cmsgpack.pack(out), 'PX', 60000) end
return out
