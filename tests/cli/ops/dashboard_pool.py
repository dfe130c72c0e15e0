"""dashboard_pool.py - the dashboard of `delayq serve` operating a pool
(issue 39), in headless Chromium (python3-selenium, chromedriver):
  - a queue whose items went overdue with no scheduler running shows the
    "no scheduler" banner within 5 s, and the banner goes within 2 s of a
    real `delayq schedule` process starting;
  - an item in flight under a take that named its holder shows "held by
    NAME" in the in-flight list and in the look-up;
  - the consumers panel lists a running `take --count 0 --name NAME`;
  - the rate chart of a quiet queue labels its axis 0,1 (integers, none
    twice);
  - with the browser in Asia/Kolkata (TZ), item times are that zone's local
    time (not UTC), and the header names the zone once.
The browser's console stays free of errors.
"""
import datetime
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

from browser import chromium, page_helpers, serve_up  # noqa: E402

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
except ImportError:
    pass

TOKEN = "t0ken-of-dashboard-pool-py"
ZONE = "Asia/Kolkata"  # +05:30 all year: never UTC, never a DST edge
tmp = tempfile.mkdtemp(prefix="delayq-dashpool.")
tokfile = private_file(tmp, "token", TOKEN + "\n")
os.environ["DELAYQ_CONSUMER_BEAT_MS"] = "500"  # the take below, listed within a second

QP = "dpool"   # the pool: a held item, a consumer
QS = "dstuck"  # overdue work, no scheduler

section("a pool with a holder and a consumer; serve")
eq(dq("offer", QP, "0", "gpu", "--id", "gpu1").rc, 0, "offer gpu1")
r = dq("take", QP, "--ack", "manual", "--lease", "1h", "--holder", "alice", "--json", "--timeout", "5s",
       "--no-scheduler")
ok(r.rc == 0 and r.json_lines() and r.json_lines()[0]["id"] == "gpu1", "gpu1 held by alice for 1 h", r)
eq(dq("offer", QP, "1h", "later", "--id", "p1").rc, 0, "offer p1, due in an hour")
taker = bg_dq("take", QP, "--count", "0", "--name", "taker-9", "--no-scheduler")
port = closed_port()
serve = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokfile)
ok(wait_for(lambda: serve_up(port), 10 * SLOW), f"serve answers on 127.0.0.1:{port}", serve.err)

section("the page in headless Chromium, in " + ZONE)
os.environ["TZ"] = ZONE  # the browser's zone (chromedriver and chromium inherit it)
driver = chromium(tmp, "--window-size=1400,1000")
del os.environ["TZ"]
if driver is None:
    serve.stop()
    finish()
driver.set_page_load_timeout(20 * SLOW)


js, text, wait_until = page_helpers(driver)


def banner():
    """The queues the banner names, or None while it is hidden."""
    return js("const b = document.getElementById('no-scheduler');"
              "return b.hidden ? null : [...b.querySelectorAll('li')].map(l => l.dataset.queue);")


def row_text(row_id):
    return js("const r = [...document.querySelectorAll('#items tbody tr')].find(r => r.dataset.id === arguments[0]);"
              "return r ? r.textContent : null;", row_id)


try:
    driver.get(f"http://127.0.0.1:{port}/")
    eq(driver.title, "delayq", "the page loads")
    wait_until(lambda: js("return !!document.querySelector('#queues tr[data-queue=\"%s\"]');" % QP),
               "the pool's row shows")
    ok(text("time-zone") in ("times in " + ZONE, "times in Asia/Calcutta"), "the header names the zone (or its "
       "older name)", text("time-zone"))
    ok(banner() is None, "no banner: nothing overdue", banner())

    section("holders, consumers, the quiet chart, local times")
    js("[...document.querySelectorAll('#queues tr')].find(r => r.dataset.queue === arguments[0]).click();", QP)
    wait_until(lambda: text("detail-name") == QP and row_text("p1") is not None, "the pool's detail, p1 pending",
               detail=lambda: (text("detail-name"), row_text("p1")))
    due = zscore_due(QP, "p1")
    local = datetime.datetime.fromtimestamp(due / 1000, datetime.timezone(datetime.timedelta(hours=5, minutes=30)))
    want = "due " + local.strftime("%Y-%m-%d %H:%M:%S.") + f"{due % 1000:03d}"
    ok(want in (row_text("p1") or ""), f"p1's time in {ZONE}: {want!r}", row_text("p1"))
    Select(driver.find_element(By.ID, "state-select")).select_by_value("inflight")
    wait_until(lambda: "held by alice" in (row_text("gpu1") or ""), "gpu1 in flight, held by alice",
               detail=lambda: row_text("gpu1"))
    driver.find_element(By.ID, "lookup-id").send_keys("gpu1")
    driver.find_element(By.ID, "lookup-go").click()
    wait_until(lambda: "held by alice" in (text("lookup-result") or ""), "the look-up says held by alice",
               detail=lambda: text("lookup-result"))
    names = lambda: js("return [...document.querySelectorAll('#consumers tbody tr')].map(r => r.dataset.name);")
    wait_until(lambda: names() == ["taker-9"], "the consumers panel lists taker-9", detail=names)
    labels = lambda: js("return document.getElementById('rate-chart').dataset.labels;")
    wait_until(lambda: labels() == "0,1", "the quiet chart's axis: 0,1", detail=labels)
    taker.stop(signal.SIGTERM)
    wait_until(lambda: names() == [] and not js("return document.getElementById('no-consumers').hidden;"),
               "it leaves the panel once it exits", detail=names)

    section("overdue work and no scheduler: the banner")
    eq(dq("offer", QS, "200ms", "x", "--id", "late1").rc, 0, "offer late1, due in 200 ms, no scheduler anywhere")
    t0 = time.monotonic()
    shown = wait_for(lambda: banner() == [QS], 5 * SLOW, interval=0.1)
    ok(shown, f"the banner names {QS} within 5 s ({time.monotonic() - t0:.1f} s)", banner())
    sched = bg_dq("schedule", QS)
    t0 = time.monotonic()
    gone = wait_for(lambda: banner() is None, 2 * SLOW, interval=0.1)
    ok(gone, f"a scheduler starts: the banner goes within 2 s ({time.monotonic() - t0:.1f} s)", banner())
    sched.stop()
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    eq(errors, [], "no errors in the browser's console")
finally:
    driver.quit()
    serve.stop()
finish()
