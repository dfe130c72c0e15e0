-- schedules.lua: lists a queue's recurring schedules (see
-- lib/80_recurring.lua); only reads (a no-writes function: FCALL_RO runs
-- it, for a user whose keys are read-only). A key of another type lists as
-- no schedules.
-- ARGV[1] key prefix
-- Returns, per schedule in name order (at most 10,000): name, kind, text,
-- zone, every_ms, start_ms, stop_ms, missed, paused, next, last, payload
-- length; a schedule whose spec does not decode lists with kind 'bad', and
-- so does one whose text or zone holds more than 255 bytes or any but
-- printable ASCII (planted: no terminal gets its control bytes). A name no
-- schedule can have (see DQ_RECURRING_NAME_MAX) is left out. A schedule of
-- the previous release not migrated yet lists with its own next and last;
-- a name that is in a tick bucket but has no spec lists as bad.
local P = ARGV[1]
local names = redis.pcall('HKEYS', recur.sched_key(P))
if type(names) ~= 'table' then return {} end
-- Where each active schedule is: one pass over the buckets (ascending:
-- a schedule is in one bucket), 200,000 entries at most.
local where, seen = {}, 0
local bs = redis.pcall('ZRANGE', recur.buckets_key(P), '0', '-1', 'WITHSCORES')
if type(bs) ~= 'table' then bs = {} end
for i = 1, #bs, 2 do
  local l = redis.pcall('LRANGE', recur.bucket_key(P, bs[i]), '0', '-1')
  if type(l) == 'table' then
    for _, m in ipairs(l) do
      local n = string.match(m, '^([^|]+)|')
      if n and not where[n] then where[n] = tonumber(bs[i + 1]) end
    end
    seen = seen + #l
  end
  if seen > 200000 then break end
end

-- A name in a bucket with no spec (a leftover: see recur.leave_named)
-- lists as bad, so that it can be seen and removed.
local known = {}
for _, n in ipairs(names) do known[n] = true end
for n in pairs(where) do
  if not known[n] then names[#names + 1] = n end
end
table.sort(names)

local function printable(t) return #t < 256 and not string.find(t, '[^ -~]') end

local out = {}
for i = 1, math.min(#names, 10000) do
  local n = names[i]
  local named = recur.name_ok(n)
  local s = named and recur.spec_read(P, n)
  -- The previous release's (spec v1, not migrated yet: see
  -- lib/85_recurring_v1.lua) lists as it stands.
  local v1 = named and not s and recur.v1_decode(redis.pcall('HGET', recur.sched_key(P), n))
  if v1 then s = v1 end
  if s and not (printable(s.text) and printable(s.zone)) then s = nil end
  if not named then -- left out
  elseif s then
    local last, nx = s.last, s.next
    if not v1 then last, nx = recur.current(P, n, s, nil, where) end
    for _, v in ipairs({n, s.kind, s.text, s.zone, fmt(s.every), fmt(s.start), fmt(s.stop), s.missed,
                        fmt(s.paused), fmt(nx), fmt(last), fmt(s.plen)}) do
      out[#out + 1] = v
    end
  else
    for _, v in ipairs({n, 'bad', '', '', '0', '0', '0', '', '0', '-1', '-1', '0'}) do out[#out + 1] = v end
  end
end
return out
