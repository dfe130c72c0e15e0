-- transfer.lua: moves due items from the pending zset to the ready list.
-- KEYS[1] z, KEYS[2] ready list, KEYS[3] set-aside list
-- ARGV[1] payload bucket prefix, ARGV[2] wake channel,
-- ARGV[3] most items to handle, ARGV[4] time budget in microseconds.
-- Works in chunks and stops at the count or time budget, so Redis is never
-- blocked for long; the caller runs it again while 'more' is 1.
-- An entry it cannot decode goes to the set-aside list with a reason, so one
-- bad entry never blocks the queue.
-- Returns {moved, set_aside, next_due_ms or -1, start_us, more}: start_us is
-- the server's clock when the run began, which clients use to map due times
-- onto their own clocks.
local z, ready, aside = KEYS[1], KEYS[2], KEYS[3]
local prefix, chan = ARGV[1], ARGV[2]
local max_items, budget_us = tonumber(ARGV[3]), tonumber(ARGV[4])
local CHUNK = 100

local start_us = server_now_us()
local now = math.floor(start_us / 1000)
local limit = '(' .. fmt((now + 1) * ORD)
local moved, set_aside, done = 0, 0, 0

while done < max_items do
  local want = math.min(CHUNK, max_items - done)
  local items = redis.call('ZRANGEBYSCORE', z, '-inf', limit, 'WITHSCORES', 'LIMIT', 0, want)
  local n = #items / 2
  if n == 0 then break end
  if done == 0 then
    -- Checked before the first write, and only when there is work: the
    -- ZRANGEBYSCORE above already failed if z is not a zset.
    local err = require_type(ready, 'list') or require_type(aside, 'list')
    if err then return err end
  end
  local ids, out, bad = {}, {}, {}
  for i = 1, #items, 2 do
    local id, score = items[i], tonumber(items[i + 1])
    ids[#ids + 1] = id
    local bucket = bucket_key(prefix, score)
    local rec = redis.pcall('HGET', bucket, id)
    if type(rec) == 'table' and rec['err'] then
      bad[#bad + 1] = aside_entry('payload bucket ' .. bucket .. ' is not a hash', id, nil)
    elseif not rec then
      bad[#bad + 1] = aside_entry('no payload record', id, nil)
    elseif string.sub(rec, 1, 1) ~= '1' then
      bad[#bad + 1] = aside_entry('unknown record format', id, rec)
      redis.call('HDEL', bucket, id)
    else
      out[#out + 1] = ready_entry(math.floor(score / ORD), now, id, string.sub(rec, 2))
      redis.call('HDEL', bucket, id)
    end
  end
  redis.call('ZREM', z, unpack(ids))
  if #out > 0 then redis.call('RPUSH', ready, unpack(out)) end
  if #bad > 0 then redis.call('RPUSH', aside, unpack(bad)) end
  moved, set_aside, done = moved + #out, set_aside + #bad, done + n
  if n < want or server_now_us() - start_us >= budget_us then break end
end

local next_due = earliest_due(z)
local more = 0
if next_due >= 0 and next_due <= now and done > 0 then more = 1 end
if done > 0 then
  -- Tells the other schedulers of this queue that this deadline is served.
  redis.call('PUBLISH', chan, fmt(next_due))
end
return {moved, set_aside, fmt(next_due), fmt(start_us), more}
