-- common.lua: prepended to every delayq script at build time.
--
-- Data layout of queue Q (all keys share the hash tag {Q}, one cluster slot;
-- P below is the prefix "dq:{Q}:", passed to the scripts that need it):
--   dq:{Q}:zs       ZSET  the slot index: slot name -> the slot's lower bound
--   P..q:<name>     ZSET  a slot: timed entries (member = the whole record,
--                         see below), score = due_ms * ORD + ordinal for
--                         pending items, lease end * ORD + ordinal in flight
--   P..i:<h>        HASH  the id index, h = a hash of the id: id -> score of
--                         the id's record; an id whose record is in no slot
--                         is in the ready list, or in flight under a take's
--                         lease (the registry below tells which)
--   P..l            ZSET  the lease registry: the takes' lease records, by
--                         score, with their ids (see The lease registry below)
--   dq:{Q}:r        LIST  ready entries, oldest first
--   dq:{Q}:s        LIST  wake tokens, one per ready entry: a waiting consumer
--                         BLPOPs one, so each entry wakes one waiter, not all
--   dq:{Q}:x        LIST  set-aside entries "1|reason|idlen|<id><raw>"
--   dq:{Q}:d        HASH  dead letters: id -> dead record
--   dq:{Q}:dz       ZSET  dead letters by time of death (ms)
--   dq:{Q}:n        HASH  counters: pending, inflight, slots (names issued),
--                         and the metrics (see Metrics below)
--   dq:{Q}:t:<req> STRING a take's result, until its taker has the reply
--                         (60 s at most): a retried take replays it
--   dq:{Q}:cfg      HASH  the queue's settings: lease_ms, max_attempts,
--                         backoff_base_ms, backoff_max_ms (absent: defaults)
--   dq:{Q}:w        shard channel (SPUBLISH/SSUBSCRIBE): the earliest due time (ms), or -1
--
-- Why slots: one big zset costs about 125 bytes an entry (skiplist node,
-- dict entry, member string). Small zsets of at most SLOT_CAP entries stay
-- listpacks (Redis's default zset-max-listpack-entries is 128), where an
-- entry costs its bytes plus two or three. Slot i holds the scores in
-- [bound i, bound i+1): a slot that grows past SLOT_CAP splits in two, so
-- any spread of due times (a burst in one second, a trickle over a year)
-- gives slots of SLOT_CAP / 2 .. SLOT_CAP entries. The record is the member,
-- so a transfer moves whole ranks of a slot with a few calls per chunk and
-- none per item. Emptied slots leave the index when a transfer reaches them.
-- The ordinal (0..ORD-1) keeps equal due times in offer order.
--
-- Formats (the first byte is the format version):
--   record v1  "1|idlen|" .. id .. payload               never delivered yet
--   record v2  "2|attempts|max|due|idlen|tlen|elen|" .. id .. token .. err .. payload
--              token ~= '': in flight (score = lease end); else a retry
--   record v4  "4|max|tlen|n|ilen|" .. token prefix .. ids .. n blocks: a
--              take's leases (score = lease end; see Lease records below)
--   record v3  "3|max|tlen|n|" .. token prefix .. n blocks: as v4 without
--              ids (written before v4; still read)
--   ready v1   "1|due|ready|idlen|" .. id .. payload          attempts 0
--   ready v2   "2|due|ready|attempts|idlen|elen|" .. id .. err .. payload
--   dead       "1|died|attempts|due|rlen|elen|" .. reason .. err .. payload
--
-- What the scripts read from Redis is outside input: another client, an
-- older delayq, a manual HSET or a bug can leave anything in these keys.
-- Every record, entry, id, count, time, setting and key type read back is
-- checked as strictly as an offer's arguments (the id rule of src/codec.c,
-- numbers within their ranges, lengths within the record), and every loop
-- is bounded by a constant or an argument, never by a number read from
-- Redis. What fails:
--   - a record or entry: set aside (the set-aside list P..'x', with a
--     reason and its raw bytes); the items around it keep flowing;
--   - a key of the layout holding another type (slot index, slots, id
--     index buckets, ready, set-aside, wake tokens, dead letters): renamed
--     out of the way to P..'bad:<suffix>:<µs>:<n>', never deleted, with a
--     note in the set-aside list; the script goes on as if it were absent;
--   - a setting (cfg) or a counter (n): an error reply that names the key,
--     the field and the value, before the script writes anything (never a
--     silent fallback). HDEL the field to go back to the default, or zero.
-- Every script reads and checks everything before its first write, so a
-- call either completes or changes nothing; only an OOM (or a script
-- killed past its time limit) can stop one half way.
-- Numbers are formatted with fmt (%d): Lua 5.1's tostring keeps only 14
-- digits, and %d formats the integers used here (all below 2^53) exactly and
-- several times faster than %.0f or the %.17g that redis.call applies to a
-- number argument, so hot paths pass scores to Redis as strings.
local ORD = 2048
local DUE_MAX = 4398046511103
local SCORE_MAX = (DUE_MAX + 1) * ORD - 1 -- below 2^53: exact as a Lua number
local SLOT_CAP = 64
local ID_BUCKETS = 32768
local ID_MAX = 128
local SHARDS_MAX = 64 -- DQ__SHARDS_MAX (src/util.h)
local TOKEN_MAX = 64
-- Attempts and max attempts, as records keep them: 9 digits, so the client
-- holds them in an int. An entry claiming ATTEMPTS_MAX cannot be delivered
-- again (its next attempt would pass the cap): it is set aside.
local ATTEMPTS_MAX = 999999999

local function fmt(n) return string.format('%d', n) end
-- As digit strings (literals: a function library's top level may not call
-- the string library when it loads).
local DUE_MAX_S, ATTEMPTS_MAX_S = '4398046511103', '999999999'

-- fmt for the small numbers (lengths, counts) of records: cached per call.
-- Never concatenate a number directly: Lua formats it with %.14g, through
-- the C library's floating-point printer, several times slower.
local small_num = {}
local function nstr(n)
  local s = small_num[n]
  if not s then
    s = fmt(n)
    small_num[n] = s
  end
  return s
end

-- tonumber for the short digit strings of lengths (of ids, errors):
-- cached per call, as they repeat from entry to entry.
local small_int = {}
local function small_uint(s)
  local n = small_int[s]
  if not n then
    n = tonumber(s)
    small_int[s] = n
  end
  return n
end

local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function server_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Whether id's bytes are all 0x21..0x7e. Anchored: an unanchored search
-- for a bad byte ('[^!-~]') starts a match at every position, twice the
-- cost on a 20-byte id.
local function id_bytes_ok(id)
  return string.find(id, '^[!-~]*$') ~= nil
end

-- Whether id follows the id rule (dq__id_valid in src/codec.c): 1..128
-- bytes of 0x21..0x7e.
local function id_ok(id)
  local n = #id
  return n >= 1 and n <= ID_MAX and id_bytes_ok(id)
end

-- Outside text for an error message: at most 40 bytes, bytes outside
-- 0x20..0x7e (and the quote) escaped as \xNN.
local function quoted(s)
  local t = string.gsub(string.sub(s, 1, 40), '[^ !#-~]', function(c)
    return string.format('\\x%02x', string.byte(c))
  end)
  if #s > 40 then t = t .. '...' end
  return '"' .. t .. '"'
end

-- A whole number read from Redis: a string of 1..digits decimal digits (no
-- sign) whose value is at most max; else nil.
local function uint_of(s, digits, max)
  if not s or #s > digits or string.find(s, '^%d+$') == nil then return nil end
  local n = tonumber(s)
  if n > max then return nil end
  return n
end

local function aside_entry(reason, id, raw)
  return '1|' .. reason .. '|' .. nstr(#id) .. '|' .. id .. (raw or '')
end

-- Keys of the wrong type ------------------------------------------------------

local renamed = 0 -- keys this call renamed (their new names must differ)

-- Per-call state back to its start. As EVAL, every call runs this file
-- afresh; in the function library (tools/embed-lua.sh) the file runs once
-- and every function calls this first, so nothing leaks from call to call
-- (the number caches would otherwise grow with whatever Redis holds).
local function call_begin()
  renamed, small_num, small_int = 0, {}, {}
end

-- Renames key (which holds the type got, not the one the layout wants) out
-- of the way, keeping its data, and notes it in the set-aside list.
local function quarantine(P, key, got)
  renamed = renamed + 1
  local dest = P .. 'bad:' .. string.sub(key, #P + 1) .. ':' .. fmt(server_now_us()) .. ':' .. nstr(renamed)
  redis.call('RENAME', key, dest)
  local x = P .. 'x'
  local note = aside_entry('wrong type: ' .. key .. ' held a ' .. got .. ', renamed to ' .. dest, '', '')
  if key ~= x then
    local t = redis.call('TYPE', x)['ok']
    if t ~= 'none' and t ~= 'list' then
      quarantine(P, x, t)
      return
    end
  end
  redis.call('RPUSH', x, note)
end

-- Makes sure key holds want or nothing: one of another type is renamed out
-- of the way (see quarantine). One TYPE call: for the keys a call touches
-- once, never per item.
local function ensure_type(P, key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then quarantine(P, key, got) end
end

-- redis.call(cmd, key, ...) on a key of the layout that is usually of the
-- right type (slots, id index buckets): a key of another type is renamed
-- out of the way and the command runs again, on the key now absent. Costs
-- what redis.call costs; used where a TYPE call per key would be per item.
local function kcall(P, cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) == nil then error(r) end
    quarantine(P, key, redis.call('TYPE', key)['ok'])
    return redis.call(cmd, key, ...)
  end
  return r
end

-- Appends the set-aside entries bad (a list, maybe empty) to the set-aside
-- list P..'x'.
local function set_aside(P, bad)
  if #bad == 0 then return end
  ensure_type(P, P .. 'x', 'list')
  redis.call('RPUSH', P .. 'x', unpack(bad))
end

-- Fails the script before it writes anything if key holds another type
-- (for read-only scripts, which never rename).
local function require_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    return redis.error_reply('WRONGTYPE delayq: key ' .. key .. ' holds a ' .. got .. ', expected a ' .. want)
  end
  return nil
end

-- Counters -----------------------------------------------------------------

-- Reads the counters hash and checks it, for every script that changes a
-- counter or may make a slot (HINCRBY fails on a value that is no integer,
-- and would fail after the script has written). A corrupt counter refuses
-- the call, before it writes: counters are reports (stats) and slot names,
-- so repairing one by guessing would hide the corruption. Returns the
-- values as numbers (absent: 0), or nil and an error reply naming the key,
-- field and value (HDEL the field to reset it to 0).
local function read_counters(counters)
  local v = redis.pcall('HMGET', counters, 'pending', 'inflight', 'slots', 'shards')
  if v.err then
    return nil, redis.error_reply('WRONGTYPE delayq: counters key ' .. counters ..
                                  ' holds a ' .. redis.call('TYPE', counters)['ok'] .. ', expected a hash')
  end
  local out = {}
  for i = 1, 3 do
    local s = v[i]
    if not s then
      out[i] = 0
    elseif #s <= 16 and (s == '0' or string.find(s, '^%-?[1-9]%d*$')) then
      out[i] = tonumber(s)
    else
      local field = i == 1 and 'pending' or i == 2 and 'inflight' or 'slots'
      return nil, redis.error_reply('ERR delayq: counter ' .. field .. ' in ' .. counters ..
                                    ' is ' .. quoted(s) .. ': expected an integer (HDEL it to reset it)')
    end
  end
  -- The queue's shard count (absent: 1, unsharded; 0 while it changes),
  -- kept here because every writing script reads this hash anyway.
  local sh = v[4]
  if not sh then
    out[4] = 1
  elseif string.find(sh, '^%d%d?$') and tonumber(sh) <= SHARDS_MAX then
    out[4] = tonumber(sh)
  else
    return nil, redis.error_reply('ERR delayq: shard count in ' .. counters .. ' is ' .. quoted(sh) ..
                                  ': expected 0..' .. SHARDS_MAX)
  end
  return out
end

-- The shard count alone, for scripts that read the counters for nothing
-- else (lookup, a take without a lease): (count) or (nil, error reply for a
-- count that is not one). A counters key of another type holds no count:
-- 1, as those scripts never needed the counters to work.
local function read_shard_count(counters)
  local sh = redis.pcall('HGET', counters, 'shards')
  if type(sh) ~= 'string' then return 1 end
  if string.find(sh, '^%d%d?$') and tonumber(sh) <= SHARDS_MAX then return tonumber(sh) end
  return nil, redis.error_reply('ERR delayq: shard count in ' .. counters .. ' is ' .. quoted(sh) ..
                                ': expected 0..' .. SHARDS_MAX)
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

-- The id index bucket of an id. SHA-1 rather than a few of the id's bytes:
-- ids made by applications ("order-17", "order-18") must spread too.
local function id_key(P, id)
  return string.format('%si:%d', P, tonumber(string.sub(redis.sha1hex(id), 1, 4), 16) % ID_BUCKETS)
end

local function ready_entry(due, ready, id, payload)
  return '1|' .. fmt(due) .. '|' .. fmt(ready) .. '|' .. nstr(#id) .. '|' .. id .. payload
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
  if not v then return CFG_DEFAULTS[field] end
  local lo, hi = cfg_range(field)
  local n = uint_of(v, 16, hi)
  if n and n >= lo then return n end
  return nil, redis.error_reply('ERR delayq: setting ' .. field .. ' in ' .. cfg .. ' is ' .. quoted(v) ..
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

-- Records ------------------------------------------------------------------

local function record_v1(id, payload)
  return '1|' .. nstr(#id) .. '|' .. id .. payload
end

local function record_v2(r, id)
  return '2|' .. nstr(r.attempts) .. '|' .. nstr(r.max) .. '|' .. fmt(r.due) .. '|' .. nstr(#id) ..
         '|' .. nstr(#r.token) .. '|' .. nstr(#r.err) .. '|' .. id .. r.token .. r.err .. r.payload
end

-- The id length, id position and id of a version 1 record, or nil and a
-- reason if rec is not one that decodes.
local function v1_head(rec)
  if string.byte(rec, 1) ~= 49 then return nil, 'unknown record format' end -- '1'
  local il, pos = string.match(rec, '^1|(%d+)|()')
  if not il or #il > 3 then return nil, 'undecodable record' end
  il = tonumber(il)
  if il < 1 or il > ID_MAX or pos + il - 1 > #rec then return nil, 'undecodable record' end
  local id = string.sub(rec, pos, pos + il - 1)
  if not id_bytes_ok(id) then return nil, 'record with an invalid id' end
  return il, pos, id
end

-- The head of a version 2 record, checked: attempts, max, due, id length,
-- token length, error length (numbers), the id's position and the id; or
-- nil and a reason.
local function v2_head(rec)
  local a, m, d, il, tl, el, pos = string.match(rec, '^2|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  if not a or #il > 3 or #tl > 3 or #el > 9 then return nil, 'undecodable record' end
  -- The captures are digits already: their lengths and values are enough.
  if #a > 9 or #m > 9 or #d > 13 then return nil, 'record with a number out of range' end
  a, m, d = tonumber(a), tonumber(m), tonumber(d)
  if d > DUE_MAX then return nil, 'record with a number out of range' end
  il, tl, el = tonumber(il), tonumber(tl), tonumber(el)
  if il < 1 or il > ID_MAX or tl > TOKEN_MAX or pos + il + tl + el - 1 > #rec then
    return nil, 'undecodable record'
  end
  local id = string.sub(rec, pos, pos + il - 1)
  if not id_bytes_ok(id) then return nil, 'record with an invalid id' end
  return a, m, d, il, tl, el, pos, id
end

-- The id of a record, or nil if it cannot be decoded.
local function record_id(rec)
  local v = string.byte(rec, 1)
  if v == 49 then
    local _, _, id = v1_head(rec)
    return id
  end
  if v ~= 50 then return nil end
  local _, _, _, _, _, _, _, id = v2_head(rec)
  return id
end

-- The bytes where the id of a record (entry false) or ready entry (entry
-- true) that does not decode would be, whatever they hold (to clean the id
-- index up after it), or nil.
local function raw_id(s, entry)
  local v, p = string.sub(s, 1, 1), nil
  if v == '1' then
    p = entry and '^1|[^|]*|[^|]*|(%d+)|()' or '^1|(%d+)|()'
  elseif v == '2' then
    p = entry and '^2|[^|]*|[^|]*|[^|]*|(%d+)|[^|]*|()' or '^2|[^|]*|[^|]*|[^|]*|(%d+)|[^|]*|[^|]*|()'
  else
    return nil
  end
  local il, pos = string.match(s, p)
  if not il or #il > 3 then return nil end
  il = tonumber(il)
  if il < 1 or pos + il - 1 > #s then return nil end
  return string.sub(s, pos, pos + il - 1)
end

-- The ready entry of a version 1 record (never delivered), due at due (ms),
-- that becomes ready at nows (fmt of now), or nil for any other record: the
-- record with the due and ready times put in after its version. dues: a
-- per-call cache of formatted due times (neighbours in a slot often share
-- one).
-- The transfer's hot path: it checks the head's shape and lengths, not the
-- id's bytes (a string copy and a scan per item); the take checks those
-- (entry_head) before anything is delivered, and sets such an entry aside.
local function ready_entry_v1(rec, due, nows, dues)
  if string.byte(rec, 1) ~= 49 then return nil end -- '1'
  local il, pos = string.match(rec, '^1|(%d%d?%d?)|()')
  if not il then return nil end
  il = small_uint(il)
  if il < 1 or il > ID_MAX or pos + il - 1 > #rec then return nil end
  local ds = dues[due]
  if not ds then
    ds = fmt(due)
    dues[due] = ds
  end
  return '1|' .. ds .. '|' .. nows .. string.sub(rec, 2)
end

-- The ready entry of a record that becomes ready now.
local function ready_entry_of(r, now)
  if r.attempts == 0 and r.err == '' then return ready_entry(r.due, now, r.id, r.payload) end
  return '2|' .. fmt(r.due) .. '|' .. fmt(now) .. '|' .. nstr(r.attempts) .. '|' .. nstr(#r.id) ..
         '|' .. nstr(#r.err) .. '|' .. r.id .. r.err .. r.payload
end

-- The head of a ready entry, as strings: due, attempts (before this
-- delivery), then as numbers the id length, the error length and the
-- position of the id, then the id; nil and a reason if it cannot be
-- decoded. Checks what the client's decoder (src/codec.c) checks, so an
-- entry the script hands out decodes: due and ready times 0..DUE_MAX,
-- attempts below ATTEMPTS_MAX, an id that follows the id rule, lengths
-- that fit.
local function entry_head(e)
  local v = string.byte(e, 1)
  local d, rd, a, il, el, pos
  if v == 49 then -- '1'
    d, rd, il, pos = string.match(e, '^1|(%d+)|(%d+)|(%d+)|()')
    a, el = '0', '0'
  elseif v == 50 then -- '2'
    d, rd, a, il, el, pos = string.match(e, '^2|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|()')
  end
  if not d or #il > 3 or #el > 9 then return nil, 'undecodable ready entry' end
  -- The captures are digits already: their lengths and values are enough,
  -- and digit strings of one length compare as their numbers do (cheaper
  -- than tonumber, which goes through the C library's strtod).
  if #d > 13 or #rd > 13 or #a > 9 or (#d == 13 and d > DUE_MAX_S) or
     (#rd == 13 and rd > DUE_MAX_S) or a == ATTEMPTS_MAX_S then
    return nil, 'ready entry with a number out of range'
  end
  il, el = small_uint(il), small_uint(el)
  if il < 1 or il > ID_MAX or pos + il + el - 1 > #e then return nil, 'undecodable ready entry' end
  local id = string.sub(e, pos, pos + il - 1)
  if not id_bytes_ok(id) then return nil, 'ready entry with an invalid id' end
  return d, a, il, el, pos, id
end

-- The key id (16 hex digits) of a sealed payload starting at byte ppos of
-- entry e (src/seal.c: "\0dqs1", the 8-byte key id, a 24-byte nonce, at
-- least a 16-byte tag), or nil for a payload that is not sealed.
local SEAL_MAGIC, SEAL_OVERHEAD = '\0dqs1', 53
local function sealed_key(e, ppos)
  -- The first byte alone rules out almost every plain payload, with no
  -- string made for it.
  if #e - ppos + 1 < SEAL_OVERHEAD or string.byte(e, ppos) ~= 0 or
     string.sub(e, ppos, ppos + 4) ~= SEAL_MAGIC then
    return nil
  end
  return string.format('%02x%02x%02x%02x%02x%02x%02x%02x', string.byte(e, ppos + 5, ppos + 12))
end

-- Whether held (16 hex digits per key id) holds key id kid.
local function key_held(held, kid)
  for j = 1, #held, 16 do
    if string.sub(held, j, j + 15) == kid then return true end
  end
  return false
end

local function dead_record(r, reason, now)
  return '1|' .. fmt(now) .. '|' .. nstr(r.attempts) .. '|' .. fmt(r.due) .. '|' .. nstr(#reason) ..
         '|' .. nstr(#r.err) .. '|' .. reason .. r.err .. r.payload
end

-- Lease records ---------------------------------------------------------------
-- A take with a lease writes one record for all the entries it hands out
-- (version 4), not one record per entry: one ZADD for the take, and an ack
-- that finds a take's items with one read. The cost a lease adds to an item
-- is then its id index entry (set by the take, removed by the ack).
--   "4|max|tlen|n|ilen|" .. token prefix .. ids .. block 1 .. ... .. block n
-- ids (ilen bytes) is the ids of the n blocks joined by single spaces (no
-- id holds a space), '' for an empty block. Block i is "<len>|" .. the i-th
-- entry the take popped, as it was in the ready list (due time, attempts
-- before this delivery, id, error, payload), or "0|" once that item is gone
-- (acked, nacked, extended: those two move it to a record of its own) or
-- was never leased (set aside, held back). The ids come first, together,
-- so that an ack of a whole take compares them with the ids it names in one
-- string comparison, and reads no block (see ack.lua). Version 3, written
-- before version 4, is the same without ilen and ids; it is still read.
-- Item i's lease token is the prefix .. i .. '.' .. the record's score, as
-- the take's reply tells the client (its first element is the score), so
-- an ack finds the record without the id index; it is in flight with attempts = its entry's + 1 and the record's
-- max attempts, until the lease's end, the record's score.
local BATCH_MAX = 1000 -- take.lua's largest count

-- A version 4 lease record: ids, the blocks' ids joined by spaces; body,
-- its blocks.
local function lease_record_v4(max, prefix, n, ids, body)
  return '4|' .. fmt(max) .. '|' .. nstr(#prefix) .. '|' .. nstr(n) .. '|' .. fmt(#ids) .. '|' .. prefix .. ids ..
         body
end

-- Whether rec is a lease record (version 3 or 4) by its first byte.
local function is_lease_record(rec)
  local v = string.byte(rec, 1)
  return v == 52 or v == 51 -- '4', '3'
end

-- A lease record's head: its version (3 or 4, as a byte), max attempts,
-- token prefix, block count n, where its ids start (version 4) and where
-- its blocks start (body), as {v, max, prefix, n, ids, body}; or nil. Reads
-- no block: an ack of a whole take needs no more (see ack.lua).
local function lease_head(rec)
  local v, m, tl, n, il, pos = string.byte(rec, 1), nil, nil, nil, '0', nil
  if v == 52 then -- '4'
    m, tl, n, il, pos = string.match(rec, '^4|(%d+)|(%d+)|(%d+)|(%d+)|()')
  elseif v == 51 then -- '3'
    m, tl, n, pos = string.match(rec, '^3|(%d+)|(%d+)|(%d+)|()')
  end
  if not m or #m > 9 or #tl > 2 or #n > 4 or #il > 6 then return nil end
  tl, n, il = tonumber(tl), tonumber(n), tonumber(il)
  if tl < 1 or tl > TOKEN_MAX or n < 1 or n > BATCH_MAX or pos + tl + il - 1 > #rec then return nil end
  return {v = v, max = tonumber(m), prefix = string.sub(rec, pos, pos + tl - 1), n = n, ids = pos + tl,
          body = pos + tl + il}
end

-- A lease record's head (lease_head) and blocks: start[i] (where block i
-- starts), at[i] and len[i] (its entry), or nil and a reason. Checks the
-- shape and lengths only; an entry is checked when it is used
-- (batch_item). Version 4 also gives idat[i] and idlen[i], where the id of
-- block i lies in its ids (idlen[i] is 0 exactly when block i is empty: a
-- record that says otherwise does not decode). Version 3 gives them only
-- with with_ids, and only for a version 1 entry (the common case), read
-- inside the block by the same match that reads the block's length (an ack
-- compares ids without parsing the entry again). head: the record's
-- lease_head, if the caller has it.
local function batch_parse(rec, with_ids, head)
  local b = head or lease_head(rec)
  if not b then return nil, 'undecodable record' end
  local start, at, len = {}, {}, {}
  b.start, b.at, b.len = start, at, len
  local n, size, v4 = b.n, #rec, b.v == 52
  local idat, idlen
  if with_ids or v4 then
    idat, idlen = {}, {}
    b.idat, b.idlen = idat, idlen
  end
  if v4 then
    -- The ids, each ended by a space but the last, by the ids' end: n - 1
    -- spaces in all.
    local pos, last = b.ids, b.body - 1
    for i = 1, n do
      local q = string.find(rec, ' ', pos, true)
      if i < n then
        if not q or q > last then return nil, 'undecodable record' end
      else
        if q and q <= last then return nil, 'undecodable record' end
        q = last + 1
      end
      if q - pos > ID_MAX then return nil, 'undecodable record' end
      idat[i], idlen[i] = pos, q - pos
      pos = q + 1
    end
  end
  local pos = b.body
  for i = 1, n do
    local l, p, il, q
    if with_ids and not v4 then l, p, il, q = string.match(rec, '^(%d+)|()1|%d+|%d+|(%d%d?%d?)|()', pos) end
    if not l then l, p = string.match(rec, '^(%d+)|()', pos) end
    if not l or #l > 9 then return nil, 'undecodable record' end
    l = small_uint(l)
    if p + l - 1 > size or (v4 and (l == 0) ~= (idlen[i] == 0)) then return nil, 'undecodable record' end
    if il then
      il = small_uint(il)
      if q + il <= p + l then idat[i], idlen[i] = q, il end
    end
    start[i], at[i], len[i] = pos, p, l
    pos = p + l
  end
  if pos ~= size + 1 then return nil, 'undecodable record' end
  return b
end

-- The block number a lease token's middle names ("1".."1000", as take.lua
-- writes them: no sign, no leading zero), or false. The valid ones are kept
-- as met (in the function library, from call to call: at most BATCH_MAX of
-- them, whatever a caller sends), as every ack names blocks 1, 2, 3...
local BLOCK_NUMBER = {}
local function block_number(mid)
  local i = BLOCK_NUMBER[mid]
  if i then return i end
  if #mid > 4 or not string.find(mid, '^[1-9]%d*$') then return false end
  i = mid + 0
  if i > BATCH_MAX then return false end
  BLOCK_NUMBER[mid] = i
  return i
end

-- The id of the entry at [at, at + len) of s, unchecked (see raw_id), or
-- nil; without copying the entry out.
local function entry_id_at(s, at, len)
  local v, il, p = string.byte(s, at), nil, nil
  if v == 49 then
    il, p = string.match(s, '^1|%d+|%d+|(%d+)|()', at)
  elseif v == 50 then
    il, p = string.match(s, '^2|%d+|%d+|%d+|(%d+)|%d+|()', at)
  end
  if not il or #il > 3 then return nil end
  il = small_uint(il)
  if il < 1 or p + il > at + len then return nil end
  return string.sub(s, p, p + il - 1)
end

-- The ids the blocks of a lease record that does not decode seem to hold
-- (read as far as the blocks decode), to clean the id index up after it.
-- Version 4's ids are not used: the blocks are what was leased.
local function batch_raw_ids(rec)
  local ids = {}
  local tl, il, pos = string.match(rec, '^4|[^|]*|(%d%d?)|[^|]*|(%d%d?%d?%d?%d?%d?)|()')
  if tl then
    pos = pos + tonumber(tl) + tonumber(il)
  else
    tl, pos = string.match(rec, '^3|[^|]*|(%d%d?)|[^|]*|()')
    if not tl then return ids end
    pos = pos + tonumber(tl)
  end
  for _ = 1, BATCH_MAX do
    local l, p = string.match(rec, '^(%d+)|()', pos)
    if not l or #l > 9 then break end
    l = tonumber(l)
    if p + l - 1 > #rec then break end
    local id = l > 0 and entry_id_at(rec, p, l)
    if id then ids[#ids + 1] = id end
    pos = p + l
  end
  return ids
end

-- Whether block i of batch b (of record rec) names id by its piece of the
-- ids (version 4), or nil when b has no ids to compare by.
local function batch_names(rec, b, i, id)
  local q = b.idat and b.idat[i]
  if not q then return nil end
  return b.idlen[i] == #id and string.sub(rec, q, q + #id - 1) == id
end

-- Whether block i of batch b (of record rec) holds id: by the record's
-- ids (version 4; with_ids for a version 1 entry of version 3), else by
-- parsing the entry.
local function batch_holds(rec, b, i, id)
  local named = batch_names(rec, b, i, id)
  if named ~= nil then return named end
  return b.len[i] > 0 and entry_id_at(rec, b.at[i], b.len[i]) == id
end

-- The block of batch b (of record rec) that holds id, or nil.
local function batch_find(rec, b, id)
  for i = 1, b.n do
    if batch_holds(rec, b, i, id) then return i end
  end
  return nil
end

-- The lease token of block i of batch b, the record at score (a number).
local function batch_token(b, i, score)
  return b.prefix .. nstr(i) .. '.' .. fmt(score)
end

-- Item i of batch b (of record rec, at score) as parse_record's table (a
-- version 2 record in flight), or nil and a reason if its entry does not
-- decode, or holds another id than its piece of the ids says (version 4).
local function batch_item(rec, b, i, score)
  local e = string.sub(rec, b.at[i], b.at[i] + b.len[i] - 1)
  local d, a, il, el, pos, id = entry_head(e)
  if not d then return nil, a end
  if batch_names(rec, b, i, id) == false then return nil, 'lease record ids disagree' end
  local t0 = pos + il
  return {attempts = tonumber(a) + 1, max = b.max, due = tonumber(d), id = id, token = batch_token(b, i, score),
          err = string.sub(e, t0, t0 + el - 1), payload = string.sub(e, t0 + el)}
end

-- Record rec (batch b) with the blocks in gone (index -> true) emptied, or
-- nil when no item is left in it. A version 4 record's ids lose the ids of
-- those blocks too, and its head gets the new length of its ids.
local function batch_without(rec, b, gone)
  local v4 = b.v == 52
  local parts, ids, left = {}, {}, 0
  for i = 1, b.n do
    if gone[i] or b.len[i] == 0 then
      parts[i], ids[i] = '0|', ''
    else
      parts[i] = string.sub(rec, b.start[i], b.at[i] + b.len[i] - 1)
      if v4 then ids[i] = string.sub(rec, b.idat[i], b.idat[i] + b.idlen[i] - 1) end
      left = left + 1
    end
  end
  if left == 0 then return nil end
  if not v4 then return string.sub(rec, 1, b.body - 1) .. table.concat(parts) end
  return lease_record_v4(b.max, b.prefix, b.n, table.concat(ids, ' '), table.concat(parts))
end

-- Whether record rec holds id (a lease record: as one of its items).
local function record_has(rec, id)
  if is_lease_record(rec) then
    local b = batch_parse(rec)
    return b ~= nil and batch_find(rec, b, id) ~= nil
  end
  return record_id(rec) == id
end

-- A record as a table, or nil and a reason if it cannot be decoded. score:
-- its score (checked by the caller: 0..SCORE_MAX). A lease record (version
-- 3) holds many items: id picks one (nil: the record reads as undecodable),
-- and the table then also has batch (its batch_parse), index (the item's
-- block) and score; an item whose entry does not decode still reads as in
-- flight (bad: the reason), so no caller removes the record for it.
local function parse_record(rec, score, id)
  local v = string.sub(rec, 1, 1)
  if v == '1' then
    local il, pos, rid = v1_head(rec)
    if not il then return nil, pos end
    return {attempts = 0, max = 0, due = math.floor(score / ORD), token = '', err = '',
            id = rid, payload = string.sub(rec, pos + il)}
  end
  if v == '4' or v == '3' then
    local b, why = batch_parse(rec)
    if not b then return nil, why end
    local i = id and batch_find(rec, b, id)
    if not i then return nil, 'undecodable record' end
    local r, bad = batch_item(rec, b, i, score)
    if not r then
      r = {attempts = 0, max = b.max, due = math.floor(score / ORD), id = id, token = batch_token(b, i, score),
           err = '', payload = '', bad = bad}
    end
    r.batch, r.index, r.score = b, i, score
    return r
  end
  if v ~= '2' then return nil, 'unknown record format' end
  local a, m, d, il, tl, el, pos, rid = v2_head(rec)
  if not a then return nil, m end
  local t0 = pos + il
  return {attempts = a, max = m, due = d, id = rid, token = string.sub(rec, t0, t0 + tl - 1),
          err = string.sub(rec, t0 + tl, t0 + tl + el - 1), payload = string.sub(rec, t0 + tl + el)}
end

-- The id index ---------------------------------------------------------------

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

-- Slots ----------------------------------------------------------------------

local function slot_key(P, name) return P .. 'q:' .. name end

-- The slot whose range holds score: (name, lower bound), or nil if score is
-- below every bound (or there is no slot).
local function slot_at(zs, score)
  -- A number argument would go out through %.17g: fmt is exact, and cheaper.
  if type(score) == 'number' then score = fmt(score) end
  local s = redis.call('ZREVRANGEBYSCORE', zs, score, '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if s[1] == nil then return nil end
  return s[1], tonumber(s[2])
end

-- The highest score in [lo, hi] over all slots, or nil, starting from the
-- slot (name, bound) that holds hi. Usually that slot alone; a split bound
-- inside [lo, hi] makes it look one slot further down.
local function last_score_in(P, zs, lo, hi, name, bound)
  for _ = 1, 64 do
    local s = kcall(P, 'ZREVRANGEBYSCORE', slot_key(P, name), fmt(hi), fmt(lo), 'WITHSCORES', 'LIMIT', '0', '1')
    if s[2] then return tonumber(s[2]) end
    if bound <= lo then return nil end
    hi = bound - 1
    name, bound = slot_at(zs, hi)
    if not name then return nil end
  end
  return nil
end

-- Splits a slot that grew past SLOT_CAP: the upper half moves to a new slot.
-- Tried at SLOT_CAP + 1 entries and every 32 more, so a slot that cannot
-- split (one score, more than ORD offers in one millisecond) is not
-- re-examined on every offer.
local function split_if_full(P, zs, counters, key)
  local card = kcall(P, 'ZCARD', key)
  if card <= SLOT_CAP or (card - SLOT_CAP - 1) % 32 ~= 0 then return end
  local half = nstr(math.floor(card / 2))
  local mid = kcall(P, 'ZRANGE', key, half, half, 'WITHSCORES')[2]
  local low = kcall(P, 'ZRANGE', key, '0', '0', 'WITHSCORES')[2]
  if mid == low then
    -- The lower half is all one score: split above it.
    local nx = kcall(P, 'ZRANGEBYSCORE', key, '(' .. mid, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if nx[2] == nil then return end
    mid = nx[2]
  end
  -- The upper half moves to a new slot inside Redis (ZRANGESTORE): no score
  -- is formatted for Lua and parsed back, as a read and a ZADD would.
  local new = fmt(redis.call('HINCRBY', counters, 'slots', '1'))
  local nkey = slot_key(P, new)
  -- A key already there is not ours (slot names are issued once): a zset is
  -- left alone and the split waits for later; another type is renamed away.
  local got = redis.call('TYPE', nkey)['ok']
  if got == 'zset' then return end
  if got ~= 'none' then quarantine(P, nkey, got) end
  local moved = redis.call('ZRANGESTORE', nkey, key, mid, '+inf', 'BYSCORE', 'LIMIT', '0', fmt(4 * SLOT_CAP))
  if moved >= 4 * SLOT_CAP then -- one score dominates: leave it
    redis.call('DEL', nkey)
    return
  end
  kcall(P, 'ZREMRANGEBYSCORE', key, mid, '+inf')
  redis.call('ZADD', zs, mid, new)
end

-- slot_insert's general case: [lo, hi] straddles a slot bound, or lies
-- below the first slot, or there is no slot yet.
local function slot_insert_anywhere(P, zs, counters, lo, hi, rec, ordinal)
  local score = lo
  local name, bound = slot_at(zs, hi)
  if ordinal and name then
    local l = last_score_in(P, zs, lo, hi, name, bound)
    if l then score = math.min(l + 1, hi) end
  end
  name = slot_at(zs, score)
  if not name then
    name = redis.call('ZRANGE', zs, '0', '0')[1] or fmt(redis.call('HINCRBY', counters, 'slots', '1'))
    redis.call('ZADD', zs, score, name) -- a new slot, or the first one now starts lower
  end
  local key = slot_key(P, name)
  kcall(P, 'ZADD', key, fmt(score), rec)
  split_if_full(P, zs, counters, key)
  return score
end

-- Whether the slot in hint h can take a record for [lo, hi]: hi lies in
-- the slot's range, and the highest score in [lo, hi] over all slots is
-- known. It is when the slot starts at or below lo, or when the slot's last
-- score lies in [lo, hi] (a millisecond whose ordinals run across a slot
-- bound: every slot below holds lower scores). The next bound is read only
-- when hi passes the highest score the slot was looked up for.
local function hint_fits(zs, h, lo, hi, ordinal)
  if not h.name or hi < h.bound then return false end
  if not (h.bound <= lo or (ordinal and h.last and h.last >= lo and h.last <= hi)) then
    return false
  end
  if hi <= h.seen then return true end
  -- The last insert landed inside the slot, not at its end: offers in no
  -- particular order (each its own delay), where the next seldom shares
  -- the slot. Reading its bound would be a call wasted: look up afresh.
  if h.upper == nil and not h.tail then return false end
  if h.upper == nil then
    local nx = redis.call('ZRANGEBYSCORE', zs, '(' .. fmt(h.bound), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    h.upper = nx[2] and tonumber(nx[2]) or math.huge
  end
  return hi < h.upper
end

-- Writes the records slot_insert held back in hint (see slot_insert); a
-- nil hint holds nothing.
local function slot_flush(hint)
  local n = hint and hint.np
  if n and n > 0 then
    kcall(hint.P, 'ZADD', hint.pkey, unpack(hint.pend, 1, n))
    hint.np = 0
  end
end

-- Adds rec with score ss (a string) to the slot key: at once, or held back
-- in hint when one is given (one ZADD then writes a run of records).
local function slot_add(P, hint, key, ss, rec)
  if not hint then
    kcall(P, 'ZADD', key, ss, rec)
    return
  end
  local n = hint.np or 0
  if n > 0 and hint.pkey ~= key then
    slot_flush(hint)
    n = 0
  end
  hint.pend = hint.pend or {}
  hint.pend[n + 1], hint.pend[n + 2], hint.pkey, hint.np, hint.P = ss, rec, key, n + 2, P
end

-- Adds a record with a score in [lo, lo + ORD - 1]: the first free ordinal
-- after the latest record of the same millisecond if ordinal, else lo
-- itself. Returns the score, and the score as a string (fmt). The caller
-- announces a score below the first bound it read before (see first_bound).
-- hint: nil, or a table the caller keeps across the inserts of one run: the
-- last slot used (name, bound, seen = the highest score it was looked up
-- for, upper = the next bound once read, last score, card, tail = whether
-- the last insert went to the end of the slot), so a batch
-- that stays in one slot looks the slot up once, and records held back to
-- be written with one ZADD a slot. With a hint, call slot_flush(hint)
-- before reading or changing a slot, and before the script ends.
-- Time mostly moves forward, so the common insert lands at or after the end
-- of its slot: the slot's last score then gives the ordinal (no scan of the
-- listpack), and a full slot is not split but followed by a new one that
-- starts with this record (nothing moves, and slots stay full).
local function slot_insert(P, zs, counters, lo, rec, ordinal, hint)
  local hi = ordinal and lo + ORD - 1 or lo
  local h = hint or {}
  if not hint_fits(zs, h, lo, hi, ordinal) then
    slot_flush(hint)
    local name, bound = slot_at(zs, hi)
    h.name = nil
    if name then
      local key = slot_key(P, name)
      local tail = kcall(P, 'ZRANGE', key, '-1', '-1', 'WITHSCORES')
      h.name, h.key, h.bound, h.seen, h.upper = name, key, bound, hi, nil
      h.last, h.card = tail[2] and tonumber(tail[2]) or nil, kcall(P, 'ZCARD', key)
    end
    if not hint_fits(zs, h, lo, hi, ordinal) then
      h.name = nil
      local score = slot_insert_anywhere(P, zs, counters, lo, hi, rec, ordinal)
      return score, fmt(score)
    end
  end
  local key = h.key
  local score = lo
  if ordinal and h.last and h.last >= lo then
    if h.last <= hi then
      score = math.min(h.last + 1, hi)
    else
      slot_flush(hint)
      local s = kcall(P, 'ZREVRANGEBYSCORE', key, fmt(hi), fmt(lo), 'WITHSCORES', 'LIMIT', '0', '1')
      if s[2] then score = math.min(tonumber(s[2]) + 1, hi) end
    end
  end
  if h.card >= SLOT_CAP and h.last and score > h.last then
    -- Appending to a full slot: start the next one here. It ends where
    -- the full one ended (h.upper and h.seen stay true).
    local name, ss = fmt(redis.call('HINCRBY', counters, 'slots', '1')), fmt(score)
    redis.call('ZADD', zs, ss, name)
    key = slot_key(P, name)
    slot_add(P, hint, key, ss, rec)
    h.name, h.key, h.bound, h.last, h.card, h.tail = name, key, score, score, 1, true
    return score, ss
  end
  local ss = fmt(score)
  slot_add(P, hint, key, ss, rec)
  h.card = h.card + 1
  h.tail = not h.last or score > h.last
  if h.tail then h.last = score end
  if h.card > SLOT_CAP then
    slot_flush(hint)
    split_if_full(P, zs, counters, key)
    h.name = nil -- the slot may have split: look it up again next time
  end
  return score, ss
end

-- The record of id at score: (slot key, record), or nil if it is in no
-- slot. Equal scores are rare (more than ORD records in a millisecond), so
-- the scan is usually over one member.
-- cache: nil, or a table kept across the look-ups of one call: the last
-- slot found and its range, so records that share a slot (the leases of one
-- take) look it up once.
local function slot_find(P, zs, id, score, cache)
  local ss = fmt(score) -- a number argument would be formatted with %.17g
  local name
  if cache and cache.name and score >= cache.bound and score < cache.upper then
    name = cache.name
  else
    local bound
    name, bound = slot_at(zs, ss)
    if not name then return nil end
    if cache then
      local nx = redis.call('ZRANGEBYSCORE', zs, '(' .. fmt(bound), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
      cache.name, cache.bound, cache.upper = name, bound, nx[2] and tonumber(nx[2]) or math.huge
    end
  end
  local key = slot_key(P, name)
  -- Bounded: past 100,000 records of one score (ORD offers in one
  -- millisecond, and 98,000 more), an id counts as in no slot.
  for i = 0, 999 do
    local recs = kcall(P, 'ZRANGEBYSCORE', key, ss, ss, 'LIMIT', nstr(i * 100), '100')
    for _, rec in ipairs(recs) do
      if record_has(rec, id) then return key, rec end
    end
    if #recs < 100 then return nil end
  end
  return nil
end

-- The lower bound of the first slot: at or before the earliest score, and a
-- time every scheduler has heard of (offers announce a new first score,
-- transfers publish the score they raise it to), so announcing only scores
-- below it is enough. nil if there is no slot.
local function first_bound(P, zs)
  local f = kcall(P, 'ZRANGE', zs, '0', '0', 'WITHSCORES')
  return f[2] and tonumber(f[2]) or nil
end

-- The earliest score in the slots, or nil; drops emptied slots from the
-- front of the index and raises the first bound to the earliest score.
local function earliest_score(P, zs)
  for _ = 1, 1000 do
    local f = redis.call('ZRANGE', zs, '0', '0', 'WITHSCORES')
    if f[1] == nil then return nil end
    local e = kcall(P, 'ZRANGE', slot_key(P, f[1]), '0', '0', 'WITHSCORES')
    if e[2] then
      local score = tonumber(e[2])
      if score > tonumber(f[2]) then redis.call('ZADD', zs, score, f[1]) end
      return score
    end
    redis.call('ZREM', zs, f[1])
  end
  return first_bound(P, zs)
end

-- earliest_score without its repairs, for the scripts that only read (a
-- no-writes function may not ZADD or ZREM): empty slots are skipped, not
-- dropped; a slot of another type counts as empty. Bounded as the other.
local function earliest_score_ro(P, zs)
  for i = 0, 999 do
    local f = redis.call('ZRANGE', zs, fmt(i), fmt(i))
    if f[1] == nil then return nil end
    local e = redis.pcall('ZRANGE', slot_key(P, f[1]), '0', '0', 'WITHSCORES')
    if type(e) == 'table' and e[2] then return tonumber(e[2]) end
  end
  return nil
end

local function earliest_due(P, zs, read_only)
  local s
  if read_only then s = earliest_score_ro(P, zs) else s = earliest_score(P, zs) end
  if s == nil then return -1 end
  return math.min(math.max(math.floor(s / ORD), 0), DUE_MAX) -- a planted score may be anything
end

-- The score a take's lease token names ("<request>.<i>.<score>": its lease
-- record's), or nil.
local function token_score(token)
  local ss = string.match(token, '%.(%d+)$')
  return ss and uint_of(ss, 16, SCORE_MAX) or nil
end

-- leased_record's look at one score: the record there that holds id under
-- token, with a lease not ended, as (record table, slot key, raw record).
local function leased_at(P, zs, id, token, now, score, cache)
  if not score or math.floor(score / ORD) <= now then return nil end
  local key, rec = slot_find(P, zs, id, score, cache)
  if not key then return nil end
  local r = parse_record(rec, score, id)
  if not r or r.bad or r.token == '' or r.token ~= token then return nil end
  return r, key, rec
end

-- The record of a leased id if token matches, as (record table, slot key,
-- raw record, id index key); nil if the id is unknown, not in flight, or the token is
-- stale: another lease's, or one that has ended (now, server ms, is at or
-- past its end), even if no scheduler has returned the item yet. ik: the
-- id's index key when the caller has it (the client sends the bucket), else
-- nil; cache: see slot_find. An item in a record of its own is found by
-- its index entry; one a take leased (lease record v4) by the record its
-- token names, as the take left the id's index entry as it was (see The
-- lease registry). An id with no index entry is not in flight.
local function leased_record(P, zs, id, token, now, ik, cache)
  ik = ik or id_key(P, id)
  local score = id_score_in(P, ik, id)
  if not score then return nil end
  local r, key, rec = leased_at(P, zs, id, token, now, score, cache)
  if not r then
    local ts = token_score(token)
    if ts and ts ~= score then r, key, rec = leased_at(P, zs, id, token, now, ts, cache) end
  end
  if not r then return nil end
  return r, key, rec, ik
end

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
