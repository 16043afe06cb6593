"""The browser tier's machinery, shared with the web benchmark (tests/bench/web.py): the real
`leasectl serve` as a subprocess, its users file written by the real `leasectl serve users add`,
and Debian's chromium driven through its chromedriver (nothing downloaded: the paths are given).

The console draws on a canvas (xterm.js), so its screen is not in the DOM. A script injected
before any of the page's own (CDP Page.addScriptToEvaluateOnNewDocument, which the page's
Content-Security-Policy does not govern) wraps `WebSocket`: it records every binary frame the tab
receives (the console's raw terminal output) and every text message it sends (its size, its
keys), and what became of each socket (opened, its close code, an error). `Tab.screen()` replays
the frames into a pyte screen of the terminal's size as the tab told the server: what the person
sees, as text.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyte

from tests.helpers import FAST, claim, enqueue, outcomes_unknown, register_tool, wait_until

ROOT = Path(__file__).resolve().parents[2]
MISSING = ("Debian's chromium and chromium-driver packages (/usr/bin/chromium, /usr/bin/chromedriver) are not "
           "installed and could not be: `make browser-tools` installs them")
# a fixed window: the terminal's columns and rows, and the screenshot, come out the same every run
WINDOW = (1280, 760)

# Runs in every page before its own scripts. Base64 keeps the frames cheap to hand to Python.
RECORDER = r"""
(() => {
  const rec = {log: [], sockets: [], keys: []};
  const painting = [];
  window.__rec = rec;
  const b64 = (bytes) => {
    let s = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(s);
  };
  const Native = window.WebSocket;
  function Recorded(url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    const id = rec.sockets.length;
    const info = {url: String(url), open: false, error: false, closed: null};
    rec.sockets.push(info);
    rec.log.push({k: "url", id: id, url: String(url)});
    ws.addEventListener("open", () => { info.open = true; });
    ws.addEventListener("error", () => { info.error = true; });
    ws.addEventListener("close", (e) => { info.closed = {code: e.code, reason: e.reason, clean: e.wasClean}; });
    ws.addEventListener("message", (e) => {
      if (typeof e.data === "string") { return; }
      // t: when it arrived; p (set later): the animation frame after it, when it is on screen
      const entry = {k: "in", id: id, b: b64(new Uint8Array(e.data)), t: performance.now(), p: null};
      rec.log.push(entry);
      painting.push(entry);
      if (painting.length === 1) {
        requestAnimationFrame(() => {
          const p = performance.now();
          for (const done of painting.splice(0)) { done.p = p; }
        });
      }
    });
    const send = ws.send.bind(ws);
    ws.send = (data) => {
      if (typeof data === "string") { rec.log.push({k: "out", id: id, s: data}); }
      return send(data);
    };
    return ws;
  }
  Recorded.prototype = Native.prototype;
  for (const name of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) { Recorded[name] = Native[name]; }
  window.WebSocket = Recorded;
  // every key typed into the terminal, stamped as the page sees it (tests/bench/web.py)
  document.addEventListener("keydown", (e) => {
    if (e.target && e.target.classList && e.target.classList.contains("xterm-helper-textarea")) {
      rec.keys.push({key: e.key, down: performance.now()});
    }
  }, true);
})();
"""


def browser_paths() -> tuple[str, str] | None:
    """(chromium, chromedriver) when both are installed, else None."""
    chromium = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists()
                                               else None)
    return (chromium, driver) if chromium and driver else None


def chromium_version(chromium: str) -> str:
    out = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """tests.helpers.wait_until, with the arguments in the order this tier writes them."""
    return wait_until(predicate, timeout=timeout, interval=interval, what=what)


# ----------------------------------------------------------------------------- the server


def leasectl(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real CLI, as a user runs it (python -m console)."""
    return subprocess.run([sys.executable, "-m", "console", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def add_user(users: Path, name: str, role: str, password: str, db_user: str | None = None) -> None:
    """`leasectl serve users add NAME --role ROLE [--db-user LOGIN] --password-stdin`."""
    args = ["serve", "users", "add", name, "--role", role, "--users", str(users), "--password-stdin"]
    if db_user:
        args += ["--db-user", db_user]
    done = leasectl(*args, stdin=password + "\n")
    assert done.returncode == 0, f"serve users add {name}: {done.stderr}"


# chromedriver's words when an element's node belongs to a document the tab has left: mid-navigation
# it says this rather than "stale element reference" (CI, 2026-12-06), and it means the same
OLD_DOCUMENT = "does not belong to the document"


def old_page_gone(old_element: Any) -> bool:
    """True once `old_element`'s page is gone. Selenium's `staleness_of` counts only a stale
    reference as gone and raises on chromedriver's other answer for the same fact (OLD_DOCUMENT)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        old_element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if OLD_DOCUMENT in str(error.msg or ""):
            return True
        raise
    return False


@dataclass
class Serve:
    """`leasectl --dsn DSN serve --listen 127.0.0.1:PORT --users FILE`, its output in `log`."""

    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def consoles(self) -> list[int]:
        """The pids of its console processes (one per open tab): its children."""
        return children(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                for pid in self.consoles():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_serve(dsn: str, users: Path, log: Path, *extra: str, port: int | None = None) -> Serve:
    """The real `leasectl serve`, listening once its first page answers."""
    port = port or free_port()
    out = log.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "console", "--dsn", dsn, "serve", "--listen", f"127.0.0.1:{port}",
                             "--users", str(users), *extra], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env={**os.environ, "LEASECTL_SERVE_LOG": "INFO"})
    out.close()
    serve = Serve(proc, port, log)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"leasectl serve exited ({proc.returncode}):\n{serve.log_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return "the console at" in serve.log_text()
        except OSError:
            return False

    try:
        wait_for(up, 60, f"leasectl serve on port {port}")
    except BaseException:
        serve.stop()
        raise
    return serve


def children(pid: int) -> list[int]:
    """The direct children of `pid` (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
        return found
    try:
        return [p.pid for p in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def rss_kib(pid: int) -> int:
    """Resident memory of one process (VmRSS), in KiB; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ----------------------------------------------------------------------------- the data


def seed(conn: Any) -> dict[str, Any]:
    """What the console shows: two calls of the unverifiable `pay` waiting for a human, three
    `search` calls and one `fetch` call whose workers stopped beating (their 1 s leases run out),
    and four `search` calls queued. Triage lists the six that need attention."""
    quick: dict[str, Any] = dict(FAST)
    register_tool(conn, "search", "read_only", **quick)
    register_tool(conn, "fetch", "read_only", **quick)
    running = []
    for n in range(3):
        enqueue(conn, "search", f"search:{n}", {"q": f"quarterly report {n}"}, agent_id="planner")
        got = claim(conn, f"w-{n}", ["search"])
        assert got is not None
        running.append(got)
    enqueue(conn, "fetch", "fetch:0", {"url": "https://example.com/invoice/42"}, agent_id="planner")
    fetch = claim(conn, "w-9", ["fetch"])
    assert fetch is not None
    pay = outcomes_unknown(conn, 2)
    queued = [enqueue(conn, "search", f"later:{n}") for n in range(4)]
    return {"search": running, "fetch": fetch, "pay": pay, "queued": queued}


# ----------------------------------------------------------------------------- the browser


def chrome(chromium: str, chromedriver: str, *, window: tuple[int, int] = WINDOW) -> Any:
    """A headless chromium with the recorder in every page it opens."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={window[0]},{window[1]}", "--force-device-scale-factor=1", "--hide-scrollbars",
                # nothing leaves the machine: a name other than loopback does not resolve
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                "--no-first-run", "--disable-extensions", "--password-store=basic", "--disable-features=Translate"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(30)
    prepare(driver, window)
    return driver


def new_tab(driver: Any, window: tuple[int, int] = WINDOW) -> str:
    """Another tab of the same browser (its cookies), prepared as the first; its handle, now current."""
    driver.switch_to.new_window("tab")
    prepare(driver, window)
    return str(driver.current_window_handle)


def prepare(driver: Any, window: tuple[int, int]) -> None:
    """The current tab: the page's own size fixed, not the window's (whose bars take a share that
    varies by version), and the recorder in every page it opens (both are the tab's own)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": window[0], "height": window[1],
                                                                "deviceScaleFactor": 1, "mobile": False})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})


class Terminal:
    """The screen of one of a page's websockets, rebuilt from the recorder's log: its size from
    the socket's URL (?width=&height=) and the resizes the tab sent, its content from the frames."""

    def __init__(self, socket_id: int, url: str) -> None:
        self.socket_id = socket_id
        query = parse_qs(urlsplit(url).query)
        self.size = (int(query.get("width", ["80"])[0]), int(query.get("height", ["24"])[0]))
        self.screen = pyte.Screen(*self.size)
        self.stream = pyte.ByteStream(self.screen)

    def feed(self, entry: dict) -> bool:
        """One entry of the log; True when it was a frame of this socket (the screen may have changed)."""
        if entry.get("id") != self.socket_id:
            return False
        if entry["k"] == "out":
            message = json.loads(entry["s"])
            if message[0] == "resize":
                self.size = (int(message[1]["width"]), int(message[1]["height"]))
                self.screen.resize(lines=self.size[1], columns=self.size[0])
        elif entry["k"] == "in":
            self.stream.feed(base64.b64decode(entry["b"]))
            return True
        return False

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())


@dataclass
class Tab:
    """One browser window on the console: keys in, the screen out (pyte), the sockets' fates."""

    driver: Any
    base: str
    seen: int = 0
    terminal: Terminal | None = None

    # -- pages
    def open(self, path: str) -> None:
        self.driver.get(self.base + path)
        self.reset()

    def reset(self) -> None:
        """A new page: its own recorder, nothing seen yet."""
        self.seen = 0
        self.terminal = None

    def sign_in(self, name: str, password: str) -> None:
        """The sign-in form, typed and sent as a person does; lands on / or stays on /login."""
        from selenium.webdriver.common.by import By

        if not self.driver.current_url.startswith(self.base + "/login"):
            self.open("/login")
        self.driver.find_element(By.ID, "name").send_keys(name)
        self.driver.find_element(By.ID, "password").send_keys(password)
        button = self.driver.find_element(By.ID, "sign-in")
        button.click()
        self.wait_new_page(button)
        self.reset()

    def wait_new_page(self, old_element: Any, timeout: float = 30) -> None:
        """After a click that navigates: the old page gone, the new one loaded."""
        from selenium.webdriver.support.wait import WebDriverWait

        WebDriverWait(self.driver, timeout).until(lambda _driver: old_page_gone(old_element))
        wait_for(lambda: self.driver.execute_script("return document.readyState") == "complete", timeout,
                 "the new page to load")

    def page_text(self) -> str:
        from selenium.webdriver.common.by import By

        try:
            return str(self.driver.find_element(By.TAG_NAME, "body").text)
        except Exception:  # noqa: BLE001 - a page between two loads has no body yet
            return ""

    def status(self) -> int | None:
        """The HTTP status of the page now shown (Navigation Timing's responseStatus)."""
        value = self.driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0]; return n ? n.responseStatus : null;")
        return int(value) if value is not None else None

    def body_classes(self) -> list[str]:
        return str(self.driver.execute_script("return document.body ? document.body.className : ''")).split()

    def sockets(self) -> list[dict]:
        return list(self.driver.execute_script("return window.__rec ? window.__rec.sockets : []"))

    def log(self, start: int = 0) -> list[dict]:
        """The recorder's entries from `start` on."""
        return list(self.driver.execute_script("return window.__rec ? window.__rec.log.slice(arguments[0]) : []",
                                               start))

    # -- the terminal
    def screen(self) -> str:
        """The terminal as the person sees it now, one line per row (the page's newest socket)."""
        entries = self.log(self.seen)
        self.seen += len(entries)
        for entry in entries:
            if entry["k"] == "url":  # a new socket: a new console, a fresh screen
                self.terminal = Terminal(entry["id"], entry["url"])
            elif self.terminal is not None:
                self.terminal.feed(entry)
        return self.terminal.text() if self.terminal is not None else ""

    @property
    def size(self) -> tuple[int, int]:
        return self.terminal.size if self.terminal is not None else (0, 0)

    def wait_screen(self, *texts: str, timeout: float = 30, gone: bool = False) -> str:
        """The screen once it shows every one of `texts` (or, `gone`, none of them)."""
        last = [""]

        def shown() -> bool:
            last[0] = self.screen()
            present = [t in last[0] for t in texts]
            return not any(present) if gone else all(present)

        try:
            wait_for(shown, timeout, f"{texts!r} {'to leave' if gone else 'on'} the screen", interval=0.15)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen shows:\n{last[0]}") from None
        return last[0]

    def textarea(self) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")

    def press(self, *keys: str, gap: float = 0.15) -> None:
        """Keys to the terminal (its hidden textarea), one by one: characters or selenium Keys."""
        area = self.textarea()
        for key in keys:
            area.send_keys(key)
            time.sleep(gap)

    def type(self, text: str) -> None:
        self.textarea().send_keys(text)
        time.sleep(0.2)

    def cookie(self, name: str) -> dict | None:
        return self.driver.get_cookie(name)


@contextlib.contextmanager
def browser(paths: tuple[str, str], base: str) -> Iterator[Tab]:
    driver = chrome(*paths)
    try:
        yield Tab(driver, base)
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
