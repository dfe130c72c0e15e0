"""topology.py - Redis Sentinel groups and Redis Clusters for the HA tests
(and bench/ha.py), started on free 127.0.0.1 ports in a private directory.

    with SentinelGroup() as g:      1 master, 2 replicas, 3 sentinels
        g.url(), g.master_port(), g.kill_master(), g.restart(port) ...
    with Cluster() as c:             3 masters, 3 replicas
        c.url(), c.owner(slot), c.kill(port), c.migrate_slot(slot, src, dst) ...

Every process is started by this module and stopped by its pid (SIGKILL
where a test wants a crash, SIGTERM otherwise), at the latest when the
interpreter exits; the directory is removed. Every wait polls with a
deadline (scaled by DQ_TEST_SLOW). Python stdlib only.
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SLOW = int(os.environ.get("DQ_TEST_SLOW", "1") or "1")
_live = []
# Put before every server's argv (the benchmark pins servers with taskset).
SERVER_PREFIX = []
# Ports whose servers speak only TLS -> the ssl.SSLContext call() uses.
_tls_ports = {}


def free_port(with_bus=False):
    """A loopback port nobody listens on (and port + 10000 too, for a
    cluster bus). Never 6379."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port == 6379 or port + 10000 > 65535:
            continue
        if with_bus:
            b = socket.socket()
            try:
                b.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
            finally:
                b.close()
        return port
    raise RuntimeError("no free port")


def _encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def call(port, *args, timeout=5, auth=None, tls=None):
    """One command over a fresh connection; returns the decoded reply (str,
    int, list, None) or raises RuntimeError for an error reply. auth: the
    arguments of an AUTH sent first ((password,) or (user, password)). tls:
    an ssl.SSLContext to speak TLS with (TLS-only servers)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        tls = tls or _tls_ports.get(port)
        sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
        sock.sendall((_encode(("AUTH",) + tuple(auth)) if auth else b"") + _encode(args))
        f = sock.makefile("rb")
        if auth:
            _read(f)
        return _read(f)


def _read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode("utf-8", "replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise RuntimeError(f"bad reply {line!r}")


def try_call(port, *args, timeout=2, auth=None, tls=None):
    try:
        return call(port, *args, timeout=timeout, auth=auth, tls=tls)
    except (OSError, RuntimeError, ConnectionError):
        return None


def info(port, section):
    text = try_call(port, "INFO", section) or ""
    return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)


def wait_until(pred, timeout, interval=0.02):
    end = time.monotonic() + timeout * SLOW
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return pred()


class _Group:
    """Processes of one topology: redis-server instances by port."""

    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TMPDIR", "/tmp"))
        self.procs = {}  # port -> Popen
        self.args = {}   # port -> argv, to restart
        self.tls = None  # ssl.SSLContext: the servers speak only TLS
        self.tls_files = None  # (certificate, key, CA) of TLS servers
        _live.append(self)

    def _spawn(self, port, argv):
        self.args[port] = argv
        self.procs[port] = subprocess.Popen(SERVER_PREFIX + argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            cwd=self.dir)

    def _server(self, port, *extra):
        d = os.path.join(self.dir, str(port))
        os.makedirs(d, exist_ok=True)
        if self.tls:
            _tls_ports[port] = self.tls
        self._spawn(port, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                           "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                           "--protected-mode", "no", *self._tls_conf(port, "--"), *extra])

    def _use_tls(self, tls):
        """tls: (certificate, key, CA) files: the group's servers speak only
        TLS (replication and the cluster bus too); None: plain."""
        if tls:
            import ssl
            self.tls_files = tls
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.tls.check_hostname = False
            self.tls.verify_mode = ssl.CERT_NONE
            self.tls.load_cert_chain(tls[0], tls[1])

    def _tls_conf(self, port, dash, listen=True):
        """The TLS settings of a server on port, as argv ("--") or config
        lines (""); listen=False: plain port, TLS only to other servers."""
        if not self.tls_files:
            return []
        crt, key, ca = self.tls_files
        conf = [("port", "0"), ("tls-port", str(port))] if listen else []
        conf += [("tls-cert-file", crt), ("tls-key-file", key), ("tls-ca-cert-file", ca),
                 ("tls-auth-clients", "no"), ("tls-replication", "yes"), ("tls-cluster", "yes")]
        if dash:
            return [x for k, v in conf for x in ("--" + k, v)]
        return [f"{k} {v}" for k, v in conf]

    def _auth(self, port):
        return None

    def wait_ping(self, ports, timeout=10):
        return wait_until(lambda: all(try_call(p, "PING", auth=self._auth(p)) == "PONG" for p in ports), timeout)

    def kill(self, port, sig=signal.SIGKILL):
        """Stops one process by its pid; returns once it is gone."""
        p = self.procs.get(port)
        if p and p.poll() is None:
            os.kill(p.pid, sig)
            p.wait(timeout=10 * SLOW)

    def restart(self, port):
        """Starts a stopped process again as it was configured (its config
        file or data dir kept)."""
        self._spawn(port, self.args[port])
        return self.wait_ping([port])

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=5 * SLOW)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in _live:
            _live.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()


class SentinelGroup(_Group):
    """One master, n_replicas replicas, n_sentinels sentinels monitoring it
    as NAME, with down-after-milliseconds down_after_ms. With
    sentinel_password, the sentinels want it from their clients: as the
    password of ACL user sentinel_user (the default user off), or without a
    user as requirepass; they use it among themselves too."""

    NAME = "dqmaster"

    def __init__(self, n_replicas=2, n_sentinels=3, down_after_ms=1000, sentinel_user=None,
                 sentinel_password=None, tls=None, tls_sentinels=True):
        super().__init__("delayq-sentinel.")
        self._use_tls(tls)
        self.tls_sentinels = tls_sentinels
        self.data_ports = [free_port() for _ in range(1 + n_replicas)]
        self.sentinel_ports = [free_port() for _ in range(n_sentinels)]
        self.sentinel_auth = None
        if sentinel_password:
            self.sentinel_auth = (sentinel_user, sentinel_password) if sentinel_user else (sentinel_password,)
        m = self.data_ports[0]
        self._server(m)
        for p in self.data_ports[1:]:
            self._server(p, "--replicaof", "127.0.0.1", str(m))
        for p in self.sentinel_ports:
            conf = os.path.join(self.dir, f"sentinel-{p}.conf")
            with open(conf, "w") as f:
                f.write(f"port {p}\nbind 127.0.0.1\ndir {self.dir}\nprotected-mode no\n"
                        f"sentinel monitor {self.NAME} 127.0.0.1 {m} 2\n"
                        f"sentinel down-after-milliseconds {self.NAME} {down_after_ms}\n"
                        f"sentinel failover-timeout {self.NAME} 5000\n"
                        f"sentinel parallel-syncs {self.NAME} 2\n")
                f.write("".join(line + "\n" for line in self._tls_conf(p, "", tls_sentinels)))
                if tls and tls_sentinels:
                    _tls_ports[p] = self.tls
                if sentinel_password and sentinel_user:
                    f.write(f"user default off\nuser {sentinel_user} on >{sentinel_password} allchannels +@all\n"
                            f"sentinel sentinel-user {sentinel_user}\nsentinel sentinel-pass {sentinel_password}\n")
                elif sentinel_password:
                    f.write(f"requirepass {sentinel_password}\nsentinel sentinel-pass {sentinel_password}\n")
            self._spawn(p, ["redis-server", conf, "--sentinel"])
        if not self.wait_ping(self.data_ports + self.sentinel_ports):
            raise RuntimeError("sentinel group did not start")

    def _auth(self, port):
        return self.sentinel_auth if port in self.sentinel_ports else None

    def url(self, password=None):
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        auth = f":{password}@" if password else ""
        return f"redis-sentinel://{auth}{hosts}#{self.NAME}"

    def master_port(self):
        for s in self.sentinel_ports:
            r = try_call(s, "SENTINEL", "get-master-addr-by-name", self.NAME, auth=self.sentinel_auth)
            if r:
                return int(r[1])
        return None

    def replicas_up(self):
        m = self.master_port()
        reps = [p for p in self.data_ports if p != m and self.procs[p].poll() is None]
        return all(info(p, "replication").get("master_link_status") == "up" and
                   info(p, "replication").get("master_port") == str(m) for p in reps)

    def sentinels_agree(self):
        """Every sentinel knows the master and its replicas and the others."""
        m = self.master_port()
        for s in self.sentinel_ports:
            r = try_call(s, "SENTINEL", "get-master-addr-by-name", self.NAME, auth=self.sentinel_auth)
            if not r or int(r[1]) != m:
                return False
            reps = try_call(s, "SENTINEL", "replicas", self.NAME, auth=self.sentinel_auth) or []
            if len(reps) < len(self.data_ports) - 1:
                return False
            # A restarted old master counts only once every sentinel sees it
            # as a healthy replica: a failover started earlier can be undone
            # by a sentinel that still thinks otherwise.
            for rep in reps:
                fields = dict(zip(rep[::2], rep[1::2]))
                if fields.get("flags") != "slave" or fields.get("master-link-status") != "ok":
                    return False
            sens = try_call(s, "SENTINEL", "sentinels", self.NAME, auth=self.sentinel_auth) or []
            if len(sens) < len(self.sentinel_ports) - 1:
                return False
        return True

    def ready(self, timeout=60):
        # 60 s: sentinels learn replicas from INFO polled every 10 s, and a
        # replica's link state from its own INFO; under the sanitizers with
        # TLS handshakes a group took over 30 s once in CI (ha_tls.py). A
        # ready group returns at once.
        return wait_until(lambda: self.replicas_up() and self.sentinels_agree(), timeout, 0.1)

    def kill_master(self):
        m = self.master_port()
        self.kill(m)
        return m

    def wait_new_master(self, old, timeout=30):
        return wait_until(lambda: (self.master_port() or old) != old and
                          info(self.master_port(), "replication").get("role") == "master", timeout, 0.05)

    def graceful_failover(self):
        return call(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.NAME, auth=self.sentinel_auth)


class Cluster(_Group):
    """masters masters with replicas_per_master replicas each, made with
    redis-cli --cluster create."""

    def __init__(self, masters=3, replicas_per_master=1, node_timeout_ms=1000, tls=None):
        super().__init__("delayq-cluster.")
        self._use_tls(tls)
        n = masters * (1 + replicas_per_master)
        self.ports = []
        while len(self.ports) < n:
            p = free_port(with_bus=True)
            if p not in self.ports and p + 10000 not in self.ports:
                self.ports.append(p)
        for p in self.ports:
            self._server(p, "--cluster-enabled", "yes", "--cluster-config-file",
                         os.path.join(self.dir, str(p), "nodes.conf"),
                         "--cluster-node-timeout", str(node_timeout_ms))
        if not self.wait_ping(self.ports):
            raise RuntimeError("cluster nodes did not start")
        tls_cli = ["--tls", "--cacert", tls[2], "--cert", tls[0], "--key", tls[1]] if tls else []
        r = subprocess.run(["redis-cli", *tls_cli, "--cluster", "create"] +
                           [f"127.0.0.1:{p}" for p in self.ports] +
                           ["--cluster-replicas", str(replicas_per_master), "--cluster-yes"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60 * SLOW)
        if r.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {r.stderr[-300:]!r}")
        if not self.ready():
            raise RuntimeError("cluster did not become ready")

    def alive(self):
        return [p for p in self.ports if self.procs[p].poll() is None]

    def url(self, seeds=2):
        return "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.alive()[:seeds])

    def slots(self):
        for p in self.alive():
            r = try_call(p, "CLUSTER", "SLOTS")
            if r:
                return r
        return []

    def owner(self, slot):
        for lo, hi, master, *rest in self.slots():
            if lo <= slot <= hi:
                return int(master[1])
        return None

    def master_ports(self):
        return sorted({int(r[2][1]) for r in self.slots()})

    def slot_of(self, key):
        return call(self.alive()[0], "CLUSTER", "KEYSLOT", key)

    def queue_on(self, port, prefix="q"):
        """A queue name whose slot this master owns (keys are dq:{QUEUE}:...)."""
        for i in range(10000):
            name = f"{prefix}{i}"
            if self.owner(self.slot_of(name)) == port:
                return name
        raise RuntimeError(f"no queue name lands on {port}")

    def node_id(self, port):
        return call(port, "CLUSTER", "MYID")

    def state_ok(self):
        def ok(p):
            text = try_call(p, "CLUSTER", "INFO") or ""
            return "cluster_state:ok" in text
        return all(ok(p) for p in self.alive())

    def replicas_up(self):
        for p in self.alive():
            rep = info(p, "replication")
            if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                return False
        return True

    def ready(self, timeout=30):
        return wait_until(lambda: self.state_ok() and self.replicas_up() and
                          len(self.master_ports()) > 0, timeout, 0.1)

    def wait_owner_change(self, slot, old, timeout=30):
        return wait_until(lambda: self.owner(slot) not in (None, old) and self.state_ok(), timeout, 0.05)

    def migrate_slot(self, slot, src, dst, between=None, batch=100):
        """Moves slot from master src to master dst with its keys, the way
        redis-cli --cluster reshard does; between() runs after each step."""
        step = between or (lambda: None)
        src_id, dst_id = self.node_id(src), self.node_id(dst)
        call(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        call(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        step()
        for _ in range(100000):
            keys = call(src, "CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            call(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys, timeout=30)
            step()
        for p in [dst, src] + [m for m in self.master_ports() if m not in (src, dst)]:
            call(p, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        step()


def _stop_all():
    for g in list(_live):
        g.stop()


atexit.register(_stop_all)
# tests/run.sh ends a test that runs too long with SIGTERM: exit through
# the atexit hooks, which stop every server by pid.
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
