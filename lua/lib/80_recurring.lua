-- lua/lib/80_recurring.lua: recurring schedules (part of the scripts'
-- shared code: see 00_base.lua). recurring.lua sets, changes, pauses and
-- removes them, schedules.lua lists them; transfer.lua runs recur.advance
-- at its start, which is what makes each tick's item, exactly once
-- whatever the number of schedulers.
--
-- Keys of queue Q (of the shard a schedule's name picks, on a sharded queue):
--   P..'sched'  HASH  schedule name -> its spec (cmsgpack map, see below)
--   P..'spay'   HASH  schedule name -> its ticks' payload
--   P..'sstate' HASH  schedule name -> 'LAST|NEXT': the latest tick whose
--                     item was made (-1: none) and the next tick (-1:
--                     ended; -2: a cron schedule waiting for ticks); while
--                     paused, the tick it stopped at
--   P..'tb'     ZSET  the tick buckets: 'T|RUN' -> T, for each tick time T
--                     some active schedule waits for; RUN is what a tick
--                     needs to know: 'e|EVERY|STOP|MISSED' for 'every',
--                     'c' for cron (its spec is read)
--   P..'tb:T|RUN' LIST the schedules of that bucket, as 'NAME|PAYLOAD'
--                     (pushed with kcall: one of another type is renamed
--                     away, as a slot is, never failing a call that has
--                     popped the schedules of the bucket before)
-- The invariant: an active schedule is in the bucket of its next tick T,
-- and has had no item for T yet. The first transfer that runs at or after
-- T (any scheduler: the call is atomic) takes the bucket's schedules,
-- puts each tick's item straight into the ready list (an ordinary item, id
-- NAME@T, due at T: see ready_entry) and moves the schedules into the
-- bucket of their next tick, in the same call, so each tick makes one item
-- however many schedulers run, crash or restart, and whatever their clocks
-- say: the time is the server's (TIME). The buckets take part in the
-- queue's earliest due time (recur.earliest), which is what wakes the
-- schedulers at T.
-- Why buckets: schedules of one interval due at one time share a bucket
-- and move together, so a tick costs about what moving an item costs: a
-- list pop, the ready entry pushed, the schedule pushed into the next
-- bucket, its state written, a call each per chunk (recur.CHUNK) and the
-- next tick worked out once per bucket. A tick's item is never pending:
-- no slot write, no id index entry (it is in the id index once a take
-- leased it).
--
-- Spec fields: v (2), kind ('every' or 'cron'), every (interval ms, >=
-- 1000; 0 for cron), start (ms, the first tick's anchor), stop (ms; 0:
-- never), missed ('skip', 'one' or 'all'), paused (0 or 1), text (the spec
-- as given: the cron expression), zone ('' for every, the IANA zone for
-- cron), plen (the payload's length, for listings);
-- for cron also win (its next ticks, ascending, at most recur.WIN) and
-- wlast (the last tick ever put in win; -1 none yet; -3 no more to come).
-- Ticks of 'every' are start + k * every. Ticks of 'cron' need the tz
-- database, which scripts cannot read: the client computes them
-- (src/util/cron.c) and puts them in win, recur.WIN at a time; when fewer than
-- recur.LOW are left, the transfer asks its scheduler for more (its reply's
-- 9th element), which sends them with recurring.lua's 'refill' (applied
-- only if wlast is still what it computed from, so concurrent schedulers
-- add them once). A window that runs dry leaves the schedule waiting
-- (next -2, in no bucket) until a refill. Ticks found late (the
-- schedulers were all down, or the schedule was paused):
--   one   one item, the first missed tick's; then on schedule
--   all   an item for each missed tick (at most recur.BURST per call; the
--         next transfer goes on), each with its own tick as due time; an
--         'every' schedule's last recur.BURST ticks at most (recur.all_from)
--   skip  none when another tick is also due or the tick is more than
--         recur.LATE_MS late
-- One local for all of this file (a script run by EVAL holds the shared
-- code and its own in one chunk, and Lua 5.1 allows 200 locals a function).
local recur = {}
recur.BURST = 1000
recur.LATE_MS = 60000
recur.CHUNK = 100 -- due schedules read at once
recur.WIN = 256
recur.LOW = 32

-- 1 to 64 of A-Z a-z 0-9 _ . : - (DQ_RECURRING_NAME_MAX): a name a
-- schedule can have.
function recur.name_ok(n)
  return type(n) == 'string' and #n >= 1 and #n <= 64 and string.find(n, '^[A-Za-z0-9_.:%-]+$') ~= nil
end

function recur.sched_key(P) return P .. 'sched' end
function recur.payload_key(P) return P .. 'spay' end
function recur.state_key(P) return P .. 'sstate' end
function recur.buckets_key(P) return P .. 'tb' end
function recur.bucket_key(P, b) return P .. 'tb:' .. b end

-- A spec of version v (2; 1, the previous release's: see
-- 85_recurring_v1.lua) from its stored bytes raw, or nil for one that does
-- not decode as such (anything may be in the hash: see 00_base.lua).
function recur.spec_decode(raw, v)
  if type(raw) ~= 'string' then return nil end
  local ok, s = pcall(cmsgpack.unpack, raw)
  if not ok or type(s) ~= 'table' or s.v ~= v or (s.kind ~= 'every' and s.kind ~= 'cron') then return nil end
  for _, f in ipairs({'every', 'start', 'stop', 'paused', 'plen'}) do
    if type(s[f]) ~= 'number' or s[f] % 1 ~= 0 or s[f] < 0 or s[f] > DUE_MAX then return nil end
  end
  if (s.kind == 'every' and s.every < 1000) or (s.missed ~= 'skip' and s.missed ~= 'one' and s.missed ~= 'all') or
     type(s.text) ~= 'string' or type(s.zone) ~= 'string' then
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

-- A schedule's spec, or nil for one that does not decode.
function recur.spec_read(P, name)
  return recur.spec_decode(redis.pcall('HGET', recur.sched_key(P), name), 2)
end

function recur.spec_write(P, name, s)
  redis.call('HSET', recur.sched_key(P), name, cmsgpack.pack(s))
end

-- What a tick of s needs to know (the bucket's RUN).
function recur.run_of(s)
  if s.kind == 'every' then return 'e|' .. fmt(s.every) .. '|' .. fmt(s.stop) .. '|' .. s.missed end
  return 'c'
end

-- A tick time as the state keeps it: -2 .. DUE_MAX, or nil.
function recur.time(v)
  if not v then return nil end
  local n = tonumber(v)
  if not n or n % 1 ~= 0 or n < -2 or n > DUE_MAX then return nil end
  return n
end

-- A schedule's last and next ticks (see P..'sstate'): -1, -1 when unknown.
function recur.state(P, name)
  local v = redis.pcall('HGET', recur.state_key(P), name)
  local l, n = nil, nil
  if type(v) == 'string' then l, n = string.match(v, '^(%-?%d+)|(%-?%d+)$') end
  l, n = recur.time(l), recur.time(n)
  if not l or not n then return -1, -1 end
  return l, n
end

function recur.state_write(P, name, last, nxt)
  redis.call('HSET', recur.state_key(P), name, fmt(last) .. '|' .. fmt(nxt))
end

-- Puts an active schedule into the bucket of tick t (none when t < 0), and
-- announces t when it comes before bound (recur.bound, read before).
function recur.enter(P, chan, name, s, t, payload, bound)
  if t < 0 then return end
  local b = fmt(t) .. '|' .. recur.run_of(s)
  kcall(P, 'RPUSH', recur.bucket_key(P, b), name .. '|' .. payload)
  redis.call('ZADD', recur.buckets_key(P), fmt(t), b)
  announce_if_first(chan, t * ORD, bound)
end

-- The bucket (its member in P..'tb', and its tick) schedule name is in,
-- or nil: active, with the state's next tick N and its payload. A cron
-- schedule's state is exact (its ticks write it): bucket 'N|c'. An 'every'
-- schedule's state is written when it is set or resumed and when a tick is
-- irregular (late, or the last): a regular tick only moves it one interval
-- on, into the next bucket. So it is in a bucket of its RUN at N + k *
-- every: the first such bucket, from N on, that holds it (LPOS). Bounded:
-- 100 pages of 1000 buckets.
function recur.locate(P, name, s, N, payload)
  if N < 0 then return nil end
  local run = recur.run_of(s)
  local member = name .. '|' .. payload
  if s.kind == 'cron' then
    local b = fmt(N) .. '|c'
    return b, N
  end
  for page = 0, 99 do
    local l = redis.pcall('ZRANGEBYSCORE', recur.buckets_key(P), fmt(N), '+inf', 'WITHSCORES', 'LIMIT',
                          fmt(page * 1000), '1000')
    if type(l) ~= 'table' or #l == 0 then return nil end
    for i = 1, #l, 2 do
      local g = tonumber(l[i + 1])
      if (g - N) % s.every == 0 and string.sub(l[i], #l[i] - #run) == '|' .. run then
        local at = redis.pcall('LPOS', recur.bucket_key(P, l[i]), member)
        if type(at) == 'number' then return l[i], g end
      end
    end
  end
  return nil
end

-- A schedule's last and next ticks, as listed (see recur.locate). where:
-- the tick of the bucket each schedule is in, when the caller read them all
-- (schedules.lua), else it is located.
function recur.current(P, name, s, payload, where)
  local l, N = recur.state(P, name)
  if s.paused == 1 or s.kind == 'cron' or N < 0 then return l, N end
  local _, g = nil, where and where[name]
  if not where then _, g = recur.locate(P, name, s, N, payload) end
  if not g then return l, -1 end
  if g == N then return l, N end
  return g - s.every, g
end

-- Takes the schedule (active, next N, that payload) out of its bucket.
function recur.leave(P, name, s, N, payload)
  local b = recur.locate(P, name, s, N, payload)
  if not b then return end
  local key = recur.bucket_key(P, b)
  redis.call('LREM', key, '1', name .. '|' .. payload)
  if redis.call('EXISTS', key) == 0 then redis.call('ZREM', recur.buckets_key(P), b) end
end

-- Takes every member of schedule name, whatever its payload, out of the
-- tick buckets, and returns how many: for a schedule whose spec does not
-- decode (neither its grid, its RUN nor its payload is known) or is gone
-- while its member is not: a schedule migrated (lib/85_recurring_v1.lua),
-- then removed or set again by a client of the previous release, which
-- knew no buckets, so today's member went on ticking, unlisted. Else a RUN
-- that decodes would go on making its items after 'remove', unlisted and
-- past removing. One pass over the buckets as schedules.lua makes it,
-- recur.SCAN members read at most, 100 taken out (one is a schedule's;
-- planted ones may be more); buckets it empties leave P..'tb' after the
-- pass (ranks shift as they go).
recur.SCAN = 200000
function recur.leave_named(P, name)
  local prefix, seen, gone, empty = name .. '|', 0, 0, {}
  for page = 0, 199 do
    local bs = redis.pcall('ZRANGE', recur.buckets_key(P), fmt(page * 1000), fmt(page * 1000 + 999))
    if type(bs) ~= 'table' or #bs == 0 or seen >= recur.SCAN then break end
    for _, b in ipairs(bs) do
      if seen >= recur.SCAN then break end
      local key = recur.bucket_key(P, b)
      local l = redis.pcall('LRANGE', key, '0', fmt(recur.SCAN - seen - 1))
      if type(l) == 'table' then
        seen = seen + #l
        local was = gone
        for _, m in ipairs(l) do
          if gone < 100 and string.sub(m, 1, #prefix) == prefix then
            gone = gone + redis.call('LREM', key, '0', m) -- a scan of the list each: 100 at most
          end
        end
        if gone > was and redis.call('EXISTS', key) == 0 then empty[#empty + 1] = b end
      end
    end
  end
  for _, b in ipairs(empty) do redis.call('ZREM', recur.buckets_key(P), b) end
  return gone
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

-- The first tick 'all' delivers for an 'every' schedule found late at T,
-- and the one after: T, or the tick recur.BURST ticks before now (or
-- before its end), so one outage makes at most recur.BURST items (a 1 s
-- schedule down for a day would make 86400); the older ticks are skipped.
function recur.all_from(s, T, now)
  local last = (s.stop > 0 and s.stop < now) and s.stop or now
  local k = math.floor((last - T) / s.every) -- ticks after T up to last
  if k < recur.BURST then return T, recur.after(s, T) end
  T = T + (k - recur.BURST + 1) * s.every
  return T, recur.after(s, T)
end

-- What tick T of s makes at now: the due times of its items (the missed
-- policy applied to the ticks between T and now), formatted, and the next
-- tick, as {times = ..., nt = ..., nts = ...}.
function recur.step(s, T, now)
  local nt = recur.after(s, T)
  local late = nt >= 0 and nt <= now
  if late and s.missed == 'all' and s.kind == 'every' then T, nt = recur.all_from(s, T, now) end
  local times = {}
  if s.missed ~= 'skip' or not (late or now - T > recur.LATE_MS) then times[1] = fmt(T) end
  if late and s.missed == 'all' then
    for _ = 1, recur.BURST do
      if nt < 0 or nt > now then break end
      times[#times + 1] = fmt(nt)
      nt = recur.after(s, nt)
    end
  elseif late then
    nt = recur.after(s, now)
  end
  return {times = times, nt = nt, nts = fmt(nt)}
end

-- The step of a bucket's RUN 'e|EVERY|STOP|MISSED' at T (a tick of its
-- grid), or nil for anything else (cron, or a RUN that does not decode:
-- each schedule's spec decides).
function recur.step_run(run, T, now)
  local e, stop, missed = string.match(run, '^e|(%d+)|(%d+)|(%a+)$')
  e, stop = e and uint_of(e, 16, DUE_MAX), stop and uint_of(stop, 16, DUE_MAX)
  if not e or e < 1000 or not stop or (missed ~= 'skip' and missed ~= 'one' and missed ~= 'all') then
    return nil
  end
  local st = recur.step({kind = 'every', every = e, start = T, stop = stop, missed = missed}, T, now)
  st.every = e
  return st
end

-- A schedule's tick T read from its spec (cron, or a RUN that does not
-- decode): the step, a cron window dropped up to the next tick and a
-- refill asked for into refills when it runs low (name, expression, zone,
-- wlast). Returns the step and the RUN of the next bucket, or nil for a
-- schedule to drop (gone, paused, undecodable).
function recur.step_spec(P, name, T, now, refills)
  local s = recur.spec_read(P, name)
  if not s or s.paused == 1 then return nil end
  local st = recur.step(s, T, now)
  if s.kind == 'cron' then
    local keep = {}
    for _, w in ipairs(s.win) do
      if st.nt >= 0 and w > st.nt then keep[#keep + 1] = w end
    end
    s.win = keep
    if st.nt ~= -1 and s.wlast >= 0 and #keep < recur.LOW then
      for _, v in ipairs({name, s.text, s.zone, fmt(s.wlast)}) do refills[#refills + 1] = v end
    end
    recur.spec_write(P, name, s)
  end
  return st, recur.run_of(s)
end

-- How many schedules the queue has (set, paused or ended); 0 for a key of
-- another type.
function recur.count(P)
  local n = redis.pcall('HLEN', recur.sched_key(P))
  return type(n) == 'number' and n or 0
end

-- The first bucket's tick, or nil.
function recur.first(P)
  local f = redis.pcall('ZRANGE', recur.buckets_key(P), '0', '0', 'WITHSCORES')
  return type(f) == 'table' and f[2] and tonumber(f[2]) or nil
end

-- The queue's earliest due time with the ticks and the timing wheel in it
-- (see earliest_due).
-- first: the first bucket's tick when the caller knows it (recur.advance's
-- fourth value), false when there is none; nil reads it.
function recur.earliest(P, zs, read_only, first)
  local d = earliest_due(P, zs, read_only)
  -- Items in the timing wheel's buckets (lib/65_wheel.lua): their first
  -- time is a bound; a reader (stats, metrics) reads the first buckets
  -- when that bound comes before the slots' first due time.
  local wf = wheel_first(P)
  if wf and read_only and (d < 0 or wf < d) then wf = wheel_first_due(P, d) end
  if wf and (d < 0 or wf < d) then d = wf end
  -- The near lists (lib/67_near.lua): the first one's due time; a reader
  -- passes over lists of tombstones alone (items cancelled), which the
  -- transfer drops in their time.
  local nf = near.first(P)
  if nf and read_only and (d < 0 or nf < d) then nf = near.first_due(P) end
  if nf and (d < 0 or nf < d) then d = nf end
  local t = first
  if t == nil then t = recur.first(P) end
  if t and (d < 0 or t < d) then return t end
  return d
end

-- A bound every scheduler has heard of, at or before the earliest time a
-- scheduler must run, in score units; nil: nothing is due. Of the slots'
-- first bound (see first_bound), the ticks, the wheel's next cascade and
-- the near lists' first due time: a scheduler takes an announcement as
-- its next time (src/util/sched_core.c), so one that left any of them out
-- would put off a time it had heard of (ticks skipped while offers due
-- sooner than the slots' records were announced: issue 42).
function recur.bound(P, zs)
  return recur.bound_of(first_bound(P, zs), wheel_first(P), near.first(P), recur.first(P))
end

-- recur.bound of what the caller read already: the slots' first bound (a
-- score), the wheel's, the near lists' and the ticks' first times (ms);
-- each nil when there is none.
function recur.bound_of(slots, wheel, nearest, tick)
  local b = slots
  if tick and (not b or tick * ORD < b) then b = tick * ORD end
  if wheel and (not b or (wheel - WHEEL_LEAD) * ORD < b) then b = (wheel - WHEEL_LEAD) * ORD end
  if nearest and (not b or nearest * ORD < b) then b = nearest * ORD end
  return b
end

-- Adds k moves of lateness late to lat (lateness_add, k at once).
function recur.late(lat, late, k)
  lateness_add(lat, late)
  if k > 1 then
    if late < 0 then late = 0 end
    lat[lat.last_b] = lat[lat.last_b] + k - 1
    lat.sum = lat.sum + late * (k - 1)
  end
end

-- Ready entries of tick st's items of schedule name into out from n + 1
-- (as ready_entry writes them, with no id string of their own); lateness
-- into lat. Returns the new n and the number of items.
function recur.entries(st, name, payload, now, nows, out, n, lat)
  local ts = st.times
  local k = #ts
  for j = 1, k do
    local t = ts[j]
    n = n + 1
    out[n] = '1|' .. t .. '|' .. nows .. '|' .. nstr(#name + 1 + #t) .. '|' .. name .. '@' .. t .. payload
    if j > 1 then recur.late(lat, now - tonumber(t), 1) end
  end
  return n, k
end

-- recur.chunk's hot path: a chunk ms of bucket b whose schedules all make
-- their tick's item and move one interval on (step st), with lateness
-- late. One string per schedule but its entry: the id's length comes from
-- the position of the '|' in 'NAME|PAYLOAD'.
function recur.regular(P, key, b, ms, st, run, nows, out, lat, late)
  local t = st.times[1]
  local head, at, extra = '1|' .. t .. '|' .. nows .. '|', '@' .. t, #t
  local k = #ms
  for i = 1, k do
    local m = ms[i]
    local p = string.find(m, '|', 1, true)
    if p then
      out[#out + 1] = head .. nstr(p + extra) .. '|' .. string.sub(m, 1, p - 1) .. at .. string.sub(m, p + 1)
    end
  end
  local nb = st.nts .. '|' .. run
  kcall(P, 'RPUSH', recur.bucket_key(P, nb), unpack(ms))
  redis.call('ZADD', recur.buckets_key(P), st.nts, nb)
  if redis.call('EXISTS', key) == 0 then redis.call('ZREM', recur.buckets_key(P), b) end
  if #out > 0 then recur.late(lat, late, #out) end
  return #out
end

-- One chunk of bucket b (tick T, RUN run): its schedules' items into out
-- (lateness into lat), the schedules into the buckets of their next ticks,
-- their states written, a call each. Returns how many items it made, or
-- nil once the bucket is empty (it leaves the buckets set). The schedules
-- of a RUN that decodes share one step (and so one state): no table, no
-- string per schedule but its name, its payload and its entry.
function recur.chunk(P, b, T, run, now, nows, out, lat, refills)
  local key = recur.bucket_key(P, b)
  local ms = redis.pcall('LPOP', key, nstr(recur.CHUNK))
  if type(ms) ~= 'table' or #ms == 0 then
    redis.call('ZREM', recur.buckets_key(P), b)
    return nil
  end
  local common = run ~= 'c' and recur.step_run(run, T, now)
  -- A regular tick (its item, then the next tick one interval on) writes
  -- no state (see recur.locate).
  local cstate = common and #common.times > 0 and common.times[#common.times] .. '|' .. common.nts
  if common and #common.times == 1 and common.nt == T + common.every then cstate = true end
  if cstate == true then return recur.regular(P, key, b, ms, common, run, nows, out, lat, now - T) end
  local nexts, state, made, n, firsts = {}, {}, 0, 0, 0
  local ns = 0
  for _, m in ipairs(ms) do
    local name, payload = string.match(m, '^([^|]+)|(.*)$')
    local st, nrun = name and common, run -- no name (planted): dropped, as recur.regular does
    if name and not st then st, nrun = recur.step_spec(P, name, T, now, refills) end
    if st then
      local k
      n, k = recur.entries(st, name, payload, now, nows, out, n, lat)
      if k > 0 then made, firsts = made + k, firsts + 1 end
      local sv = st == common and cstate
      if not sv then
        local last = k > 0 and st.times[k]
        if not last then -- none made: it stays (see recur.locate)
          local l, N = recur.state(P, name)
          if st == common and N ~= T then l = T - common.every end
          last = fmt(l)
        end
        sv = last .. '|' .. st.nts
      end
      if sv ~= true then state[ns + 1], state[ns + 2], ns = name, sv, ns + 2 end
      if st.nt >= 0 then
        local nb = st.nts .. '|' .. nrun
        local g = nexts[nb]
        if not g then
          g = {t = st.nts}
          nexts[nb] = g
        end
        g[#g + 1] = m
      end
    end
  end
  if firsts > 0 then recur.late(lat, now - T, firsts) end
  for nb, g in pairs(nexts) do
    kcall(P, 'RPUSH', recur.bucket_key(P, nb), unpack(g))
    redis.call('ZADD', recur.buckets_key(P), g.t, nb)
  end
  if ns > 0 then redis.call('HSET', recur.state_key(P), unpack(state)) end
  if redis.call('EXISTS', key) == 0 then redis.call('ZREM', recur.buckets_key(P), b) end
  return made
end

-- transfer.lua's first step: the schedules whose tick has come, a bucket
-- at a time, until max items are made or the server's clock passes
-- deadline_us; each chunk's entries are pushed by push (with their wake
-- tokens). Returns the items made, the cron schedules whose windows run low
-- (a flat list, see recur.step_spec), and whether more ticks may be due
-- (the caller then says 'more', so its scheduler runs again at once: a
-- tick advanced late would count as missed), and when not, the first
-- bucket's tick (false: none) for recur.earliest: one read of the buckets
-- per call when none is due, as on every wake-up of a queue with no
-- schedules.
function recur.advance(P, now, max, deadline_us, lat, push)
  local made, refills, nows = 0, {}, fmt(now)
  for _ = 1, 10000 do
    if made >= max or server_now_us() >= deadline_us then return made, refills, true end
    local f = redis.pcall('ZRANGE', recur.buckets_key(P), '0', '0', 'WITHSCORES')
    if type(f) ~= 'table' or not f[1] then return made, refills, false, false end -- none (or a key of another type)
    local T, run = tonumber(f[2]), string.match(f[1], '^%d+|(.*)$')
    if T and T > now then return made, refills, false, T end -- the first tick is still to come
    if not T or T % 1 ~= 0 or T < 0 or T > DUE_MAX or not run or string.match(f[1], '^%d+') ~= fmt(T) then
      redis.call('ZREM', recur.buckets_key(P), f[1]) -- planted: no bucket of ours
    else
      local out = {}
      local k = recur.chunk(P, f[1], T, run, now, nows, out, lat, refills)
      if k then
        made = made + k
        push(out)
      end
    end
  end
  return made, refills, true
end
