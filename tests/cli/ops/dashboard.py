"""dashboard.py - the page of `delayq serve`, in a real browser: Debian's
headless Chromium driven by python3-selenium through chromedriver.

The queues are built with the CLI. The page must show each queue with its
counts, a live rate once items flow, the lateness histogram (its bars add up
to the moves a scheduler made), the items of every state paged by cursor
(in flight with its lease's end and attempt), a look-up by id; it must cancel, redrive one
and all dead letters and purge with the token (and say 401 with a wrong
one), show a payload of markup as text, and say when Redis is down and
when it is back. The browser's console must stay free of errors (a CSP
violation would land there).
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

from browser import chromium, page_helpers, serve_up  # noqa: E402

try:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
except ImportError:
    pass

TOKEN = "t0ken-of-dashboard-py"
tmp = tempfile.mkdtemp(prefix="delayq-dash.")
tokfile = private_file(tmp, "token", TOKEN + "\n")


# ------------------------------------------------------------------ state
section("queues built with the CLI")
Q, Q2 = "dash1", "dash2"
XSS = '<img src=x onerror="window.__dq_xss=1">'
for i in range(3):
    eq(dq("offer", Q, "1h", XSS if i == 0 else f"later {i}", "--id", f"p{i}").rc, 0, f"offer p{i} (pending)")
eq(dq("config", Q, "--max-attempts", "1").rc, 0, "max attempts 1")
for i in range(3):
    eq(dq("offer", Q, "0", f"doomed {i}", "--id", f"d{i}").rc, 0, f"offer d{i}")
r = dq("take", Q, "--ack", "manual", "--count", "3", "--json", "--timeout", "5s")
taken = r.json_lines() if r.rc == 0 else []
eq(sorted(m["id"] for m in taken), ["d0", "d1", "d2"], "d0..d2 taken with a lease")
for m in taken:
    eq(dq("nack", Q, m["id"], m["token"], "--error", f"boom {m['id']}").rc, 0, f"nack {m['id']}: dead")
eq(dq("config", Q, "--max-attempts", "5").rc, 0, "max attempts 5")
for i in range(2):
    eq(dq("offer", Q, "0", f"now {i}", "--id", f"r{i}").rc, 0, f"offer r{i} (ready)")
st = stats(Q)
ok(st.get("pending") == 3 and st.get("ready") == 2 and st.get("dead") == 3, "3 pending, 2 ready, 3 dead", st)
batch = "".join(f"1h\tq{i:03d}\titem {i}\n" for i in range(120)).encode()
eq(dq("offer", Q2, "--batch", "-", stdin=batch).rc, 0, "120 pending in dash2")

keyf = private_file(tmp, "key", dq("keygen", redis=False).text)
Q3 = "dash3"
eq(dq("--key-file", keyf, "offer", Q3, "1h", "the-secret", "--id", "s0").rc, 0, "a sealed item in dash3")
# dash4: one item in flight (leased for 1 h), and 20 moved by a scheduler's
# transfers (due in 300 ms), so the lateness histogram has counts.
Q4 = "dash4"
eq(dq("offer", Q4, "0", "held", "--id", "f0").rc, 0, "offer f0")
r = dq("take", Q4, "--ack", "manual", "--lease", "1h", "--json", "--timeout", "5s")
ok(r.rc == 0 and r.json_lines() and r.json_lines()[0]["id"] == "f0", "f0 taken with a 1 h lease", r)
batch = "".join(f"300ms\tm{i}\tx\n" for i in range(20)).encode()
eq(dq("offer", Q4, "--batch", "-", stdin=batch).rc, 0, "20 items due in 300 ms")
sched = bg_dq("schedule", Q4)
ok(wait_for(lambda: stats(Q4).get("ready") == 20, 10), "a scheduler moved them", stats(Q4))
sched.stop()

port = closed_port()
serve = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokfile)
ok(wait_for(lambda: serve_up(port), 10 * SLOW), f"serve answers on 127.0.0.1:{port}", serve.err)

# ------------------------------------------------------------------ browser
section("the page in headless Chromium")
driver = chromium(tmp, "--window-size=1400,1000")
if driver is None:
    serve.stop()
    finish()
driver.set_page_load_timeout(20 * SLOW)


js, text, wait_until = page_helpers(driver)


def cell(queue, cls):
    return js("const r = document.querySelector('#queues tr[data-queue=\"' + arguments[0] + '\"]');"
              "const c = r && r.querySelector('.' + arguments[1]); return c ? c.textContent : null;", queue, cls)


def row_ids():
    return js("return [...document.querySelectorAll('#items tbody tr')].map(r => r.dataset.id);")


def click_fresh(by, selector, timeout=5):
    """Finds and clicks an element, again if the page re-rendered it in
    between (the queue table is rebuilt on every refresh)."""
    end = time.time() + timeout * SLOW
    while True:
        try:
            driver.find_element(by, selector).click()
            return
        except StaleElementReferenceException:
            if time.time() > end:
                raise
            time.sleep(0.05)


def click(elem_id):
    click_fresh(By.ID, elem_id)


def open_queue(queue):
    click_fresh(By.CSS_SELECTOR, f'#queues tr[data-queue="{queue}"]')


def click_in_row(row_id, cls):
    js("const r = [...document.querySelectorAll('#items tbody tr')].find(r => r.dataset.id === arguments[0]);"
       "r.querySelector('.' + arguments[1]).click();", row_id, cls)


try:
    driver.get(f"http://127.0.0.1:{port}/")
    eq(driver.title, "delayq", "the page loads (title delayq)")
    wait_until(lambda: driver.find_element(By.ID, "redis-status").get_attribute("data-up") == "true",
               "Redis shown up", detail=lambda: text("redis-status"))
    wait_until(lambda: cell(Q, "count-pending") == "3" and cell(Q, "count-ready") == "2"
               and cell(Q, "count-dead") == "3" and cell(Q, "count-inflight") == "0",
               "dash1's row: 3 pending, 2 ready, 0 in flight, 3 dead",
               detail=lambda: [cell(Q, c) for c in ("count-pending", "count-ready", "count-inflight", "count-dead")])
    wait_until(lambda: cell(Q2, "count-pending") == "120", "dash2's row: 120 pending",
               detail=lambda: cell(Q2, "count-pending"))

    section("a queue's detail: items, payloads as text, look-up")
    open_queue(Q)
    wait_until(lambda: driver.find_element(By.ID, "queue-detail").is_displayed(), "the detail opens")
    eq(text("detail-name"), Q, "it names dash1")
    wait_until(lambda: row_ids() == ["p0", "p1", "p2"], "pending by due time: p0 p1 p2", detail=row_ids)
    shown = js("const r = document.querySelector('#items tr[data-id=\"p0\"] .payload'); return r && r.textContent;")
    eq(shown, XSS, "a payload of markup shows as text")
    eq(js("return window.__dq_xss === undefined && !document.querySelector('#items img');"), True,
       "and never runs or renders")
    bars = js("return [...document.querySelectorAll('#lateness .lat-bar')].map(b => b.dataset.le);")
    eq(len(bars or []), 14, "the lateness histogram has 14 bars")
    driver.find_element(By.ID, "lookup-id").send_keys("p1")
    click("lookup-go")
    wait_until(lambda: "state pending" in (text("lookup-result") or ""), "look-up of p1: pending",
               detail=lambda: text("lookup-result"))
    driver.find_element(By.ID, "lookup-id").clear()
    driver.find_element(By.ID, "lookup-id").send_keys("nosuch")
    click("lookup-go")
    wait_until(lambda: "no such item" in (text("lookup-result") or ""), "look-up of an unknown id says so",
               detail=lambda: text("lookup-result"))

    Select(driver.find_element(By.ID, "state-select")).select_by_value("ready")
    wait_until(lambda: sorted(row_ids() or []) == ["r0", "r1"], "the ready list: r0 r1", detail=row_ids)
    Select(driver.find_element(By.ID, "state-select")).select_by_value("dead")
    wait_until(lambda: sorted(row_ids() or []) == ["d0", "d1", "d2"], "the dead letters: d0 d1 d2", detail=row_ids)
    reason = js("const r = document.querySelector('#items tr[data-id=\"d1\"]'); return r && r.textContent;")
    ok(reason and "boom d1" in reason, "a dead letter shows its last error", reason)

    section("changes need the token")
    click_in_row("d0", "redrive-one")
    wait_until(lambda: "token" in (text("action-result") or "").lower(), "without a token: asks for it",
               detail=lambda: text("action-result"))
    driver.find_element(By.ID, "token").send_keys("wrong-token")
    click_in_row("d0", "redrive-one")
    wait_until(lambda: "401" in (text("action-result") or ""), "a wrong token: 401 shown",
               detail=lambda: text("action-result"))
    eq(stats(Q).get("dead"), 3, "and nothing changed")
    driver.find_element(By.ID, "token").clear()
    driver.find_element(By.ID, "token").send_keys(TOKEN)

    section("redrive one, redrive all, cancel, purge")
    click_in_row("d0", "redrive-one")
    wait_until(lambda: "redrove d0" in (text("action-result") or ""), "redrive d0", detail=lambda: text("action-result"))
    wait_until(lambda: cell(Q, "count-dead") == "2", "the page's dead count falls to 2",
               detail=lambda: cell(Q, "count-dead"))
    eq(stats(Q).get("dead"), 2, "Redis agrees: 2 dead")
    click("redrive-all")
    ok("again" in driver.find_element(By.ID, "redrive-all").text, "redrive all asks for a second click")
    eq(stats(Q).get("dead"), 2, "one click changes nothing")
    click("redrive-all")
    wait_until(lambda: "redrove 2 dead letters" in (text("action-result") or ""), "redrive all: 2",
               detail=lambda: text("action-result"))
    wait_until(lambda: cell(Q, "count-dead") == "0" and cell(Q, "count-ready") == "5",
               "the page shows 0 dead, 5 ready", detail=lambda: (cell(Q, "count-dead"), cell(Q, "count-ready")))

    Select(driver.find_element(By.ID, "state-select")).select_by_value("pending")
    wait_until(lambda: row_ids() == ["p0", "p1", "p2"], "back to pending", detail=row_ids)
    click_in_row("p2", "cancel-item")
    wait_until(lambda: "cancelled p2" in (text("action-result") or ""), "cancel p2",
               detail=lambda: text("action-result"))
    wait_until(lambda: cell(Q, "count-pending") == "2" and row_ids() == ["p0", "p1"],
               "2 pending on the page and in the list", detail=lambda: (cell(Q, "count-pending"), row_ids()))
    eq(zscore_due(Q, "p2"), None, "p2 is gone from Redis")

    eq(dq("config", Q, "--max-attempts", "1").rc, 0, "max attempts still 1")
    r = dq("take", Q, "--ack", "manual", "--json", "--timeout", "5s")
    m = r.json_lines()[0] if r.rc == 0 and r.json_lines() else {}
    eq(dq("nack", Q, m.get("id", "?"), m.get("token", "?"), "--error", "again").rc, 0, "one more dead letter")
    wait_until(lambda: cell(Q, "count-dead") == "1", "the page shows it", detail=lambda: cell(Q, "count-dead"))
    click("purge-dead")
    click("purge-dead")
    wait_until(lambda: "purged 1 dead letters" in (text("action-result") or ""), "purge: 1",
               detail=lambda: text("action-result"))
    wait_until(lambda: cell(Q, "count-dead") == "0", "0 dead on the page", detail=lambda: cell(Q, "count-dead"))

    section("paging and a live rate")
    open_queue(Q2)
    wait_until(lambda: text("detail-name") == Q2 and len(row_ids() or []) == 50, "dash2: a first page of 50",
               detail=lambda: (text("detail-name"), len(row_ids() or [])))
    first = row_ids()
    eq(first[:3], ["q000", "q001", "q002"], "in due order")
    click("next-page")
    wait_until(lambda: (row_ids() or [""])[0] == "q050", "next page starts at q050", detail=lambda: row_ids()[:3])
    click("next-page")
    wait_until(lambda: len(row_ids() or []) == 20 and row_ids()[-1] == "q119", "the third page: q100..q119",
               detail=lambda: row_ids())
    click("first-page")
    wait_until(lambda: row_ids() == first, "first page again", detail=lambda: row_ids()[:3])
    ids = set()
    for k in range(40):
        batch = "".join(f"1h\tlive{k}-{i}\tx\n" for i in range(50)).encode()
        dq("offer", Q2, "--batch", "-", stdin=batch)
        time.sleep(0.05)
        rate = cell(Q2, "rate-in")
        if rate not in (None, "–") and float(rate) > 0:
            ids.add(rate)
            break
    ok(ids, "offers in flow show a rate in above 0", cell(Q2, "rate-in"))
    painted = js("const c = document.getElementById('rate-chart'), d = c.getContext('2d')"
                 ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
                 "for (let i = 0; i < d.length; i += 4) if (d[i + 2] > 180 && d[i] < 80) n++; return n;")
    ok(painted and painted > 20, "the chart draws the offered line", painted)

    section("a sealed payload shows sealed (serve has no key)")
    open_queue(Q3)
    wait_until(lambda: row_ids() == ["s0"], "dash3: s0", detail=row_ids)
    shown = js("const r = document.querySelector('#items tr[data-id=\"s0\"] .payload'); return r && r.textContent;")
    kid = open(keyf).read().split()[1]
    ok(shown and shown.startswith(f"<sealed with key {kid}") and "the-secret" not in driver.page_source,
       "sealed, naming its key, no plaintext", shown)

    section("in flight, and the lateness histogram")
    open_queue(Q4)
    wait_until(lambda: text("detail-name") == Q4, "dash4 opens")
    Select(driver.find_element(By.ID, "state-select")).select_by_value("inflight")
    wait_until(lambda: row_ids() == ["f0"], "in flight: f0", detail=row_ids)
    row = js("const r = document.querySelector('#items tr[data-id=\"f0\"]'); return r && r.textContent;")
    ok(row and "lease ends" in row, "its row shows the lease's end", row)
    attempts = js("const r = document.querySelector('#items tr[data-id=\"f0\"]'); return r && r.cells[2].textContent;")
    eq(attempts, "1", "and its attempt")
    bars = lambda: js("return [...document.querySelectorAll('#lateness .lat-bar')].reduce((n, b) => n + +b.dataset.count, 0);")
    wait_until(lambda: bars() == 20, "the histogram's bars count the 20 moves", detail=bars)
    ok("20 items" in (text("lat-summary") or ""), "and its summary says so", text("lat-summary"))

    section("Redis down and back")
    ok(redis_stop(), "redis stopped")
    wait_until(lambda: driver.find_element(By.ID, "redis-status").get_attribute("data-up") == "false",
               "the page says Redis is down", detail=lambda: text("redis-status"))
    ok("down" in (text("redis-status") or "").lower(), "in words", text("redis-status"))
    ok(redis_start(), "redis started")
    wait_until(lambda: driver.find_element(By.ID, "redis-status").get_attribute("data-up") == "true",
               "and up again", timeout=20, detail=lambda: text("redis-status"))
    wait_until(lambda: cell(Q, "count-pending") == "2", "dash1's counts are back", detail=lambda: cell(Q, "count-pending"))

    section("the console")
    # The 4xx and 503 answers the test asked for are logged as network
    # errors; anything else (a script error, a CSP violation) must not be.
    logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE" and e.get("source") != "network"]
    ok(not logs, "no script or security errors in the browser's console", logs[:3])
finally:
    driver.quit()
    ok(serve.running(), "serve survived")
    eq(serve.stop(), 0, "serve exits 0 on SIGTERM")
    shutil.rmtree(tmp, ignore_errors=True)
finish()
