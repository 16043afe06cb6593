"""Benchmark: the console in a browser (`leasectl serve`), measured in a real headless Chromium,
with its conditions printed alongside.

    python -m tests.bench.web [--dsn DSN] [--sessions 1,4,8,16] [--keys 200] [--no-peer]

  sessions held   N signed-in tabs open at once in one Chromium, each its own console process
                  (1, 4, 8, 16: `serve --max-consoles` is 16 by default); once every tab shows
                  Triage and 3 s have passed: the consoles' resident memory (RSS) in total and per
                  session, the memory only that console holds (USS: no page another process
                  shares), the serve process's own RSS, the PostgreSQL connections per session,
                  and the CPU the server and its consoles use while nobody types (5 s; each
                  console refreshes every 2 s)
  keystroke       stamped in the page: keydown -> the first websocket frame after it, -> the
                  frame after which the screen (the frames replayed in a VT emulator) shows the
                  key's answer, -> the animation frame after that one (painted); p50 and p95 of
                  `keys` keys of two kinds, in one tab: a key that switches screens (1 Triage <->
                  2 Calls, after 10 not counted; paced: each sent 0.1-0.3 s after the screen showed
                  the last one's answer: the new screen's name in the header), and characters typed into the filter box and taken back with
                  backspace (0.15-0.3 s apart, as a person types: the answer is the text typed so far)
  first screen    sign-in (the form sent) to Triage on the screen: the console process's start
  peer            the same figures for textual-serve's own Server running the same console
                  command (python -m console.operator.web.console_process, one person's session
                  in its environment): no sign-in, no Origin check; what the serve layer costs
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shlex
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from selenium.webdriver.common.keys import Keys

from console.db.connect import connect
from console.operator.web.console_process import SESSION_ENV, PersonSession
from console.shared.dsn import masked_dsn
from tests.bench.common import BenchServer, bench_server, percentile, print_header
from tests.browser.harness import (
    WINDOW,
    Tab,
    Terminal,
    add_user,
    browser_paths,
    chrome,
    chromium_version,
    free_port,
    new_tab,
    rss_kib,
    seed,
    start_serve,
    wait_for,
)
from tests.helpers import ensure_login

PERSON, PASSWORD, LOGIN = "alice", "correct horse battery", "bench_web_alice"
# the header's crumb of each screen the keys switch between
CRUMBS = {"1": " 1 Triage ", "2": " 2 Calls "}
WARM_KEYS = 10
PEER_SCRIPT = """
import sys
from textual_serve.server import Server
Server(sys.argv[1], host="127.0.0.1", port=int(sys.argv[2]), title="leasectl").serve()
"""


@dataclass
class Held:
    sessions: int
    opened_s: float  # the new tabs' wait for their first screen
    consoles_rss_mb: float
    consoles_uss_mb: float | None
    server_rss_mb: float
    connections: int
    idle_cpu: float  # CPU seconds per second of the server and its consoles, nobody typing


@dataclass
class Latency:
    first_frame: list[float]
    changed: list[float]
    painted: list[float]
    missed: int


@dataclass
class Figures:
    name: str
    first_screen_s: float
    held: list[Held]
    switching: Latency
    typing: Latency


# ----------------------------------------------------------------------------- the servers


@dataclass
class Running:
    """A server under measurement: its process, its URL, whether a person signs in first."""

    name: str
    proc: subprocess.Popen
    url: str
    sign_in: bool

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                for group in descendants(self.proc.pid).values():
                    for pid in group:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_leasectl(dsn: str, users: Path, log: Path, max_consoles: int) -> Running:
    served = start_serve(dsn, users, log, "--max-consoles", str(max_consoles))
    return Running("leasectl serve", served.proc, served.url, sign_in=True)


def start_peer(person_dsn: str, log: Path) -> Running:
    """textual-serve's Server with the same console command, the person's session in its environment."""
    port = free_port()
    command = shlex.join([sys.executable, "-m", "console.operator.web.console_process"])
    person = PersonSession(person=PERSON, role="operator", operator=PERSON, dsn=person_dsn,
                           shown_dsn=masked_dsn(person_dsn))
    out = log.open("w")
    proc = subprocess.Popen([sys.executable, "-c", PEER_SCRIPT, command, str(port)], stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, SESSION_ENV: person.to_env()})
    out.close()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"textual-serve exited ({proc.returncode}): {log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/", timeout=2):
                return True
        except OSError:
            return False

    wait_for(up, 60, f"textual-serve on {url}")
    return Running("textual-serve", proc, url, sign_in=False)


def descendants(pid: int) -> dict[int, list[int]]:
    """Each child of `pid` with its own descendants: one console (or the shell that runs one) each."""
    import psutil

    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for kid in kids:
        try:
            out[kid.pid] = [kid.pid, *(p.pid for p in kid.children(recursive=True))]
        except psutil.NoSuchProcess:
            continue
    return out


def consoles_are(pid: int, count: int) -> bool:
    return len(descendants(pid)) == count


def uss_kib(pid: int) -> int | None:
    """The memory only this process holds (psutil's USS, from smaps), in KiB; None when unknown."""
    try:
        import psutil

        return int(psutil.Process(pid).memory_full_info().uss) // 1024
    except Exception:  # noqa: BLE001 - a process gone, smaps unreadable: no figure
        return None


def idle_cpu(pid: int, seconds: float) -> float:
    """CPU seconds per second the server and its consoles used over `seconds` with nobody typing."""
    import psutil

    def used() -> float:
        total = 0.0
        try:
            processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    before, t0 = used(), time.perf_counter()
    time.sleep(seconds)
    return (used() - before) / (time.perf_counter() - t0)


def connections(admin_dsn: str, dbname: str) -> int:
    """Backends on the database but this one and the serve process's own (its sign-in journal)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("select count(*) from pg_stat_activity where datname = %s and pid <> pg_backend_pid() "
                           "and application_name <> 'leasectl-serve'", (dbname,)).fetchone()
    return int(row[0]) if row else 0


# ----------------------------------------------------------------------------- the measurements


def first_tab(driver: Any, running: Running) -> tuple[Tab, float]:
    """The first tab, signed in when the server wants it; seconds from the form sent (or the page
    asked for) to Triage on the screen."""
    tab = Tab(driver, running.url)
    if running.sign_in:
        tab.open("/login")
        t0 = time.perf_counter()
        tab.sign_in(PERSON, PASSWORD)
    else:
        t0 = time.perf_counter()
        tab.open("/")
    tab.wait_screen(CRUMBS["1"], timeout=120)
    return tab, time.perf_counter() - t0


def held_sessions(running: Running, paths: tuple[str, str], counts: list[int], admin_dsn: str,
                  dbname: str) -> tuple[float, list[Held]]:
    """Tabs opened in one Chromium up to each count in turn, every one a console: what they hold."""
    driver = chrome(*paths)
    try:
        first, first_screen = first_tab(driver, running)
        tabs = {driver.current_window_handle: first}
        pid = running.proc.pid
        held = []
        for n in counts:
            t0 = time.perf_counter()
            new = []
            while len(tabs) < n:
                handle = new_tab(driver)
                tab = Tab(driver, running.url)
                tab.open("/")
                tabs[handle] = tab
                new.append(handle)
            for handle in new:
                driver.switch_to.window(handle)
                tabs[handle].wait_screen(CRUMBS["1"], timeout=240)
            opened = time.perf_counter() - t0
            wait_for(partial(consoles_are, pid, n), 30, f"{n} console processes")
            time.sleep(3)
            groups = descendants(pid)
            rss = sum(rss_kib(p) for group in groups.values() for p in group)
            unique = [uss_kib(p) for group in groups.values() for p in group]
            held.append(Held(n, opened, rss / 1024,
                             sum(u for u in unique if u is not None) / 1024 if None not in unique else None,
                             rss_kib(pid) / 1024, connections(admin_dsn, dbname), idle_cpu(pid, 5.0)))
        return first_screen, held
    finally:
        driver.quit()


def keystrokes(running: Running, paths: tuple[str, str], keys: int) -> tuple[Latency, Latency]:
    """In one tab: `keys` screen switches (1 <-> 2, after WARM_KEYS more), then `keys` characters
    typed into the filter box and taken back, each read back from the page's record."""
    driver = chrome(*paths)
    try:
        tab, _ = first_tab(driver, running)
        time.sleep(2)  # the first screen's own fetches done
        area = tab.textarea()
        rng = random.Random(31)
        expected: list[str | None] = []  # per key sent: the text whose appearance is its answer
        for n in range(WARM_KEYS + keys):
            key = "2" if n % 2 == 0 else "1"
            area.send_keys(key)
            expected.append(CRUMBS[key] if n >= WARM_KEYS else None)
            header_shows(tab, CRUMBS[key])
            time.sleep(rng.uniform(0.1, 0.3))
        switched = len(expected)
        typed = 0
        while typed < keys:  # rounds: `/`, up to 20 letters and as many backspaces (the last unmeasured), escape
            letters = min(20, (keys - typed + 1) // 2)
            area.send_keys("/")
            expected.append(None)
            time.sleep(0.6)
            text = ""
            for _ in range(letters):
                text += rng.choice(string.ascii_lowercase)
                area.send_keys(text[-1])
                expected.append(f"{text} ")
                time.sleep(rng.uniform(0.15, 0.3))
            while text:
                text = text[:-1]
                area.send_keys(Keys.BACKSPACE)
                expected.append(f"{text} " if text else None)
                time.sleep(rng.uniform(0.15, 0.3))
            area.send_keys(Keys.ESCAPE)
            expected.append(None)
            time.sleep(0.8)
            typed += 2 * letters - 1
        time.sleep(1)
        pressed = list(driver.execute_script("return window.__rec.keys"))
        if len(pressed) != len(expected):
            raise RuntimeError(f"{len(expected)} keys sent, the page saw {len(pressed)}")
        entries = tab.log()
        return (measured(entries, pressed[:switched], expected[:switched], header_only=True),
                measured(entries, pressed[switched:], expected[switched:], header_only=False))
    finally:
        driver.quit()


def header_shows(tab: Tab, crumb: str, timeout: float = 5.0) -> None:
    """Back once the tab's screen names `crumb` in its header (or `timeout` passed: that key will
    not be counted): the next key is not sent before this one was answered."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and crumb not in tab.screen().split("\n", 1)[0]:
        time.sleep(0.03)


def measured(entries: list[dict], keys: list[dict], expected: list[str | None], *, header_only: bool) -> Latency:
    """From the page's record: each key's first frame after it, the frame after which the screen
    shows `expected` (the header line, or anywhere), and the animation frame after that one."""
    sockets = [e for e in entries if e["k"] == "url"]
    terminal = Terminal(sockets[-1]["id"], sockets[-1]["url"])
    frames = []  # (arrived, painted, the screen after it)
    for entry in entries[entries.index(sockets[-1]) + 1:]:
        if terminal.feed(entry):
            lines = terminal.lines()
            frames.append((float(entry["t"]), entry["p"], lines[0] if header_only else "\n".join(lines)))
    result = Latency([], [], [], 0)
    downs = [float(key["down"]) for key in keys] + [float("inf")] * 2
    answered = [float("-inf")] * len(keys)  # when each key's answer was on screen (-inf: unmeasured)
    for n in range(len(keys)):
        want = expected[n]
        if want is None:
            continue
        # its answer is the first frame after it that shows it, before the key after next (which
        # may show the same again); a key typed before the last one was answered is not counted
        shown = next((f for f in frames if downs[n] < f[0] < downs[n + 2] and want in f[2]), None)
        if shown is not None:
            answered[n] = shown[0]
        if shown is None or (n > 0 and answered[n - 1] > downs[n]):
            result.missed += 1
            continue
        first = next(f for f in frames if f[0] > downs[n])
        result.first_frame.append(first[0] - downs[n])
        result.changed.append(shown[0] - downs[n])
        if shown[1] is not None:
            result.painted.append(float(shown[1]) - downs[n])
    return result


def measure(running: Running, paths: tuple[str, str], counts: list[int], keys: int, admin_dsn: str,
            dbname: str) -> Figures:
    try:
        first_screen, held = held_sessions(running, paths, counts, admin_dsn, dbname)
        wait_for(lambda: not descendants(running.proc.pid), 30, "the consoles of the closed tabs to end")
        switching, typing = keystrokes(running, paths, keys)
    finally:
        running.stop()
    return Figures(running.name, first_screen, held, switching, typing)


# ----------------------------------------------------------------------------- the report


def p50_p95(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):.0f} / {percentile(values, 95):.0f}"


def report(results: list[Figures], keys: int) -> None:
    print()
    print("sessions held at once (one Chromium, each tab its own console process; 3 s after every tab shows Triage)")
    header = (f"{'server':<15} {'tabs':>4} {'opened in':>9} {'consoles RSS':>12} {'RSS/session':>11} "
              f"{'USS/session':>11} {'server RSS':>10} {'conns/session':>13} {'CPU idle':>8}")
    print(header)
    print("-" * len(header))
    for figures in results:
        for h in figures.held:
            uss = f"{h.consoles_uss_mb / h.sessions:.0f} MB" if h.consoles_uss_mb is not None else "—"
            print(f"{figures.name:<15} {h.sessions:>4} {h.opened_s:>8.1f}s {h.consoles_rss_mb:>9.0f} MB "
                  f"{h.consoles_rss_mb / h.sessions:>8.0f} MB {uss:>11} {h.server_rss_mb:>7.0f} MB "
                  f"{h.connections / h.sessions:>13.1f} {h.idle_cpu * 100:>7.0f}%")
    print("  opened in: the tabs added at that row to Triage on each; USS: memory no other process shares;")
    print("  CPU idle: the server and its consoles, nobody typing (5 s; each console refreshes every 2 s), % of one CPU")
    print()
    print(f"keystroke to screen, stamped in the page (ms; {keys} keys of each kind; p50 / p95)")
    header = (f"{'server':<15} {'keys':<34} {'first frame':>11} {'screen shows it':>15} {'painted':>11} "
              f"{'n':>4} {'not counted':>11}")
    print(header)
    print("-" * len(header))
    for figures in results:
        for what, lat in (("switch screen (1 <-> 2), paced", figures.switching),
                          ("type in the filter box, 0.15-0.3 s", figures.typing)):
            print(f"{figures.name:<15} {what:<34} {p50_p95(lat.first_frame):>11} {p50_p95(lat.changed):>15} "
                  f"{p50_p95(lat.painted):>11} {len(lat.changed):>4} {lat.missed:>11}")
    print("  first frame: keydown -> the first websocket frame after it; screen shows it: -> the frame after which the")
    print("  screen (the frames replayed in a VT emulator) shows the answer: the new screen's name in the header, the")
    print("  text typed so far; painted: -> the animation frame after that one. n: keys counted; not counted: no")
    print("  answer, or typed before the key before it was answered. paced: each screen switch sent 0.1-0.3 s after")
    print("  the screen showed the last one's answer (polled every 30 ms)")
    print()
    print("first screen: " + "; ".join(f"{f.name} {f.first_screen_s:.1f} s" for f in results)
          + " (leasectl serve: the sign-in form sent -> Triage shown; textual-serve: the page asked for -> Triage)")


def person_login(server: BenchServer) -> str | None:
    """A login of the operator group for the console to run as, where the bench may make one."""
    try:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            ensure_login(admin, LOGIN, "leasectl_operator")
    except psycopg.Error:
        return None
    return LOGIN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", help="measure on this server (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--sessions", default="1,4,8,16", help="tabs held at once, in turn (comma-separated)")
    parser.add_argument("--keys", type=int, default=200, help="keystrokes timed per server")
    parser.add_argument("--no-peer", action="store_true", help="leave out textual-serve's own Server")
    args = parser.parse_args(argv)
    counts = sorted({int(n) for n in args.sessions.split(",")})
    paths = browser_paths()
    if paths is None:
        print("chromium or chromedriver not found: `make browser-tools` installs them", file=sys.stderr)
        return 2
    import textual

    with bench_server(args.dsn) as server, tempfile.TemporaryDirectory(prefix="leasectl-bench-web-") as tmp:
        print_header("leasectl web console benchmark (leasectl serve, in a headless Chromium)", server)
        print(f"  load:     load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} at start (a shared machine)")
        dsn = server.leasectl_database()
        with connect(dsn) as conn:
            seed(conn)
        login = person_login(server)
        users = Path(tmp) / "users.toml"
        add_user(users, PERSON, "operator", PASSWORD, login)
        person_dsn = make_conninfo(dsn, user=login) if login else dsn
        dbname = str(conninfo_to_dict(dsn)["dbname"])
        print(f"  browser:  {chromium_version(paths[0])}, headless, a {WINDOW[0]}x{WINDOW[1]} page, font 16 px "
              f"(WebGL off: --disable-gpu)")
        print(f"  consoles: Textual {textual.__version__}, one process per tab, running as login "
              f"{login or 'of the server'}; each refreshes every 2 s")
        print(f"  servers:  leasectl serve (aiohttp around textual-serve {version('textual-serve')}'s AppService), "
              + ("and textual-serve's own Server with the same console command" if not args.no_peer else "alone"))
        print("  data:     6 calls needing attention (Triage), 4 queued")
        results = []
        t0 = time.perf_counter()
        results.append(measure(start_leasectl(dsn, users, Path(tmp) / "serve.log", max(counts[-1], 16)), paths,
                               counts, args.keys, server.dsn, dbname))
        if not args.no_peer:
            results.append(measure(start_peer(person_dsn, Path(tmp) / "peer.log"), paths, counts, args.keys,
                                   server.dsn, dbname))
        report(results, args.keys)
        print(f"  (measured in {time.perf_counter() - t0:.0f} s; load average "
              f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} at the end)")
        server.drop_database(dsn)
    return 0


def version(package: str) -> str:
    from importlib.metadata import version as installed

    return installed(package)


if __name__ == "__main__":
    sys.exit(main())
