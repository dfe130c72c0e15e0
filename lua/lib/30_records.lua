-- lua/lib/30_records.lua: records and ready entries (part of the scripts' shared code: see 00_base.lua).
-- Records ------------------------------------------------------------------

local function ready_entry(due, ready, id, payload)
  return '1|' .. fmt(due) .. '|' .. fmt(ready) .. '|' .. nstr(#id) .. '|' .. id .. payload
end

-- A version 1 record of id and payload; pre (optional): text put before it
-- in the same string (a bucket entry's head), so the record is not made
-- and then copied into a second string.
local function record_v1(id, payload, pre)
  return (pre or '') .. '1|' .. nstr(#id) .. '|' .. id .. payload
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
-- decoded. Checks what the client's decoder (src/util/codec.c) checks, so an
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
-- entry e (src/util/seal.c: "\0dqs1", the 8-byte key id, a 24-byte nonce, at
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

