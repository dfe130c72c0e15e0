-- lua/lib/75_holders.lua: who holds a take's leases, and which schedulers
-- are alive (part of the scripts' shared code: see 00_base.lua). Its
-- constants and functions are fields of one local table, seen: the shared
-- code and a script run as one chunk under EVAL, where Lua 5.1 allows 200
-- locals.
local seen = {HOLDER_MAX = 64}

-- Holders ----------------------------------------------------------------------
-- A leased take may name its holder (dq_take_opts.holder). The name goes in
-- a key of its own, P..'h:'..<the take's token prefix>, set by take.lua
-- with the lease as its time to live: it lasts while the lease does and
-- needs no clean-up (extend.lua stretches it with the lease it extends). A
-- take without a holder writes nothing, so leases cost what they did.
-- Every token of a take starts with its prefix ("<request>.", see
-- lib/40_leases.lua), so the key is found from any item's token.
function seen.holder_key(P, tprefix) return P .. 'h:' .. tprefix end

-- The holder key of the take that handed out token, or nil.
function seen.holder_key_of(P, token)
  local tprefix = string.match(token, '^[^.]+%.')
  return tprefix and seen.holder_key(P, tprefix)
end

-- The holder named for token's take while its lease lasts, or ''.
function seen.holder_of(P, token)
  local hk = seen.holder_key_of(P, token)
  local h = hk and redis.pcall('GET', hk)
  return type(h) == 'string' and h or ''
end

-- Schedulers ------------------------------------------------------------------
-- Every scheduler of a queue beats in P..'schedulers' (a sorted set: member,
-- its name, host:pid; score, the server ms until which it counts as live)
-- on its catch-up and safety runs of transfer.lua, which it makes anyway:
-- no call of its own; only while the queue exists (its counters do), so a
-- beat never brings back a key of a wiped queue. stats counts the live
-- ones.
function seen.schedulers_key(P) return P .. 'schedulers' end

-- Schedulers of P live now (ms), by their beats.
function seen.schedulers_live(P, now)
  local live = redis.pcall('ZRANGEBYSCORE', seen.schedulers_key(P), fmt(now), '+inf')
  return type(live) == 'table' and #live or 0
end

-- Consumers ------------------------------------------------------------------
-- Every long-running consumer of a queue (a streaming or waiting take, a
-- worker, serve's takes) beats in P..'c' (a sorted set: member, its name,
-- host:pid by default; score, the server ms until which it counts as live)
-- and keeps its details in P..'ci' (a hash: name -> "started|in hand|last
-- seen", server ms), from beat.lua, on a timer of the client's (every
-- dq_options.consumer_beat_ms, the beat counting three times that);
-- consumers.lua lists the live ones. A consumer that exits cleanly says
-- 'bye' and leaves both at once; one that dies stops counting when its last
-- beat runs out, and a later beat of any consumer prunes it.
