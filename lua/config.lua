-- config.lua: reads or sets a queue's settings.
-- KEYS[1] queue settings
-- ARGV: pairs of field, value ('' leaves a field as it is, '-' resets it to
-- the default). Fields: lease_ms, max_attempts, backoff_base_ms,
-- backoff_max_ms. Everything is checked before anything is written.
-- Returns the settings after the change, defaults filled in:
-- {lease_ms, max_attempts, backoff_base_ms, backoff_max_ms}.
local cfg = KEYS[1]
local err = require_type(cfg, 'hash')
if err then return err end
local FIELDS = {'lease_ms', 'max_attempts', 'backoff_base_ms', 'backoff_max_ms'}
local new = {}
for _, field in ipairs(FIELDS) do new[field] = queue_setting(cfg, field, -1) end
for i = 1, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if CFG_DEFAULTS[field] == nil then
    return redis.error_reply('ERR delayq: unknown queue setting ' .. tostring(field))
  end
  if value == '-' then
    new[field] = CFG_DEFAULTS[field]
  elseif value ~= '' then
    local n = tonumber(value)
    if not n or n < 0 or n ~= math.floor(n) or n > DUE_MAX then
      return redis.error_reply('ERR delayq: bad value for ' .. field .. ': ' .. value)
    end
    new[field] = n
  end
end
if new.lease_ms < 1 then return redis.error_reply('ERR delayq: lease_ms must be at least 1') end
if new.backoff_base_ms > new.backoff_max_ms then
  return redis.error_reply('ERR delayq: backoff_base_ms above backoff_max_ms')
end
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '-' then redis.call('HDEL', cfg, ARGV[i])
  elseif ARGV[i + 1] ~= '' then redis.call('HSET', cfg, ARGV[i], fmt(new[ARGV[i]])) end
end
local out = {}
for i, field in ipairs(FIELDS) do out[i] = fmt(new[field]) end
return out
