"""scheduler.py - moves due items to the ready list for a set of queues, as
`delayq schedule` does, so that Python processes alone make a deployment.

Owns the timing of the transfer function (PROTOCOL.md, Scheduling): a
catch-up run per queue at the start and after every reconnect, one timer per
queue armed for the earliest due time it knows (learned from each run's
reply and from the producers' announcements on the queue's shard channel
dq:{Q}:w), and a safety run at a random time in [1/2, 1] of the safety
interval after the last run, whatever was heard. The function decides by
the server's clock what is due, so a timer that fires early moves nothing
and is armed again; several schedulers on one queue are safe (each run is
atomic), only redundant.
"""
from __future__ import annotations

import random
import threading
import time
from typing import Dict, Iterable, Optional

import redis

from .client import SAFETY_CHECK_MS, Client, Keys

# A transfer run's bounds, as the C scheduler's defaults: items moved and
# server time spent per call, so Redis is never held long.
TRANSFER_BATCH = 1000
TRANSFER_BUDGET_US = 2000


class _Queue:
    """What the scheduler knows of one queue: when to run next (monotonic
    seconds), for a due time or for the safety check."""

    def __init__(self, name: str):
        self.keys = Keys(name)
        self.due_at: Optional[float] = None  # the earliest due time known
        self.safety_at = 0.0
        self.transfers = 0


class Scheduler:
    """Runs transfers for queues (all unsharded, on the client's server).

    run() works in the calling thread until stop() (from another thread or a
    signal handler); start() runs it in a daemon thread. Errors: a sharded
    queue raises ShardedQueueError out of run(); Redis away is retried
    (reconnect, then catch-up) until stop().
    """

    def __init__(self, client: Client, queues: Iterable[str], safety_check_ms: int = SAFETY_CHECK_MS):
        self.client = client
        self.queues: Dict[str, _Queue] = {q: _Queue(q) for q in queues}
        if not self.queues:
            raise ValueError("a scheduler needs at least one queue")
        self.safety = safety_check_ms / 1000.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._offset = 0.0  # server ms minus local monotonic ms, from the last run
        self.moved = 0  # items moved to the ready list, all queues

    # ------------------------------------------------------------ control

    def start(self) -> "Scheduler":
        """Runs run() in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.run, name="delayq-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Asks run() to return (within about 100 ms) and waits for the
        thread start() made."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        """Subscribes, catches up, then serves timers and announcements until
        stop()."""
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._subscribe()
                for q in self.queues.values():
                    self._transfer(q, top_up=True)  # catch-up
                self._serve(conn)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self._stop.wait(0.2)  # Redis away: connect again, then catch up
            finally:
                if conn is not None:
                    conn.disconnect()

    # ------------------------------------------------------------ inside

    def _subscribe(self) -> redis.Connection:
        """A connection of its own, subscribed (SSUBSCRIBE) to every queue's
        announcement channel. A raw connection: redis-py 4's PubSub knows no
        shard channels."""
        kw = dict(self.client.redis.connection_pool.connection_kwargs)
        kw["socket_timeout"] = None
        conn = self.client.redis.connection_pool.connection_class(**kw)
        conn.connect()
        conn.send_command("SSUBSCRIBE", *[q.keys.channel for q in self.queues.values()])
        for _ in self.queues:
            conn.read_response()  # ["ssubscribe", channel, n]
        return conn

    def _serve(self, conn: redis.Connection) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for q in self.queues.values():
                if (q.due_at is not None and q.due_at <= now) or q.safety_at <= now:
                    self._transfer(q, top_up=q.safety_at <= now)
            nxt = min(min(q.safety_at, q.due_at if q.due_at is not None else q.safety_at)
                      for q in self.queues.values())
            wait = min(max(nxt - time.monotonic(), 0.0), 0.1)
            if conn.can_read(timeout=wait):
                self._heard(conn.read_response())

    def _heard(self, msg) -> None:
        """An announcement ["smessage", channel, due ms or -1]: a due time
        earlier than the one known arms the queue's timer for it."""
        if not isinstance(msg, list) or len(msg) != 3 or msg[0] != b"smessage":
            return
        chan = msg[1].decode()
        try:
            due = int(msg[2])
        except ValueError:
            return
        for q in self.queues.values():
            if q.keys.channel == chan and due >= 0:
                at = self._local(due)
                if q.due_at is None or at < q.due_at:
                    q.due_at = at

    def _local(self, server_ms: int) -> float:
        """The monotonic time at which the server's clock reads server_ms."""
        return (server_ms - self._offset) / 1000.0

    def _transfer(self, q: _Queue, top_up: bool) -> None:
        """Runs the transfer function until it says no more is due now, and
        arms the queue's timers from its reply."""
        k = q.keys
        keys = [k.slots, k.ready, k.aside, k.counters, k.dead, k.dead_times, k.wake]
        args = [k.prefix, k.channel, str(TRANSFER_BATCH), str(TRANSFER_BUDGET_US),
                "1" if top_up else "0", "1"]
        for _ in range(1000):
            reply = self.client.fcall("transfer", keys, args, k.queue)
            mono = time.monotonic() * 1000.0
            moved, _aside, next_due, start_us, more = (int(x) for x in reply[:5])
            self._offset = start_us / 1000.0 - mono
            self.moved += moved
            q.transfers += 1
            if not more:
                break
        q.due_at = self._local(next_due) if next_due >= 0 else None
        if q.due_at is not None and moved == 0 and q.due_at <= time.monotonic():
            q.due_at = time.monotonic() + 0.001  # due by our clock, not yet by the server's
        q.safety_at = time.monotonic() + self.safety * random.uniform(0.5, 1.0)
