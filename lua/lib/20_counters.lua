-- lua/lib/20_counters.lua: counters, metrics and settings (part of the scripts' shared code: see 00_base.lua).
-- Counters -----------------------------------------------------------------

-- What the counters hash says of the queue itself, besides the counts
-- (filled by read_counters and read_shard_count, which read it in the same
-- HMGET; reset per call by call_begin):
--   clock   the queue's clock's high-water mark: the latest server time (ms)
--           a script used for the queue (see queue_now_ms); nil: none yet
--   epoch   the queue's creation mark: the server time (us) when an offer
--           or a setting first made the queue's keys, as a digit string; nil:
--           none (queue_epoch: 0). A client that
--           saw epoch E and later reads none, or another, knows the keys
--           vanished (a restart without persistence, an eviction, a flush)
--   cfgset  how many settings the settings hash held when config.lua last
--           wrote it (nil, '0': none), a digit string: a settings hash gone while this says some
--           were set is an error, never a silent fallback to defaults
-- (qmeta itself is declared in 10_types.lua, so call_begin can reset it.)

-- The meta fields of an HMGET reply v from index i (clock, epoch, cfgset),
-- checked: nil, or an error reply naming the field. On every call's path:
-- the fewest Lua steps (digit strings of a bounded length: the epoch stays
-- a string until a reply carries it, see queue_epoch).
local function meta_parse(counters, v, i)
  local c, e, k = v[i], v[i + 1], v[i + 2]
  local bad = (c and (#c > 13 or string.find(c, '%D') or (#c == 13 and c > DUE_MAX_S)) and 'clock') or
              (e and (#e > 16 or string.find(e, '%D')) and 'epoch') or
              (k and (#k > 2 or string.find(k, '%D')) and 'cfgset')
  if bad then
    local val = bad == 'clock' and c or bad == 'epoch' and e or k
    return redis.error_reply('ERR delayq:corrupt field ' .. bad .. ' in ' .. counters .. ' is ' .. quoted(val) ..
                             ': expected an integer (HDEL it to reset it)')
  end
  qmeta.clock, qmeta.epoch, qmeta.cfgset, qmeta.counters = c and tonumber(c), e, k, counters
  return nil
end

-- The queue's epoch as a number for a reply (0: none).
local function queue_epoch()
  local e = qmeta.epoch
  return e and tonumber(e) or 0
end

-- The queue's shard count as the counters hash holds it (sh, from an HMGET:
-- absent: 1, unsharded; 0 while it changes), kept there because every
-- writing script reads this hash anyway: (count) or (nil, error reply).
local function shard_count_of(counters, sh)
  if not sh then return 1 end
  if string.find(sh, '^%d%d?$') and tonumber(sh) <= SHARDS_MAX then return tonumber(sh) end
  return nil, redis.error_reply('ERR delayq:corrupt shard count in ' .. counters .. ' is ' .. quoted(sh) ..
                                ': expected 0..' .. SHARDS_MAX)
end

-- Reads the counters hash and checks it, for every script that changes a
-- counter or may make a slot (HINCRBY fails on a value that is no integer,
-- and would fail after the script has written). A corrupt counter refuses
-- the call, before it writes: counters are reports (stats) and slot names,
-- so repairing one by guessing would hide the corruption. Returns the
-- values as numbers (absent: 0), or nil and an error reply naming the key,
-- field and value (HDEL the field to reset it to 0). Fills qmeta (before
-- it checks the counts: a take without a lease needs no counts).
local function read_counters(counters)
  local v = redis.pcall('HMGET', counters, 'pending', 'inflight', 'slots', 'shards', 'clock', 'epoch', 'cfgset')
  if v.err then
    qmeta.shards = 1 -- no count there (see read_shard_count)
    return nil, redis.error_reply('WRONGTYPE delayq: counters key ' .. counters ..
                                  ' holds a ' .. redis.call('TYPE', counters)['ok'] .. ', expected a hash')
  end
  local merr = meta_parse(counters, v, 5)
  if merr then return nil, merr end
  local out = {}
  local serr
  out[4], serr = shard_count_of(counters, v[4])
  if serr then return nil, serr end
  qmeta.shards = out[4]
  for i = 1, 3 do
    local s = v[i]
    if not s then
      out[i] = 0
    elseif #s <= 16 and (s == '0' or string.find(s, '^%-?[1-9]%d*$')) then
      out[i] = tonumber(s)
    else
      local field = i == 1 and 'pending' or i == 2 and 'inflight' or 'slots'
      return nil, redis.error_reply('ERR delayq:corrupt counter ' .. field .. ' in ' .. counters ..
                                    ' is ' .. quoted(s) .. ': expected an integer (HDEL it to reset it)')
    end
  end
  return out
end

-- The shard count alone, for scripts that read the counters for nothing
-- else (lookup, config, dead letters): (count) or (nil, error reply for a
-- count that is not one). A counters key of another type holds no count:
-- 1, as those scripts never needed the counters to work. Fills qmeta, in
-- the same call.
local function read_shard_count(counters)
  local v = redis.pcall('HMGET', counters, 'shards', 'clock', 'epoch', 'cfgset')
  if v.err then return 1 end
  local merr = meta_parse(counters, v, 2)
  if merr then return nil, merr end
  return shard_count_of(counters, v[1])
end

-- The queue's clock (ms) at server time now (ms): now, but never before the
-- high-water mark qmeta.clock (read_counters or read_shard_count reads it
-- first), so a server clock set back (a restart on another clock, an NTP
-- step) never runs a queue's time backwards: due times, lease ends and
-- lateness stay ordered as they were made. After a step back the queue's
-- time stands at the mark until the server's clock passes it (items fall
-- due up to the step late, never early); a step forward is taken as it
-- comes (items due within it fall due at once, up to the step early). The
-- time used is noted, for clock_save. queue_now_ms: at the server's TIME.
local function queue_time_of(now)
  local mark = qmeta.clock
  if mark and mark > now then now = mark end
  if not qmeta.used or now > qmeta.used then qmeta.used = now end
  return now
end

local function queue_now_ms()
  return queue_time_of(server_now_ms())
end

-- The epoch a new queue gets (see qmeta): the server's time in us.
local function new_epoch()
  return fmt(server_now_us())
end

-- Writes the mark (the latest time this call used, if later than the one
-- read) and, with make_epoch, an epoch for a queue that has none, with
-- field = value if field is given (a counter's new value, computed from
-- the one read_counters read: the call is atomic): one HSET of the
-- counters hash the script read, so the mark costs the scripts that write
-- a counter anyway no call of its own. For the scripts that write the
-- queue's timed state (offer, a take with a lease, nack, extend, transfer);
-- after their checks, with their writes.
local function clock_save(counters, make_epoch, field, value)
  local used = qmeta.used
  local clock = used and (not qmeta.clock or used > qmeta.clock) and fmt(used)
  if clock then qmeta.clock = used end
  if make_epoch and not qmeta.epoch then
    -- A new queue (rare): everything in one call.
    qmeta.epoch = new_epoch()
    local args = {'epoch', qmeta.epoch}
    if field then args[3], args[4] = field, value end
    if clock then args[#args + 1], args[#args + 2] = 'clock', clock end
    redis.call('HSET', counters, unpack(args))
  elseif field and clock then
    redis.call('HSET', counters, field, value, 'clock', clock)
  elseif field or clock then
    redis.call('HSET', counters, field or 'clock', field and value or clock)
  end
end

-- Refuses a call made for another shard count than the queue's: the
-- client routed it by a count it has not yet learned (or that changed), so
-- nothing is written and the reply tells the count ('DQSHARDS n'; 0 while
-- the count changes: try again shortly). n: the queue's count (from
-- read_counters or read_shard_count); want: the client's, as the string it
-- sent; nil or '' skips the check (callers that route no item).
local function shards_refusal(n, want)
  if want == nil or want == '' or want == nstr(n) then return nil end
  return redis.error_reply('DQSHARDS ' .. nstr(n))
end

-- Metrics -------------------------------------------------------------------
-- What happened to a queue, for /metrics: counters and a histogram of
-- lateness, in the counters hash next to pending and inflight:
--   offered, delivered, acked, nacked, dead, expired   totals since the start
--   lat:<b>  transfers' moves with lateness (ready time - due time, ms) in
--            bucket b: at most LAT_MS[b] ms, b = #LAT_MS + 1 above them all
--   lat_sum  the sum of those latenesses, ms
-- They are reports, not the queue's state: written with pcall, so a field
-- someone corrupted fails its own increment (stats reports it), never the
-- call that delivers or keeps an item. Buckets in ms; /metrics shows seconds.
local LAT_MS = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

local function metric_add(counters, field, n)
  if n ~= 0 then redis.pcall('HINCRBY', counters, field, nstr(n)) end
end

-- Lateness of the moves of one call, gathered per bucket and written once.
-- A call moves items in due order, so runs of one lateness come together:
-- the last one's bucket is kept, and the scan of LAT_MS (a dozen steps per
-- item in a backlog, where every item is seconds late) runs once per run.
local function lateness_add(lat, late)
  if late < 0 then late = 0 end
  local b = lat.last_b
  if late ~= lat.last_late then
    b = 1
    while b <= #LAT_MS and late > LAT_MS[b] do b = b + 1 end
    lat.last_late, lat.last_b = late, b
  end
  lat[b] = (lat[b] or 0) + 1
  lat.sum = (lat.sum or 0) + late
end

local function lateness_write(counters, lat)
  if not lat.sum then return end
  for b = 1, #LAT_MS + 1 do
    if lat[b] then metric_add(counters, 'lat:' .. nstr(b), lat[b]) end
  end
  metric_add(counters, 'lat_sum', lat.sum)
end

-- Settings -----------------------------------------------------------------

-- The queue's settings, for the arguments given as -1 ("the queue's").
local CFG_DEFAULTS = {lease_ms = 30000, max_attempts = 16, backoff_base_ms = 1000,
                      backoff_max_ms = 600000}

-- The range of a setting, as config.lua enforces it when it writes one
-- (a function, not tables: every call of a script builds its tables).
local function cfg_range(field)
  if field == 'lease_ms' then return 1, DUE_MAX end
  if field == 'max_attempts' then return 0, ATTEMPTS_MAX end
  return 0, DUE_MAX
end

-- A setting's value as stored in the settings hash cfg (absent: the
-- default), checked as config.lua checks what it writes. Returns the
-- number, or nil and an error reply that names the setting and the key: a
-- bad setting is never replaced by a weaker one.
local function stored_setting(cfg, field)
  local v = redis.pcall('HGET', cfg, field)
  if type(v) == 'table' then
    return nil, redis.error_reply('WRONGTYPE delayq: settings key ' .. cfg .. ' holds a ' ..
                                  redis.call('TYPE', cfg)['ok'] .. ', expected a hash')
  end
  if not v then
    -- Absent: the default, unless the settings hash is gone while the
    -- counters say settings were set (an eviction of that key alone, a DEL).
    local set = qmeta.cfgset
    if set and set ~= '0' and not qmeta.cfg_repair and redis.call('EXISTS', cfg) == 0 then
      return nil, redis.error_reply('ERR delayq:corrupt settings key ' .. cfg .. ' is gone (evicted or deleted) while ' ..
                                    qmeta.counters .. ' says ' .. set .. ' setting(s) were set: ' ..
                                    'refused rather than run on the defaults (set them again with delayq config)')
    end
    return CFG_DEFAULTS[field]
  end
  local lo, hi = cfg_range(field)
  local n = uint_of(v, 16, hi)
  if n and n >= lo then return n end
  return nil, redis.error_reply('ERR delayq:corrupt setting ' .. field .. ' in ' .. cfg .. ' is ' .. quoted(v) ..
                                ': expected ' .. fmt(lo) .. '..' .. fmt(hi))
end

-- given if it is >= 0, else the queue's setting (see stored_setting).
local function queue_setting(cfg, field, given)
  if given >= 0 then return given end
  return stored_setting(cfg, field)
end

-- Pushes n wake tokens (one per entry made ready); at most 1000.
local function signal(sig, n)
  n = math.min(n, 1000)
  while n > 0 do
    local k = math.min(n, 100)
    local t = {}
    for i = 1, k do t[i] = '1' end
    redis.call('RPUSH', sig, unpack(t))
    n = n - k
  end
end

-- The backoff of a nack on attempt attempts: base * 2^(attempts - 1),
-- capped, times (1 + frac) / 2. Closed form: the attempt count is read
-- from Redis, so no loop may depend on it.
local function backoff_ms(base, cap, attempts, frac)
  local k = math.min(math.max(attempts - 1, 0), 60)
  local d = math.min(base * 2 ^ k, cap) -- base, cap <= DUE_MAX: no overflow, no NaN
  return math.floor(d * (1 + frac) / 2)
end

