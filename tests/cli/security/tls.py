"""tls.py - native TLS (issue 37) against redis-servers of the test's own
that speak only TLS (port 0, tls-port), with a CA and certificates this
file makes with openssl in a temp dir (tests/lib/tlsca.py).

1. rediss:// with --tls-ca: offer, stats, take, take --ack manual + ack,
   schedule (a separate process: its pub/sub hears the offer, so a
   --no-scheduler take gets the item well before the 5 s safety check),
   work --exec; $DELAYQ_TLS_CA does what --tls-ca does; the name checked
   is the URL's host (localhost by DNS name, 127.0.0.1 by IP entry).
1b. The rest of the CLI, each command once: lookup, list, cancel, config,
   functions status and load, doctor, every, schedules, a leased take with
   extend and nack, dead count, list, redrive and purge, offer --batch, and
   serve (its /metrics reads the queue over TLS).
2. Mutual TLS (tls-auth-clients yes): --tls-cert/--tls-key work; without
   them exit 3, the message names the client certificate.
3. Failures: each exits 3 within the connect timeout with a message naming
   its cause, and writes nothing: the system's CA store (which does not
   hold the test CA), another CA, a name the certificate does not hold
   (--tls-server-name fixes a certificate for another name), an expired
   certificate, plain redis:// against a TLS port, rediss:// against a
   plain port; --tls-insecure-skip-verify connects anyway, with a warning.
"""
import json
import os
import ssl
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import BIN, PORT, SLOW, Bg, dq, finish, ok, redis, section, wait_for  # noqa: E402
import topology  # noqa: E402
from tlsca import TestCA, tls_args  # noqa: E402

# The CLI's connect timeout (dq_options default): every failure ends by it.
CONNECT_S = 2.0

ca = TestCA()
other = TestCA("other")
good = ca.issue("server", ["IP:127.0.0.1", "DNS:localhost"])
named = ca.issue("named", ["DNS:redis.test"])
expired = ca.issue("expired", ["IP:127.0.0.1", "DNS:localhost"], days=0)
client = ca.issue("client")
time.sleep(1.1)  # the expired certificate's last second passes

# The test's own client: it trusts any server (it checks the servers, not
# their certificates) and has the client certificate for mutual TLS.
peek = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
peek.check_hostname = False
peek.verify_mode = ssl.CERT_NONE
peek.load_cert_chain(*client)


class TlsServers(topology._Group):
    def __init__(self):
        super().__init__("delayq-tls.")
        self.tls = peek

    def start(self, crt_key, auth_clients=False):
        port = topology.free_port()
        self._server(port, *tls_args(port, crt_key[0], crt_key[1], ca.ca, auth_clients))
        if not self.wait_ping([port]):
            raise RuntimeError("TLS redis-server did not start")
        return port

    def keys(self, port, pattern):
        return topology.call(port, "KEYS", pattern, tls=self.tls)


servers = TlsServers()
main = servers.start(good)
mutual = servers.start(good, auth_clients=True)
other_name = servers.start(named)
old = servers.start(expired)
TLS_CA = ["--tls-ca", ca.ca]
MTLS = ["--tls-cert", client[0], "--tls-key", client[1]]


def run(url, *args, env=None, stdin=None):
    return dq("--redis", url, *args, redis=False, env=env, stdin=stdin)


def url(port, host="127.0.0.1", scheme="rediss"):
    return f"{scheme}://{host}:{port}"


section("1. every command over rediss://")
U = url(main)
r = run(U, *TLS_CA, "offer", "tq", "0", "first")
ok(r.rc == 0 and r.text.strip(), "offer over TLS exits 0 and prints an id", r)
r = run(U, *TLS_CA, "stats", "tq", "--json")
st = json.loads(r.text) if r.rc == 0 else {}
ok(st.get("pending", 0) + st.get("ready", 0) == 1, "stats over TLS: one item", r)
r = run(U, *TLS_CA, "take", "tq", "--timeout", "5s")
ok(r.rc == 0 and r.text == "first\n", "take over TLS gets it", r)
r = run(U, "offer", "tq", "0", "second", env={"DELAYQ_TLS_CA": ca.ca})
ok(r.rc == 0, "$DELAYQ_TLS_CA does what --tls-ca does", r)
r = run(url(main, "localhost"), *TLS_CA, "take", "tq", "--ack", "manual", "--json", "--timeout", "5s")
item = json.loads(r.text) if r.rc == 0 else {}
ok(item.get("payload") == "second", "take --ack manual over TLS, to localhost (a DNS name)", r)
r = run(U, *TLS_CA, "ack", "tq", item.get("id", "?"), item.get("token", "?"))
ok(r.rc == 0, "ack over TLS", r)
r = run(U, *TLS_CA, "stats", "tq", "--json")
st = json.loads(r.text) if r.rc == 0 else {}
ok(r.rc == 0 and st.get("inflight") == 0 and st.get("pending") == 0 and st.get("ready") == 0,
   "nothing in flight or left after the ack", r)

sched = Bg([BIN, "--redis", U, *TLS_CA, "schedule", "tsq"], name="schedule over TLS")
ok(wait_for(lambda: topology.call(main, "PUBSUB", "SHARDCHANNELS", "*tsq*", tls=peek), 10),
   "schedule subscribed over TLS (sharded pub/sub)")
r = run(U, *TLS_CA, "offer", "tsq", "1s", "later")
t0 = time.monotonic()
r2 = run(U, *TLS_CA, "take", "tsq", "--no-scheduler", "--timeout", "10s")
took = time.monotonic() - t0
ok(r.rc == 0 and r2.rc == 0 and r2.text == "later\n", "the schedule process moved the item (take --no-scheduler got it)", r2)
ok(took < 3.5 * SLOW, f"... {took:.2f} s after the offer, due in 1 s: woken by its pub/sub, not the safety check")
ok(sched.stop() == 0, "schedule exits 0 on SIGTERM")

out = os.path.join(tempfile.mkdtemp(prefix="delayq-tls-work."), "done")
work = Bg([BIN, "--redis", U, *TLS_CA, "work", "twq", "--exec", f"cat >> {out}; echo >> {out}"], name="work over TLS")
for i in range(3):
    run(U, *TLS_CA, "offer", "twq", "0", f"job{i}")


def done_lines():
    try:
        with open(out) as f:
            return sorted(l for l in f.read().split("\n") if l)
    except OSError:
        return []


ok(wait_for(lambda: len(done_lines()) == 3, 15), "work --exec over TLS ran all three", done_lines())
ok(done_lines() == ["job0", "job1", "job2"], "... each once, with its payload", done_lines())
ok(work.stop() == 0, "work exits 0 on SIGTERM", work.err[-300:])

section("1b. the rest of the CLI over rediss://")
# Each command that connects, once, with what it must answer: TLS carries
# them all the same way, so one run each shows none bypasses it.
R = run(U, *TLS_CA, "offer", "tr", "1h", "p", "--id", "r1")
ok(R.rc == 0, "offer r1", R)
for args, rc, what in [
        (["lookup", "tr", "r1", "--json"], 0, "lookup"),
        (["list", "tr", "--state", "pending", "--json"], 0, "list"),
        (["cancel", "tr", "r1"], 0, "cancel"),
        (["offer", "tr", "0", "n", "--id", "r2"], 0, "offer r2"),
        (["config", "tr", "--max-attempts", "1", "--json"], 0, "config"),
        (["functions", "status"], 0, "functions status"),
        (["functions", "load"], 0, "functions load"),
        (["doctor", "--json"], None, "doctor (its findings may be unsafe: exit 0 or 1)"),
        (["every", "tr", "tick", "1h", "x"], 0, "every"),
        (["schedules", "tr", "--json"], 0, "schedules"),
        (["schedules", "tr", "remove", "tick"], 0, "schedules remove")]:
    R = run(U, *TLS_CA, *args)
    ok(R.rc == rc if rc is not None else R.rc in (0, 1), f"{what} over TLS: exit {rc if rc is not None else '0 or 1'}",
       R)
R = run(U, *TLS_CA, "take", "tr", "--ack", "manual", "--lease", "30s", "--json", "--timeout", "5s")
it = json.loads(R.text) if R.rc == 0 else {}
ok(it.get("id") == "r2", "leased take of r2", R)
R = run(U, *TLS_CA, "extend", "tr", "r2", it.get("token", "?"), "1m")
ok(R.rc == 0, "extend over TLS", R)
R = run(U, *TLS_CA, "nack", "tr", "r2", it.get("token", "?"), "--error", "boom")
ok(R.rc == 0, "nack over TLS (its last attempt: a dead letter)", R)
for args, want, what in [(["dead", "tr", "count"], "1", "dead count"),
                         (["dead", "tr", "list", "--json"], "boom", "dead list"),
                         (["dead", "tr", "redrive"], None, "dead redrive"),
                         (["dead", "tr", "purge"], None, "dead purge")]:
    R = run(U, *TLS_CA, *args)
    ok(R.rc == 0 and (want is None or want in R.text), f"{what} over TLS", R)
R = run(U, *TLS_CA, "offer", "tr", "--batch", "-", stdin=b"0\tb1\tone\n0\tb2\ttwo\n")
ok(R.rc == 0 and R.text.split() == ["2"], "offer --batch over TLS: 2 offered", R)
sport = topology.free_port()
srv = Bg([BIN, "--redis", U, *TLS_CA, "serve", "--listen", f"127.0.0.1:{sport}", "tr"], name="serve over TLS")


def scrape():
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sport}/metrics", timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return ""


ok(wait_for(lambda: 'delayq_up 1' in scrape(), 10), "serve over TLS: /metrics says Redis is up")
ok('queue="tr"' in scrape() and 'delayq_items{' in scrape(), "... and reads the queue", scrape()[-400:])
ok(srv.stop() == 0, "serve exits 0 on SIGTERM")

section("2. mutual TLS (tls-auth-clients yes)")
M = url(mutual)
r = run(M, *TLS_CA, *MTLS, "offer", "mq", "0", "x")
ok(r.rc == 0, "with --tls-cert and --tls-key: offer exits 0", r)
r = run(M, "take", "mq", "--timeout", "5s",
        env={"DELAYQ_TLS_CA": ca.ca, "DELAYQ_TLS_CERT": client[0], "DELAYQ_TLS_KEY": client[1]})
ok(r.rc == 0 and r.text == "x\n", "... and through $DELAYQ_TLS_CERT / $DELAYQ_TLS_KEY", r)
t0 = time.monotonic()
r = run(M, *TLS_CA, "offer", "mq2", "0", "y")
ok(r.rc == 3, "without a client certificate: exit 3", r)
ok("certificate required" in r.errtext and "--tls-cert" in r.errtext, "... saying the server wants a client certificate", r.errtext)
ok(servers.keys(mutual, "*mq2*") == [], "... nothing written")
r = run(M, *TLS_CA, "--tls-cert", client[0], "offer", "mq2", "0", "y")
ok(r.rc == 2 and "both" in r.errtext, "--tls-cert without --tls-key: exit 2, saying both are needed", r)

section("3. each failure: exit 3 within the connect timeout, its cause named, nothing written")


def refused(what, u, args, cause, port, env=None):
    q = "fq" + str(refused.n)
    refused.n += 1
    t0 = time.monotonic()
    r = run(u, *args, "offer", q, "0", "z", env=env)
    secs = time.monotonic() - t0
    ok(r.rc == 3, f"{what}: exit 3", r)
    ok(cause in r.errtext, f"... the message says '{cause}'", r.errtext)
    ok(secs < (CONNECT_S + 2) * SLOW, f"... within the connect timeout ({secs:.2f} s)")
    left = servers.keys(port, f"*{q}*") if port != PORT else redis("KEYS", f"*{q}*")
    ok(left == [], "... nothing written", left)


refused.n = 0
refused("the system's CA store (no test CA in it)", U, [], "certificate is not accepted", main)
refused("another CA", U, ["--tls-ca", other.ca], "no CA trusted here signed it", main)
refused("a name the certificate does not hold", url(main, "localhost"),
        [*TLS_CA, "--tls-server-name", "wrong.example"], "hostname mismatch", main)
refused("an IP address the certificate does not hold", url(other_name), TLS_CA, "IP address mismatch", other_name)
r = run(url(other_name), *TLS_CA, "--tls-server-name", "redis.test", "offer", "nq", "0", "n")
ok(r.rc == 0, "--tls-server-name redis.test: the same server is accepted", r)
refused("an expired certificate", url(old), TLS_CA, "certificate has expired", old)
refused("plain redis:// against a TLS port", url(main, scheme="redis"), [], "a TLS port? use rediss://", main)
refused("rediss:// against a plain port", url(PORT), TLS_CA, "a plain port? use redis://", PORT)
r = run(url(old), "--tls-insecure-skip-verify", "offer", "iq", "0", "i")
ok(r.rc == 0, "--tls-insecure-skip-verify: an expired certificate of an unknown CA is accepted", r)
ok("not verified" in r.errtext and "warning" in r.errtext, "... with a warning", r.errtext)

servers.stop()
finish()
