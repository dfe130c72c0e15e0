-- transfer.lua: moves due items from z to the ready list: pending items whose
-- due time came, and items in flight whose lease ran out (those count an
-- attempt; past their max attempts they go to the dead letters instead).
-- KEYS[1] z, KEYS[2] ready list, KEYS[3] set-aside list, KEYS[4] ready ids,
-- KEYS[5] counters, KEYS[6] dead letters, KEYS[7] dead-letter times,
-- KEYS[8] wake tokens
-- ARGV[1] payload bucket prefix, ARGV[2] wake channel,
-- ARGV[3] most items to handle, ARGV[4] time budget in microseconds,
-- ARGV[5] '1' to also top the wake tokens up to the ready entries (catch-up
-- and safety runs: a token can be lost with a consumer that died between
-- its BLPOP and its take; not on every run, where consumers woken but not
-- yet taking would make it add tokens nobody needs).
-- Works in chunks and stops at the count or time budget, so Redis is never
-- blocked for long; the caller runs it again while 'more' is 1.
-- An entry it cannot decode goes to the set-aside list with a reason, so one
-- bad entry never blocks the queue.
-- Returns {moved, set_aside, next_due_ms or -1, start_us, more, expired,
-- buried}: start_us is the server's clock when the run began, which clients
-- use to map due times onto their own clocks.
local z, ready, aside, rs, counters, dead, deadz = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local sig = KEYS[8]
local prefix, chan = ARGV[1], ARGV[2]
local max_items, budget_us = tonumber(ARGV[3]), tonumber(ARGV[4])
local CHUNK = 100

local start_us = server_now_us()
local now = math.floor(start_us / 1000)
local limit = '(' .. fmt((now + 1) * ORD)
local moved, set_aside, done, expired, buried = 0, 0, 0, 0, 0

while done < max_items do
  local want = math.min(CHUNK, max_items - done)
  local items = redis.call('ZRANGEBYSCORE', z, '-inf', limit, 'WITHSCORES', 'LIMIT', 0, want)
  local n = #items / 2
  if n == 0 then break end
  if done == 0 then
    -- Checked before the first write, and only when there is work: the
    -- ZRANGEBYSCORE above already failed if z is not a zset.
    local err = require_type(ready, 'list') or require_type(aside, 'list') or
                require_type(rs, 'set')
    if err then return err end
  end
  local ids, out, ready_ids, bad = {}, {}, {}, {}
  for i = 1, #items, 2 do
    local id, score = items[i], tonumber(items[i + 1])
    ids[#ids + 1] = id
    local bucket = bucket_key(prefix, score)
    local rec = redis.pcall('HGET', bucket, id)
    local r = nil
    if type(rec) == 'table' and rec['err'] then
      bad[#bad + 1] = aside_entry('payload bucket ' .. bucket .. ' is not a hash', id, nil)
    elseif not rec then
      bad[#bad + 1] = aside_entry('no payload record', id, nil)
    else
      r = parse_record(rec, score)
      if not r then bad[#bad + 1] = aside_entry('unknown record format', id, rec) end
      redis.call('HDEL', bucket, id)
    end
    if r and r.token ~= '' then
      -- A lease ran out: its consumer died or stalled.
      expired = expired + 1
      r.token = ''
      if r.max > 0 and r.attempts >= r.max then
        bury(dead, deadz, id, r, 'lease expired on attempt ' .. r.attempts .. ' of ' .. r.max, now)
        buried = buried + 1
        r = nil
      end
    end
    if r then
      out[#out + 1] = ready_entry_of(r, id, now)
      ready_ids[#ready_ids + 1] = id
    end
  end
  redis.call('ZREM', z, unpack(ids))
  if #out > 0 then
    redis.call('RPUSH', ready, unpack(out))
    redis.call('SADD', rs, unpack(ready_ids))
    signal(sig, #out)
  end
  if #bad > 0 then redis.call('RPUSH', aside, unpack(bad)) end
  moved, set_aside, done = moved + #out, set_aside + #bad, done + n
  if n < want or server_now_us() - start_us >= budget_us then break end
end
if expired > 0 then redis.pcall('HINCRBY', counters, 'inflight', -expired) end
if ARGV[5] == '1' then
  local have = redis.pcall('LLEN', sig)
  if type(have) == 'number' then
    local missing = redis.call('LLEN', ready) - have
    if missing > 0 then signal(sig, math.min(missing, 1000)) end
  end
end

local next_due = earliest_due(z)
local more = 0
if next_due >= 0 and next_due <= now and done > 0 then more = 1 end
if done > 0 then
  -- Tells the other schedulers of this queue that this deadline is served.
  redis.call('PUBLISH', chan, fmt(next_due))
end
return {moved, set_aside, fmt(next_due), fmt(start_us), more, expired, buried}
