"""keyslot.py - dq__key_slot (src/util/slot.c) agrees with a real cluster node.

Starts its own redis-server in cluster mode (CLUSTER KEYSLOT exists only
there; the suite's server is not one) on a free loopback port, in a temporary
directory, and stops it by pid at exit. Then asks it CLUSTER KEYSLOT for
about 2000 keys - random bytes with braces in every arrangement, binary
keys, empty tags, queue-style keys - and compares with the slots that
BUILD/tests/tools/keyslot (our function as a filter: hex keys in, slots
out) prints for the same keys."""
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

TOOL = os.path.join(os.environ.get("DQ_BUILD_DIR", "build"), "tests", "tools", "keyslot")


def port_free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_cluster_port():
    """A port P with P and P+10000 (the cluster bus) both free right now."""
    for _ in range(50):
        p = closed_port()
        if p + 10000 < 65536 and port_free(p + 10000):
            return p
    return None


def start_cluster_node(tmp):
    """(Bg, port) of a cluster-mode redis-server answering PING, or (None, None)."""
    for _ in range(3):
        port = free_cluster_port()
        if port is None:
            continue
        node = Bg(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                   "--cluster-enabled", "yes", "--cluster-config-file", os.path.join(tmp, "nodes.conf"),
                   "--save", "", "--appendonly", "no", "--dir", tmp], name="redis-server (cluster)")

        def up():
            try:
                with Redis(port=port, timeout=1) as r:
                    return r.cmd("PING") == "PONG"
            except OSError:
                return False
        if wait_for(up, 10):
            return node, port
        node.stop()  # someone took a port between the probe and the bind
    return None, None


def keys():
    """About 2000 keys, the same every run."""
    rnd = random.Random(20240611)
    out = [b"", b"{}", b"}{", b"{", b"}", b"{{}}", b"{}{x}", b"{x}{}", b"a{}b", b"{\x00}",
           b"123456789", b"foo", b"{user1000}.following", b"foo{{bar}}zap", b"foo{}{bar}"]
    for q in ["q", "reminders", "a.b-c_d:e", "x" * 128]:
        for suffix in ["zs", "q:0", "q:12345", "i:32767", "ch", "c", "dead", "dt", "cfg", "sig"]:
            out.append(f"dq:{{{q}}}:{suffix}".encode())
    alphabet = b"{}{}ab\x00\xff:"
    while len(out) < 2000:
        kind = rnd.randrange(4)
        n = rnd.randrange(0, 40)
        if kind == 0:  # any bytes
            k = bytes(rnd.randrange(256) for _ in range(n))
        elif kind == 1:  # dense with braces
            k = bytes(rnd.choice(alphabet) for _ in range(n))
        elif kind == 2:  # one tag somewhere, maybe empty, maybe unclosed
            tag = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 6)))
            k = (bytes(rnd.randrange(97, 123) for _ in range(rnd.randrange(4))) + b"{" + tag +
                 (b"}" if rnd.random() < 0.8 else b"") + bytes(rnd.randrange(256) for _ in range(n)))
        else:  # long keys
            k = bytes(rnd.randrange(256) for _ in range(rnd.randrange(100, 600)))
        out.append(k)
    return out


def main():
    if not ok(os.access(TOOL, os.X_OK), f"{TOOL} is built"):
        return
    if not ok(shutil.which("redis-server") is not None, "redis-server is on PATH"):
        return
    tmp = tempfile.mkdtemp(prefix="delayq-keyslot.")
    try:
        node, port = start_cluster_node(tmp)
        if not ok(node is not None, "a cluster-mode redis-server starts"):
            return
        ks = keys()
        r = subprocess.run([TOOL], input=b"".join(k.hex().encode() + b"\n" for k in ks),
                           capture_output=True, timeout=30)
        if not ok(r.returncode == 0, "keyslot tool exits 0", r.stderr):
            return
        ours = [int(x) for x in r.stdout.split()]
        eq(len(ours), len(ks), "one slot per key")
        with Redis(port=port) as red:
            theirs = [red.cmd("CLUSTER", "KEYSLOT", k) for k in ks]
        bad = [(k, o, t) for k, o, t in zip(ks, ours, theirs) if o != t]
        eq(bad[:5], [], f"dq__key_slot == CLUSTER KEYSLOT for {len(ks)} keys")
        eq(min(ours), 0, "the empty key is in slot 0")
        ok(max(ours) < 16384, "every slot below 16384")
        node.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


main()
finish()
