-- config.lua: reads or sets a queue's settings.
-- KEYS[1] queue settings, KEYS[2] counters (optional: for the shard count)
-- ARGV: pairs of field, value ('' leaves a field as it is, '-' resets it to
-- the default). Fields: lease_ms, max_attempts, backoff_base_ms,
-- backoff_max_ms. Everything is checked before anything is written: the
-- values given, and the stored values of the fields left as they are (the
-- same ranges, cfg_range, that the scripts reading them check). A
-- bad stored value is an error naming it; setting or resetting that field
-- repairs it. Settings gone (the settings hash absent while the counters'
-- cfgset says some were set: evicted, deleted) are an error for a call that
-- only reads; one that sets or resets a field writes them anew.
-- Returns the settings after the change, defaults filled in, and the
-- queue's shard count as KEYS[2] holds it (1 without KEYS[2]):
-- {lease_ms, max_attempts, backoff_base_ms, backoff_max_ms, shards}. The
-- caller writes the same settings to every shard of a sharded queue.
local cfg = KEYS[1]
local err = require_type(cfg, 'hash')
if err then return err end
local shards = 1
if KEYS[2] then
  shards, err = read_shard_count(KEYS[2])
  if err then return err end
end
local FIELDS = {'lease_ms', 'max_attempts', 'backoff_base_ms', 'backoff_max_ms'}
local new, given = {}, {}
if #ARGV % 2 ~= 0 then return redis.error_reply('ERR delayq:proto queue settings come in pairs') end
-- A call that sets or resets a field repairs settings that are gone (see
-- stored_setting): the fields it leaves out take their defaults.
for i = 2, #ARGV, 2 do
  if ARGV[i] ~= '' then qmeta.cfg_repair = true end
end
for i = 1, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if CFG_DEFAULTS[field] == nil then
    return redis.error_reply('ERR delayq:proto unknown queue setting ' .. quoted(field))
  end
  if value == '-' then
    new[field], given[field] = CFG_DEFAULTS[field], true
  elseif value ~= '' then
    local lo, hi = cfg_range(field)
    local n = uint_of(value, 16, hi)
    if not n or n < lo then
      return redis.error_reply('ERR delayq:input bad value for ' .. field .. ': ' .. quoted(value) ..
                               ': expected ' .. fmt(lo) .. '..' .. fmt(hi))
    end
    new[field], given[field] = n, true
  end
end
for _, field in ipairs(FIELDS) do
  if not given[field] then
    new[field], err = stored_setting(cfg, field)
    if err then return err end
  end
end
if new.backoff_base_ms > new.backoff_max_ms then
  return redis.error_reply('ERR delayq:input backoff_base_ms above backoff_max_ms')
end
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '-' then redis.call('HDEL', cfg, ARGV[i])
  elseif ARGV[i + 1] ~= '' then redis.call('HSET', cfg, ARGV[i], fmt(new[ARGV[i]])) end
end
if KEYS[2] and qmeta.cfg_repair then
  -- The mark that settings were set (counters' cfgset), so that their
  -- loss is noticed; and the queue's epoch, as settings make a queue.
  local set = redis.call('HLEN', cfg)
  if set > 0 then redis.call('HSET', KEYS[2], 'cfgset', nstr(set)) else redis.call('HDEL', KEYS[2], 'cfgset') end
  if set > 0 and not qmeta.epoch then redis.call('HSET', KEYS[2], 'epoch', new_epoch()) end
end
local out = {}
for i, field in ipairs(FIELDS) do out[i] = fmt(new[field]) end
out[#out + 1] = shards
return out
