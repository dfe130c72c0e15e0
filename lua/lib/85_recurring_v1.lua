-- lua/lib/85_recurring_v1.lua: the previous release's recurring schedules
-- (spec v1, part of the scripts' shared code: see 00_base.lua) and their
-- migration to today's (lib/80_recurring.lua), so a schedule set before an
-- upgrade goes on ticking after it, with no user action.
--
-- What the previous release kept (commit 78a83b5; a queue of one shard):
--   P..'sched'  HASH  name -> spec v1: today's fields (v 1) and next (ms;
--                     -1 ended, -2 a cron schedule waiting for ticks) and
--                     last (the latest tick whose item was made, or -1)
--   P..'ticks'  ZSET  name -> next, for the schedules neither paused nor
--                     ended: each had its next tick's item, an ordinary
--                     pending item (id NAME@next, due at next), in the
--                     slots already
--   P..'spay'   HASH  name -> payload (as today; never sealed: that
--                     release refused to seal a schedule's payload)
-- It had no P..'sstate': every schedule set since has an entry there, so a
-- schedule without one is a v1 one (or a corrupt one).
--
-- Migrating a schedule writes its spec v2 and its state, takes it out of
-- P..'ticks' and, when active, puts it into the bucket of its next tick T
-- with T's pending item taken back: the transfer then makes T's item as it
-- makes any tick's, on time or late by the missed policy. An item of T no
-- longer pending (ready, leased, acked, or cancelled by hand) counts as
-- made: the schedule goes on at the tick after T, the missed policy
-- applied as the previous release's transfer would have. So no tick is
-- lost and none is made twice, whichever release's scheduler ran first.
-- Where: transfer.lua's catch-up and safety runs (recur.upgrade, bounded:
-- what every scheduler does on starting, so no user action is needed) and
-- recurring.lua on the schedule it changes (recur.upgrade_one). The
-- listing (schedules.lua) only reads: it shows a v1 schedule as it is.
-- A v1 spec that does not decode leaves P..'ticks' (its pending item stays
-- an ordinary item) and lists as 'bad', as a corrupt spec v2 does.
recur.MIGRATE = 100 -- schedules migrated per call at most

function recur.ticks_key(P) return P .. 'ticks' end
function recur.scan_key(P) return P .. 'smig' end -- the HSCAN cursor of a migration under way

-- A spec v1 from its stored bytes, or nil.
function recur.v1_decode(raw)
  local s = recur.spec_decode(raw, 1)
  if not s then return nil end
  for _, f in ipairs({'next', 'last'}) do
    if type(s[f]) ~= 'number' or s[f] % 1 ~= 0 or s[f] < -2 or s[f] > DUE_MAX then return nil end
  end
  return s
end

-- Takes back the item the previous release made for name's tick T, if it
-- is still pending and was never delivered. Returns whether it did (false:
-- T's item counts as made).
function recur.v1_unpend(P, zs, counters, name, T)
  local id = name .. '@' .. fmt(T)
  local score, ik = id_score(P, id)
  if not score then return false end -- acked, cancelled by hand
  local key, rec = slot_find(P, zs, id, score)
  if not key then return false end -- ready or leased
  local r = parse_record(rec, score, id)
  if not r or r.token ~= '' or r.attempts ~= 0 then return false end -- in flight, a retry; undecodable: left as is
  kcall(P, 'ZREM', key, rec)
  id_del(P, ik, id)
  redis.call('HINCRBY', counters, 'pending', -1)
  return true
end

-- Migrates schedule name, of spec v1 s (see above); a cron schedule short
-- of ticks goes into refills (see recur.step_spec), when given. bound: as
-- recur.enter takes it. A schedule with a state was today's once (set
-- again by the previous release since): its old member leaves the buckets
-- first (recur.leave_named). Returns whether it made that pass.
function recur.v1_migrate(P, zs, counters, chan, name, s, now, refills, bound)
  local was_new = redis.call('HEXISTS', recur.state_key(P), name) == 1
  if was_new then recur.leave_named(P, name) end
  local n = {v = 2, kind = s.kind, every = s.every, start = s.start, stop = s.stop, missed = s.missed,
             paused = s.paused, text = s.text, zone = s.zone, plen = s.plen, win = s.win, wlast = s.wlast}
  local last, nt = s.last, s.next
  redis.pcall('ZREM', recur.ticks_key(P), name)
  if n.paused == 0 and nt >= 0 and not recur.v1_unpend(P, zs, counters, name, nt) then
    -- nt's item was made: the previous release's next tick after it.
    last, nt = nt, recur.after(n, nt)
    if nt >= 0 and nt <= now and n.missed ~= 'all' then nt = recur.after(n, now) end
    if n.kind == 'cron' then
      local keep = {} -- the window holds the ticks after the next one
      for _, w in ipairs(n.win) do
        if nt >= 0 and w > nt then keep[#keep + 1] = w end
      end
      n.win = keep
    end
  end
  if refills and n.kind == 'cron' and nt ~= -1 and n.wlast >= 0 and #n.win < recur.LOW then
    for _, v in ipairs({name, n.text, n.zone, fmt(n.wlast)}) do refills[#refills + 1] = v end
  end
  local payload = redis.pcall('HGET', recur.payload_key(P), name)
  recur.spec_write(P, name, n)
  recur.state_write(P, name, last, nt)
  if n.paused == 0 then recur.enter(P, chan, name, n, nt, type(payload) == 'string' and payload or '', bound) end
  return was_new
end

-- Migrates schedule name if its spec is v1; else takes it out of
-- P..'ticks' (a stale entry, or a v1 spec that does not decode: it lists as
-- 'bad') and, when it has no state, gives it an unknown one ('-1|-1', what
-- recur.state reads for none), so recur.upgrade's scan passes it by. A name
-- no schedule can have (planted: '@', control bytes) is never migrated:
-- in a bucket it would tick on, unlisted, and no 'remove' could name it.
-- Returns whether it passed over the buckets (see recur.v1_migrate).
function recur.upgrade_one(P, zs, counters, chan, name, now, refills, bound)
  local s = recur.name_ok(name) and recur.v1_decode(redis.pcall('HGET', recur.sched_key(P), name))
  if s then return recur.v1_migrate(P, zs, counters, chan, name, s, now, refills, bound) end
  redis.pcall('ZREM', recur.ticks_key(P), name)
  if redis.call('HEXISTS', recur.sched_key(P), name) == 1 and redis.call('HEXISTS', recur.state_key(P), name) == 0 then
    redis.call('HSET', recur.state_key(P), name, '-1|-1')
  end
end

-- transfer.lua's first step on its catch-up and safety runs: migrates the
-- v1 schedules, the active ones first (P..'ticks', by tick), then the
-- others (an HSCAN of P..'sched' whose cursor waits in P..'smig' between
-- calls), recur.MIGRATE at most and until the server's clock passes
-- deadline_us, and after one pass over the buckets (recur.leave_named).
-- Costs three reads when there are none. Returns whether more may be left
-- (the caller says 'more').
function recur.upgrade(P, zs, counters, chan, now, deadline_us, refills)
  local sk, tk = recur.sched_key(P), recur.ticks_key(P)
  local ns, nst = redis.pcall('HLEN', sk), redis.pcall('HLEN', recur.state_key(P))
  local stateless = type(ns) == 'number' and (type(nst) ~= 'number' or ns > nst)
  if redis.call('EXISTS', tk) == 0 and not stateless then return false end
  ensure_type(P, sk, 'hash')
  ensure_type(P, recur.payload_key(P), 'hash')
  ensure_type(P, recur.state_key(P), 'hash')
  ensure_type(P, recur.buckets_key(P), 'zset')
  local bound, done = recur.bound(P, zs), 0
  local function full() -- one at least per call, whatever the budget: each call gets on
    return done >= recur.MIGRATE or (done > 0 and server_now_us() >= deadline_us)
  end
  local active = redis.pcall('ZRANGE', tk, '0', fmt(recur.MIGRATE - 1))
  if type(active) == 'table' then
    for _, name in ipairs(active) do
      if full() then return true end
      done = done + 1
      if recur.upgrade_one(P, zs, counters, chan, name, now, refills, bound) then return true end
    end
    if #active >= recur.MIGRATE then return true end -- more may be left
  end
  if not stateless then return false end
  local ck = recur.scan_key(P)
  local cur = redis.pcall('GET', ck)
  if type(cur) ~= 'string' or not string.find(cur, '^%d+$') then cur = '0' end
  local page = redis.pcall('HSCAN', sk, cur, 'COUNT', fmt(recur.MIGRATE))
  if type(page) ~= 'table' or page.err then
    -- A cursor Redis refuses (planted), or HSCAN refused (an ACL without
    -- it): start again at the next safety run, not at once ('more' would
    -- run the transfer again and again, thousands of times a second).
    redis.pcall('DEL', ck)
    return false
  end
  local kv = page[2]
  for i = 1, #kv, 2 do
    if redis.call('HEXISTS', recur.state_key(P), kv[i]) == 0 then
      -- Full: the cursor stays, and the next call reads this page again.
      if full() then return true end
      done = done + 1
      if recur.upgrade_one(P, zs, counters, chan, kv[i], now, refills, bound) then return true end
    end
  end
  if page[1] == '0' then
    redis.pcall('DEL', ck)
    return false
  end
  redis.pcall('SET', ck, page[1])
  return true
end
