-- recurring.lua: sets, changes, pauses, resumes, removes and lists a
-- queue's recurring schedules (see lib/80_recurring.lua for the keys, the
-- spec and how ticks become items).
-- KEYS[1] slot index, KEYS[2] counters
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] the operation, then:
--   set NAME EVERY_MS START_MS STOP_MS MISSED TEXT PAYLOAD [cron ZONE]
--       START_MS 0: the first tick is one interval from now; STOP_MS 0:
--       never. Replaces a schedule of that name (its pending tick's item
--       goes; the new first tick is computed from now). Returns the first
--       tick (-1: none before STOP_MS). With 'cron ZONE' (EVERY_MS 0, TEXT
--       the expression), the schedule waits for its ticks: returns the
--       server's time, after which the client computes them (refill).
--   refill NAME WLAST TICK...
--       A cron schedule's next ticks (ascending, after WLAST; none: no more
--       will come), added if its window still ends at WLAST (else another
--       client added them first). Returns its next tick (-2: still waiting).
--   remove NAME | pause NAME | resume NAME
--       Returns 1, or 0 for a name the queue has no schedule of.
--   list
--       Returns, per schedule in name order (at most 10,000): name, kind,
--       text, zone, every_ms, start_ms, stop_ms, missed, paused, next, last,
--       payload length; a schedule whose spec does not decode lists with
--       kind 'bad'.
-- Refused (before any write) on a queue of more than one shard: a sharded
-- queue's own keys are no shard, so no transfer would run its ticks.
local zs, counters = KEYS[1], KEYS[2]
local P, chan, op, name = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local counts, err = read_counters(counters)
if err then return err end
if counts[4] ~= 1 then
  return redis.error_reply('ERR delayq:input recurring schedules need a queue of one shard (this one has ' ..
                           fmt(counts[4]) .. ')')
end
ensure_type(P, recur.sched_key(P), 'hash')
ensure_type(P, recur.ticks_key(P), 'zset')
ensure_type(P, recur.payload_key(P), 'hash')
ensure_type(P, zs, 'zset')
local now = server_now_ms()

-- Announces a new first item to the schedulers, as offers do.
local function announce(score, bound)
  if score then announce_if_first(chan, score, bound) end
end

local function name_ok(n)
  return n and #n >= 1 and #n <= 64 and string.find(n, '^[%w_.:%-]+$') ~= nil
end

if op == 'list' then
  local names = redis.call('HKEYS', recur.sched_key(P))
  table.sort(names)
  local out = {}
  for i = 1, math.min(#names, 10000) do
    local n = names[i]
    local s = recur.spec_read(P, n)
    if s then
      for _, v in ipairs({n, s.kind, s.text, s.zone, fmt(s.every), fmt(s.start), fmt(s.stop), s.missed,
                          fmt(s.paused), fmt(s.next), fmt(s.last), fmt(s.plen)}) do
        out[#out + 1] = v
      end
    else
      for _, v in ipairs({n, 'bad', '', '', '0', '0', '0', '', '0', '-1', '-1', '0'}) do out[#out + 1] = v end
    end
  end
  return out
end

if not name_ok(name) then
  return redis.error_reply('ERR delayq:proto malformed schedule name')
end

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
  local old = recur.spec_read(P, name)
  if old and old.paused == 0 then recur.uninsert(P, zs, counters, name, old.next) end
  local s = {v = 1, kind = 'every', every = every, start = start > 0 and start or now, stop = stop,
             missed = missed, paused = 0, next = -1, last = old and old.last or -1, text = text,
             zone = '', plen = #payload}
  redis.call('HSET', recur.payload_key(P), name, payload)
  if ARGV[11] then
    s.kind, s.every, s.start, s.zone, s.win, s.wlast = 'cron', 0, start, ARGV[12], {}, -1
    recur.arm(P, zs, counters, name, s, -2)
    return now
  end
  local bound = first_bound(P, zs)
  local t = recur.after(s, now)
  announce(recur.arm(P, zs, counters, name, s, t), bound)
  return t
end

local s = recur.spec_read(P, name)
if op == 'remove' then
  if redis.call('HEXISTS', recur.sched_key(P), name) == 0 then return 0 end
  if s and s.paused == 0 then recur.uninsert(P, zs, counters, name, s.next) end
  redis.call('ZREM', recur.ticks_key(P), name)
  redis.call('HDEL', recur.sched_key(P), name)
  redis.pcall('HDEL', recur.payload_key(P), name)
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
  if s.wlast ~= wlast then return s.next end -- another client was first
  for _, t in ipairs(ticks) do
    if #s.win < recur.WIN then s.win[#s.win + 1] = t end
  end
  s.wlast = #ticks > 0 and s.win[#s.win] or -3
  if s.next == -2 and s.paused == 0 then
    local bound = first_bound(P, zs)
    announce(recur.arm(P, zs, counters, name, s, recur.after(s, now)), bound)
  else
    recur.spec_write(P, name, s)
  end
  return s.next
end
if op == 'pause' then
  if s.paused == 0 then
    recur.uninsert(P, zs, counters, name, s.next)
    redis.call('ZREM', recur.ticks_key(P), name)
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
    local bound = first_bound(P, zs)
    announce(recur.arm(P, zs, counters, name, s, s.next), bound)
  end
  return 1
end
return redis.error_reply('ERR delayq:proto unknown schedule operation')
