-- lua/lib/80_recurring.lua: recurring schedules (part of the scripts'
-- shared code: see 00_base.lua). recurring.lua sets, changes, pauses and
-- removes them; transfer.lua runs recur.advance at its start, which is
-- what makes each tick's item, exactly once whatever the number of
-- schedulers.
--
-- Keys of queue Q (its own keys: schedules need a queue of one shard):
--   P..'sched'  HASH  schedule name -> its spec (cmsgpack map, see below)
--   P..'ticks'  ZSET  schedule name -> its next tick (ms), for the schedules
--                     neither paused nor ended
--   P..'spay'   HASH  schedule name -> its ticks' payload (apart from the
--                     spec, which each tick rewrites: a big payload is
--                     written once, not once a tick)
-- The invariant: a schedule in P..'ticks' at tick T has its tick's item,
-- an ordinary item with id NAME@T and due time T, pending in the slots (or
-- cancelled by hand). That item is what wakes the schedulers at T, as any
-- item does. The first transfer that runs at or after T (any scheduler:
-- the call is atomic) makes the next tick's item and moves the tick in
-- P..'ticks' in the same call, so each tick makes one item however many
-- schedulers run, crash or restart, and whatever their clocks say: the
-- time is the server's (TIME).
--
-- Spec fields: v (1), kind ('every' or 'cron'), every (interval ms, >=
-- 1000; 0 for cron), start (ms, the first tick's anchor), stop (ms; 0:
-- never), missed ('skip', 'one' or 'all'), paused (0 or 1), next (ms; -1
-- once ended; -2 for a cron schedule waiting for its ticks), last (the
-- latest tick whose item was made, or -1), text (the spec as given: the
-- cron expression), zone ('' for every, the IANA zone for cron), plen (the
-- payload's length, for listings);
-- for cron also win (its next ticks, ascending, at most recur.WIN) and
-- wlast (the last tick ever put in win; -1 none yet; -3 no more to come).
-- Ticks of 'every' are start + k * every. Ticks of 'cron' need the tz
-- database, which scripts cannot read: the client computes them
-- (src/util/cron.c) and puts them in win, recur.WIN at a time; when fewer than
-- recur.LOW are left, the transfer asks its scheduler for more (its reply's
-- 8th element), which sends them with recurring.lua's 'refill' (applied
-- only if wlast is still what it computed from, so concurrent schedulers
-- add them once). A window that runs dry leaves the schedule waiting
-- (next -2, out of the ticks set) until a refill. Ticks found late (the schedulers
-- were all down, or the schedule was paused):
--   one   the pending item (the first missed tick's) is delivered, the
--         others make none; then on schedule
--   all   an item for each missed tick (at most recur.BURST per call; the
--         next transfer goes on), each with its own tick as due time
--   skip  none: the pending item is removed when another tick is also due
--         or it is more than recur.LATE_MS late
-- One local for all of this file (a script run by EVAL holds the shared
-- code and its own in one chunk, and Lua 5.1 allows 200 locals a function).
local recur = {}
recur.BURST = 1000
recur.LATE_MS = 60000
recur.SCAN = 100 -- schedules advanced per transfer at most
recur.WIN = 256
recur.LOW = 32

function recur.sched_key(P) return P .. 'sched' end
function recur.payload_key(P) return P .. 'spay' end
function recur.ticks_key(P) return P .. 'ticks' end
function recur.tick_id(name, tick) return name .. '@' .. fmt(tick) end

-- A schedule's spec, or nil for one that does not decode (anything may be
-- in the hash: see 00_base.lua).
function recur.spec_read(P, name)
  local raw = redis.pcall('HGET', recur.sched_key(P), name)
  if type(raw) ~= 'string' then return nil end
  local ok, s = pcall(cmsgpack.unpack, raw)
  if not ok or type(s) ~= 'table' or s.v ~= 1 or (s.kind ~= 'every' and s.kind ~= 'cron') then return nil end
  for _, f in ipairs({'every', 'start', 'stop', 'paused', 'next', 'last'}) do
    if type(s[f]) ~= 'number' or s[f] % 1 ~= 0 or s[f] < -2 or s[f] > DUE_MAX then return nil end
  end
  if (s.kind == 'every' and s.every < 1000) or (s.missed ~= 'skip' and s.missed ~= 'one' and s.missed ~= 'all') or
     type(s.plen) ~= 'number' or type(s.text) ~= 'string' or type(s.zone) ~= 'string' then
    return nil
  end
  if s.kind == 'cron' then
    if type(s.win) ~= 'table' or #s.win > recur.WIN or type(s.wlast) ~= 'number' or s.wlast < -3 or
       s.wlast > DUE_MAX then
      return nil
    end
    for i, t in ipairs(s.win) do
      if type(t) ~= 'number' or t % 1 ~= 0 or t < 0 or t > DUE_MAX or (i > 1 and t <= s.win[i - 1]) then
        return nil
      end
    end
  end
  return s
end

function recur.spec_write(P, name, s)
  redis.call('HSET', recur.sched_key(P), name, cmsgpack.pack(s))
end

-- The first tick of s after ms (start itself when start > ms), or -1 past
-- its stop time.
-- A cron schedule's window holds no tick after ms: -2 (waiting for ticks),
-- or -1 when no more will come.
function recur.after(s, ms)
  local t = s.start
  if s.kind == 'cron' then
    t = nil
    for _, w in ipairs(s.win) do
      if w > ms then
        t = w
        break
      end
    end
    if not t then return s.wlast == -3 and -1 or -2 end
  elseif t <= ms then
    t = s.start + (math.floor((ms - s.start) / s.every) + 1) * s.every
  end
  if t > DUE_MAX or (s.stop > 0 and t > s.stop) then return -1 end
  return t
end

-- A transfer's advance makes many items, most often of one due time: b (a
-- batch, or nil for one item at once) holds their records back to be
-- written with one ZADD a slot (see slot_insert's hint), and their id index
-- entries and pending count until the records are written (recur.flush).
function recur.batch() return {hint = {}, idx = {}, added = 0, refills = {}} end

function recur.flush(P, counters, b)
  if not b then return end
  slot_flush(b.hint)
  for i = 1, #b.idx, 3 do id_set(P, b.idx[i], b.idx[i + 1], b.idx[i + 2]) end
  if b.added ~= 0 then redis.call('HINCRBY', counters, 'pending', b.added) end
  b.idx, b.added = {}, 0
end

-- Makes the item of name's tick (pending, due at tick), unless the id is
-- already held (then the queue has it: never twice). Returns its score, or
-- nil when it was already there.
function recur.insert(P, zs, counters, name, s, tick, b)
  local id = recur.tick_id(name, tick)
  local ik = id_key(P, id)
  if id_score_in(P, ik, id) then return nil end
  local payload = redis.pcall('HGET', recur.payload_key(P), name)
  if type(payload) ~= 'string' then payload = '' end -- lost or of another type: still the tick
  local score, ss = slot_insert(P, zs, counters, tick * ORD, record_v1(id, payload), true, b and b.hint)
  if b then
    local n = #b.idx
    b.idx[n + 1], b.idx[n + 2], b.idx[n + 3], b.added = ik, id, ss, b.added + 1
  else
    id_set(P, ik, id, ss)
    redis.call('HINCRBY', counters, 'pending', 1)
  end
  return score
end

-- Removes the pending item of name's tick, if it is still pending.
function recur.uninsert(P, zs, counters, name, tick, b)
  if tick < 0 then return end
  recur.flush(P, counters, b) -- it reads the slots
  local id = recur.tick_id(name, tick)
  local score, ik = id_score(P, id)
  if not score then return end
  local key, rec = slot_find(P, zs, id, score)
  if not key then return end -- ready or taken: it is its consumer's now
  local r = parse_record(rec, score, id)
  if r and r.token ~= '' then return end
  kcall(P, 'ZREM', key, rec)
  id_del(P, ik, id)
  if r then redis.call('HINCRBY', counters, 'pending', -1) end
end

-- Enters s's tick t (or ends s when t is -1, or leaves it waiting for
-- ticks when -2): its item, its place in the ticks set, its spec. A cron
-- window drops the ticks up to t; one running low adds the schedule to
-- b.refills (b: a batch, or nil: not asked for) as name, expression, zone,
-- wlast. Returns the item's score (nil if none was made).
function recur.arm(P, zs, counters, name, s, t, b)
  s.next = t
  if s.kind == 'cron' then
    local keep = {}
    for _, w in ipairs(s.win) do
      if t >= 0 and w > t then keep[#keep + 1] = w end
    end
    s.win = keep
    if b and t ~= -1 and s.wlast >= 0 and #keep < recur.LOW then
      for _, v in ipairs({name, s.text, s.zone, fmt(s.wlast)}) do b.refills[#b.refills + 1] = v end
    end
  end
  local score
  if t < 0 then
    redis.call('ZREM', recur.ticks_key(P), name)
  else
    score = recur.insert(P, zs, counters, name, s, t, b)
    redis.call('ZADD', recur.ticks_key(P), fmt(t), name)
  end
  recur.spec_write(P, name, s)
  return score
end

-- Advances the schedules whose tick T has come (now >= T): the missed
-- policy for the ticks between T and now, then the next tick's item.
function recur.advance_one(P, zs, counters, name, T, now, b)
  local s = recur.spec_read(P, name)
  if not s or s.paused == 1 then
    redis.call('ZREM', recur.ticks_key(P), name)
    return
  end
  local nt = recur.after(s, T)
  local late = nt >= 0 and nt <= now
  if s.missed == 'skip' and (late or now - T > recur.LATE_MS) then
    recur.uninsert(P, zs, counters, name, T, b)
  else
    s.last = T
  end
  if late and s.missed == 'all' then
    for _ = 1, recur.BURST do
      if nt < 0 or nt > now then break end
      recur.insert(P, zs, counters, name, s, nt, b)
      s.last = nt
      nt = recur.after(s, nt)
    end
  elseif late then
    nt = recur.after(s, now)
  end
  recur.arm(P, zs, counters, name, s, nt, b)
end

-- transfer.lua's first step: the schedules whose tick has come, recur.SCAN
-- at most. Returns the cron schedules whose windows run low (see
-- recur.arm), a flat list, and whether more ticks may be due (the caller
-- then says 'more', so its scheduler runs again at once: a tick advanced
-- late would count as missed).
function recur.advance(P, zs, counters, now)
  local due = redis.pcall('ZRANGEBYSCORE', recur.ticks_key(P), '-inf', fmt(now), 'WITHSCORES', 'LIMIT', '0',
                          nstr(recur.SCAN))
  if type(due) ~= 'table' then return {}, false end -- a key of another type: no schedules run
  local b = recur.batch()
  for i = 1, #due, 2 do
    recur.advance_one(P, zs, counters, due[i], tonumber(due[i + 1]), now, b)
  end
  recur.flush(P, counters, b)
  return b.refills, #due >= 2 * recur.SCAN
end
