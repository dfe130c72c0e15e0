-- lua/lib/: the code every delayq script shares, one concern a file. Its
-- files are joined in name order (each may use what the ones before it
-- define) and put before every script at build time (tools/embed-lua.sh):
-- once in the function library, and in front of each script's EVAL text.
-- This first file: the data layout, the formats, the limits, and the
-- helpers for numbers, ids and error messages.
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
--                         lease (the registry tells which)
--   P..b:<k>        LIST  a bucket of the timing wheel: items offered out of
--                         time order, due in [k, k + 1) * WHEEL_MS, entries
--                         '<off>|<h>|<record>'; P..bz ZSET its index, k ->
--                         the bucket's start (see lib/65_wheel.lua)
--   P..m:<due>      LIST  a near list: items offered less than 40 s before
--                         their due time <due>, entries <h><record> in offer
--                         order (h in two bytes); P..mg:<g> ZSET the lists
--                         of 32 ms, due -> due, and P..mz ZSET the groups,
--                         g -> earliest due (see lib/67_near.lua)
--   P..l            ZSET  the lease registry: the takes' lease records, by
--                         score, with their ids (see lib/70_registry.lua)
--   P..h:<tprefix> STRING the holder a leased take named, until its lease
--                         ends (see lib/75_holders.lua)
--   P..schedulers  ZSET  the queue's schedulers (host:pid) by when their
--                         last beat stops counting (see lib/75_holders.lua)
--   P..c           ZSET  the queue's consumers (name) by when their last
--                         beat stops counting (see lib/75_holders.lua)
--   P..ci          HASH  the consumers' details: name -> started|in hand|seen
--   dq:{Q}:r        LIST  ready entries, oldest first
--   dq:{Q}:s        LIST  wake tokens, one per ready entry: a waiting consumer
--                         BLPOPs one, so each entry wakes one waiter, not all
--   dq:{Q}:x        LIST  set-aside entries "1|reason|idlen|<id><raw>"
--   dq:{Q}:d        HASH  dead letters: id -> dead record
--   dq:{Q}:dz       ZSET  dead letters by time of death (ms)
--   dq:{Q}:n        HASH  counters: pending, inflight, slots (names issued),
--                         and the metrics; the queue's clock mark, epoch and
--                         settings mark (clock, epoch, cfgset: see
--                         lib/20_counters.lua)
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
--              take's leases (score = lease end; see lib/40_leases.lua)
--   record v3  "3|max|tlen|n|" .. token prefix .. n blocks: as v4 without
--              ids (written before v4; still read)
--   ready v1   "1|due|ready|idlen|" .. id .. payload          attempts 0
--   ready v2   "2|due|ready|attempts|idlen|elen|" .. id .. err .. payload
--   dead       "1|died|attempts|due|rlen|elen|" .. reason .. err .. payload
--
-- What the scripts read from Redis is outside input: another client, an
-- older delayq, a manual HSET or a bug can leave anything in these keys.
-- Every record, entry, id, count, time, setting and key type read back is
-- checked as strictly as an offer's arguments (the id rule of src/util/codec.c,
-- numbers within their ranges, lengths within the record), and every loop
-- is bounded by a constant or an argument, never by a number read from
-- Redis. What fails:
--   - a record or entry: set aside (the set-aside list P..'x', with a
--     reason and its raw bytes); the items around it keep flowing;
--   - a key of the layout holding another type (slot index, slots, id
--     index buckets, ready, set-aside, wake tokens, dead letters, tick
--     buckets): renamed
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
local SHARDS_MAX = 64 -- DQ__SHARDS_MAX (src/util/util.h)
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

-- Whether id follows the id rule (dq__id_valid in src/util/codec.c): 1..128
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

