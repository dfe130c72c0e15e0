-- lua/lib/50_idindex.lua: the id index (part of the scripts' shared code: see 00_base.lua).
-- The id index ---------------------------------------------------------------

-- The id index bucket of an id. SHA-1 rather than a few of the id's bytes:
-- ids made by applications ("order-17", "order-18") must spread too.
local function id_key(P, id)
  return string.format('%si:%d', P, tonumber(string.sub(redis.sha1hex(id), 1, 4), 16) % ID_BUCKETS)
end

-- The score of an id's record (pending, in flight in a record of its own,
-- or ready or leased by a take when it is in no slot), or nil for an id
-- the queue does not hold. An index entry that
-- is no score (0..SCORE_MAX) counts as absent: the next offer of the id
-- replaces it.
local function id_score_in(P, ik, id)
  local s = kcall(P, 'HGET', ik, id)
  return s and uint_of(s, 16, SCORE_MAX) or nil
end

local function id_score(P, id)
  local ik = id_key(P, id)
  return id_score_in(P, ik, id), ik
end

-- score: a number, or a number already formatted with fmt.
-- The id index's writes, on the hot paths of take and ack. HSET and HDEL
-- reply a count (0 or 1) unless they failed: compared, not passed to
-- type() (which makes a string), so only a failure (a bucket of another
-- type) goes through kcall's handling.
local function id_set(P, ik, id, score)
  if type(score) ~= 'string' then score = fmt(score) end
  local n = redis.pcall('HSET', ik, id, score)
  if n ~= 0 and n ~= 1 then kcall(P, 'HSET', ik, id, score) end
end

local function id_del(P, ik, id)
  local n = redis.pcall('HDEL', ik, id)
  if n ~= 0 and n ~= 1 then kcall(P, 'HDEL', ik, id) end
end

-- Moves a record to the dead letters of the queue (the caller has taken it
-- out of its slot, and made sure dead and deadz are of their types).
local function bury(P, dead, deadz, r, reason, now)
  redis.call('HSET', dead, r.id, dead_record(r, reason, now))
  redis.call('ZADD', deadz, now, r.id)
  id_del(P, id_key(P, r.id), r.id)
end

