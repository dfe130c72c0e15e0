-- recurring.lua: sets, changes, pauses, resumes and removes a queue's
-- recurring schedules (see lib/80_recurring.lua for the keys, the spec and
-- how ticks become items; schedules.lua lists them).
-- KEYS[1] slot index, KEYS[2] counters
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] the operation, then:
--   set NAME EVERY_MS START_MS STOP_MS MISSED TEXT PAYLOAD [cron ZONE]
--       START_MS 0: the first tick is one interval from now; STOP_MS 0:
--       never. Replaces a schedule of that name (the new first tick is
--       computed from now). Returns the first tick (-1: none before
--       STOP_MS). With 'cron ZONE' (EVERY_MS 0, TEXT the expression), the
--       schedule waits for its ticks: returns the server's time, after which
--       the client computes them (refill).
--   refill NAME WLAST TICK...
--       A cron schedule's next ticks (ascending, after WLAST; none: no more
--       will come), added if its window still ends at WLAST (else another
--       client added them first). Returns its next tick (-2: still waiting).
--   remove NAME | pause NAME | resume NAME
--       Returns 1, or 0 for a name the queue has no schedule of.
-- The operation may come as 'OP/COUNT', COUNT the shard count the client
-- routed by: a schedule lives in the shard its name picks (as an offer's
-- id does), so another count is refused ('DQSHARDS n') before any write,
-- and the client routes again. Without COUNT (a refill, sent to the keys
-- whose transfer asked for it), 'set' is refused on a sharded queue's keys.
local zs, counters = KEYS[1], KEYS[2]
local P, chan, name = ARGV[1], ARGV[2], ARGV[4]
local op, want = string.match(ARGV[3] or '', '^(%a+)/?(%d*)$')
if not op then return redis.error_reply('ERR delayq:proto unknown schedule operation') end

local counts, err = read_counters(counters)
err = err or shards_refusal(counts[4], want)
if err then return err end
if want == '' and op == 'set' and counts[4] ~= 1 then
  return redis.error_reply('ERR delayq:proto recurring schedules of a queue of ' .. fmt(counts[4]) ..
                           ' shards are set by their shard count')
end
ensure_type(P, recur.sched_key(P), 'hash')
ensure_type(P, recur.payload_key(P), 'hash')
ensure_type(P, recur.state_key(P), 'hash')
ensure_type(P, recur.buckets_key(P), 'zset')
local now = server_now_ms()

if not recur.name_ok(name) then
  return redis.error_reply('ERR delayq:proto malformed schedule name')
end

-- A schedule of the previous release becomes today's before it changes
-- (see lib/85_recurring_v1.lua).
local v1 = recur.v1_decode(redis.pcall('HGET', recur.sched_key(P), name))
if v1 then recur.v1_migrate(P, zs, counters, chan, name, v1, now, nil, recur.bound(P, zs)) end

local s = recur.spec_read(P, name)
local function payload_of()
  local v = redis.pcall('HGET', recur.payload_key(P), name)
  return type(v) == 'string' and v or ''
end
local last, nxt = -1, -1
if s then last, nxt = recur.current(P, name, s, payload_of()) end

if op == 'set' then
  local every, start, stop = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  local missed, text, payload = ARGV[8], ARGV[9], ARGV[10]
  if not every or every < 0 or every > DUE_MAX or every % 1 ~= 0 or not start or start < 0 or
     start > DUE_MAX or start % 1 ~= 0 or not stop or stop < 0 or stop > DUE_MAX or stop % 1 ~= 0 or
     (missed ~= 'skip' and missed ~= 'one' and missed ~= 'all') or not text or not payload or
     (ARGV[11] and (ARGV[11] ~= 'cron' or not ARGV[12] or #ARGV[12] > 200)) or
     (not ARGV[11] and every < 1000) then
    return redis.error_reply('ERR delayq:proto malformed schedule arguments')
  end
  if s and s.paused == 0 then recur.leave(P, name, s, nxt, payload_of()) end -- its old tick
  if not s then recur.leave_named(P, name) end -- a spec that does not decode: any tick
  s = {v = 2, kind = 'every', every = every, start = start > 0 and start or now, stop = stop,
       missed = missed, paused = 0, text = text, zone = '', plen = #payload}
  redis.call('HSET', recur.payload_key(P), name, payload)
  if ARGV[11] then
    s.kind, s.every, s.start, s.zone, s.win, s.wlast = 'cron', 0, start, ARGV[12], {}, -1
    recur.spec_write(P, name, s)
    recur.state_write(P, name, last, -2)
    return now
  end
  local bound = recur.bound(P, zs)
  local t = recur.after(s, now)
  recur.spec_write(P, name, s)
  recur.state_write(P, name, last, t)
  recur.enter(P, chan, name, s, t, payload, bound)
  return t
end

if op == 'remove' then
  if redis.call('HEXISTS', recur.sched_key(P), name) == 0 then
    -- No spec, but maybe a member left ticking, and a state (see
    -- recur.leave_named): 1 if there was either.
    local had = redis.call('HDEL', recur.state_key(P), name)
    return (recur.leave_named(P, name) > 0 or had == 1) and 1 or 0
  end
  if s and s.paused == 0 then recur.leave(P, name, s, nxt, payload_of()) end
  if not s then recur.leave_named(P, name) end
  redis.call('HDEL', recur.sched_key(P), name)
  redis.call('HDEL', recur.payload_key(P), name)
  redis.call('HDEL', recur.state_key(P), name)
  return 1
end
if not s then
  if redis.call('HEXISTS', recur.sched_key(P), name) == 1 then
    return redis.error_reply('ERR delayq:corrupt schedule ' .. quoted(name) .. ' does not decode: remove it')
  end
  return 0
end
if op == 'refill' then
  local wlast, ticks, prev = tonumber(ARGV[5]), {}, tonumber(ARGV[5])
  if not wlast or s.kind ~= 'cron' or #ARGV - 5 > recur.WIN then
    return redis.error_reply('ERR delayq:proto malformed refill arguments')
  end
  for i = 6, #ARGV do
    local t = tonumber(ARGV[i])
    if not t or t % 1 ~= 0 or t <= prev or t > DUE_MAX then
      return redis.error_reply('ERR delayq:proto malformed refill arguments')
    end
    ticks[#ticks + 1], prev = t, t
  end
  if s.wlast ~= wlast then return nxt end -- another client was first
  for _, t in ipairs(ticks) do
    if #s.win < recur.WIN then s.win[#s.win + 1] = t end
  end
  s.wlast = #ticks > 0 and s.win[#s.win] or -3
  if nxt == -2 then
    -- Waiting: its first tick after now (kept in the state while paused).
    local bound = recur.bound(P, zs)
    nxt = recur.after(s, now)
    local keep = {} -- the window holds the ticks after the next one
    for _, w in ipairs(s.win) do
      if w > nxt then keep[#keep + 1] = w end
    end
    s.win = keep
    recur.state_write(P, name, last, nxt)
    if s.paused == 0 then recur.enter(P, chan, name, s, nxt, payload_of(), bound) end
  end
  recur.spec_write(P, name, s)
  return nxt
end
if op == 'pause' then
  if s.paused == 0 then
    recur.leave(P, name, s, nxt, payload_of())
    recur.state_write(P, name, last, nxt) -- the tick it stopped at
    s.paused = 1
    recur.spec_write(P, name, s)
  end
  return 1
end
if op == 'resume' then
  if s.paused == 1 then
    -- The tick it stopped at comes back (due already, most likely): the
    -- next transfer applies the missed policy to it and what followed.
    s.paused = 0
    local bound = recur.bound(P, zs)
    recur.enter(P, chan, name, s, nxt, payload_of(), bound)
    recur.spec_write(P, name, s)
  end
  return 1
end
return redis.error_reply('ERR delayq:proto unknown schedule operation')
