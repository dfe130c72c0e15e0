"""serve_browser.py - DNS rebinding and framing against `delayq serve`, in a
real browser (Debian's headless Chromium through python3-selenium), with a
real serve and redis (issue 35, findings 5, 7 and 10).

Chromium resolves rebind.test and foreign.test to 127.0.0.1
(--host-resolver-rules), as a rebound name would. A document of the origin
http://rebind.test:PORT (what an attacker's page becomes once its name
points here) fetches /api/queues, /metrics and a page of items of its own
origin (CSP set aside, as the attacker's own page has none): each must
answer 421 and show no queue. A page of another origin
(foreign.test, served by this test) frames the dashboard: the frame must be
blocked, with the browser saying why (X-Frame-Options or frame-ancestors).
The dashboard itself, at 127.0.0.1 and localhost, still works, and says
"Registry problem" (not Redis down) when dq:queues is not a set.
"""
import http.server
import os
import shutil
import sys
import tempfile
import threading

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

from browser import chromium, serve_up  # noqa: E402

try:
    from selenium.webdriver.common.by import By
except ImportError:
    pass

tmp = tempfile.mkdtemp(prefix="delayq-browser.")
Q = "secretq"
eq(dq("offer", Q, "1h", "the-payload-to-steal", "--id", "s0").rc, 0, "an item to steal")


port = closed_port()
serve = bg_dq("serve", "--listen", f"127.0.0.1:{port}", "shown")
ok(wait_for(lambda: serve_up(port), 10 * SLOW), f"serve answers on 127.0.0.1:{port}", serve.err)

# The foreign origin's page: it frames the dashboard.
FRAME = f'<!DOCTYPE html><title>foreign</title><iframe id="f" src="http://127.0.0.1:{port}/"></iframe>'.encode()


class Foreign(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(FRAME)))
        self.end_headers()
        self.wfile.write(FRAME)

    def log_message(self, *a):
        pass


foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
fport = foreign.server_address[1]
threading.Thread(target=foreign.serve_forever, daemon=True).start()

driver = chromium(tmp, "--host-resolver-rules=MAP rebind.test 127.0.0.1, MAP foreign.test 127.0.0.1",
                  "--window-size=1200,900")
if driver is None:
    serve.stop()
    foreign.shutdown()
    finish()
driver.set_page_load_timeout(20 * SLOW)
driver.set_script_timeout(20 * SLOW)

FETCH = ("const done = arguments[arguments.length - 1];"
         "fetch(arguments[0], {cache: 'no-store'}).then(r => r.text().then(t => done([r.status, t])))"
         ".catch(e => done([0, String(e)]));")


def text(elem_id):
    return driver.execute_script("const e = document.getElementById(arguments[0]); return e ? e.textContent : null;",
                                 elem_id)


try:
    section("DNS rebinding: a document of http://rebind.test:PORT reads its own origin")
    # The attacker's document would carry no CSP; serve's 421 answer (the
    # document Chromium holds here) forbids fetches: CSP is set aside for
    # this section so its scripts run as the attacker's would.
    driver.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})
    driver.get(f"http://rebind.test:{port}/")
    ok(Q not in driver.page_source and driver.title != "delayq", "the dashboard is not served to rebind.test",
       driver.title)
    for path in ("/api/queues", "/metrics", f"/api/queues/{Q}/items", f"/api/queues/{Q}/items/s0"):
        status, body = driver.execute_async_script(FETCH, path)
        ok(status == 421 and Q not in body and "the-payload" not in body, f"fetch {path}: 421, nothing shown",
           (status, body[:200]))
    status, body = driver.execute_async_script(FETCH, f"http://rebind.test:{port}/api/queues")
    ok(status == 421 and Q not in body, "fetch http://rebind.test:PORT/api/queues: 421", (status, body[:200]))

    driver.execute_cdp_cmd("Page.setBypassCSP", {"enabled": False})

    section("the dashboard at its own names still works")
    for host in ("127.0.0.1", "localhost"):
        driver.get(f"http://{host}:{port}/")
        eq(driver.title, "delayq", f"http://{host}:PORT/ loads the dashboard")
        ok(wait_for(lambda: driver.execute_script(
            f"return !!document.querySelector('#queues tr[data-queue=\"{Q}\"]');"), 10 * SLOW, interval=0.1),
           f"and shows {Q}")

    section("a page of another origin frames the dashboard: blocked")
    driver.get_log("browser")  # drop what came before
    driver.get(f"http://foreign.test:{fport}/")
    eq(driver.title, "foreign", "the foreign page loads")
    frame = driver.find_element(By.ID, "f")
    ok(wait_for(lambda: driver.execute_script(
        "return document.readyState === 'complete';"), 10 * SLOW, interval=0.1), "the foreign page is complete")
    driver.switch_to.frame(frame)
    inside = driver.execute_script("return [document.title, !!document.getElementById('queues'),"
                                   " document.body ? document.body.innerText.slice(0, 200) : ''];")
    driver.switch_to.default_content()
    ok(inside[0] != "delayq" and not inside[1] and Q not in inside[2], "the frame holds no dashboard", inside)
    logs = " ".join(e.get("message", "") for e in driver.get_log("browser"))
    ok("X-Frame-Options" in logs or "frame-ancestors" in logs, "the browser says it refused the frame", logs[:400])

    section("a registry of the wrong type: the page says so, Redis stays up")
    redis("DEL", "dq:queues")
    redis("SET", "dq:queues", "overwritten")
    driver.get(f"http://127.0.0.1:{port}/")
    ok(wait_for(lambda: "WRONGTYPE" in (text("registry-problem") or "") and driver.find_element(
        By.ID, "registry-problem").is_displayed(), 10 * SLOW, interval=0.1),
       "#registry-problem shows, naming WRONGTYPE", text("registry-problem"))
    ok(driver.find_element(By.ID, "redis-status").get_attribute("data-up") == "true",
       "#redis-status says Redis up", text("redis-status"))
    ok(wait_for(lambda: driver.execute_script("return !!document.querySelector('#queues tr[data-queue=\"shown\"]');"),
                10 * SLOW, interval=0.1), "the queue named on the command line is listed")
    redis("DEL", "dq:queues")
    eq(dq("offer", Q, "1h", "again", "--id", "s1").rc, 0, "the key deleted, an offer registers again")
    ok(wait_for(lambda: driver.execute_script("const e = document.getElementById('registry-problem');"
                                             " return !!e && e.hidden;"), 10 * SLOW, interval=0.1),
       "the problem goes away", text("registry-problem"))
finally:
    driver.quit()
    foreign.shutdown()
    ok(serve.running(), "serve survived")
    eq(serve.stop(), 0, "serve exits 0 on SIGTERM")
    shutil.rmtree(tmp, ignore_errors=True)
finish()
