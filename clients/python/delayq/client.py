"""client.py - the work verbs of delayq's protocol (PROTOCOL.md): offer,
take, ack, nack, extend, cancel and lookup, each one FCALL of a function of
the delayq library that the Redis server holds.

Owns: finding that library (its name changes with each release; the one
whose `protocol` function answers major PROTOCOL_MAJOR is used), the keys
and arguments of each call, and the decoding of replies. Time is always the
server's: delays are sent as delays and due times come back from Redis.
Thread-safe as redis-py's client is: threads may share one Client.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import redis

PROTOCOL_MAJOR = 1
# A take's lease_ms or max_attempts of QUEUE_SETTING: the queue's setting.
QUEUE_SETTING = -1
# As the C library's defaults (include/delayq.h).
PAYLOAD_MAX = 1024 * 1024
SAFETY_CHECK_MS = 5000
DUE_MAX_MS = 4398046511103  # every ms argument's bound (lua/lib/00_base.lua, DUE_MAX)
ATTEMPTS_MAX = 999999999
HOLDER_MAX = 64
ID_MAX = 128
QUEUE_MAX = 128
ID_BUCKETS = 32768
TAKE_MAX = 1000
# What one offer call carries at most (as src/ops/offer.c): the call's fixed
# cost is paid once per many items, and Redis is never held for long: items,
# bytes, and work in cost units (_item_cost).
CHUNK_ITEMS = 250
CHUNK_BYTES = 512 * 1024
CHUNK_COST = 500
NEAR_MS = 40000  # the scripts' near lists' horizon (lua/lib/67_near.lua)
REGISTRY_KEY = "dq:queues"

Payload = Union[bytes, str]
_ID_RE = re.compile(r"[!-~]{1,%d}" % ID_MAX)
_QUEUE_RE = re.compile(r"[A-Za-z0-9_.:-]{1,%d}" % QUEUE_MAX)
_REFUSAL_RE = re.compile(r"(?:ERR )?delayq:(input|state|corrupt|proto) ")


class DelayqError(Exception):
    """A call refused: bad arguments (nothing was sent), or an error Redis or
    the library's function answered (its text kept). refusal is the class
    word of a refusal by the library's functions ("input", "state",
    "corrupt", "proto": PROTOCOL.md, Errors), or None."""

    refusal: Optional[str] = None


class NoLibraryError(DelayqError):
    """The server holds no delayq library of this client's protocol: load one
    with `delayq functions load` (an administrator's act)."""


class ShardedQueueError(DelayqError):
    """The queue is sharded (or changing its shard count): this client takes
    unsharded queues only. Nothing was written. shards is the queue's count
    (0 while it changes)."""

    def __init__(self, queue: str, shards: int):
        self.queue, self.shards = queue, shards
        if shards == 0:
            why = f"queue {queue} is changing its shard count"
        else:
            why = f"queue {queue} is sharded ({shards} shards)"
        super().__init__(why + ": the Python client works on unsharded queues only "
                         "(use the C library, the CLI or delayq serve's HTTP API)")


@dataclass
class Item:
    """One item to offer. payload: bytes, or text (sent as UTF-8). delay_ms
    counts from the server's clock; due_ms (server epoch ms), if given,
    replaces it. id: None for a generated one. nx: keep a pending item of
    that id as it is instead of replacing it."""
    payload: Payload
    delay_ms: int = 0
    id: Optional[str] = None
    nx: bool = False
    due_ms: Optional[int] = None


def _item_cost(it: Item) -> int:
    """An item's share of an offer call's work, in CHUNK_COST units (as
    src/ops/offer.c's item_cost): 2, 1 more when due within NEAR_MS or at
    an absolute time (a near list's append costs Redis about 1.3 times the
    wheel's), 1 more for an id given (looked up first). Only sizes calls."""
    cost = 2
    if it.due_ms is not None or it.delay_ms < NEAR_MS:
        cost += 1
    if it.id is not None:
        cost += 1
    return cost


def _send_order(items: List[Item], args: List[Tuple[str, bytes]]) -> List[int]:
    """The order offer_many sends items in, as the C library's dq_offer_many
    (src/util/send_order.c): items with a delay by delay, then items with a
    due time by due time, ties in the items' order. Delay order is due order
    across calls (a later call has a later server time and an equal or
    longer delay), so each item keeps its due time and equal due times keep
    their offer order, while a call's items share the scripts' near lists
    and wheel buckets (one append for many items: Redis's cost an item of
    random delays falls to about one delay's). The items' order when an id
    comes twice: the later must replace (or, nx, keep) the earlier."""
    ids = [a[0] for a in args]
    if len(set(ids)) < len(ids):
        return list(range(len(items)))
    return sorted(range(len(items)), key=lambda j: (items[j].due_ms is not None,
                                                  items[j].delay_ms if items[j].due_ms is None else items[j].due_ms))


@dataclass
class Offered:
    """What an offer did. status: 'added', 'replaced' or 'kept' (nx, or an id
    ready or in flight, which an offer never replaces); due_ms: the item's due
    time (server ms; of the kept item when kept, 0 if unknown); state after the
    offer: 'pending', 'ready' or 'inflight'."""
    id: str
    status: str
    due_ms: int
    state: str


@dataclass
class Message:
    """An item taken. token is None for a take without a lease; with one, it
    is what ack, nack and extend need. attempt counts from 1; error is the
    text of the last nack (b'' if none)."""
    queue: str
    id: str
    payload: bytes
    due_ms: int
    ready_ms: int
    attempt: int
    error: bytes
    token: Optional[str]


@dataclass
class Nacked:
    """What a nack did: dead (the item had had its attempts and is now a dead
    letter), else due_ms (server ms) of its retry."""
    dead: bool
    due_ms: int


@dataclass
class Lookup:
    """The state of an id: 'unknown', 'pending' (due_ms its due time), 'ready',
    'inflight' (due_ms its lease's end) or 'dead'. holder: the name its take
    gave, while in flight ('' for none)."""
    state: str
    due_ms: int
    attempts: int
    holder: str = ""


_STATES = {1: "pending", 2: "ready", 3: "inflight"}
_STATUS = {1: "added", 2: "replaced", 3: "kept"}
_LOOKUP = {0: "unknown", 1: "pending", 2: "ready", 3: "inflight", 4: "dead"}


def new_id() -> str:
    """A generated id, as the C library's: 128 random bits in base64url."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


def id_bucket(item_id: str) -> int:
    """The id's bucket of the id index (dq:{Q}:i:<bucket>): the first 16 bits
    of SHA-1(id), modulo 32768."""
    return int(hashlib.sha1(item_id.encode()).hexdigest()[:4], 16) % ID_BUCKETS


def check_queue(queue: str) -> None:
    """Raises DelayqError unless queue is 1..128 characters of [A-Za-z0-9_.:-]."""
    if not isinstance(queue, str) or not _QUEUE_RE.fullmatch(queue):
        raise DelayqError(f"bad queue name {queue!r}: 1 to {QUEUE_MAX} characters of A-Z a-z 0-9 _ . : -")


def check_id(item_id: str) -> None:
    """Raises DelayqError unless item_id is 1..128 printable ASCII characters
    without spaces (0x21..0x7e)."""
    if not isinstance(item_id, str) or not _ID_RE.fullmatch(item_id):
        raise DelayqError(f"bad id {item_id!r}: 1 to {ID_MAX} printable ASCII characters, no spaces")


def _ms(value: int, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= DUE_MAX_MS:
        raise DelayqError(f"bad {what} {value!r}: an integer number of ms, {low} to {DUE_MAX_MS}")
    return value


class Keys:
    """The keys of unsharded queue Q (PROTOCOL.md, Keys): all share the hash
    tag {Q}."""

    def __init__(self, queue: str):
        check_queue(queue)
        self.queue = queue
        self.prefix = f"dq:{{{queue}}}:"
        p = self.prefix
        self.slots, self.ready, self.aside = p + "zs", p + "r", p + "x"
        self.counters, self.wake, self.config = p + "n", p + "s", p + "cfg"
        self.dead, self.dead_times, self.channel = p + "d", p + "dz", p + "w"


def decode_entry(queue: str, raw: bytes, token: Optional[str]) -> Optional[Message]:
    """A ready entry ("1|due|ready|idlen|" id payload, or "2|due|ready|attempts|
    idlen|elen|" id error payload) as a Message, or None if it does not decode."""
    version = raw[:2]
    if version not in (b"1|", b"2|"):
        return None
    fields = 4 if version == b"1|" else 6
    parts = raw.split(b"|", fields)
    if len(parts) != fields + 1 or not all(p.isdigit() for p in parts[1:fields]):
        return None
    nums = [int(p) for p in parts[1:fields]]
    if version == b"1|":
        due, ready, idlen = nums
        attempts, elen = 0, 0
    else:
        due, ready, attempts, idlen, elen = nums
    rest = parts[fields]
    if not 1 <= idlen <= ID_MAX or idlen + elen > len(rest):
        return None
    item_id = rest[:idlen]
    if any(not 0x21 <= b <= 0x7E for b in item_id):
        return None
    return Message(queue, item_id.decode(), rest[idlen + elen:], due, ready, attempts + 1,
                   rest[idlen:idlen + elen], token)


def split_token(token: str) -> Tuple[str, str, str]:
    """A lease token "<request>.<i>.<score>" cut as the ack function takes it:
    prefix "<request>.", middle "<i>", suffix ".<score>"; a token without two
    dots is all prefix."""
    last = token.rfind(".")
    before = token.rfind(".", 0, last) if last > 0 else -1
    if last < 0 or before < 0:
        return token, "", ""
    return token[:before + 1], token[before + 1:last], token[last:]


class Client:
    """A connection to one Redis server holding delayq's function library.

    url: a redis:// (or rediss://, unix://) URL as redis-py reads it; extra
    keyword arguments go to redis.Redis.from_url. The library is found on
    first use (see library()), or named: library (what `delayq functions
    status` prints), for a user who may not run FUNCTION LIST (the rule
    `delayq acl` prints grants FCALL, not that). Errors: DelayqError (and
    its kinds below), and redis-py's ConnectionError and TimeoutError when
    Redis is away.
    """

    def __init__(self, url: str = "redis://127.0.0.1:6379", library: Optional[str] = None, **kwargs):
        self.redis = redis.Redis.from_url(url, **kwargs)
        self._named = library
        self._library: Optional[str] = None
        self._registered: set = set()
        self._lock = threading.Lock()
        # Result keys of takes (PROTOCOL.md, take): a tag of this client, and
        # numbers reused once a take is done.
        self._tag = new_id()
        self._free_slots: List[int] = []
        self._next_slot = itertools.count()

    def close(self) -> None:
        """Closes the connections."""
        self.redis.close()

    # ------------------------------------------------------------ library

    def library(self, refresh: bool = False) -> str:
        """The name of the delayq library this client calls: among the
        server's libraries named delayq_*, one with a `<name>_protocol`
        function answering major PROTOCOL_MAJOR (the highest minor; of equal
        ones, the first name). Raises NoLibraryError if there is none."""
        if self._library and not refresh:
            return self._library
        if self._named:
            names = [self._named]
        else:
            try:
                libs = self.redis.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "delayq_*") or []
            except redis.ResponseError as e:
                raise NoLibraryError(f"cannot list the server's libraries ({e}): grant the user "
                                     "+function|list, or name the library: Client(url, library=...) "
                                     "(`delayq functions status` prints it)") from None
            names = []
            for lib in libs:
                info = dict(zip(lib[::2], lib[1::2]))
                name = _text(info.get(b"library_name", b""))
                fns = {_text(dict(zip(f[::2], f[1::2])).get(b"name", b"")) for f in info.get(b"functions", [])}
                if name.startswith("delayq_") and name + "_protocol" in fns:
                    names.append(name)
        best: Optional[Tuple[int, str]] = None
        for name in names:
            try:
                major, minor = self.redis.execute_command("FCALL_RO", name + "_protocol", 0)[:2]
            except (redis.ResponseError, ValueError):
                continue
            if major == PROTOCOL_MAJOR and (best is None or (-minor, name) < (-best[0], best[1])):
                best = (minor, name)
        if best is None and self._named:
            raise NoLibraryError(f"the library this client names, {self._named}, is not on the server "
                                 f"(or answers no protocol {PROTOCOL_MAJOR}): a release loads its library under "
                                 "a name of its own; `delayq functions status` prints the one loaded, for "
                                 "Client(url, library=...)")
        if best is None:
            raise NoLibraryError(f"no delayq library of protocol {PROTOCOL_MAJOR} on the server: "
                                 "load one with `delayq functions load` (delayq 1.x)")
        self._library = best[1]
        return self._library

    def fcall(self, fn: str, keys: Sequence[str], args: Sequence[Union[str, bytes, int]],
              queue: str, read_only: bool = False):
        """Runs the library's function fn (FCALL, or FCALL_RO) and returns its
        reply. A library gone (FUNCTION FLUSH, a newer one loaded in its
        place) is looked for again once. Error replies raise DelayqError
        (ShardedQueueError for DQSHARDS)."""
        for attempt in (0, 1):
            name = self.library(refresh=attempt == 1) + "_" + fn
            try:
                return self.redis.execute_command("FCALL_RO" if read_only else "FCALL", name,
                                                  len(keys), *keys, *args)
            except redis.ResponseError as e:
                if attempt == 0 and str(e).startswith("Function not found"):
                    continue
                raise _error(e, queue) from None
        raise DelayqError("unreachable")

    # ------------------------------------------------------------ offers

    def offer(self, queue: str, payload: Payload, delay_ms: int = 0, id: Optional[str] = None,
              nx: bool = False, due_ms: Optional[int] = None) -> Offered:
        """Offers one item, due delay_ms after the server's now (or at server
        epoch ms due_ms). Returns what happened (its id: the one given, or a
        generated one). Raises DelayqError for bad arguments (nothing sent)."""
        return self.offer_many(queue, [Item(payload, delay_ms, id, nx, due_ms)])[0]

    def offer_many(self, queue: str, items: Iterable[Item]) -> List[Offered]:
        """Offers items in calls of up to 250 items (fewer for items that cost
        Redis more, see _item_cost; and 512 KiB), pipelined, sent in delay
        order (see _send_order). Every item is checked before the first is
        sent. Each call is atomic; the calls are not one: a failure raises
        (the first failed call's error) after all were sent, and any subset
        of the items may then be offered, not a prefix (look them up by id).
        Returns one Offered per item, in the items' order."""
        keys = Keys(queue)
        items = list(items)
        args = [self._offer_args(it) for it in items]
        chunks, cur, size, cost = [], [], 0, 0
        for j in _send_order(items, args):
            c = _item_cost(items[j])
            if cur and (len(cur) == CHUNK_ITEMS or size + len(args[j][1]) > CHUNK_BYTES or cost + c > CHUNK_COST):
                chunks.append(cur)
                cur, size, cost = [], 0, 0
            cur.append(j)
            size += len(args[j][1])
            cost += c
        if not cur:
            return []
        chunks.append(cur)
        replies = self._send_offers(keys, [[args[j] for j in chunk] for chunk in chunks])
        out: List[Optional[Offered]] = [None] * len(items)
        for chunk, reply in zip(chunks, replies):
            if isinstance(reply, Exception):
                raise _error(reply, queue)
            for i, j in enumerate(chunk):
                st, due, state = reply[1 + 3 * i:4 + 3 * i]
                out[j] = Offered(args[j][0], _STATUS[st], int(due), _STATES[state])
        return out  # type: ignore[return-value]

    def _send_offers(self, keys: Keys, chunks: List[List[Tuple[str, bytes]]]) -> list:
        """One offer call per chunk, pipelined on one connection, and the
        queue's name into the registry (dq:queues) before the first (once
        per client and queue; a registry an ACL refuses never fails an
        offer). The calls a missing library refused go again once, to the
        library found anew. Returns the replies (an exception for a call
        refused). The commands are packed here, not by redis-py: its
        per-argument packing was a third of a batch's time."""
        if keys.queue not in self._registered:
            try:
                self.redis.sadd(REGISTRY_KEY, keys.queue)
            except redis.ResponseError:
                pass
            self._registered.add(keys.queue)
        head = [keys.slots, keys.ready, keys.counters, keys.wake, keys.prefix, keys.channel, "1"]
        replies: list = [None] * len(chunks)
        todo = list(range(len(chunks)))
        for attempt in (0, 1):
            name = self.library(refresh=attempt == 1) + "_offer"
            fixed = _bulk(["FCALL", name, "4"] + head)
            cmds = [b"*%d\r\n%s%s" % (3 + len(head) + 5 * len(chunks[j]), fixed,
                                       b"".join(a[1] for a in chunks[j])) for j in todo]
            for j, r in zip(todo, self._pipeline_raw(cmds)):
                replies[j] = r
            todo = [j for j in todo if isinstance(replies[j], redis.ResponseError) and
                    str(replies[j]).startswith("Function not found")]
            if not todo:
                break
        return replies

    def _pipeline_raw(self, cmds: List[bytes]) -> list:
        """Sends packed commands on one pooled connection and reads their
        replies (an error reply as its ResponseError)."""
        pool = self.redis.connection_pool
        conn = pool.get_connection("FCALL")
        try:
            conn.send_packed_command(cmds)
            out: list = []
            for _ in cmds:
                try:
                    out.append(conn.read_response())
                except redis.ResponseError as e:
                    out.append(e)
            return out
        except BaseException:
            conn.disconnect()  # replies may be left unread: never reuse it
            raise
        finally:
            pool.release(conn)

    @staticmethod
    def _offer_args(it: Item) -> Tuple[str, bytes]:
        """An item's id and its five arguments, packed (RESP bulk strings)."""
        payload = _bytes_of(it.payload, "payload")
        if len(payload) > PAYLOAD_MAX:
            raise DelayqError(f"payload is {len(payload)} bytes, limit is {PAYLOAD_MAX}")
        if payload.startswith(b"\0dqs"):
            raise DelayqError("the payload starts as a sealed payload does (\\0dqs): change its first bytes")
        fresh = it.id is None
        item_id = new_id() if fresh else it.id
        if not fresh:
            check_id(item_id)
        if it.due_ms is not None:
            ms, flags = _ms(it.due_ms, "due_ms"), 1
        else:
            ms, flags = _ms(it.delay_ms, "delay_ms"), 0
        flags |= (2 if it.nx else 0) | (4 if fresh else 0)
        b = item_id.encode()
        ms_b, bucket = b"%d" % ms, b"%d" % id_bucket(item_id)
        return item_id, b"$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\n%d\r\n$%d\r\n%s\r\n" % (
            len(b), b, len(payload), payload, len(ms_b), ms_b, flags, len(bucket), bucket)

    # ------------------------------------------------------------ takes

    def take(self, queue: str, count: int = 1, wait_ms: int = 0, lease_ms: Optional[int] = None,
             max_attempts: int = QUEUE_SETTING, holder: Optional[str] = None) -> List[Message]:
        """Takes up to count (1..1000) ready items, waiting up to wait_ms for
        the first (the function runs at least once). Without lease_ms the
        items are handed out for good (at most once); with it (ms, or
        QUEUE_SETTING for the queue's lease_ms) each is in flight under a
        lease until ack, nack, extend or the lease's end, and carries a token.
        max_attempts (leased takes; QUEUE_SETTING: the queue's, 0: no limit)
        bounds the deliveries before an item that keeps failing is a dead
        letter (at most ATTEMPTS_MAX). holder (leased takes): who holds the
        items, 1 to 64 bytes, shown by lookup while the lease lasts. Returns
        [] when nothing came in time.

        The wait is the C library's: a BLPOP on the queue's wake list
        (dq:{Q}:s) for a token, which every item made ready pushes, then the
        function again; never longer than half the safety interval per BLPOP.
        """
        keys = Keys(queue)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= TAKE_MAX:
            raise DelayqError(f"bad count {count!r}: 1 to {TAKE_MAX}")
        _ms(wait_ms, "wait_ms")
        lease = 0 if lease_ms is None else lease_ms
        if lease != QUEUE_SETTING:
            _ms(lease, "lease_ms", 1 if lease_ms is not None else 0)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or \
                not -1 <= max_attempts <= ATTEMPTS_MAX:
            raise DelayqError(f"bad max_attempts {max_attempts!r}: -1 (the queue's), 0 (no limit) to {ATTEMPTS_MAX}")
        held_by = _holder(holder, lease)
        deadline = time.monotonic() + wait_ms / 1000.0
        slot = self._slot_acquire()
        try:
            woke, look = False, True
            while True:
                if look:
                    msgs = self._take_once(keys, count, lease, max_attempts, woke, slot, held_by)
                    if msgs is not None:
                        return msgs
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                # Redis takes a BLPOP timeout in seconds, decimals allowed;
                # 0 would wait for ever.
                wait = max(0.01, min(left, SAFETY_CHECK_MS / 2000.0))
                woke = self.redis.blpop([keys.wake], timeout=wait) is not None
                if not woke and time.monotonic() >= deadline:
                    return []
                # A wait that ended empty looks again only if entries wait
                # (their tokens popped by a consumer paused or dead): one
                # LLEN, not a function call per idle wait.
                look = woke or self.redis.llen(keys.ready) > 0
        finally:
            self._slot_release(slot)

    def _take_once(self, keys: Keys, count: int, lease: int, max_attempts: int, woke: bool,
                   slot: int, holder: str = "") -> Optional[List[Message]]:
        """One run of the take function: the messages, or None when nothing
        was ready (or every entry popped was set aside). A reply lost with
        the connection is asked for again by the same request, which the
        function answers from its result key instead of popping more."""
        request = new_id()
        args = [keys.prefix, keys.channel, str(count), str(lease), request + ".", str(max_attempts),
                "1" if woke else "0", f"{keys.prefix}t:{self._tag}.{slot}", "0", "", "1"]
        if holder:
            args.append(holder)
        k = [keys.slots, keys.ready, keys.aside, keys.counters, keys.wake, keys.config]
        try:
            reply = self.fcall("take", k, args, keys.queue)
        except (redis.ConnectionError, redis.TimeoutError):
            args[8] = "1"
            reply = self.fcall("take", k, args, keys.queue)
        # The reply ends with the queue's epoch (PROTOCOL.md): what comes
        # before it is {} when nothing was ready, else {lease, e1, ..., en}.
        entries = reply[:-1] if reply else []
        if not entries:
            return None
        score = int(entries[0])
        msgs = []
        for i, raw in enumerate(entries[1:], start=1):
            if not raw or raw.startswith(b"k|"):
                continue  # set aside by the function, or sealed for a key we lack
            token = f"{request}.{i}.{score}" if score else None
            m = decode_entry(keys.queue, raw, token)
            if m is None:
                raise DelayqError(f"queue {keys.queue}: an entry taken does not decode: {raw[:60]!r}")
            msgs.append(m)
        return msgs or None

    def _slot_acquire(self) -> int:
        with self._lock:
            return self._free_slots.pop() if self._free_slots else next(self._next_slot)

    def _slot_release(self, slot: int) -> None:
        with self._lock:
            self._free_slots.append(slot)

    # ------------------------------------------------------------ leases

    def ack(self, queue: str, id: str, token: str) -> bool:
        """Finishes an item taken with a lease: it leaves the queue. False when
        the token is stale (the lease ran out, the item was acked or nacked)
        or the id unknown."""
        return self.ack_many(queue, [(id, token)])[0]

    def ack_many(self, queue: str, items: Sequence[Tuple[str, str]]) -> List[bool]:
        """Acks (id, token) pairs in one call (at most 1000 items a group of
        one take, as a worker acks a batch it took). One bool per item, in
        order, as ack answers."""
        keys = Keys(queue)
        args: List[str] = [keys.prefix, "1"]
        group_at, last = -1, None
        for item_id, token in items:
            check_id(item_id)
            prefix, middle, suffix = split_token(_token(token))
            if (prefix, suffix) != last or args[group_at + 2] == "1000":
                group_at, last = len(args), (prefix, suffix)
                args += [prefix, suffix, "0"]
            args[group_at + 2] = str(int(args[group_at + 2]) + 1)
            args += [middle, item_id, str(id_bucket(item_id))]
        if not items:
            return []
        statuses = self.fcall("ack", [keys.slots, keys.counters], args, queue)
        if any(s < 0 for s in statuses):
            raise DelayqError(f"queue {queue}: a malformed ack (id, token or bucket)")
        return [s == 1 for s in statuses]

    def nack(self, queue: str, id: str, token: str, delay_ms: Optional[int] = None,
             error: Payload = b"") -> Optional[Nacked]:
        """Fails an item taken with a lease: it comes back after delay_ms (None:
        the queue's backoff), or becomes a dead letter if that was its last
        attempt. error (up to 1000 bytes kept) goes with it. None when the
        token is stale or the id unknown."""
        keys = Keys(queue)
        check_id(id)
        delay = -1 if delay_ms is None else _ms(delay_ms, "delay_ms")
        err = _bytes_of(error, "error")
        args = [keys.prefix, keys.channel, id, _token(token), str(delay), err[:1000], "-1", "-1",
                repr(random.random()), "1"]
        k = [keys.slots, keys.counters, keys.dead, keys.dead_times, keys.config]
        status, due = self.fcall("nack", k, args, queue)[:2]
        if status == 0:
            return None
        return Nacked(status == 2, int(due))

    def extend(self, queue: str, id: str, token: str, lease_ms: int) -> Optional[int]:
        """Renews an item's lease: it now ends lease_ms after the server's now.
        Returns that end (server ms), or None when the token is stale or the
        id unknown."""
        keys = Keys(queue)
        check_id(id)
        args = [keys.prefix, id, _token(token), str(_ms(lease_ms, "lease_ms", 1)), keys.channel, "1"]
        status, end = self.fcall("extend", [keys.slots, keys.counters], args, queue)[:2]
        return int(end) if status == 1 else None

    # ------------------------------------------------------------ items

    def cancel(self, queue: str, id: str) -> bool:
        """Removes a pending item. False if the id is not pending (unknown,
        ready, in flight or dead)."""
        keys = Keys(queue)
        check_id(id)
        return self.fcall("cancel", [keys.slots, keys.counters], [keys.prefix, id, "1"], queue) == 1

    def lookup(self, queue: str, id: str) -> Lookup:
        """The state of an id (read only: FCALL_RO)."""
        keys = Keys(queue)
        check_id(id)
        reply = self.fcall("lookup", [keys.slots, keys.dead, keys.counters], [keys.prefix, id, "1"], queue,
                           read_only=True)
        holder = _text(reply[3]) if len(reply) > 3 and isinstance(reply[3], bytes) else ""
        return Lookup(_LOOKUP.get(int(reply[0]), "unknown"), int(reply[1]), int(reply[2]), holder)


def _bulk(args: Sequence[str]) -> bytes:
    """Text arguments as RESP bulk strings."""
    return b"".join(b"$%d\r\n%s\r\n" % (len(e), e) for e in (a.encode() for a in args))


def _text(b) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)


def _bytes_of(value: Payload, what: str) -> bytes:
    """A payload (or a nack's error text) as bytes: bytes-like as it is, text
    as UTF-8; anything else raises (bytes(5) would be five zero bytes)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise DelayqError(f"bad {what}: bytes or str, not {type(value).__name__}")


def _holder(holder: Optional[str], lease: int) -> str:
    """A take's holder as the function takes it: '' for none; else 1 to
    HOLDER_MAX bytes of UTF-8 without control characters, on a leased take."""
    if holder is None:
        return ""
    if not isinstance(holder, str) or not 1 <= len(holder.encode()) <= HOLDER_MAX or \
            any(ord(ch) < 0x20 or ord(ch) == 0x7f for ch in holder):
        raise DelayqError(f"bad holder {holder!r}: 1 to {HOLDER_MAX} bytes of UTF-8, no control character")
    if lease == 0:
        raise DelayqError("a holder needs a leased take (lease_ms)")
    return holder


def _token(token: str) -> str:
    if not isinstance(token, str) or not 1 <= len(token) <= 64 or " " in token:
        raise DelayqError(f"bad token {token!r}")
    return token


def _error(e: Exception, queue: str) -> DelayqError:
    """The DelayqError for an error reply: DQSHARDS n is a sharded queue."""
    text = str(e)
    if text.startswith("DQSHARDS "):
        return ShardedQueueError(queue, int(text.split()[1]))
    err = DelayqError(f"queue {queue}: {text}")
    # redis-py drops the leading "ERR ": "delayq:CLASS text".
    m = _REFUSAL_RE.match(text)
    err.refusal = m.group(1) if m else None
    return err
