"""browser.py - Debian's headless Chromium under chromedriver
(python3-selenium) for the tests that drive `delayq serve` in a real
browser (tests/cli/ops/dashboard.py, tests/cli/security/serve_browser.py).

chromium(tmp, *flags) checks that the pieces are installed and starts the
browser with the flags that keep it off the network (no background
networking, no extensions, a private profile under tmp), plus flags; it
returns the driver, or None after a failed check (the test then finishes).
The browser's console is kept for driver.get_log("browser"). serve_up(port)
says whether a serve on 127.0.0.1:port answers /api/queues.
page_helpers(driver) gives the helpers a test of the page uses: js (run a
script), text (an element's text by id) and wait_until (poll, then check).
"""
import os
import shutil
import urllib.request

from dqtest import SLOW, ok, wait_for

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
except ImportError:
    webdriver = None


def chromium(tmp, *flags):
    """A started headless Chromium driver, or None after saying why."""
    ok(webdriver is not None, "python3-selenium is installed (make deps)")
    ok(shutil.which("chromium") and shutil.which("chromedriver"),
       "chromium and chromedriver are installed (make deps)")
    if webdriver is None or not shutil.which("chromedriver"):
        return None
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--disable-background-networking",
              f"--user-data-dir={tmp}/chromium") + flags:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=shutil.which("chromedriver"),
                      log_path=os.path.join(tmp, "chromedriver.log"))
    try:
        return webdriver.Chrome(service=service, options=opts)
    except WebDriverException as e:
        ok(False, "chromium starts under chromedriver", str(e)[:500])
        return None


def serve_up(port):
    """Whether serve on 127.0.0.1:port answers GET /api/queues with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/queues", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def page_helpers(driver):
    """(js, text, wait_until) bound to driver: js(script, *args) runs a
    script in the page; text(id) is an element's textContent (None if
    absent); wait_until(pred, what, timeout, detail) polls pred every 0.1 s
    up to timeout s (scaled), checks it with ok() and returns it, with
    detail() shown when it fails."""
    def js(script, *args):
        return driver.execute_script(script, *args)

    def text(elem_id):
        return js("const e = document.getElementById(arguments[0]); return e ? e.textContent : null;", elem_id)

    def wait_until(pred, what, timeout=10, detail=None):
        got = wait_for(pred, timeout * SLOW, interval=0.1)
        ok(got, what, detail() if (detail and not got) else None)
        return got

    return js, text, wait_until
