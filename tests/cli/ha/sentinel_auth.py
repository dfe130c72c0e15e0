"""sentinel_auth.py - Sentinels that want a password of their clients: an
ACL user (sentinel_user and sentinel_password in the URL), and a plain
requirepass (sentinel_password alone). With the right credentials delayq
finds the master and works; with a wrong password or none it exits 3 with
one line that names the sentinel and never shows the password."""
# tier: slow (about 20 s): make test runs it, make test-fast does not
import os
import sys

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import dq, finish, note, ok, section  # noqa: E402
from topology import SentinelGroup  # noqa: E402

USER, PASSWORD = "sentinel-client", "s3ntinel-Pw"


def url(g, query):
    return g.url().replace("#", f"?{query}#") if query else g.url()


def works(u, queue, what):
    r = dq("--redis", u, "offer", queue, "0", "through an authenticated sentinel", redis=False)
    ok(r.rc == 0, f"{what}: offer exits 0", r)
    r = dq("--redis", u, "take", queue, "--json", "--timeout", "5s", redis=False)
    ok(r.rc == 0 and r.json_lines() and r.json_lines()[0]["payload"] == "through an authenticated sentinel",
       f"{what}: take gets it", r)


def refused(u, what, *words):
    r = dq("--redis", u, "stats", "sa", redis=False, timeout=60)
    err = r.errtext
    ok(r.rc == 3 and err.count("\n") == 1, f"{what}: exit 3, one line", r)
    ok(all(w in err for w in words), f"{what}: the line says {' and '.join(words)}", err)
    ok(PASSWORD not in err and "wrong-pass" not in err, f"{what}: no password shown", err)
    note(err.strip())


section("a sentinel with an ACL user (default user off)")
with SentinelGroup(n_replicas=1, n_sentinels=1, sentinel_user=USER, sentinel_password=PASSWORD) as g:
    ok(g.ready(), "the group is up, its sentinel answering the user")
    port = g.sentinel_ports[0]
    works(url(g, f"sentinel_user={USER}&sentinel_password={PASSWORD}"), "sa1", "user and password")
    refused(url(g, f"sentinel_user={USER}&sentinel_password=wrong-pass"), "a wrong password",
            f"127.0.0.1:{port}", "WRONGPASS invalid username-password pair or user is disabled.")
    refused(url(g, ""), "no credentials", f"127.0.0.1:{port}", "NOAUTH")

section("a sentinel with requirepass")
with SentinelGroup(n_replicas=1, n_sentinels=1, sentinel_password=PASSWORD) as g:
    ok(g.ready(), "the group is up")
    works(url(g, f"sentinel_password={PASSWORD}"), "sa2", "password alone")
    refused(url(g, "sentinel_password=wrong-pass"), "a wrong password", f"127.0.0.1:{g.sentinel_ports[0]}",
            "WRONGPASS")
finish()
