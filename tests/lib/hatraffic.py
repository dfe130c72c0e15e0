"""hatraffic.py - the traffic of the HA tests: producers that offer through
the CLI the whole time a failover happens, and readers of what consumers
got (a `take --json` process, or the ids a `work --exec` appended), and a
watch on the sentinels' +selected-slave (to resume a paused master then)."""
import json
import os
import socket
import threading
import time

from dqtest import BIN, Bg, dq, finish, note, ok, section, wait_for
from topology import SentinelGroup, _encode, _read


class Producer(threading.Thread):
    """Offers prefix0, prefix1, ... to queues in turn, delays 0-900 ms,
    one CLI process each (--wait-replicas 1, or wait), until stopped; records every
    outcome as (id, queue, exit code, started local s, delay ms)."""

    def __init__(self, url, prefix, queues, wait="1"):
        super().__init__(daemon=True)
        self.url, self.prefix, self.queues = url, prefix, queues
        self.wait = wait  # --wait-replicas
        self.results = []
        self.halt = threading.Event()

    def run(self):
        i = 0
        while not self.halt.is_set() and i < 5000:
            id_ = f"{self.prefix}{i}"
            q = self.queues[i % len(self.queues)]
            delay = (i * 137) % 900
            t0 = time.time()
            r = dq("--redis", self.url, "--wait-replicas", self.wait, "offer", q, f"{delay}ms", "p", "--id", id_,
                   redis=False, timeout=20)
            self.results.append((id_, q, r.rc, t0, delay))
            i += 1
            time.sleep(0.01)

    def stop(self):
        self.halt.set()
        self.join(30)

    def confirmed(self, queue=None):
        """The offers confirmed durable (exit 0)."""
        return [r for r in self.results if r[2] == 0 and (queue is None or r[1] == queue)]


class SelectedWatch:
    """Calls on_selected once, when any sentinel announces +selected-slave."""

    def __init__(self, ports, on_selected):
        self.fired = threading.Event()
        self.at = None
        self.on_selected = on_selected
        self.socks = []
        for p in ports:
            s = socket.create_connection(("127.0.0.1", p), timeout=60)
            s.sendall(_encode(("SUBSCRIBE", "+selected-slave")))
            self.socks.append(s)
            threading.Thread(target=self._listen, args=(s,), daemon=True).start()

    def _listen(self, s):
        f = s.makefile("rb")
        try:
            while not self.fired.is_set():
                m = _read(f)
                if isinstance(m, list) and m and m[0] == "message" and not self.fired.is_set():
                    self.fired.set()
                    self.at = time.time()
                    self.on_selected()
        except (OSError, RuntimeError, ConnectionError):
            pass

    def close(self):
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


def sentinel_group():
    """A SentinelGroup (1 master, 2 replicas, 3 sentinels, down-after
    1000 ms) checked ready, its URL, and a file for a `work` to write ids
    to: (group, url, wpath). Ends the test when the group does not settle."""
    section("a Sentinel group: 1 master, 2 replicas, 3 sentinels, down-after 1000 ms")
    g = SentinelGroup()
    if not ok(g.ready(), "replicas linked and sentinels agree"):
        finish()
    return g, g.url(), os.path.join(g.dir, "worked.txt")


def consumers(url, take_queue, work_queue, wpath):
    """A `take --count 0 --json` on take_queue and a `work --exec` on
    work_queue that appends each id to wpath (read with taken and worked)."""
    take = Bg([BIN, "--redis", url, "take", take_queue, "--count", "0", "--json"], name="take")
    work = Bg([BIN, "--redis", url, "work", work_queue, "--concurrency", "4", "--exec",
               f"printf '%s\\n' \"$DELAYQ_ID\" >> {wpath}"], name="work")
    return take, work


def wrap_up(g, take, work):
    """Checks the consumers still run, stops them and the group (take's
    log shown), and ends the test."""
    ok(take.running() and work.running(), "consumers still running (not restarted)")
    for p in (take, work):
        p.stop()
    if take.err.strip():
        note("take's log: " + " | ".join(take.err.decode(errors="replace").splitlines()[:8]))
    g.stop()
    finish()


def taken(bg):
    """id -> [(receive time, message)] from a `take --json` Bg process."""
    out = {}
    for recv, line in bg.snapshot():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        out.setdefault(m["id"], []).append((recv, m))
    return out


def worked(path):
    """id -> times run, from the file a `work --exec` appended ids to."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    out[line.strip()] = out.get(line.strip(), 0) + 1
    except OSError:
        pass
    return out


def kill_master_under_load(g, prod):
    """SIGKILLs the master of SentinelGroup g while prod offers: checks that
    a replica is promoted and that 10 offers started after the promotion
    succeed. Returns (the old master's port, kill time, promotion time)."""
    old = g.master_port()
    t_kill = time.time()
    g.kill_master()
    note(f"master {old} SIGKILLed")
    ok(g.wait_new_master(old), "sentinels promote a replica", g.master_port())
    t_promoted = time.time()
    note(f"new master {g.master_port()} after {t_promoted - t_kill:.2f} s")
    ok(wait_for(lambda: sum(1 for r in prod.results if r[2] == 0 and r[3] > t_promoted) >= 10, 30),
       "offers after the failover succeed (exit 0)")
    return old, t_kill, t_promoted


def check_delivered(prod, take, take_queue, wpath, label):
    """Every offer prod had confirmed durable reached its consumer (take_queue's
    `take --json`, the other queues' `work`), none before its due time: on
    the server's clock (ready >= due) and on ours (received no sooner than
    the offer started plus its delay)."""
    confirmed = prod.confirmed()
    ok(len(confirmed) > 0, f"{label}: offers confirmed durable ({len(confirmed)})")

    def missing():
        got, done = taken(take), worked(wpath)
        return [r[0] for r in confirmed if r[0] not in (got if r[1] == take_queue else done)]

    wait_for(lambda: not missing(), 20)
    m = missing()
    ok(not m, f"{label}: every durable offer delivered", (f"{len(m)} missing", m[:20]))
    got = taken(take)
    early = [(r[0], e) for r in confirmed if r[1] == take_queue for recv, e in got.get(r[0], [])
             if e["ready_ms"] < e["due_ms"] or recv + 0.005 < r[3] + r[4] / 1000.0]
    ok(not early, f"{label}: none delivered before its due time", early[:5])
    twice = sum(1 for v in got.values() if len(v) > 1) + sum(1 for v in worked(wpath).values() if v > 1)
    note(f"{label}: {twice} ids delivered more than once (allowed: a take or an ack the failover undid)")
