"""Browser tests of the operator console against a real 3-node cluster.

Each step drives headless Chromium over WebDriver and reads what the page shows; waits are
bounded waits for a condition, never sleeps. A failing step raises, and the script exits
non-zero with the step's name.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ADMIN = "console-ci-admin-key-0123456789abcdef0123"
SECRET = "console-ci-cluster-secret-0123456789abcdef"
BIN = os.environ["ROWCALL_NODE_BIN"]
WORK = Path(os.environ["CONSOLE_WORK"])
OUT = Path(os.environ["CONSOLE_OUT"])
WAIT = 30  # seconds a condition may take to hold before the step fails


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, key: str | None = None, method: str = "GET") -> dict:
    request = urllib.request.Request(url, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


class Cluster:
    def __init__(self, n: int) -> None:
        self.ports = [(free_port(), free_port()) for _ in range(n)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for i, (http, grpc) in enumerate(self.ports, 1):
            others = ",".join(f"127.0.0.1:{g}" for j, (_, g) in enumerate(self.ports, 1) if j != i)
            args = [BIN, "--id", str(i), "--http", f"127.0.0.1:{http}", "--grpc", f"127.0.0.1:{grpc}",
                    "--data", str(WORK / f"node-{i}"), "--bootstrap", "--join", others]
            env = dict(os.environ, ROWCALL_ADMIN_KEY=ADMIN, ROWCALL_CLUSTER_SECRET=SECRET,
                       ROWCALL_RATE_LIMIT="off", NO_COLOR="1", ROWCALL_LOG="warn")
            log = open(WORK / f"node-{i}.log", "ab")  # noqa: SIM115
            self.procs[i] = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i - 1][0]}"

    def ready(self) -> None:
        def all_ready() -> bool:
            for i in self.procs:
                try:
                    urllib.request.urlopen(self.url(i) + "/readyz", timeout=2)
                except Exception:
                    return False
            return True
        wait_for(all_ready, "cluster ready")

    def leader(self) -> int:
        return get(self.url(1) + "/api/cluster")["leader"]

    def stop(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait()

    def shutdown(self) -> None:
        for p in self.procs.values():
            p.kill()
            p.wait()


def wait_for(check, what: str, timeout: float = WAIT):
    """Polls `check` until it is truthy (bounded); raises naming `what`."""
    import time
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # the page or node is not there yet
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900"]:
        options.add_argument(flag)
    profile = WORK / f"profile-{len(list(WORK.glob('profile-*')))}"
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def visible(driver, element_id: str) -> bool:
    return driver.find_element(By.ID, element_id).is_displayed()


def text(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(OUT / f"{name}.png"))


def login(driver, url: str, key: str) -> None:
    driver.get(url + "/console")
    wait_for(lambda: visible(driver, "login"), "login page shown")
    driver.find_element(By.ID, "login-key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
    wait_for(lambda: visible(driver, "catalogue") and "TIME_NOW" in text(driver, "rows"), "catalogue after login")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(3)
    a = b = None
    step = "start"
    try:
        cluster.ready()
        a, b = browser(), browser()

        step = "anonymous visitor sees only the login page and public data"
        a.get(cluster.url(1) + "/console")
        wait_for(lambda: visible(a, "login"), step)
        for section in ["catalogue", "row", "ask", "receipts", "cluster"]:
            assert not visible(a, section), f"{section} shown to an anonymous visitor"
        shot(a, "login")
        a.find_element(By.ID, "anonymous").click()
        wait_for(lambda: "TIME_NOW" in text(a, "rows"), step)
        assert text(a, "who") == "anonymous"
        assert not visible(a, "new-row"), "an anonymous visitor is offered New row"
        a.find_element(By.ID, "logout").click()
        wait_for(lambda: visible(a, "login"), "logged out")

        step = "log in and find a row"
        login(a, cluster.url(1), ADMIN)
        assert text(a, "who") == "admin"
        a.find_element(By.ID, "f-text").send_keys("time")
        a.find_element(By.CSS_SELECTOR, "#filter button[type=submit]").click()
        wait_for(lambda: "TIME_NOW" in text(a, "rows"), step)
        shot(a, "catalogue")

        step = "edit a row and see it on another node's console"
        a.find_element(By.LINK_TEXT, "TIME_NOW").click()
        wait_for(lambda: visible(a, "row") and a.find_element(By.ID, "e-key").get_attribute("value") == "TIME_NOW", step)
        words = "The current time, edited from the console."
        area = a.find_element(By.ID, "e-content")
        area.clear()
        area.send_keys(words)
        a.find_element(By.CSS_SELECTOR, "#edit button[type=submit]").click()
        wait_for(lambda: text(a, "status").startswith("Saved TIME_NOW"), step)
        shot(a, "row")
        login(b, cluster.url(2), ADMIN)
        b.get(cluster.url(2) + "/console#row/TIME_NOW")

        def seen_on_two() -> bool:
            b.refresh()
            return wait_for(lambda: b.find_element(By.ID, "e-content").get_attribute("value") == words, step, 3)
        wait_for(seen_on_two, step)

        step = "two editors: the second gets a conflict, not an overwrite"
        a.refresh()  # editor A's form is at the version B now also holds
        wait_for(lambda: a.find_element(By.ID, "e-content").get_attribute("value") == words, step)
        area = b.find_element(By.ID, "e-content")
        area.clear()
        area.send_keys("editor B")
        b.find_element(By.CSS_SELECTOR, "#edit button[type=submit]").click()
        wait_for(lambda: text(b, "status").startswith("Saved TIME_NOW"), step)
        area = a.find_element(By.ID, "e-content")
        area.clear()
        area.send_keys("editor A, late")
        a.find_element(By.CSS_SELECTOR, "#edit button[type=submit]").click()
        wait_for(lambda: "Someone else changed this row" in text(a, "status"), step)
        shot(a, "conflict")

        step = "run an ask and read its ranking"
        a.get(cluster.url(1) + "/console#ask")
        wait_for(lambda: visible(a, "ask"), step)
        a.find_element(By.ID, "ask-text").send_keys("what time is it")
        a.find_element(By.CSS_SELECTOR, "#ask-form button").click()
        wait_for(lambda: len(a.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")) > 0, step)
        first = a.find_elements(By.CSS_SELECTOR, "#ranking tbody tr")[0].find_elements(By.TAG_NAME, "td")
        assert first[1].text == "TIME_NOW", [td.text for td in first]
        assert first[3].text, "no why for the first candidate"
        shot(a, "ask")

        step = "confirm a receipt"
        invoked = get(cluster.url(1) + "/api/dispatch?invoke=TIME_NOW")
        receipt = invoked["proof"]["invocation_id"]
        a.get(cluster.url(1) + "/console#receipts/" + receipt)
        wait_for(lambda: text(a, "status") == "Confirmed" and receipt in text(a, "receipt-out"), step)
        shot(a, "receipts")

        step = "see a member go missing when a node is stopped"
        leader = cluster.leader()
        gone = next(i for i in (1, 2, 3) if i != leader)
        a.get(cluster.url(leader) + "/console#cluster")
        wait_for(lambda: len(a.find_elements(By.CSS_SELECTOR, "#members tbody tr")) == 3, step)
        assert text(a, "cluster-summary").startswith(f"This node {leader} (leader)"), text(a, "cluster-summary")
        cluster.stop(gone)
        # A write the two others commit: the leader's appends to the stopped member go
        # unanswered, which is what the cluster page reports as missing.
        write = urllib.request.Request(
            cluster.url(leader) + "/api/directory", method="POST",
            data=json.dumps({"key": "CONSOLE_PROBE", "type": "static", "content": "x"}).encode(),
            headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        urllib.request.urlopen(write, timeout=20).read()

        def missing() -> bool:
            a.find_element(By.ID, "cluster-refresh").click()
            rows = a.find_elements(By.CSS_SELECTOR, "#members tbody tr")
            return any(r.find_elements(By.TAG_NAME, "td")[0].text == str(gone) and ("behind by" in r.text or "missing" in r.text) for r in rows)
        wait_for(missing, step)
        shot(a, "cluster")
        print("console: all browser steps passed")
        return 0
    except Exception as e:
        print(f"console: FAILED at step {step!r}: {e}", file=sys.stderr)
        if a is not None:
            shot(a, "failure")
        return 1
    finally:
        for d in (a, b):
            if d is not None:
                d.quit()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
