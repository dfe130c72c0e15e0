-- offer.lua: adds or replaces pending items, one or many per call.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] counters, KEYS[4] wake tokens
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] the shard count the
-- client routed the items by (see shards_refusal), then 5 fields per item: id,
-- payload, ms, flags, bucket. flags is one digit, the sum of 1 (ms is an
-- absolute due time; else a delay), 2 (keep an existing pending id instead
-- of replacing it) and 4 (fresh: the id was just generated, so it cannot
-- exist). bucket: the id's id index bucket, as id_key computes it (the
-- client computes it: SHA-1 costs Redis a sixth of an offer).
-- Returns the queue's time (ms: the server's, never before the queue's
-- clock mark, see queue_now_ms), then 3 integers per item: status (1 added,
-- 2 replaced, 3 kept), due_ms, state of the id after the offer (1 pending,
-- 2 ready, 3 in flight).
-- An id is never queued twice: one that is ready or in flight is kept as it
-- is, whatever 'keep' says (replacing it would break its consumer's lease).
--
-- Cost matters here (every item passes once): the fixed costs (the call,
-- TIME, the type check, the slot look-up) are paid once per call, and the
-- records bound for one slot are written with one ZADD, so batches are
-- cheap. All items (ids included) are checked before the first write, and
-- so are the counters (a corrupt one refuses the call: see lib/20_counters.lua); a
-- ready list, slot index, slot or id index bucket of another type is renamed
-- out of the way (see quarantine), so a call never half-applies. A record
-- that does not decode where the id index points is set aside, and the
-- offer adds the item as new.
-- Can fail after writing only on an OOM.
local zs, ready, counters, sig = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P, chan = ARGV[1], ARGV[2]
local n = (#ARGV - 3) / 5

-- Checked up front: the counters (HINCRBY would fail after the writes);
-- they hold the queue's clock mark, which now needs.
local counts, err = read_counters(counters)
if err then return err end
err = shards_refusal(counts[4], ARGV[3])
if err then return err end

local now = queue_now_ms()
local dues, flags = {}, {}
-- The flags digit by look-up: tonumber (the C library's strtod) costs an
-- offer about 2 % of its instructions, and a flags argument is one digit.
local FLAGS = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7}
for i = 1, n do
  local b = 3 + (i - 1) * 5
  local f, due, h = FLAGS[ARGV[b + 4]], tonumber(ARGV[b + 3]), tonumber(ARGV[b + 5])
  if not f or not due or not h or h < 0 or h >= ID_BUCKETS or
     h % 1 ~= 0 or due < 0 or due % 1 ~= 0 or not id_ok(ARGV[b + 1]) then
    return redis.error_reply('ERR delayq:proto malformed offer arguments for item ' .. i)
  end
  if f % 2 == 0 then due = now + due end
  if due > DUE_MAX then
    return redis.error_reply('ERR delayq:input due time beyond ' .. DUE_MAX .. ' ms after the epoch')
  end
  dues[i], flags[i] = due, f
end

local out = {now}
local announce = nil -- the earliest due time that became the queue's first
local slots_bound = first_bound(P, zs) -- at or before every score in the slots (see first_bound)
-- The earliest due times the timing wheel (lib/65_wheel.lua) and the near
-- lists (lib/67_near.lua) may hold.
local wfirst = wheel_first(P)
local nfirst = near.first(P)
-- The first time a scheduler must run: a bound every scheduler has heard
-- of (offers announce it, transfers publish it), in score units, of the
-- slots, the wheel's cascade, the near lists and the first tick (see
-- recur.bound).
local bound = recur.bound_of(slots_bound, wfirst, nfirst, recur.first(P))
local w = wheel_pusher()
local nw = near.pusher()
-- The due time of the queue's last record in the slots (-inf: none), read
-- when first needed: an offer after it, or less than WHEEL_MS before it, is
-- in time order and goes to the last slot cheaply (offers of one deadline
-- from many producers land a few ms apart: they stay out of the wheel,
-- whose cascade of a burst of one millisecond costs more than the slots'
-- path).
local tail_due = nil
local function read_tail()
  local l = redis.call('ZRANGE', zs, '-1', '-1')[1]
  local t = l and kcall(P, 'ZRANGE', slot_key(P, l), '-1', '-1', 'WITHSCORES')
  tail_due = t and t[2] and math.floor(tonumber(t[2]) / ORD) or -math.huge
end
-- The last item's due time and whether it went to the wheel: the next of
-- that due time goes the same way (offers of one delay decide once a call).
-- Safe for offer order: an item of that millisecond went to the slots only
-- if none was in the wheel then, and none went there since.
local last_due, last_go = nil, false
local wheel_used = false -- an item of this call went to the wheel
local added = 0 -- net change of the pending count
local offered = 0 -- items accepted (added or replaced)
local hint = {} -- the slot of the last insert, and records held back (see slot_insert)
-- Id index writes held back until the records they point at are written:
-- a failed call then leaves no index entry without its record.
local idx, nidx = {}, 0
local held = {} -- ids whose writes are held back (not generated ones: no later item of the call looks one up)

local function flush()
  slot_flush(hint)
  wheel_flush(P, w)
  near.flush(P, nw)
  for i = 1, nidx, 3 do id_set(P, idx[i], idx[i + 1], idx[i + 2]) end
  nidx, held = 0, {}
end

-- Offers one item; returns its status, due time and state.
local iks = {} -- id index keys by bucket digits, for this call
local function offer_one(id, payload, due, keep, fresh, h)
  local ik = iks[h]
  if not ik then
    ik = P .. 'i:' .. h
    iks[h] = ik
  end
  local replaced = false
  if not fresh then
    -- An id may come twice in one call: its first copy must be written
    -- before the look-up, and before its slot is read or changed.
    if held[id] then flush() end
    local s = kcall(P, 'HGET', ik, id)
    local old = s and uint_of(s, 16, SCORE_MAX)
    local wk, wpos = wheel_ref_of(s)
    local wrec, wdue
    if wk then wrec, wdue = wheel_record(P, id, wk, wpos) end
    local nd, npos = nil, nil
    if not wk and not old then nd, npos = near.ref_of(s) end
    if nd and near.record(P, id, nd, npos) then
      -- In a near list: its old entry becomes a tombstone, which the
      -- transfer skips (lib/67_near.lua).
      if keep then return 3, nd, 1 end
      near.bury(P, nd, npos)
      added, replaced = added - 1, true
    elseif wrec then
      -- In a bucket of the wheel: its old entry becomes a tombstone, which
      -- the cascade skips (lib/65_wheel.lua).
      if keep then return 3, wdue, 1 end
      wheel_bury(P, wdue, wpos)
      added, replaced = added - 1, true
    elseif old then
      flush()
      local key, rec = slot_find(P, zs, id, old)
      if not key then
        -- Ready, or in flight under a take's lease (see
        -- lib/70_registry.lua).
        ensure_type(P, lease_registry(P), 'zset')
        local r, rs = registry_find(P, zs, id)
        if r then return 3, math.floor(rs / ORD), 3 end
        return 3, 0, 2
      end
      local r, why = parse_record(rec, old, id)
      if not r then
        -- Not an item of ours: set aside (not counted), and offer anew.
        set_aside(P, {aside_entry(why, id, rec)})
        kcall(P, 'ZREM', key, rec)
        hint.name = nil
      else
        if r.token ~= '' then return 3, math.floor(old / ORD), 3 end
        if keep then return 3, math.floor(old / ORD), 1 end
        kcall(P, 'ZREM', key, rec)
        hint.name = nil -- its card and last score may have changed
        added, replaced = added - 1, true
      end
    end
  end
  local status = replaced and 2 or 1

  -- Due already, and nothing due waits (a bound that is too early only
  -- sends the item through the scheduler): straight to the ready list.
  if due <= now and (slots_bound == nil or slots_bound >= (now + 1) * ORD) and (wfirst == nil or wfirst > now) and
     (nfirst == nil or nfirst > now) then
    kcall(P, 'RPUSH', ready, ready_entry(due, now, id, payload))
    kcall(P, 'RPUSH', sig, '1')
    id_set(P, ik, id, due * ORD)
    return status, due, 2
  end

  -- Into its millisecond's near list: an item due sooner than the wheel's
  -- horizon (lib/67_near.lua). Into the wheel: an item due later that
  -- lands inside the slots, or whose bucket has a list (offer order: see
  -- lib/65_wheel.lua). The cheap test first: a bucket's list is looked for
  -- once a call, and only for items that would go to the slots.
  -- Inline, not in functions: this runs for every item, and a Lua call
  -- costs about 1,000 instructions (docs/benchmarks.md, issue 42).
  local go = last_go
  if due ~= last_due then
    go = false
    if due < now + WHEEL_NEAR then
      go = 'near'
    else
      if not tail_due then read_tail() end
      go = due < tail_due - WHEEL_MS
    end
    if not go and (wfirst or wheel_used) then
      -- A bucket with a list has its index score inside it, so none lies
      -- wholly before the wheel's first time: no look there.
      local k = math.floor(due / WHEEL_MS)
      local l = w.listed[k]
      if l == nil and wfirst and wfirst < (k + 1) * WHEEL_MS then l = wheel_listed(P, w, k) end
      go = l or false
    end
    last_due, last_go = due, go
  end
  if go == 'near' then
    near.add(nw, due, h, ik, id, payload)
    -- A generated id is looked up by no later item of the call: nothing
    -- to flush for it (see held).
    if not fresh then held[id] = true end
    added = added + 1
    if bound == nil or due * ORD < bound then
      bound = due * ORD
      announce = due
    end
    return status, due, 1
  end
  if go then
    wheel_add(w, due, h, ik, id, payload)
    wheel_used = true
    if not fresh then held[id] = true end
    added = added + 1
    -- The scheduler cascades the bucket WHEEL_LEAD before its index score,
    -- the bucket's start (lib/65_wheel.lua).
    local at = math.floor(due / WHEEL_MS) * WHEEL_MS - WHEEL_LEAD
    if bound == nil or at * ORD < bound then
      bound = at * ORD
      announce = math.max(at, now)
    end
    return status, due, 1
  end

  local score, ss = slot_insert(P, zs, counters, due * ORD, record_v1(id, payload), true, hint)
  idx[nidx + 1], idx[nidx + 2], idx[nidx + 3] = ik, id, ss
  nidx = nidx + 3
  if not fresh then held[id] = true end
  added = added + 1
  if tail_due and due > tail_due then tail_due = due end
  if slots_bound == nil or score < slots_bound then slots_bound = score end
  if bound == nil or score < bound then
    bound = score
    announce = due -- the earliest deadline moved earlier: wake the schedulers
  end
  return status, due, 1
end

for i = 1, n do
  local b = 3 + (i - 1) * 5
  local f = flags[i]
  local status, due, state = offer_one(ARGV[b + 1], ARGV[b + 2], dues[i], f % 4 >= 2, f >= 4, ARGV[b + 5])
  if status ~= 3 then offered = offered + 1 end
  local k = #out
  out[k + 1], out[k + 2], out[k + 3] = status, due, state
end
flush()
metric_add(counters, 'offered', offered)
-- The pending count, the clock's mark and a new queue's epoch: one HSET.
if added ~= 0 then clock_save(counters, true, 'pending', fmt(counts[1] + added))
else clock_save(counters, true) end
if announce then redis.call('SPUBLISH', chan, fmt(announce)) end
return out
