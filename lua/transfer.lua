-- transfer.lua: moves due records from the slots to the ready list: pending
-- items whose due time came, and items in flight whose lease ran out (those
-- count an attempt; past their max attempts they go to the dead letters);
-- and the near lists due (lib/67_near.lua), each in its place among them.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] set-aside list,
-- KEYS[4] counters, KEYS[5] dead letters, KEYS[6] dead-letter times,
-- KEYS[7] wake tokens
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] most items to handle,
-- ARGV[4] time budget in microseconds,
-- ARGV[5] '1' to also top the wake tokens up to the ready entries (catch-up
-- and safety runs: a token can be lost with a consumer that died between
-- its BLPOP and its take; not on every run, where consumers woken but not
-- yet taking would make it add tokens nobody needs),
-- ARGV[6] the shard count the scheduler runs the queue's shards by (see
-- shards_refusal: a scheduler learns a queue's count this way),
-- ARGV[7] (optional, with ARGV[5] '1') the scheduler's name for its beat,
-- ARGV[8] how long the beat counts, in ms (see Schedulers in
-- lib/75_holders.lua).
-- Works in chunks of whole ranks of the first slot, with a few calls per
-- chunk and none per item (but a ZSCORE for a record other than version 1
-- in a burst, below): the record is the member, and the id index keeps
-- the id (an id in no slot is ready). Stops at the count or time budget, so
-- Redis is never blocked for long; the caller runs it again while 'more'.
-- A record it cannot decode (or whose score is no time) goes to the
-- set-aside list with a reason and its raw bytes, and its id (if any can be
-- read) leaves the id index when the index points at it, so one bad record
-- never blocks the queue, and never keeps a later offer of its id out. A
-- slot, ready list, set-aside list or dead-letter key of another type is
-- renamed out of the way (see quarantine in lib/10_types.lua). Corrupt counters
-- refuse the call before it writes.
-- Can fail after writing only on an OOM.
-- Returns {moved, set_aside, next_due_ms or -1, start_us, more, expired,
-- buried, epoch[, refills]}: moved counts the items the recurring schedules'
-- ticks made too, and next_due_ms is the earliest of the pending items and
-- the ticks (lib/80_recurring.lua); start_us is the server's clock when the run began, which clients
-- use to map due times onto their own clocks (the server's, not the
-- queue's: while a clock set back runs below the queue's mark, an item due
-- after the mark falls due when the server's clock reaches it); epoch is
-- the queue's (0: none; see lib/20_counters.lua); refills, only when there
-- are any, lists the cron schedules whose windows of ticks run low
-- (lib/80_recurring.lua).
local zs, ready, aside, counters, dead, deadz = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local sig = KEYS[7]
local P, chan = ARGV[1], ARGV[2]
local max_items, budget_us = tonumber(ARGV[3]), tonumber(ARGV[4])
local CHUNK = 100
if not max_items or not budget_us or max_items < 1 or max_items > 1000000 then
  return redis.error_reply('ERR delayq:proto malformed transfer arguments')
end

-- Everything that can refuse the call, before the first write.
local counts, err = read_counters(counters)
err = err or shards_refusal(counts[4], ARGV[6])
if err then return err end

local start_us = server_now_us()
local now = queue_time_of(math.floor(start_us / 1000)) -- never before the queue's mark
local limit = '(' .. fmt((now + 1) * ORD)
local nows, dues = fmt(now), {}
local moved, set_aside_n, done, expired, buried, pending_out = 0, 0, 0, 0, 0, 0
local lat = {} -- lateness of the moves, by bucket (see lib/20_counters.lua)
local checked = false

-- Only when there is work: keys of another type are renamed away.
local function check_types()
  if checked then return end
  ensure_type(P, ready, 'list')
  ensure_type(P, aside, 'list')
  ensure_type(P, dead, 'hash')
  ensure_type(P, deadz, 'zset')
  ensure_type(P, sig, 'list')
  checked = true
end

-- An item whose lease ran out (its consumer died or stalled): ready again,
-- or buried past its max attempts.
local function lease_ran_out(r, out)
  expired = expired + 1
  r.token = ''
  if r.max > 0 and r.attempts >= r.max then
    bury(P, dead, deadz, r, 'lease expired on attempt ' .. r.attempts .. ' of ' .. r.max, now)
    buried = buried + 1
  else
    out[#out + 1] = ready_entry_of(r, now)
  end
end

-- The items left in a lease record whose lease ran out (see
-- lib/40_leases.lua), each as lease_ran_out does; an item whose entry does not
-- decode is set aside (into bad, its id into unindex; not counted, as a
-- record set aside is not: most likely not ours). Returns how many items
-- it held, or nil and the reason the record does not decode (the caller
-- sets it aside whole; the ids its blocks seem to hold go into unindex).
local function leases_ran_out(rec, score, out, bad, unindex)
  local b, why = batch_parse(rec)
  if not b then
    for _, id in ipairs(batch_raw_ids(rec)) do unindex[#unindex + 1], unindex[#unindex + 2] = id, score end
    return nil, why
  end
  local items = 0
  for j = 1, b.n do
    if b.len[j] > 0 then
      items = items + 1
      local r, bad_why = batch_item(rec, b, j, score)
      if r then
        lease_ran_out(r, out)
      else
        local id = entry_id_at(rec, b.at[j], b.len[j])
        bad[#bad + 1] = aside_entry(bad_why, id or '', string.sub(rec, b.at[j], b.at[j] + b.len[j] - 1))
        if id then unindex[#unindex + 1], unindex[#unindex + 2] = id, score end
      end
    end
  end
  return items
end

-- RPUSHes list to key in pieces of 1000 (a lease record can add up to
-- 1000 entries to a chunk), with a wake token per entry if wake.
local function push_in_pieces(key, list, wake)
  for j = 1, #list, 1000 do
    local k = math.min(j + 999, #list)
    redis.call('RPUSH', key, unpack(list, j, k))
    if wake then signal(sig, k - j + 1) end
  end
end

-- The previous release's schedules become today's first, on the runs not
-- fired by a due time (every scheduler's first run is one): see
-- lib/85_recurring_v1.lua.
local upgrading, v1_refills = false, {}
if ARGV[5] == '1' then upgrading = recur.upgrade(P, zs, counters, chan, now, start_us + budget_us, v1_refills) end

-- The recurring schedules whose tick has come make their items first,
-- straight into the ready list (see lib/80_recurring.lua).
local refills, ticks_left, first_tick
done, refills, ticks_left, first_tick = recur.advance(P, now, max_items, start_us + budget_us, lat, function(list)
  if #list == 0 then return end
  check_types()
  push_in_pieces(ready, list, true)
end)
moved = done
for _, v in ipairs(v1_refills) do refills[#refills + 1] = v end

-- The timing wheel's buckets due within its lead go into the slots first
-- (lib/66_cascade.lua), within the run's budget; records due at or after
-- the earliest due time the wheel still holds wait for their bucket, so
-- offer order among equal due times holds even when the budget runs out.
local wbad = {}
local wtook = wheel_cascade(P, zs, counters, now, math.max(max_items - done, 0), wbad, start_us + budget_us)
if #wbad > 0 then
  check_types()
  push_in_pieces(aside, wbad, false)
  set_aside_n = set_aside_n + #wbad
end
done = done + wtook
local wfirst = wheel_first(P)
if wfirst and wfirst <= now then limit = '(' .. fmt(wfirst * ORD) end

-- Moves the slots' due records scoring below upto (a ZRANGEBYSCORE max:
-- '(' and a score); returns true when it stopped for the run's count or
-- time budget, false when nothing below upto is left.
local function move_slots(upto)
  -- A burst (many items due in one millisecond) is read without its scores.
  -- Redis 7.0 sends a score with %.17g, about 4k instructions each: most of
  -- what moving an item costs. When a chunk's items all had one due time and
  -- filled the chunk or emptied their slot, the next chunk's records due in
  -- that millisecond (in the same slot or the next) are read alone (their due
  -- time is known); the chunks after that go back to scores once that
  -- millisecond is done in a slot. A record other than a version 1 one read
  -- this way gets its score from ZSCORE.
  local burst -- that due time (ms), or nil
  for _ = 1, 10000 do
    if done >= max_items then return true end
    local first = kcall(P, 'ZRANGE', zs, '0', '0')
    if first[1] == nil then break end
    local key = slot_key(P, first[1])
    local want = math.min(CHUNK, max_items - done)
    local items, step
    if burst then
      items = kcall(P, 'ZRANGEBYSCORE', key, fmt(burst * ORD), fmt((burst + 1) * ORD - 1), 'LIMIT', '0', nstr(want))
      step = 1
    else
      items = kcall(P, 'ZRANGEBYSCORE', key, '-inf', upto, 'WITHSCORES', 'LIMIT', '0', nstr(want))
      step = 2
    end
    local n = #items / step
    if n == 0 then
      -- Nothing due in the first slot: done, unless it is an emptied one (in
      -- a burst: read it again with scores).
      if redis.call('EXISTS', key) == 0 then
        redis.call('ZREM', zs, first[1])
      elseif burst then
        burst = nil
      else
        break
      end
    else
      check_types()
      local out, bad, unindex = {}, {}, {}
      local leases = {} -- the scores of the lease records the chunk takes: out of the registry
      -- A lease record holds up to 1000 items: a chunk ends after the record
      -- that brings it to CHUNK items, so a call stays short however many
      -- leases run out together.
      local taken, units = 0, 0
      local one_due = burst -- the due time all the chunk's items share, or false
      for i = 1, #items, step do
        if units >= CHUNK then break end
        taken, units = taken + 1, units + 1
        -- A score as WITHSCORES writes it is always a number: "+ 0" reads it
        -- with one strtod, where tonumber would run two.
        local rec = items[i]
        local score = step == 2 and items[i + 1] + 0
        local due = score and math.floor(score / ORD) or burst
        if one_due == nil then one_due = due elseif one_due ~= due then one_due = false end
        -- Most records were never delivered (version 1): their ready entry
        -- is the record with the two times put in, no table needed.
        local e = due >= 0 and ready_entry_v1(rec, due, nows, dues)
        if e then
          pending_out = pending_out + 1
          lateness_add(lat, now - due)
          out[#out + 1] = e
        else
          -- The others need their exact score.
          score = score or redis.call('ZSCORE', key, rec) + 0
          local r, why, held
          if score < 0 then
            why = 'record with a negative score'
          elseif is_lease_record(rec) then
            held, why = leases_ran_out(rec, score, out, bad, unindex)
            leases[#leases + 1] = fmt(score)
          else
            r, why = parse_record(rec, score)
          end
          if held then
            units = units + held - 1
          elseif not r then
            -- Not counted: most likely not ours.
            local id = raw_id(rec, false)
            bad[#bad + 1] = aside_entry(why, id or '', rec)
            if id then unindex[#unindex + 1], unindex[#unindex + 2] = id, score end
          elseif r.token ~= '' then
            lease_ran_out(r, out)
          else
            pending_out = pending_out + 1
            lateness_add(lat, now - math.floor(score / ORD))
            out[#out + 1] = ready_entry_of(r, now)
          end
        end
      end
      if step == 2 or redis.call('ZRANK', key, items[1]) == 0 then
        -- The chunk is the slot's first ranks: read from -inf, or from a
        -- record nothing comes before (ZREMRANGEBYSCORE would parse every
        -- score it passes).
        redis.call('ZREMRANGEBYRANK', key, '0', nstr(taken - 1))
      else
        redis.call('ZREM', key, unpack(items, 1, taken))
      end
      push_in_pieces(ready, out, true)
      push_in_pieces(aside, bad, false)
      registry_drop(P, leases)
      -- The id index entries that pointed at the records set aside.
      for i = 1, #unindex, 2 do
        local id = unindex[i]
        local ik = id_key(P, id)
        if id_score_in(P, ik, id) == unindex[i + 1] then id_del(P, ik, id) end
      end
      moved, set_aside_n, done = moved + #out, set_aside_n + #bad, done + units
      local same = one_due and one_due >= 0 and one_due or nil
      if taken == n and n < want then
        -- What was due in this slot is done (in a burst, of its millisecond).
        if redis.call('EXISTS', key) == 1 then
          if not burst then break end
          burst = nil -- later records of the slot: read them with scores
        else
          -- The slot emptied: it leaves the index now (not on the next
          -- round), and the next slot may go on with the same due time.
          redis.call('ZREM', zs, first[1])
          burst = same
        end
      elseif taken == n then
        -- A full chunk of one due time: the slot may hold more of it (a slot
        -- outgrows a chunk when it cannot split: its records at one score).
        burst = same
      else
        burst = nil
      end
      if server_now_us() - start_us >= budget_us then return true end
    end
  end
  return false
end

-- The earliest score in the slots (math.huge: none), or nil when the first
-- slot is empty (not known without more reads).
local function slots_next()
  local f = kcall(P, 'ZRANGE', zs, '0', '0')[1]
  if not f then return math.huge end
  local e = kcall(P, 'ZRANGE', slot_key(P, f), '0', '0', 'WITHSCORES')
  return e[2] and tonumber(e[2]) or nil
end

-- The near lists (lib/67_near.lua) due by now, and before the wheel's
-- earliest time (its entries of a millisecond were offered before the
-- list's), each after the slots' records of its millisecond and those
-- before it: group by group (the index mz, by each group's earliest list),
-- a list's due time is read from its group, the slots are moved up to it
-- unless their earliest score is known to lie past it, then the list.
local NEAR_SPAN = 16 -- groups read from the index at once
local mz = near.index(P)
local ncap = now
if wfirst and wfirst <= now then ncap = wfirst - 1 end
local nfirst = near.first(P)
local stopped = false
if nfirst and nfirst <= ncap then
  local cur = redis.call('HGET', counters, 'mcur')
  local cd, cn = near.cursor_of(cur)
  local caps = fmt(ncap)
  local snext = nil -- the slots' earliest score, once known
  local out, bad, nm = {}, {}, near.mover()
  local function flush_near()
    near.drop(nm)
    if #out == 0 and #bad == 0 then return end
    check_types()
    push_in_pieces(ready, out, true)
    push_in_pieces(aside, bad, false)
    moved, set_aside_n, pending_out = moved + #out, set_aside_n + #bad, pending_out + #out
    out, bad = {}, {}
  end
  -- Moves group gs's lists due by ncap; sets stopped when the budget ends
  -- it. Its members that name no list of it go; one whose score is not
  -- its due time gets it.
  local function move_group(g, gs)
    local gk = near.group_key(P, gs)
    local ms = redis.pcall('ZRANGEBYSCORE', gk, '-inf', caps, 'LIMIT', '0', '256')
    if type(ms) ~= 'table' or ms.err then
      quarantine(P, gk, redis.call('TYPE', gk)['ok'])
      ms = {}
    end
    local gone = {}
    for _, ds in ipairs(ms) do
      local d = near.due_of(ds, g)
      if not d then
        gone[#gone + 1] = ds
      elseif d > ncap then
        redis.call('ZADD', gk, ds, ds)
      else
        if not snext or snext < (d + 1) * ORD then
          flush_near()
          stopped = move_slots('(' .. fmt((d + 1) * ORD))
          if stopped then break end
          snext = slots_next()
        end
        if done >= max_items then
          stopped = true
          break
        end
        local from = (cd == ds) and cn or 0
        local took, fin = near.move(P, nm, d, ds, from, math.min(max_items - done, 1000), now, nows, out, bad, lat)
        done = done + took
        if not fin then
          cd, cn, stopped = ds, from + took, true
          break
        end
        gone[#gone + 1] = ds
        if cd == ds then cd, cn = nil, 0 end
        if #out >= 1000 then flush_near() end
      end
    end
    near.regroup(P, gs, gone)
  end
  for _ = 1, 10000 do
    if stopped then break end
    local gr = redis.pcall('ZRANGEBYSCORE', mz, '-inf', caps, 'LIMIT', '0', nstr(NEAR_SPAN))
    if type(gr) ~= 'table' or gr.err then
      quarantine(P, mz, redis.call('TYPE', mz)['ok'])
      break
    end
    if #gr == 0 then break end
    for _, gs in ipairs(gr) do
      local g = near.group_of(gs)
      if g then move_group(g, gs) else redis.call('ZREM', mz, gs) end -- names no group
      if stopped then break end
    end
    flush_near()
    if not stopped and server_now_us() - start_us >= budget_us then stopped = true end
  end
  flush_near()
  -- Where a list cut short goes on (see 'mcur' in lib/67_near.lua); a
  -- cursor whose list is gone (deleted by something else) goes too, or a
  -- new list of its due time would start past its first entries.
  if cd and redis.call('EXISTS', near.key(P, cd)) == 0 then cd = nil end
  if cd then
    local now_cur = cd .. ':' .. fmt(cn)
    if now_cur ~= cur then redis.call('HSET', counters, 'mcur', now_cur) end
  elseif cur then
    redis.call('HDEL', counters, 'mcur')
  end
end
if not stopped then move_slots(limit) end
if expired > 0 then redis.call('HINCRBY', counters, 'inflight', -expired) end
if pending_out > 0 then redis.call('HINCRBY', counters, 'pending', -pending_out) end
metric_add(counters, 'expired', expired)
metric_add(counters, 'dead', buried)
lateness_write(counters, lat)
if ARGV[5] == '1' then
  -- Registry members whose lease has ended (their records gone another
  -- way than the ones that drop them, by an older delayq, say).
  kcall(P, 'ZREMRANGEBYSCORE', lease_registry(P), '-inf', limit)
  local have = redis.pcall('LLEN', sig)
  local rl = redis.pcall('LLEN', ready)
  if type(have) == 'number' and type(rl) == 'number' then
    local missing = rl - have
    if missing > 0 then signal(sig, math.min(missing, 1000)) end
  end
  -- Only for a queue that exists (has its counters): a beat must not
  -- bring back a key of a queue that was wiped (see wipe.py).
  local lasts = tonumber(ARGV[8] or '')
  if ARGV[7] and ARGV[7] ~= '' and lasts and lasts > 0 and lasts < 86400000 and
     redis.call('EXISTS', counters) == 1 then
    redis.pcall('ZADD', seen.schedulers_key(P), fmt(now + lasts), ARGV[7])
    redis.pcall('ZREMRANGEBYSCORE', seen.schedulers_key(P), '-inf', '(' .. fmt(now - 60000))
  end
end

local next_due = recur.earliest(P, zs, false, first_tick) -- the buckets are not read again when advance knows
-- The wheel's next cascade is a due time of the schedulers too.
if wfirst and (next_due < 0 or wfirst - WHEEL_LEAD < next_due) then next_due = math.max(wfirst - WHEEL_LEAD, 0) end
local more = 0
if next_due >= 0 and next_due <= now and done > 0 then more = 1 end
if ticks_left or upgrading then more = 1 end
if done > 0 then
  clock_save(counters, false) -- it moved items by this time
  -- Tells the other schedulers of this queue that this deadline is served.
  redis.call('SPUBLISH', chan, fmt(next_due))
end
local out = {moved, set_aside_n, fmt(next_due), fmt(start_us), more, expired, buried, queue_epoch()}
-- Cron schedules short of ticks (see lib/80_recurring.lua), when any.
if #refills > 0 then out[9] = refills end
return out
