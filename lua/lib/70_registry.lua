-- lua/lib/70_registry.lua: the lease registry (part of the scripts' shared code: see 00_base.lua).
-- The lease registry -----------------------------------------------------------
-- A take with a lease writes no id index entry per item (it would cost an
-- item a SHA-1 and an HSET: 15% of what Redis runs for an item a worker
-- drains, figure 5f in BENCHMARKS.md): each id keeps the entry it had while
-- ready, a score in no slot. The take names its lease record in one sorted
-- set instead, P..'l': score, the record's; member, that score as fmt
-- writes it, '|', and the record's ids as the take wrote them (see Lease
-- records). So lookup and offer can still tell an id in flight from a
-- ready one: for an id the index says is ready, they read the registry
-- (at most REGISTRY_SCAN members, earliest lease end first) and then only
-- the records whose ids name the id. A record leaves the registry (by its
-- score: its ids there may be more than it has left) when its last item
-- goes (ack, nack, extend) or its lease runs out (transfer); the
-- transfer's catch-up and safety runs drop every member whose lease has
-- ended. A member that does not parse, or whose record is gone, is skipped.
local REGISTRY_SCAN = 4096

local function lease_registry(P) return P .. 'l' end

-- The registry member of the lease record at ss (as fmt writes it) whose
-- ids are ids.
local function registry_member(ss, ids) return ss .. '|' .. ids end

-- Drops the records at the scores ss (as fmt writes them) from the registry.
local function registry_drop(P, ss)
  for _, s in ipairs(ss) do kcall(P, 'ZREMRANGEBYSCORE', lease_registry(P), s, s) end
end

-- Whether the ids of registry member m (from byte from on) name id: as a
-- whole id, between spaces or the ends. Bounded by the member's length.
local function member_names(m, from, id)
  local at = from
  for _ = 1, #m do
    local q = string.find(m, id, at, true)
    if not q then return false end
    local e = q + #id
    if (q == from or string.byte(m, q - 1) == 32) and (e > #m or string.byte(m, e) == 32) then return true end
    at = q + 1
  end
  return false
end

-- The records at exactly score ss (as fmt writes it; at most 16, as takes
-- never share a score) and their slot's key; {} and nil when no slot's
-- range holds ss. The lease record a token or the registry names is read
-- this way.
local function records_at(P, zs, ss)
  local name = slot_at(zs, ss)
  if not name then return {}, nil end
  local key = slot_key(P, name)
  return kcall(P, 'ZRANGEBYSCORE', key, ss, ss, 'LIMIT', '0', '16'), key
end

-- The lease record the registry names that holds id, as (record table,
-- score), or nil. The caller has checked the registry's type.
local function registry_find(P, zs, id)
  for _, m in ipairs(redis.call('ZRANGE', lease_registry(P), '0', nstr(REGISTRY_SCAN - 1))) do
    local bar = string.find(m, '|', 1, true)
    local score = bar and uint_of(string.sub(m, 1, bar - 1), 16, SCORE_MAX)
    if score and member_names(m, bar + 1, id) then
      for _, rec in ipairs(records_at(P, zs, fmt(score))) do
        if is_lease_record(rec) then
          local r = parse_record(rec, score, id)
          if r then return r, score end
        end
      end
    end
  end
  return nil
end

-- Takes the item of leased_record's (r, key, rec) out of its slot: its
-- record goes, or, for a lease record, loses the item's block (and goes,
-- leaving the registry, when no item is left).
local function lease_remove(P, key, rec, r)
  kcall(P, 'ZREM', key, rec)
  if r.batch then
    local left = batch_without(rec, r.batch, {[r.index] = true})
    if left then
      kcall(P, 'ZADD', key, fmt(r.score), left)
    else
      registry_drop(P, {fmt(r.score)})
    end
  end
end

-- The id and token of a version 2 record (nil for a record that does not
-- decode or is of another version: it holds no lease).
local function record_lease(rec)
  if string.byte(rec, 1) ~= 50 then return nil end -- '2'
  local a, _, _, il, tl, _, pos, id = v2_head(rec)
  if not a then return nil end
  return id, string.sub(rec, pos + il, pos + il + tl - 1)
end

-- The id of a record and, when it is leased (version 2), its lease token;
-- nil if it does not decode. One parse where record_id then record_lease
-- would make two (an ack needs both of every record it finds).
local function record_id_lease(rec)
  if string.byte(rec, 1) == 50 then return record_lease(rec) end
  return record_id(rec)
end

-- slot_find for many records at once: items is a list of tables with id
-- and score (a number); each item whose record is found gets key (its
-- slot's key) and rec (and lease, its token, when the range read found a
-- leased record), and, when found by a range read, run: the read's
-- {key, lo, hi, n} (the range's scores as strings and how many records it
-- held, all of them read: none when it stopped at its limit), so a caller
-- that removes every record of a run can remove the range. The items that share a slot cost one ZRANGEBYSCORE
-- over their scores, not one each (a batch of acks usually holds the leases
-- of one take: one slot, consecutive ordinals). Records are matched by
-- score, and their ids checked only then; an item whose score several
-- records share (more than ORD in one millisecond), or that a range read did
-- not reach (it stops at twice the items plus 64 records), is looked up
-- alone with slot_find.
local function slot_find_many(P, zs, items)
  local order, sorted = {}, true
  for i, w in ipairs(items) do
    order[i] = w
    if i > 1 and w.score < items[i - 1].score then sorted = false end
  end
  -- A take's leases are acked in the order taken: usually sorted already.
  if not sorted then table.sort(order, function(x, y) return x.score < y.score end) end
  local i = 1
  while i <= #order do
    local name, bound = slot_at(zs, fmt(order[i].score))
    if not name then
      i = i + 1
    else
      local nx = redis.call('ZRANGEBYSCORE', zs, '(' .. fmt(bound), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
      local upper = nx[2] and tonumber(nx[2]) or math.huge
      local j = i
      while j < #order and order[j + 1].score < upper do j = j + 1 end
      local key, limit = slot_key(P, name), 2 * (j - i + 1) + 64
      local lo, hi = fmt(order[i].score), fmt(order[j].score)
      local recs = kcall(P, 'ZRANGEBYSCORE', key, lo, hi, 'WITHSCORES', 'LIMIT', '0', nstr(limit))
      local whole = #recs / 2 < limit
      local run = whole and {key = key, lo = lo, hi = hi, n = #recs / 2} or nil
      local by = {} -- score (as Redis wrote it) -> record
      for k = 1, #recs, 2 do by[recs[k + 1]] = recs[k] end
      for k = i, j do
        local w = order[k]
        local rec = by[fmt(w.score)]
        local rid, lease
        if rec then rid, lease = record_id_lease(rec) end
        if rid == w.id then
          w.key, w.rec, w.run, w.lease = key, rec, run, lease
        elseif rec or not whole then
          w.key, w.rec = slot_find(P, zs, w.id, w.score)
        end
      end
      i = j + 1
    end
  end
end

-- Publishes the new earliest due time if score is before the first bound.
local function announce_if_first(chan, score, bound_before)
  if bound_before == nil or score < bound_before then
    redis.call('SPUBLISH', chan, fmt(math.floor(score / ORD)))
  end
end
