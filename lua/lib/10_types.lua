-- lua/lib/10_types.lua: keys of the wrong type (part of the scripts' shared code: see 00_base.lua).
-- Keys of the wrong type ------------------------------------------------------

local renamed = 0 -- keys this call renamed (their new names must differ)
local qmeta = {} -- the queue's marks this call read (see lib/20_counters.lua)

-- Per-call state back to its start. As EVAL, every call runs this file
-- afresh; in the function library (tools/embed-lua.sh) the file runs once
-- and every function calls this first, so nothing leaks from call to call
-- (the number caches would otherwise grow with whatever Redis holds).
local function call_begin()
  renamed, small_num, small_int = 0, {}, {}
  -- Emptied, not replaced: a table a call is garbage, and on a one-item
  -- offer the collector's share shows (BENCHMARKS.md, issue 36).
  qmeta.clock, qmeta.epoch, qmeta.cfgset, qmeta.counters = nil, nil, nil, nil
  qmeta.shards, qmeta.used, qmeta.cfg_repair = nil, nil, nil
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

