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

        put = urllib.request.Request(
            cluster.url(1) + "/api/directory", method="POST",
            data=json.dumps({"key": "CONSOLE_WRITER", "type": "static", "content": "# WHAT: console writer probe\nx",
                             "risk": "write", "auth": "public"}).encode(),
            headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        urllib.request.urlopen(put, timeout=20).read()

        step = "run an ask and read its ranking"
        a.get(cluster.url(1) + "/console#ask")
        wait_for(lambda: visible(a, "ask"), step)
        a.find_element(By.ID, "ask-text").send_keys("what time is it")
        a.find_element(By.CSS_SELECTOR, "#ask-form button").click()
        wait_for(lambda: len(a.find_elements(By.CSS_SELECTOR, "#rankings tbody tr")) > 0, step)
        # A node without a model ranks by words alone: one ranking, said so.
        assert len(a.find_elements(By.CSS_SELECTOR, "#rankings table")) == 1
        assert "ranks by words" in text(a, "ask-modes-note"), text(a, "ask-modes-note")
        first = a.find_elements(By.CSS_SELECTOR, "#rankings tbody tr")[0].find_elements(By.TAG_NAME, "td")
        assert first[1].text == "TIME_NOW", [td.text for td in first]
        assert first[3].text, "no why for the first candidate"

        step = "run a read-only row from the ranking"
        first[4].find_element(By.TAG_NAME, "button").click()
        wait_for(lambda: text(a, "status").startswith("Ran TIME_NOW, receipt inv_"), step)
        assert '"ok": true' in text(a, "run-out"), text(a, "run-out")
        shot(a, "ask")

        step = "a row that writes is not run from the ranking"
        a.find_element(By.ID, "ask-text").clear()
        a.find_element(By.ID, "ask-text").send_keys("console writer probe")
        a.find_element(By.CSS_SELECTOR, "#ask-form button").click()
        rows = wait_for(lambda: [r for r in a.find_elements(By.CSS_SELECTOR, "#rankings tbody tr")
                                 if r.find_elements(By.TAG_NAME, "td")[1].text == "CONSOLE_WRITER"], step)
        rows[0].find_elements(By.TAG_NAME, "td")[4].find_element(By.TAG_NAME, "button").click()
        wait_for(lambda: "is not read-only (risk write)" in text(a, "status"), step)
        assert get(cluster.url(1) + "/api/receipts?key=CONSOLE_WRITER", ADMIN)["receipts"] == [], "a writing row ran"

        step = "confirm a receipt"
        invoked = get(cluster.url(1) + "/api/dispatch?invoke=TIME_NOW")
        receipt = invoked["proof"]["invocation_id"]
        a.get(cluster.url(1) + "/console#receipts/" + receipt)
        wait_for(lambda: text(a, "status") == "Confirmed" and receipt in text(a, "receipt-out"), step)

        step = "verify a receipt in the browser: its inclusion proof and the co-signed checkpoint"

        def verified() -> bool:
            # A checkpoint is co-signed within a second or so of the receipt; until then the
            # node says none covers it yet.
            a.find_element(By.ID, "verify").click()
            return wait_for(lambda: text(a, "status").startswith(("Verified", "Not verified")), step, 5) \
                and text(a, "status") == f"Verified {receipt} in this browser"
        wait_for(verified, step)
        steps = text(a, "verify-steps")
        assert "inclusion path leads from leaf" in steps and "signed by" in steps, steps
        signers = [r.find_elements(By.TAG_NAME, "td") for r in a.find_elements(By.CSS_SELECTOR, "#signers tbody tr")]
        assert len(signers) == 3 and sum(td[1].text == "yes" for td in signers) >= 2, [[t.text for t in r] for r in signers]
        assert "as this node lists them" in text(a, "keys-origin")
        shot(a, "receipts")

        step = "pin the voter keys; the next receipt is checked against them and the log seen to grow"
        a.find_element(By.ID, "pin-keys").click()
        wait_for(lambda: "pinned in this browser" in text(a, "keys-origin"), step)
        later = get(cluster.url(2) + "/api/dispatch?invoke=TIME_NOW")["proof"]["invocation_id"]
        a.find_element(By.ID, "receipt-id").clear()
        a.find_element(By.ID, "receipt-id").send_keys(later)
        receipt = later

        def verified_later() -> bool:
            a.find_element(By.ID, "verify").click()
            return wait_for(lambda: text(a, "status").startswith(("Verified", "Not verified")), step, 5) \
                and text(a, "status") == f"Verified {later} in this browser"
        wait_for(verified_later, step)
        assert "pinned in this browser" in text(a, "keys-origin")
        steps = text(a, "verify-steps")
        assert "extends the checkpoint" in steps or "saw before" in steps, steps

        step = "a tampered proof or signature is refused in the browser"
        refused = a.execute_async_script(r"""
            const done = arguments[arguments.length - 1];
            (async () => {
              const proof = await api("/api/receipts/proof?id=" + arguments[0]);
              const leaf = fromB64(proof.leaf_hash), root = fromB64(proof.root);
              const path = proof.path.map(fromB64);
              const out = [];
              await verifyInclusion(proof.leaf_index, proof.tree_size, leaf, path, root);
              out.push("genuine proof verifies");
              const bad = root.slice(); bad[0] ^= 1;
              try { await verifyInclusion(proof.leaf_index, proof.tree_size, leaf, path, bad); out.push("tampered root verified"); }
              catch (e) { out.push("refused: " + e.message); }
              const cp = proof.checkpoint;
              const keys = await Promise.all(cp.keys.map(parseKey));
              const note = cp.note.replace("\n" + cp.size + "\n", "\n" + (cp.size + 1) + "\n");
              try { await verifiedSigners(note, keys); out.push("forged note verified"); }
              catch (e) { out.push("refused: " + e.message); }
              return out;
            })().then(done, (e) => done(["error: " + e.message]));
        """, later)
        assert refused[0] == "genuine proof verifies", refused
        assert refused[1].startswith("refused: leaf") and "does not lead to the root" in refused[1], refused
        assert refused[2].startswith("refused: ") and "signature does not verify" in refused[2], refused

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

        step = "the cluster page charts this node's asks, invocations and writes, and how each member ranks"
        def charted() -> bool:
            a.find_element(By.ID, "cluster-refresh").click()
            figures = a.find_elements(By.CSS_SELECTOR, "#charts figure")
            return len(figures) == 4 and all(f.find_elements(By.TAG_NAME, "polyline") for f in figures[:3])
        wait_for(charted, step)
        captions = [f.text for f in a.find_elements(By.CSS_SELECTOR, "#charts figcaption")]
        assert [c.split(" (")[0] for c in captions] == ["Asks", "Invocations", "Replicated writes", "Write latency"], captions
        # The peak of each count chart is what this node did: an ask, invocations, writes.
        peaks = [f.find_element(By.TAG_NAME, "text").text for f in a.find_elements(By.CSS_SELECTOR, "#charts figure")]
        assert all(not p.startswith("0.00 ") for p in peaks[:3]), peaks
        ranks = [r.find_elements(By.TAG_NAME, "td")[6].text for r in a.find_elements(By.CSS_SELECTOR, "#members tbody tr")]
        assert "lexical" in " ".join(ranks) and "as this node" in ranks, ranks
        shot(a, "cluster")

        step = "an import the SSRF guard refuses says why"
        a.get(cluster.url(leader) + "/console#catalogue")
        wait_for(lambda: visible(a, "catalogue"), step)
        a.find_element(By.CSS_SELECTOR, "#import summary").click()
        a.find_element(By.ID, "i-url").send_keys("http://127.0.0.1:9/mcp")
        a.find_element(By.CSS_SELECTOR, "#import-form button").click()
        wait_for(lambda: "ROWCALL_HTTP_ALLOW" in text(a, "status"), step)
        shot(a, "import")

        step = "every control has a label, and pages fit a phone's width"
        unlabelled = a.execute_script("""
            return Array.from(document.querySelectorAll("input:not([type=hidden]), select, textarea, button"))
              .filter((e) => !(e.closest("label") || e.getAttribute("aria-label") || (e.tagName === "BUTTON" && e.textContent.trim())))
              .map((e) => e.id || e.outerHTML.slice(0, 60));
        """)
        assert unlabelled == [], unlabelled
        # The new-row form checks a key against the rule before anything is sent.
        a.get(cluster.url(leader) + "/console#new")
        wait_for(lambda: visible(a, "row") and a.find_element(By.ID, "e-key").get_attribute("readonly") is None, step)
        checked = a.execute_script("""
            const k = document.getElementById("e-key");
            return ["GOOD_KEY", "_X1", "lower", "1ST", "A".repeat(65), "A-B"].map((v) => { k.value = v; return k.checkValidity(); });
        """)
        assert checked == [True, True, False, False, False, False], checked
        a.set_window_size(390, 844)
        for page in ["catalogue", "ask", "receipts", "cluster"]:
            a.get(cluster.url(leader) + "/console#" + page)
            wait_for(lambda: visible(a, page), step)
            wide = a.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert wide <= 1, f"{page} is {wide} px wider than a phone's screen"
            shot(a, f"phone-{page}")
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
