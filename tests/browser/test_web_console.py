"""`leasectl serve` in a real headless Chromium: the console as a signed-in person uses it, and
what the server refuses (issue 31).

The screen is read from what the tab received (tests/browser/harness.py: the websocket's frames
replayed into a VT emulator of the tab's size); keys go to xterm's textarea as a person types
them; every outcome is checked where it lands: the database (the call, its journal, the sign-in
journal, pg_stat_activity), the server's log and its console processes.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from console.db.connect import connect, run_one
from console.shared.errors import PermissionDenied
from tests.browser.conftest import (
    ALICE,
    ALICE_LOGIN,
    ALICE_PASSWORD,
    LOGINS,  # noqa: F401 - the `logins` fixture makes the LOGINS of the test's module
    VICTOR,
    VICTOR_LOGIN,
    VICTOR_PASSWORD,
)
from tests.browser.harness import ROOT, Serve, Tab, seed, wait_for
from tests.helpers import events, job

pytestmark = pytest.mark.browser

COOKIE = "leasectl_session"  # plain http: no __Host- prefix
SCREENSHOT = ROOT / "screenshots" / "web_console.png"
# the fixtures of tests/browser/conftest.py, and other_site below
StartServe = Callable[..., Serve]
OpenTab = Callable[[Serve], Tab]
ServePage = Callable[[str], str]


def signed_in(tab: Tab, name: str, password: str) -> str:
    """Sign in through the form; the console's first screen (Triage, the person's header)."""
    tab.sign_in(name, password)
    assert tab.driver.current_url == tab.base + "/", f"not signed in: {tab.page_text()}"
    return tab.wait_screen("1 Triage", f"{name}@", timeout=45)


def sign_ins(db: Any, person: str) -> list[dict]:
    with db.connect() as conn:
        return list(conn.execute("select outcome, reason, remote, db_role from web_sign_ins where person = %s "
                                 "order by id", (person,)))


def backends(db: Any, login: str) -> int:
    with db.connect() as conn:
        row = conn.execute("select count(*) as n from pg_stat_activity where usename = %s and datname = %s",
                           (login, db.name)).fetchone()
    return int(row["n"])


def no_consoles(server: Serve, timeout: float = 20) -> None:
    wait_for(lambda: not server.consoles(), timeout, "the server's console processes to end")


def test_operator_signs_in_filters_opens_a_call_and_cancels_it_as_herself(
        db: Any, serve: StartServe, tabs: OpenTab, tmp_path: Path) -> None:
    with db.connect() as conn:
        calls = seed(conn)
    fetch = calls["fetch"]
    short = str(fetch["id"])[:8]
    others = [str(c["id"])[:8] for c in calls["search"]]
    server = serve("--label", "web-demo")  # the header's name for the database (the README's picture)
    tab = tabs(server)
    screen = signed_in(tab, ALICE, ALICE_PASSWORD)
    assert "read-write" in screen
    assert tab.page_text().startswith("leasectl\nsigned in as alice")  # the page's own bar names her
    screen = tab.wait_screen(short, *others, "outcome unknown")  # the six calls that need attention

    # the whole terminal is on the page, its last row (the footer's keys) within the window
    bottom = tab.driver.execute_script(
        "return [document.querySelector('.xterm-screen').getBoundingClientRect().bottom, window.innerHeight]")
    assert bottom[0] <= bottom[1], f"the terminal runs past the window's bottom: {bottom}"
    time.sleep(0.5)  # the terminal fades in (0.2 s) and paints
    shot = tmp_path / "web_console.png"
    assert tab.driver.save_screenshot(str(shot)), "chromium took no screenshot"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("LEASECTL_BROWSER_SCREENSHOT") == "1":
        shutil.copyfile(shot, SCREENSHOT)

    # `/` filters Triage down to the one fetch call
    tab.press("/")
    tab.wait_screen("filter keys")
    tab.type("tool:fetch")
    tab.press(Keys.ENTER)
    screen = tab.wait_screen("filter tool:fetch", "1 of 6 shown")
    assert short in screen and not any(other in screen for other in others), screen

    # enter opens it; c opens its Cancel dialog; a reason, enter: applied
    tab.press(Keys.ENTER)
    tab.wait_screen(str(fetch["id"]), "lease health")
    tab.press("c")
    tab.wait_screen(f"Cancel call {short}", "why are you doing this?")
    time.sleep(0.6)  # the dialog ignores keys typed before it appeared: a person reads it first
    tab.type("stuck since the deploy")
    tab.press(Keys.ENTER)
    tab.wait_screen("APPLIED")

    # in the database: the call moved, and the journal names alice and her own login
    with db.connect() as conn:
        assert job(conn, fetch["id"])["state"] == "cancel_requested"
        journal = [e for e in events(conn, fetch["id"]) if e["kind"] == "operator_cancel"]
    assert len(journal) == 1
    assert journal[0]["actor"] == ALICE and journal[0]["db_role"] == ALICE_LOGIN
    assert journal[0]["reason"] == "stuck since the deploy"
    assert backends(db, ALICE_LOGIN) > 0  # her console runs as her login
    assert [r["outcome"] for r in sign_ins(db, ALICE)] == ["signed_in"]


def test_viewer_cannot_cancel_the_console_says_so_and_the_database_refuses(
        db: Any, serve: StartServe, tabs: OpenTab) -> None:
    with db.connect() as conn:
        calls = seed(conn)
    target = calls["queued"][0]
    short = str(target["id"])[:8]
    server = serve()
    tab = tabs(server)
    screen = signed_in(tab, VICTOR, VICTOR_PASSWORD)
    assert "READ-ONLY" in screen and "read-write" not in screen

    tab.press("2")
    tab.wait_screen("2 Calls", "page 1")
    tab.press("/")
    tab.wait_screen("filter keys")
    tab.type(f"id:{short}")
    tab.press(Keys.ENTER)
    tab.wait_screen(f"filter id:{short}")
    tab.press(Keys.ENTER)
    tab.wait_screen(str(target["id"]), "queued")
    tab.press("c")
    screen = tab.wait_screen("Not allowed", "Read-only console")
    assert "viewer" in screen and "Cancel call" not in screen

    with db.connect() as conn:
        assert job(conn, target["id"])["state"] == "queued"
        assert not [e for e in events(conn, target["id"]) if e["kind"].startswith("operator_")]

    # his console runs as his own login, and that login may not cancel: the database says so
    assert backends(db, VICTOR_LOGIN) > 0
    with connect(make_conninfo(db.dsn, user=VICTOR_LOGIN)) as conn, pytest.raises(PermissionDenied) as refused:
        run_one(conn, "operator/request_cancel", job_id=target["id"], seen_state="queued", seen_token=0,
                operator=VICTOR, reason="from the viewer's own login")
    assert getattr(refused.value.__cause__, "sqlstate", None) == "42501", refused.value.__cause__
    with db.connect() as conn:
        assert job(conn, target["id"])["state"] == "queued"

    tab.driver.get("about:blank")  # the tab closes: its console, and its connections, go
    no_consoles(server)
    wait_for(lambda: backends(db, VICTOR_LOGIN) == 0, 20, "victor's connections to close")


@pytest.fixture
def other_site() -> Iterator[ServePage]:
    """start(html) serves that page at http://127.0.0.1:<another port>/: another Origin."""
    servers: list[ThreadingHTTPServer] = []

    def start(page: str) -> str:
        body = page.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(httpd)
        threading.Thread(target=httpd.serve_forever, name="other-site", daemon=True).start()
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


ATTACK = """<!DOCTYPE html><html><body><p>a page on another origin</p><script>
window.__attack = {events: [], done: false};
const ws = new WebSocket("ws://127.0.0.1:%d/ws?width=80&height=24");
ws.onopen = () => window.__attack.events.push("open");
ws.onerror = () => window.__attack.events.push("error");
ws.onclose = (e) => { window.__attack.events.push("close " + e.code); window.__attack.done = true; };
</script></body></html>"""


def test_a_page_from_another_origin_cannot_open_the_websocket(
        db: Any, serve: StartServe, tabs: OpenTab, other_site: ServePage) -> None:
    server = serve()
    tab = tabs(server)
    signed_in(tab, ALICE, ALICE_PASSWORD)  # the browser holds her session cookie
    assert tab.cookie(COOKIE) is not None
    tab.driver.get("about:blank")
    no_consoles(server)

    site = other_site(ATTACK % server.port)
    tab.driver.get(site + "/")
    attack = wait_for(lambda: tab.driver.execute_script("return window.__attack.done && window.__attack"), 20,
                      "the other page's websocket to end")
    assert "open" not in attack["events"], attack
    assert "error" in attack["events"] and "close 1006" in attack["events"], attack
    assert f"websocket refused: Origin 'http://127.0.0.1:{site.rsplit(':', 1)[1]}'" in server.log_text()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # and no console was started for it, not even for a moment
        assert not server.consoles(), "a console process started for another origin's websocket"
        time.sleep(0.05)


def test_wrong_password_is_refused_journaled_and_then_rate_limited(db: Any, serve: StartServe, tabs: OpenTab) -> None:
    server = serve()
    tab = tabs(server)
    tab.sign_in("mallory", "any password at all")
    assert tab.status() == 401
    for n in range(5):
        tab.sign_in(ALICE, f"wrong password {n}")
        assert tab.status() == 401
        assert "Wrong name or password" in tab.page_text()
        assert tab.driver.current_url == server.url + "/login"
    tab.sign_in(ALICE, ALICE_PASSWORD)  # right, but after five wrong ones: not even checked
    assert tab.status() == 429
    assert "Too many failed tries" in tab.page_text()
    assert tab.driver.current_url == server.url + "/login"
    assert not server.consoles()

    rows = sign_ins(db, ALICE)
    assert [(r["outcome"], r["reason"]) for r in rows[:5]] == [("refused", "wrong password")] * 5
    assert rows[5]["outcome"] == "rate_limited" and "too many failed tries" in rows[5]["reason"]
    assert len(rows) == 6 and all(r["remote"] == "127.0.0.1" for r in rows)
    assert [(r["outcome"], r["reason"]) for r in sign_ins(db, "mallory")] == [("refused", "no such person")]


IDLE = 6.0


def test_an_idle_session_ends_its_tab_is_closed_and_the_end_is_journaled(
        db: Any, serve: StartServe, tabs: OpenTab) -> None:
    server = serve("--idle", f"{IDLE:g}s")
    tab = tabs(server)
    signed_in(tab, ALICE, ALICE_PASSWORD)
    tab.press("2")  # a keystroke: the session's idle time starts again from here
    last_key = time.monotonic()
    tab.wait_screen("2 Calls")
    wait_for(lambda: "-closed" in tab.body_classes(), IDLE + 15, "the tab's websocket to close")
    closed_after = time.monotonic() - last_key
    assert closed_after >= IDLE - 0.5, f"closed {closed_after:.1f} s after the last key, before the idle time"
    sockets = tab.sockets()
    assert sockets[-1]["open"] and sockets[-1]["closed"]["code"] == 4001, sockets
    assert "Session ended" in tab.page_text()
    no_consoles(server)
    rows = sign_ins(db, ALICE)
    assert [r["outcome"] for r in rows] == ["signed_in", "expired"]
    assert rows[1]["reason"].startswith("no keystroke for")

    tab.driver.refresh()
    wait_for(lambda: tab.driver.current_url == server.url + "/login", 15, "the reload to land on the sign-in page")


def test_signing_out_is_journaled_and_the_old_cookie_opens_nothing(db: Any, serve: StartServe, tabs: OpenTab) -> None:
    server = serve()
    tab = tabs(server)
    signed_in(tab, ALICE, ALICE_PASSWORD)
    cookie = tab.cookie(COOKIE)
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
    assert COOKIE not in tab.driver.execute_script("return document.cookie")  # no script of the page reads it
    assert ALICE_PASSWORD not in tab.driver.page_source and db.dsn not in tab.driver.page_source

    button = tab.driver.find_element(By.ID, "sign-out")
    button.click()
    tab.wait_new_page(button)
    assert tab.driver.current_url == server.url + "/login?why=out"
    assert "Signed out." in tab.page_text()
    assert tab.cookie(COOKIE) is None
    no_consoles(server)
    assert [r["outcome"] for r in sign_ins(db, ALICE)] == ["signed_in", "signed_out"]

    # the old cookie, put back: the websocket is refused, the console page sends to sign-in
    tab.driver.add_cookie({"name": COOKIE, "value": cookie["value"], "path": "/", "httpOnly": True,
                           "sameSite": "Strict"})
    tab.driver.execute_script("""
        window.__old = {events: [], done: false};
        const ws = new WebSocket("ws://" + location.host + "/ws?width=80&height=24");
        ws.onopen = () => window.__old.events.push("open");
        ws.onclose = (e) => { window.__old.events.push("close " + e.code); window.__old.done = true; };""")
    old = wait_for(lambda: tab.driver.execute_script("return window.__old.done && window.__old"), 20,
                   "the old cookie's websocket to end")
    assert old["events"] == ["close 1006"], old
    tab.driver.get(server.url + "/")
    assert tab.driver.current_url == server.url + "/login"
    assert not server.consoles()
    assert [r["outcome"] for r in sign_ins(db, ALICE)] == ["signed_in", "signed_out"]



def test_an_export_is_downloaded_by_the_browser_and_never_written_on_the_servers_disk(
        db: Any, serve: StartServe, tabs: OpenTab, tmp_path: Path) -> None:
    with db.connect() as conn:
        seed(conn)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    server = serve("--label", "web-export")
    tab = tabs(server)
    tab.driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    signed_in(tab, ALICE, ALICE_PASSWORD)
    tab.wait_screen("web-export")  # --label names the database in the header
    tab.press("6")
    tab.wait_screen("6 Audit")
    tab.press("e")
    tab.wait_screen("Export the history", "your browser downloads it")
    time.sleep(0.6)
    tab.press(Keys.ENTER)
    screen = tab.wait_screen("EXPORTED", "handed to your browser as")
    name = next(word for word in screen.split() if word.startswith("leasectl-audit-")).rstrip(".")
    got = wait_for(lambda: [p for p in downloads.iterdir() if p.suffix == ".jsonl"], 30, "the browser's download")
    assert got[0].name == name
    lines = got[0].read_text().splitlines()
    assert lines and all(line.startswith("{") for line in lines), "the history as JSONL"
    # nowhere on the server's disk where a path typed in the page could point: its working
    # directory, its home
    for place in (ROOT, Path.home()):
        assert not (place / name).exists(), place
