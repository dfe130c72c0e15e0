-- take.lua: pops up to N ready entries for a consumer, atomically.
-- KEYS[1] slot index, KEYS[2] ready list, KEYS[3] set-aside list,
-- KEYS[4] counters, KEYS[5] wake tokens, KEYS[6] queue settings
-- ARGV[1] key prefix, ARGV[2] wake channel, ARGV[3] N,
-- ARGV[4] lease ms (0: no lease, the entries are simply handed out; -1: the
-- queue's setting),
-- ARGV[5] token prefix (unique per call; the token of entry i is prefix..i),
-- ARGV[6] max attempts recorded with a lease (0: no limit; -1: the queue's),
-- ARGV[7] '1' if the caller was woken by a token it popped (BLPOP),
-- ARGV[8] the caller's result key (dq:{Q}:t:<client>.<n>, one per take a
-- client has out at once, reused by its next take),
-- ARGV[9] '1' when this call repeats a request whose reply was lost (same
-- token prefix), '0' for a new request,
-- ARGV[10] the key ids the caller holds, 16 hex digits each, concatenated
-- ('' or absent: none),
-- ARGV[11] the shard count the caller takes the queue's shards by (see
-- shards_refusal; absent or '': not checked),
-- ARGV[12] (optional) the holder the take names, 1 to 64 bytes:
-- kept while the lease lasts (see lib/75_holders.lua). A sealed entry (its payload starts "\0dqs1", then
-- the 8-byte key id: src/util/seal.c) whose key the caller does not hold is not
-- handed out: it stays ready for a consumer that holds the key, moved to
-- the tail of the ready list (with its wake token), and the take goes on to
-- the entries behind it, popping up to PASS_MAX such entries a call. So an
-- item no consumer here can open never stops the ones behind it, and each
-- passes once per turn of the list, not once per take. When the take got
-- fewer than N entries, the reply ends with "k|<key id>|<id>" for the first
-- entry passed, so the caller can name the key it lacks.
-- The result is kept in the result key for 60 s, tagged with the token
-- prefix; a repeated call finds it there and gets the same result back
-- instead of popping more, so a take whose reply is lost loses nothing. A
-- new request skips that read, and overwrites the key: no reply lost costs
-- one SET, and no clean-up command. A take whose entries were all leased
-- keeps only "L<score>": its lease record holds the entries as popped, and
-- a repeat rebuilds the reply from the record's blocks (one gone since, by
-- extend or nack, is ''; the whole reply is {} once the record has gone,
-- its lease run out and its items back in the ready list). Any other take
-- keeps its reply, packed.
-- One wake token goes with each entry taken (the caller's own counts), so
-- the tokens left match the entries left.
-- Without a lease the id leaves the id index. With a lease the entries
-- go, as they are, into one lease record for the take (see
-- lib/40_leases.lua), scored by the lease's end, whose score goes into the
-- lease registry; the ids' index entries stay as they were (see
-- lib/70_registry.lua). The scheduler returns what is left in the
-- record to the ready list when the lease runs out, unless ack, nack or
-- extend comes first with the item's token.
-- Every reply ends with the queue's epoch (an integer; 0: none, see
-- lib/20_counters.lua), after what is described here.
-- Returns {} when nothing was ready, else {lease, e1, ..., en}, n <= N: lease is
-- the lease record's score when the entries were leased (entry i's token
-- is then the token prefix .. i .. '.' .. lease), 0 when handed out (or
-- 1 when every entry was set aside or held back); ei is the i-th entry
-- taken (entries passed for a key are not counted), as it was in the ready
-- list (the caller decodes it: attempt = its attempts + 1), or '' for
-- one that could not be decoded and went to the set-aside list, or, last,
-- the "k|..." of one held back (see ARGV[10]). Raw entries
-- cost the script no parsing into tables, no number formatting, and one
-- reply element per message instead of six.
-- An entry whose id breaks the id rule, or whose numbers are out of range,
-- is set aside like one that does not decode (so it is never delivered, and
-- no batch of acks can meet its id); its id leaves the id index when the
-- index says it is ready. The settings used (lease_ms, max_attempts) and the
-- counters (which only a leased take changes; every take adds to the
-- delivered metric, with pcall) are checked before the LPOP:
-- a bad one refuses the call, naming it, and nothing is popped. Keys of another type are renamed away.
-- Can fail after writing only on an OOM.
-- Entries sealed for a key the caller lacks that one call passes at most.
local PASS_MAX = 1000
local zs, ready, aside, counters, sig, cfg = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local P, chan = ARGV[1], ARGV[2]
local lease, tprefix, max = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local count = tonumber(ARGV[3])
local keys_held = ARGV[10] or ''
local holder = ARGV[12] or ''
if not lease or not max or not count or count < 1 or count > 1000 or count % 1 ~= 0 or
   lease < -1 or lease > DUE_MAX or lease % 1 ~= 0 or max < -1 or max > ATTEMPTS_MAX or max % 1 ~= 0 or
   #tprefix > TOKEN_MAX - 5 or #keys_held % 16 ~= 0 or #keys_held > 16 * 64 or #holder > seen.HOLDER_MAX or
   string.find(keys_held, '[^0-9a-f]') then
  return redis.error_reply('ERR delayq:proto malformed take arguments')
end

-- Everything this script writes after the LPOP must not fail half way, so
-- all that can refuse the call comes first.
-- A leased take checks every counter it changes; the shard count is one of
-- them (one read of the hash, not two).
-- The counters come first: they hold the marks the settings and the
-- clock need (qmeta); a take without a lease needs only the shard count.
local counts, cerr = read_counters(counters)
local shards, err
lease, err = queue_setting(cfg, 'lease_ms', lease)
if err then return err end
if lease > 0 then
  max, err = queue_setting(cfg, 'max_attempts', max)
  if err then return err end
  if #tprefix < 1 then return redis.error_reply('ERR delayq:proto malformed take arguments') end
  if cerr then return cerr end
  shards = counts[4]
else
  shards = qmeta.shards
  if not shards then return cerr end
end
err = shards_refusal(shards, ARGV[11])
if err then return err end
local tag = tprefix .. '\n'
-- Every reply ends with the queue's epoch (see qmeta; 0: none), an integer
-- after the entries: a consumer notices the queue's keys vanish.
local function with_epoch(t)
  t[#t + 1] = queue_epoch()
  return t
end
-- The reply of the leased take whose lease record is at score ss (see
-- the result key above), or nil if ss is no score.
local function leased_reply(ss)
  local score = uint_of(ss, 16, SCORE_MAX)
  if not score then return nil end
  ss = fmt(score)
  for _, rec in ipairs(records_at(P, zs, ss)) do
    local b = is_lease_record(rec) and batch_parse(rec)
    if b and b.prefix == tprefix then
      local out = {score}
      for i = 1, b.n do
        out[i + 1] = b.len[i] > 0 and string.sub(rec, b.at[i], b.at[i] + b.len[i] - 1) or ''
      end
      return out
    end
  end
  return {}
end

if ARGV[9] == '1' then
  -- A key of another type holds no result of ours: the SET below replaces it.
  local replay = redis.pcall('GET', ARGV[8])
  if type(replay) == 'string' and string.sub(replay, 1, #tag) == tag then
    if string.byte(replay, #tag + 1) == 76 then -- 'L'
      local out = leased_reply(string.sub(replay, #tag + 2))
      if out then return with_epoch(out) end
      return redis.error_reply('ERR delayq:corrupt take result ' .. ARGV[8] .. ' is unreadable')
    end
    local ok, out = pcall(cmsgpack.unpack, string.sub(replay, #tag + 1))
    if ok and type(out) == 'table' then return with_epoch(out) end
    return redis.error_reply('ERR delayq:corrupt take result ' .. ARGV[8] .. ' is unreadable')
  end
end
local entries = kcall(P, 'LPOP', ready, ARGV[3])
if not entries then
  -- Nothing ready, so no token is owed: drop strays (from takes that
  -- found their entry taken by a caller that was not woken). A key of
  -- another type is not ours: renamed away, not deleted.
  ensure_type(P, sig, 'list')
  redis.call('DEL', sig)
  return with_epoch({})
end

local deadline, bound = 0, nil
if lease > 0 then
  deadline = math.min(queue_now_ms() + lease, DUE_MAX)
  bound = recur.bound(P, zs)
end
local out, bad, leased, first = {lease > 0 and 1 or 0}, {}, 0, nil
local delivered = 0
-- With a lease: the ids of the lease record's blocks (see
-- lib/40_leases.lua; '' for an empty one), the parts of its blocks, three per entry
-- (so no string is made per entry; filled in order, so Lua keeps the table
-- an array).
local ids, blocks = {}, {}
local function block_parts(i, id, elen, e)
  ids[i] = id
  local k = 3 * i - 2
  blocks[k], blocks[k + 1], blocks[k + 2] = elen, '|', e
end
local lease_ss -- the lease record's score, as fmt writes it
local unindex = {} -- ids of entries set aside, with their due times
local back = {} -- sealed entries for a key the caller lacks: to the tail
local marker -- the "k|..." of the first of them
-- Takes entry e as the reply's next one (its lease block too), or passes it.
local function take_entry(e)
  local d, a, il, el, pos, id = entry_head(e)
  local kid = d and sealed_key(e, pos + il + el)
  if kid and not key_held(keys_held, kid) then
    back[#back + 1] = e
    marker = marker or ('k|' .. kid .. '|' .. id)
    return
  end
  local i = #out
  if not d then
    -- An entry set aside leaves an empty block.
    if lease > 0 then block_parts(i, '', '0', '') end
    local rid = raw_id(e, true)
    bad[#bad + 1] = aside_entry(a, rid or '', e)
    local due = rid and tonumber(string.match(e, '^.|(%d+)|'))
    if due then unindex[#unindex + 1], unindex[#unindex + 2] = rid, due end
    out[i + 1] = ''
  else
    if lease > 0 then
      block_parts(i, id, nstr(#e), e)
      leased = leased + 1
    else
      id_del(P, id_key(P, id), id)
    end
    out[i + 1] = e
    delivered = delivered + 1
  end
end
while entries do
  for _, e in ipairs(entries) do take_entry(e) end
  local want = count - (#out - 1)
  if want < 1 or #back == 0 or #back >= PASS_MAX then break end
  entries = redis.call('LPOP', ready, nstr(math.min(want, PASS_MAX - #back)))
end
local taken = #out - 1
if marker and taken < count then
  -- Last, so the tokens of the entries taken keep their numbers; an empty
  -- block for it keeps the record's blocks one per reply element.
  if lease > 0 then block_parts(taken + 1, '', '0', '') end
  out[taken + 2] = marker
end
if leased > 0 then
  -- One record for the take's leases, scored by their end; with an
  -- ordinal, so takes in the same millisecond never share a score.
  local idlist = table.concat(ids, ' ')
  local rec = lease_record_v4(max, tprefix, #out - 1, idlist, table.concat(blocks))
  local score
  score, lease_ss = slot_insert(P, zs, counters, deadline * ORD, rec, true)
  -- The ids keep their index entries as they were (ready): lookup and
  -- offer find them in flight through the registry (see
  -- lib/70_registry.lua).
  kcall(P, 'ZADD', lease_registry(P), lease_ss, registry_member(lease_ss, idlist))
  first = score
  out[1] = score -- the tokens name it (see lib/40_leases.lua)
end
metric_add(counters, 'delivered', delivered)
set_aside(P, bad) -- the set-aside list is KEYS[3]: P .. 'x'
-- Tokens: one per entry that left the ready list (the caller's own counts);
-- those held back stay, with theirs, and a token the caller popped for one
-- goes back with it.
local owed = taken - (ARGV[7] == '1' and 1 or 0)
if owed > 0 then redis.pcall('LPOP', sig, nstr(owed)) end
if #back > 0 then
  redis.call('RPUSH', ready, unpack(back))
  if owed < 0 then signal(sig, -owed) end
end
-- An entry set aside leaves the id index if the index says its id is
-- ready (in no slot, at the entry's due time).
for i = 1, #unindex, 2 do
  local id, due = unindex[i], unindex[i + 1]
  local ik = id_key(P, id)
  local s = id_score_in(P, ik, id)
  if s and math.floor(s / ORD) == due and not slot_find(P, zs, id, s) then id_del(P, ik, id) end
end
if leased > 0 then
  clock_save(counters, false, 'inflight', fmt(counts[2] + leased)) -- with the clock's mark
  announce_if_first(chan, first, bound)
  if holder ~= '' then redis.call('SET', seen.holder_key(P, tprefix), holder, 'PX', nstr(lease)) end
end
-- For a repeat (see the result key above): every entry leased, the record's
-- score; else the reply.
local result = leased == #out - 1 and 'L' .. lease_ss or cmsgpack.pack(out)
redis.call('SET', ARGV[8], tag .. result, 'PX', 60000)
return with_epoch(out)
