"""recurring_views.py - where a queue's recurring schedules are seen
(issue 40): a real `delayq serve` on a real redis, and headless Chromium.
  - /metrics: delayq_schedules{queue} counts a queue's schedules (active,
    paused or ended), and is 0 for a queue without any;
  - GET /api/queues/{q}/schedules: the schedules as 'schedules --json'
    lists them (name, spec, zone, next and last tick, paused, state); 404
    for an unknown queue;
  - a user with the rule of 'delayq acl --read-only' lists the schedules
    ('delayq schedules', a no-writes function run by FCALL_RO) and reads
    /metrics through serve, but cannot set one;
  - the dashboard lists the open queue's schedules with their next and
    last tick (skipped, and said so, where Chromium is missing).
"""
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

from browser import chromium, serve_up  # noqa: E402

try:
    from selenium.webdriver.common.by import By
except ImportError:
    pass

tmp = tempfile.mkdtemp(prefix="delayq-recviews.")
Q, Q0 = "rv1", "rv0"


def http(port, path):
    """(status, body bytes) of a GET to 127.0.0.1:port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10 * SLOW) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return None, str(e).encode()


def gauge(body, name, queue):
    """The value of name{queue="queue"} in a /metrics body, or None."""
    want = f'{name}{{queue="{queue}"}} '
    for line in body.decode().splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    return None


# ------------------------------------------------------------------ state
section("schedules set with the CLI, one scheduler")
eq(dq("offer", Q0, "1h", "plain").rc, 0, "a queue without schedules")
r = dq("every", Q, "fast", "1s", "f")
ok(r.rc == 0, "every fast 1s", r)
eq(dq("every", Q, "slow", "1h", "s").rc, 0, "every slow 1h")
eq(dq("cron", Q, "nightly", "0 3 * * *", "n", "--tz", "Europe/Paris").rc, 0, "cron nightly in Europe/Paris")
eq(dq("schedules", Q, "pause", "slow").rc, 0, "slow paused")
sched = bg_dq("schedule", Q)
ok(wait_for(lambda: (dq("schedules", Q, "--json").json_lines() or [{}])[0].get("last_ms", -1) > 0, 5 * SLOW),
   "fast made a tick (its last tick is listed)")

# ------------------------------------------------------------------ serve
section("serve: /metrics and /api/queues/{q}/schedules")
port = closed_port()
serve = bg_dq("serve", "--listen", f"127.0.0.1:{port}", Q, Q0)
ok(wait_for(lambda: serve_up(port), 10 * SLOW), f"serve answers on 127.0.0.1:{port}", serve.err)
st, body = http(port, "/metrics")
eq(st, 200, "/metrics answers")
eq(gauge(body, "delayq_schedules", Q), 3.0, "delayq_schedules counts active, paused and cron schedules")
eq(gauge(body, "delayq_schedules", Q0), 0.0, "and 0 for a queue without schedules")
ok("# TYPE delayq_schedules gauge" in body.decode(), "declared as a gauge")
st, body = http(port, f"/api/queues/{Q}/schedules")
eq(st, 200, "the schedules endpoint answers")
got = json.loads(body) if st == 200 else {}
cli = {s["name"]: s for s in dq("schedules", Q, "--json").json_lines()}
api = {s["name"]: s for s in got.get("schedules", [])}
eq(got.get("queue"), Q, "names its queue")
eq(sorted(api), ["fast", "nightly", "slow"], "lists the three schedules by name")
for name in ("fast", "nightly", "slow"):
    a, c = api.get(name, {}), cli.get(name, {})
    eq({k: a.get(k) for k in ("spec", "zone", "paused", "state")},
       {k: c.get(k) for k in ("spec", "zone", "paused", "state")}, f"{name}: as 'schedules --json' lists it")
    ok(isinstance(a.get("next_ms"), int) and isinstance(a.get("last_ms"), int), f"{name}: next and last ticks", a)
eq((api.get("nightly", {}).get("zone"), api.get("slow", {}).get("paused")), ("Europe/Paris", True),
   "the cron schedule's zone; the paused one paused")
ok(api.get("fast", {}).get("last_ms", -1) > 0 and api["fast"]["next_ms"] > api["fast"]["last_ms"],
   "fast: a last tick, and the next one after it", api.get("fast"))
st, body = http(port, f"/api/queues/{Q0}/schedules")
eq((st, json.loads(body).get("schedules") if st == 200 else None), (200, []), "a queue without: an empty list")
st, _ = http(port, "/api/queues/nosuchq/schedules")
eq(st, 404, "an unknown queue: 404")
st, _ = http(port, "/api/queues/bad%20name/schedules")
eq(st, 400, "a bad queue name: 400")

# ------------------------------------------------------------------ read-only user
section("a user with the rule of 'delayq acl --read-only'")
pw = private_file(RDIR, "rv.pw", "rv-s3cret\n")
r = dq("acl", Q, Q0, "--user", "rvro", "--password-file", pw, "--read-only", redis=False)
ok(r.rc == 0 and r.text.startswith("ACL SETUSER "), "acl --read-only prints the rule", r)
ok(redis(*r.text.split()) in ("OK", b"OK"), "rule applied")
ro = f"redis://rvro:rv-s3cret@127.0.0.1:{PORT}"
r = dq("--redis", ro, "schedules", Q, "--json", redis=False)
eq((r.rc, sorted(s["name"] for s in r.json_lines()) if r.rc == 0 else r.errtext[-300:]),
   (0, ["fast", "nightly", "slow"]), "the read-only user lists the schedules")
r = dq("--redis", ro, "every", Q, "nope", "1s", "x", redis=False)
ok(r.rc != 0 and "nope" not in dq("schedules", Q).text, "but cannot set one", r)
port2 = closed_port()
serve_ro = bg_dq("--redis", ro, "serve", "--listen", f"127.0.0.1:{port2}", Q)
ok(wait_for(lambda: serve_up(port2), 10 * SLOW), "serve as the read-only user answers", serve_ro.err)
st, body = http(port2, "/metrics")
eq((st, gauge(body, "delayq_schedules", Q)), (200, 3.0), "its /metrics counts the schedules")
st, body = http(port2, f"/api/queues/{Q}/schedules")
eq((st, len(json.loads(body).get("schedules", [])) if st == 200 else body[:200]), (200, 3),
   "its schedules endpoint lists them")
ok(serve_ro.stop() == 0, "serve as the read-only user stops cleanly", serve_ro.err[-300:])

# ------------------------------------------------------------------ browser
section("the dashboard lists the open queue's schedules")
driver = chromium(tmp, "--window-size=1400,1000")
if driver is not None:
    driver.set_page_load_timeout(20 * SLOW)

    def rows():
        return driver.execute_script(
            "return [...document.querySelectorAll('#schedules tbody tr')].map(r => "
            "[r.dataset.name, r.querySelector('.next-tick').textContent, r.querySelector('.last-tick').textContent,"
            " r.lastChild.textContent]);")

    try:
        driver.get(f"http://127.0.0.1:{port}/")
        ok(wait_for(lambda: driver.execute_script(
            f"return !!document.querySelector('#queues tr[data-queue=\"{Q}\"]');"), 10 * SLOW), "the queue is listed")
        driver.find_element(By.CSS_SELECTOR, f'#queues tr[data-queue="{Q}"]').click()
        ok(wait_for(lambda: len(rows()) == 3, 10 * SLOW), "three schedules listed", rows())
        by = {r[0]: r for r in rows()}
        fast = dq("schedules", Q, "--json").json_lines()[0]
        ok(by.get("fast", [None, ""])[1].startswith(time.strftime("%Y-", time.gmtime(fast["next_ms"] / 1000))),
           "fast: its next tick as a date", by.get("fast"))
        ok(by.get("fast", [None, "", ""])[2] not in ("", "-"), "fast: its last tick shown", by.get("fast"))
        eq((by.get("slow") or [None] * 4)[3], "paused", "slow: paused")
        eq((by.get("nightly") or [None] * 3)[2], "-", "nightly: no last tick yet")
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        eq(logs, [], "no error in the browser's console")
    finally:
        driver.quit()

ok(serve.stop() == 0, "serve stops cleanly", serve.err[-300:])
ok(sched.stop() == 0, "the scheduler stops cleanly", sched.err[-300:])
shutil.rmtree(tmp, ignore_errors=True)
finish()
