-- take.lua: pops up to N ready entries for a consumer, atomically.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] set-aside list,
-- KEYS[4] counters, KEYS[5] wake tokens, KEYS[6] queue settings
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] N,
-- ARGV[4] lease ms (0: no lease, the entries are simply handed out; -1: the
-- queue's setting),
-- ARGV[5] token prefix (unique per call; the token of entry i is prefix..i),
-- ARGV[6] max attempts recorded with a lease (0: no limit; -1: the queue's),
-- ARGV[7] '1' if the caller was woken by a token it popped (BLPOP),
-- ARGV[8] the call's result key (dq:{Q}:t:<token prefix>): the result is kept
-- there for 60 s, and a call repeated with the same key (its reply was lost
-- with the connection) gets the same result back instead of popping more, so
-- a take whose reply is lost loses nothing. The caller deletes the key once
-- it has the reply.
-- One wake token goes with each entry taken (the caller's own counts), so
-- the tokens left match the entries left.
-- Without a lease the id leaves the id index. With a lease each entry goes
-- into the slots, scored by the lease's end, with a record holding its
-- token; the scheduler returns it to the ready list when the lease runs
-- out, unless ack, nack or extend comes first with the token.
-- Returns {} when nothing was ready, else {lease, e1, ..., en}: lease is 1
-- when the entries were leased (entry i's token is then the token prefix
-- .. i), 0 when handed out; ei is the i-th entry popped, as it was in the
-- ready list (the caller decodes it: attempt = its attempts + 1), or '' for
-- one that could not be decoded and went to the set-aside list. Raw entries
-- cost the script no parsing into tables, no number formatting, and one
-- reply element per message instead of six.
local zs, ready, aside, counters, sig, cfg = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local P, chan = ARGV[1], ARGV[2]
local lease, tprefix, max = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])

-- Everything this script writes after the LPOP must not fail half way.
local err = require_type(zs, 'zset') or require_type(counters, 'hash')
if err then return err end
local replay = redis.call('GET', ARGV[8])
if replay then return cmsgpack.unpack(replay) end
local entries = redis.call('LPOP', ready, ARGV[3])
if not entries then
  -- Nothing ready, so no token is owed: drop strays (from takes that
  -- found their entry taken by a caller that was not woken).
  redis.pcall('DEL', sig)
  return {}
end
local owed = #entries - (ARGV[7] == '1' and 1 or 0)
if owed > 0 then redis.pcall('LPOP', sig, nstr(owed)) end

local now = server_now_ms()
lease = queue_setting(cfg, 'lease_ms', lease)
if lease > 0 then max = queue_setting(cfg, 'max_attempts', max) end
local deadline = math.min(now + lease, DUE_MAX)
local bound = nil
if lease > 0 then bound = first_bound(zs) end
local out, bad, leased, first = {lease > 0 and 1 or 0}, {}, 0, nil
local hint = {} -- the leases of one take share a deadline, so usually one slot
local maxs = lease > 0 and fmt(max) or nil
for i, e in ipairs(entries) do
  local d, a, il, el, pos = entry_head(e)
  if not d then
    bad[#bad + 1] = aside_entry('undecodable ready entry', '', e)
    out[i + 1] = ''
  else
    local id = string.sub(e, pos, pos + il - 1)
    if lease > 0 then
      local token = tprefix .. nstr(i)
      local rec = '2|' .. nstr(a + 1) .. '|' .. maxs .. '|' .. d .. '|' .. nstr(il) .. '|' ..
                  nstr(#token) .. '|' .. nstr(el) .. '|' .. id .. token .. string.sub(e, pos + il)
      -- With ordinals, leases follow the latest record of their
      -- millisecond (the hint knows it after the first), so takes in the
      -- same millisecond append instead of sharing scores, and a full
      -- slot is followed by a new one instead of split.
      local score, ss = slot_insert(P, zs, counters, deadline * ORD, rec, true, hint)
      id_set(id_key(P, id), id, ss)
      if first == nil or score < first then first = score end
      leased = leased + 1
    else
      id_del(id_key(P, id), id)
    end
    out[i + 1] = e
  end
end
slot_flush(hint)
if #bad > 0 then redis.pcall('RPUSH', aside, unpack(bad)) end
if leased > 0 then
  redis.call('HINCRBY', counters, 'inflight', nstr(leased))
  announce_if_first(chan, first, bound)
end
redis.call('SET', ARGV[8], cmsgpack.pack(out), 'PX', 60000)
return out
