"""`leasectl serve` without a browser: its HTTP answers, sessions and journal against a real database
(the browser tier, tests/browser, drives the same server in Chromium). The server runs in this
test's event loop (console.operator.web.server.WebConsole on aiohttp), its clock a number the
test moves; HTTP goes through a real socket with aiohttp's client."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psycopg
import pytest
from aiohttp import web
from typer.testing import CliRunner

from console.db.connect import connect, run
from console.db.web import may_journal, record_sign_in
from console.operator.cli import app
from console.operator.web.server import COOKIE_PLAIN, COOKIE_SECURE, ServeConfig, WebConsole
from console.shared.errors import PermissionDenied
from console.shared.web_users import WebUser, hash_password, save_user
from tests.helpers import enqueue, register_tool

LOGINS = {"lc_web_serve": "leasectl_web", "lc_web_alice": "leasectl_operator", "lc_web_victor": "leasectl_auditor",
          "lc_web_worker": "leasectl_worker"}
GOOD = "correct horse battery"
FAST_HASH = 2**10  # the tests' hashes are cheap; the file format and the check are the same


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(connector: aiohttp.BaseConnector | None = None) -> aiohttp.ClientSession:
    # unsafe: the jar keeps cookies of an IP address (127.0.0.1), as a browser does
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), connector=connector)


def users() -> dict[str, WebUser]:
    return {"alice": WebUser(name="alice", role="operator", password=hash_password(GOOD, n=FAST_HASH),
                             db_user="lc_web_alice"),
            "victor": WebUser(name="victor", role="viewer", password=hash_password(GOOD, n=FAST_HASH),
                              db_user="lc_web_victor"),
            "proxied": WebUser(name="proxied", role="operator")}


class Served:
    def __init__(self, console: WebConsole, port: int, scheme: str = "http") -> None:
        self.console = console
        self.port = port
        self.origin = f"{scheme}://127.0.0.1:{port}"
        self.now = 1000.0

    def url(self, path: str) -> str:
        return self.origin + path


@pytest.fixture
async def served(db, logins) -> AsyncIterator[Served]:
    async with serving(db) as s:
        yield s


class serving:
    """An async context: the server on a free port, stopped at the end."""

    def __init__(self, db, **config: object) -> None:
        port = free_port()
        self.served: Served | None = None
        self.config = ServeConfig(dsn=db.dsn, host="127.0.0.1", port=port, **config)  # type: ignore[arg-type]
        self.db = db

    async def __aenter__(self) -> Served:
        holder: dict[str, float] = {"now": 1000.0}
        console = WebConsole(self.config, users=users(), clock=lambda: holder["now"])
        self.runner = web.AppRunner(console.make_app())
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.config.port, ssl_context=self._ssl())
        await site.start()
        served = Served(console, self.config.port, "https" if self.config.tls else "http")
        served.holder = holder  # type: ignore[attr-defined]
        return served

    def _ssl(self):  # type: ignore[no-untyped-def]
        if self.config.tls_cert is None:
            return None
        from console.operator.web.server import tls_context

        assert self.config.tls_key is not None
        return tls_context(self.config.tls_cert, self.config.tls_key)

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def journal(db, person: str | None = None) -> list[tuple[str, str, str | None, str]]:
    with db.connect() as conn:
        rows = conn.execute("select person, outcome, reason, db_role from web_sign_ins "
                            "where %(p)s::text is null or person = %(p)s order by id", {"p": person}).fetchall()
    return [(r["person"], r["outcome"], r["reason"], r["db_role"]) for r in rows]


async def sign_in(http: aiohttp.ClientSession, s: Served, name: str, password: str, *,
                  origin: str | None = "same") -> aiohttp.ClientResponse:
    headers = {"Origin": s.origin} if origin == "same" else ({"Origin": origin} if origin else {})
    return await http.post(s.url("/login"), data={"name": name, "password": password}, headers=headers,
                           allow_redirects=False)


# --- the journal in the database ---------------------------------------------------------------------

def test_the_journal_is_written_only_through_its_function_and_never_changed(db, logins):
    serve_dsn = psycopg.conninfo.make_conninfo(db.dsn, user="lc_web_serve")
    with connect(serve_dsn) as conn:
        may_journal(conn)
        record_sign_in(conn, person="mallory\x1b[2J\nroot", outcome="refused", remote="10.0.0.1", reason="x" * 900)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("insert into web_sign_ins (person, outcome, remote) values ('a', 'signed_in', 'b')")
    rows = journal(db)
    assert rows[0][0] == "mallory?[2J?root", "control characters cannot forge a line of the journal"
    assert len(rows[0][2] or "") == 500 and rows[0][3] == "lc_web_serve"
    for login in ("lc_web_worker", "lc_web_alice"):
        with connect(psycopg.conninfo.make_conninfo(db.dsn, user=login)) as conn:
            with pytest.raises(PermissionDenied):
                may_journal(conn)
            with pytest.raises(PermissionDenied):
                record_sign_in(conn, person="x", outcome="signed_in", remote="y")
    with connect(psycopg.conninfo.make_conninfo(db.dsn, user="lc_web_victor")) as conn:
        assert [r["person"] for r in run(conn, "web/sign_ins", person=None, outcome=None, since=None, lim=10)] == [
            "mallory?[2J?root"], "an auditor reads the journal"
    with db.connect() as owner:
        for statement in ("update web_sign_ins set outcome = 'signed_in'", "delete from web_sign_ins",
                          "truncate web_sign_ins"):
            with pytest.raises(psycopg.Error, match="append-only"):
                owner.execute(statement)


# --- the HTTP layer ------------------------------------------------------------------------------------

async def test_nothing_but_the_sign_in_page_without_a_session(served: Served):
    async with client() as http:
        r = await http.get(served.url("/"), allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/login"
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
        r = await http.get(served.url("/login"))
        assert r.status == 200 and 'action="/login"' in await r.text()
        assert "googleapis" not in await r.text()
        r = await http.get(served.url("/ws"), headers={"Origin": served.origin})
        assert r.status == 401
        r = await http.get(served.url("/download/anything"))
        assert r.status == 404
        r = await http.get(served.url("/"), headers={"Host": f"rebound.example:{served.port}"}, allow_redirects=False)
        assert r.status == 421, "a name that is not this server's (DNS rebinding) gets nothing"


async def test_a_wrong_password_is_refused_journaled_and_limited(served: Served, db):
    async with client() as http:
        r = await sign_in(http, served, "alice", "wrong password!")
        assert r.status == 401 and "Wrong name or password" in await r.text()
        r = await sign_in(http, served, "nobody-here", "wrong password!")
        assert r.status == 401 and "Wrong name or password" in await r.text(), "the same words for an unknown name"
        r = await sign_in(http, served, "proxied", "any password!")
        assert r.status == 401, "a person without a password signs in through the proxy only"
        for _ in range(4):
            await sign_in(http, served, "alice", "still wrong!!")
        r = await sign_in(http, served, "alice", GOOD)
        assert r.status == 429 and "Too many failed tries" in await r.text() and int(r.headers["Retry-After"]) > 800
        assert not http.cookie_jar.filter_cookies(served.url("/")), "no session for a limited try, right or not"
    assert [(p, o, why) for p, o, why, _ in journal(db)] == [
        ("alice", "refused", "wrong password"), ("nobody-here", "refused", "no such person"),
        ("proxied", "refused", "no password set: this person signs in through the reverse proxy"),
        *[("alice", "refused", "wrong password")] * 4,
        ("alice", "rate_limited", "too many failed tries: refused unchecked for 900 s more")]
    served.holder["now"] += 901  # type: ignore[attr-defined]
    async with client() as http:
        assert (await sign_in(http, served, "alice", GOOD)).status == 303, "the window passed"


async def test_a_sign_in_or_out_from_another_origin_is_refused(served: Served, db):
    async with client() as http:
        for origin in ("http://evil.example", "null", None, f"http://127.0.0.1:{served.port + 1}"):
            r = await sign_in(http, served, "alice", GOOD, origin=origin)
            assert r.status == 403, origin
        assert journal(db) == [], "refused before the password was looked at"
        assert (await sign_in(http, served, "alice", GOOD)).status == 303
        r = await http.post(served.url("/logout"), headers={"Origin": "http://evil.example"}, allow_redirects=False)
        assert r.status == 403 and len(served.console.sessions) == 1, "a page elsewhere cannot sign you out"


async def test_a_session_cookie_is_http_only_and_strict_and_opens_the_console_only_from_this_origin(
        served: Served, db):
    with db.connect() as conn:
        register_tool(conn, "web-tool", "read_only")
        enqueue(conn, "web-tool", "k-web")
    async with client() as http:
        r = await sign_in(http, served, "alice", GOOD)
        assert r.status == 303 and r.headers["Location"] == "/"
        cookie = r.cookies[COOKIE_PLAIN]
        assert cookie["httponly"] and cookie["samesite"] == "Strict" and not cookie["secure"]
        page = await (await http.get(served.url("/"))).text()
        assert "signed in as <b id=\"person\">alice</b>" in page
        for origin in ("http://evil.example", f"http://localhost:{served.port + 1}", "null"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(served.url("/ws?width=100&height=30"), headers={"Origin": origin})
            assert refused.value.status == 403
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(served.url("/ws"))  # no Origin at all
        assert served.console.started_consoles == 0, "no console process for a refused socket"
        # this page's own Origin: a console starts as alice and draws
        ws = await http.ws_connect(served.url("/ws?width=100&height=30"), headers={"Origin": served.origin})
        drawn = b""
        async with asyncio.timeout(60):
            while b"Triage" not in drawn:
                message = await ws.receive()
                assert message.type == aiohttp.WSMsgType.BINARY, message
                drawn += message.data
        assert served.console.started_consoles == 1 and served.console.open_tabs() == 1
        with db.connect() as conn:
            users_seen = {r["usename"] for r in conn.execute(
                "select usename from pg_stat_activity where datname = current_database()").fetchall()}
        assert "lc_web_alice" in users_seen, "alice's console runs as her own login"
        # her session expires while the tab is open: the tab is closed, the console ends, the journal says so
        served.holder["now"] += served.console.config.idle_seconds + 1  # type: ignore[attr-defined]
        await served.console.reap()
        async with asyncio.timeout(20):
            while (message := await ws.receive()).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                pass
        assert (message.data, message.extra) == (4001, "no keystroke for 30 min"), message
        assert served.console.open_tabs() == 0
        assert (await http.get(served.url("/"), allow_redirects=False)).status == 303
    assert [(p, o, why) for p, o, why, _ in journal(db)] == [
        ("alice", "signed_in", None), ("alice", "expired", "no keystroke for 30 min")]


async def test_signing_out_ends_the_session_and_its_tabs(served: Served, db):
    async with client() as http:
        await sign_in(http, served, "victor", GOOD)
        r = await http.post(served.url("/logout"), headers={"Origin": served.origin}, allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/login?why=out"
    async with client() as http:
        assert (await http.get(served.url("/"), allow_redirects=False)).status == 303
    assert [(p, o) for p, o, _, _ in journal(db)] == [("victor", "signed_in"), ("victor", "signed_out")]
    assert len(served.console.sessions) == 0


async def test_the_viewers_console_is_read_only_in_the_database(served: Served):
    person = served.console.person_session(users()["victor"])
    assert person.read_only_because == "victor signs in as a viewer" and "lc_web_victor" in person.dsn
    assert served.console.person_session(users()["alice"]).read_only_because is None


async def test_behind_a_proxy_its_header_signs_in_and_nothing_else_reaches_the_server(db, logins):
    async with serving(db, trusted_header="X-Forwarded-User", trusted_proxies=frozenset({"127.0.0.1"})) as s:
        async with client() as http:
            r = await http.get(s.url("/"), headers={"X-Forwarded-User": "proxied"}, allow_redirects=False)
            assert r.status == 200 and COOKIE_PLAIN in r.cookies
            r = await http.get(s.url("/"), headers={"X-Forwarded-User": "stranger"}, allow_redirects=False)
            assert r.status == 403
            r = await http.post(s.url("/login"), data={"name": "alice", "password": GOOD},
                                headers={"Origin": s.origin})
            assert r.status == 404, "no password form behind the proxy"
        assert [(p, o) for p, o, _, _ in journal(db)] == [("proxied", "signed_in"), ("stranger", "refused")]
    async with serving(db, trusted_header="X-Forwarded-User", trusted_proxies=frozenset({"10.1.2.3"})) as s, \
            client() as http:
        r = await http.get(s.url("/"), headers={"X-Forwarded-User": "proxied"}, allow_redirects=False)
        assert r.status == 403 and "reverse proxy only" in await r.text(), "a forged header from elsewhere"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test's certificate")
async def test_under_tls_the_cookie_is_secure_and_host_only(db, logins, tmp_path: Path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    async with serving(db, tls_cert=cert, tls_key=key) as s, client(aiohttp.TCPConnector(ssl=False)) as http:
        r = await sign_in(http, s, "alice", GOOD)
        assert r.status == 303
        cookie = r.cookies[COOKIE_SECURE]
        assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Strict" and not cookie["domain"]
        assert r.headers["Strict-Transport-Security"].startswith("max-age=")
        plain = await sign_in(http, s, "alice", GOOD, origin=f"http://127.0.0.1:{s.port}")
        assert plain.status == 403, "an http page cannot post to the https server"


# --- the command line ----------------------------------------------------------------------------------

@pytest.fixture
def cli(db, logins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "users.toml"
    monkeypatch.setenv("LEASECTL_WEB_USERS", str(path))
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, dsn: str | None = None):
        result = runner.invoke(app, ["--dsn", dsn or db.dsn, *args], input=input)
        assert "Traceback" not in result.output, result.output
        return result

    return invoke, path


def test_serve_refuses_what_would_be_unsafe_or_useless_before_it_listens(cli, db):
    invoke, path = cli
    none = invoke("serve", "--listen", "127.0.0.1:18022")
    assert none.exit_code == 2 and "nobody can sign in" in none.output
    save_user(path, users()["alice"])
    for args, says in ((["--listen", "0.0.0.0:8022"], "not a loopback address"),
                       (["--listen", "10.0.0.5:8022"], "needs TLS"),
                       (["--listen", "nonsense"], "HOST:PORT"),
                       (["--listen", "example.com:80"], "IP address"),
                       (["--tls-cert", str(path)], "go together"),
                       (["--tls-cert", str(path), "--tls-key", str(path)], "cannot load"),
                       (["--public-url", "ftp://x"], "scheme://host"),
                       (["--trusted-proxy", "10.0.0.1"], "goes with --trusted-header"),
                       (["--idle", "soon"], "--idle"),
                       (["--listen", "127.0.0.1:0"], "the port people will open"),
                       (["--trusted-header", "X-User", "--trusted-proxy", "10.0.0.0/8"], "IP address")):
        result = invoke("serve", *args)
        assert result.exit_code == 2, (args, result.output)
        assert says in result.output.replace("\n", " "), (args, result.output)
    not_web = invoke("serve", "--listen", "127.0.0.1:18022", dsn=psycopg.conninfo.make_conninfo(db.dsn, user="lc_web_alice"))
    assert not_web.exit_code == 1 and "may not journal sign-ins" in not_web.output
    assert "GRANT leasectl_web" in not_web.output


def test_users_are_added_listed_and_removed_without_ever_showing_a_hash(cli):
    invoke, path = cli
    added = invoke("serve", "users", "add", "dana", "--role", "operator", "--db-user", "lc_web_alice",
                   "--password-stdin", input=GOOD + "\n")
    assert added.exit_code == 0, added.output
    assert "scrypt$" in path.read_text() and GOOD not in path.read_text()
    listed = invoke("serve", "users", "list", "--json")
    assert listed.exit_code == 0 and "scrypt" not in listed.output
    assert '"db_user": "lc_web_alice"' in listed.output and '"password": true' in listed.output
    for args, code, says in ((["add", "dana", "--role", "operator", "--password-stdin"], 2, "already"),
                             (["add", "eve", "--role", "admin", "--no-password"], 2, "operator or viewer"),
                             (["add", "eve", "--role", "viewer", "--password-stdin"], 2, "at least 10"),
                             (["add", "bad name", "--role", "viewer", "--no-password"], 2, "not a user name"),
                             (["add", "eve", "--role", "viewer", "--no-password", "--db-user", "x;y"], 2, "login"),
                             (["remove", "nobody"], 2, "not in")):
        result = invoke("serve", "users", *args, input="short\n")
        assert result.exit_code == code and says in result.output, (args, result.output)
    assert invoke("serve", "users", "remove", "dana").exit_code == 0
    assert "nobody can sign in" in invoke("serve", "users", "list").output


def test_audit_sign_ins_lists_the_journal(cli, db):
    invoke, _ = cli
    with db.connect() as conn:
        record_sign_in(conn, person="alice", outcome="refused", remote="10.0.0.1", reason="wrong password")
        record_sign_in(conn, person="alice", outcome="signed_in", remote="10.0.0.1")
    shown = invoke("audit", "sign-ins", "--outcome", "refused", "--json")
    assert shown.exit_code == 0 and '"reason": "wrong password"' in shown.output and "signed_in" not in shown.output
    assert invoke("audit", "sign-ins", "--outcome", "maybe").exit_code == 2
    assert "no sign-in matches" in invoke("audit", "sign-ins", "--person", "zed").output


# --- found by an attack walk (each failed before its mend) ---------------------------------------------

async def test_a_burst_of_sign_ins_sent_at_once_cannot_outrun_the_limit_nor_fill_the_journal(served: Served, db):
    async with client() as http:
        answers = await asyncio.gather(*[sign_in(http, served, "alice", f"guess number {i}") for i in range(18)],
                                       sign_in(http, served, "alice", GOOD))
        statuses = [r.status for r in answers]
    assert statuses.count(401) == 5 and statuses.count(303) == 0, statuses
    assert statuses.count(429) == 14
    outcomes = [o for _, o, _, _ in journal(db)]
    assert outcomes.count("refused") == 5
    assert outcomes.count("rate_limited") == 1, "a flood of refusals is one row a minute per address"
    served.holder["now"] += 61  # type: ignore[attr-defined]
    async with client() as http:
        assert (await sign_in(http, served, "alice", GOOD)).status == 429
    said = [why for _, o, why, _ in journal(db) if o == "rate_limited"]
    assert len(said) == 2 and said[1] is not None and "13 more from this address" in said[1]


async def test_a_name_with_nul_and_escapes_is_journaled_cleaned(served: Served, db):
    async with client() as http:
        r = await sign_in(http, served, "al\x00ice\n\x1b[31m", "wrong password!")
        assert r.status == 401
    assert [(p, o) for p, o, _, _ in journal(db)] == [("al?ice??[31m", "refused")]


async def test_a_users_file_that_does_not_parse_signs_nobody_in_and_ends_nobody(db, logins, tmp_path: Path):
    path = tmp_path / "users.toml"
    save_user(path, users()["alice"])
    config = ServeConfig(dsn=db.dsn, host="127.0.0.1", port=free_port(), users_file=path)
    console = WebConsole(config)
    runner = web.AppRunner(console.make_app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", config.port).start()
    s = Served(console, config.port)
    try:
        async with client() as http:
            assert (await sign_in(http, s, "alice", GOOD)).status == 303
            path.write_text("[users.alice\n")  # being edited
            r = await http.get(s.url("/"), allow_redirects=False)
            assert r.status == 503 and "users file" in await r.text()
            assert "Content-Security-Policy" in r.headers, "a refusal carries the headers too"
            await console.reap()
            assert len(console.sessions) == 1, "a file being edited ends nobody's session"
            path.write_text("")  # truncated by an editor before it writes
            await console.reap()
            assert len(console.sessions) == 1
            save_user(path, users()["alice"])
            assert (await http.get(s.url("/"), allow_redirects=False)).status == 200
    finally:
        await runner.cleanup()


def test_a_persons_dsn_never_carries_serves_password():
    from console.operator.web.server import as_login

    dsn = as_login("postgresql://serve:S3cret@db.example:5432/leasectl?sslmode=require", "alice")
    parts = psycopg.conninfo.conninfo_to_dict(dsn)
    assert parts["user"] == "alice" and "password" not in parts and parts["sslmode"] == "require"
    assert as_login("host=x user=serve password=p", None) == "host=x user=serve password=p"


def test_a_console_dies_with_a_serve_killed_by_sigkill(db, logins, tmp_path: Path):
    import os
    import signal
    import sys
    import time

    from tests.conftest import ROOT

    path = tmp_path / "users.toml"
    save_user(path, users()["alice"])
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen([sys.executable, "-m", "console", "--dsn", db.dsn, "serve", "--listen",
                                  f"127.0.0.1:{port}", "--users", str(path)], cwd=ROOT, stdout=out,
                                 stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "the console at" not in log.read_text():
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)

        async def open_a_tab() -> None:
            s = Served(None, port)  # type: ignore[arg-type]
            async with client() as http:
                assert (await sign_in(http, s, "alice", GOOD)).status == 303
                ws = await http.ws_connect(s.url("/ws"), headers={"Origin": s.origin})
                drawn = b""
                async with asyncio.timeout(60):
                    while b"Triage" not in drawn:
                        drawn += (await ws.receive()).data
                mine.extend(console_pids(parent=serve.pid))
                os.kill(serve.pid, signal.SIGKILL)
                serve.wait(10)

        mine: list[int] = []
        asyncio.run(open_a_tab())
        assert len(mine) == 1, "the tab's console, a child of serve"
        deadline = time.monotonic() + 10
        while set(console_pids()) & set(mine):
            assert time.monotonic() < deadline, "a console outlived its serve"
            time.sleep(0.2)
    finally:
        if serve.poll() is None:
            serve.kill()


def console_pids(parent: int | None = None) -> list[int]:
    """The running console processes of `leasectl serve` (of one serve process, if given)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"console.operator.web.console_process" not in (entry / "cmdline").read_bytes():
                    continue
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent is None or ppid == parent:
                found.append(int(entry.name))
    return found
