"""`leasectl serve`: the console in a browser, every person signed in and working as themselves.

Built on textual-serve's two working parts, and nothing else of it: `AppService` (one console
process per browser tab, bridged to the tab's websocket through Textual's own web driver) and its
browser terminal (static/js/textual.js, xterm.js). Its `Server` is not used: it has no sign-in, no
Origin check and a page that fetches a font from Google; this module is the small aiohttp layer
around the same parts that adds what a console that can cancel payments needs:

* sign-in per person (the users file, console/shared/web_users.py: scrypt hashes), or a trusted
  reverse proxy's header, accepted only from the proxy's own address;
* each tab's console runs as its person: their operator name in the journal, their PostgreSQL
  login (db_user), read-only in the database for a viewer (console_process.py);
* sessions in memory (console/core/signin.py): a random token in a cookie that is HttpOnly,
  SameSite=Strict, Secure (and __Host-) under TLS; idle and absolute expiry, after which the
  tab's console is stopped; sign-in tries limited per name and per address;
* every attempt, sign-out and expiry journaled in the database (web_sign_ins, migration 0025);
* a websocket or a POST from another Origin is refused, and so is a request whose Host is not
  one of this server's names (DNS rebinding); a Content-Security-Policy keeps the page to its
  own scripts, styles and socket, and no frame may hold it;
* a file the console exports is handed to the tab that asked for it, never written where the
  browser says on the server's disk.
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import json
import logging
import os
import shlex
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import textual_serve
from aiohttp import WSMsgType, web
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

import console.operator.web as web_package
from console.core.signin import LOOPBACK_NAMES, Sessions, SignInLimits, WebSession, allowed_host, allowed_origin
from console.db.lane import Lane
from console.db.web import record_sign_in
from console.operator.files import remove_orphaned_export_directories
from console.operator.web.console_process import PARENT_ENV, SESSION_ENV, PersonSession
from console.shared.dsn import masked_dsn
from console.shared.errors import LeasectlError
from console.shared.web_users import WebUser, load_users, verify_password

log = logging.getLogger("leasectl.serve")

HERE = Path(web_package.__file__).resolve().parent
TEXTUAL_STATIC = Path(textual_serve.__path__[0]).resolve() / "static"
OWN_STATIC = HERE / "static"
COOKIE_PLAIN = "leasectl_session"
COOKIE_SECURE = "__Host-leasectl_session"  # the browser keeps it only if Secure, Path=/ and no Domain
# what a tab may ask for its terminal: the browser's figures, held within sane bounds
MIN_COLUMNS, MAX_COLUMNS, MIN_ROWS, MAX_ROWS = 20, 400, 8, 200
MAX_MESSAGE = 64 * 1024
REAP_EVERY = 2.0
LIMITED_SAID_EVERY = 60.0  # a rate-limited address is journaled at most once a minute
NEW_TOKEN = web.RequestKey("new_token", str)  # a session the proxy's header started with this request
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


@dataclass(frozen=True)
class ServeConfig:
    """What `leasectl serve` was told (console/operator/cli/serve.py builds it)."""

    dsn: str
    host: str = "127.0.0.1"
    port: int = 8022
    users_file: Path | None = None
    read_dsn: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    trusted_header: str | None = None
    trusted_proxies: frozenset[str] = frozenset({"127.0.0.1", "::1"})
    public_url: str | None = None
    allow_hosts: tuple[str, ...] = ()
    idle_seconds: float = 30 * 60.0
    lifetime_seconds: float = 12 * 3600.0
    max_consoles: int = 16
    read_only: bool = False
    label: str | None = None
    poll_seconds: float = 2.0
    console_command: tuple[str, ...] = (sys.executable, "-m", "console.operator.web.console_process")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def scheme(self) -> str:
        if self.public_url:
            return urlsplit(self.public_url).scheme
        return "https" if self.tls else "http"

    @property
    def secure_cookies(self) -> bool:
        return self.scheme == "https"

    @property
    def public_port(self) -> int:
        if self.public_url:
            parts = urlsplit(self.public_url)
            return parts.port or (443 if parts.scheme == "https" else 80)
        return self.port

    @property
    def names(self) -> frozenset[str]:
        """The host names a browser may use for this server (Host and Origin are checked against them)."""
        names: set[str] = set(h.lower() for h in self.allow_hosts)
        if self.public_url:
            names.add((urlsplit(self.public_url).hostname or "").lower())
        host = self.host.lower()
        if is_loopback(host) or host in ("", "0.0.0.0", "::"):
            names.update(LOOPBACK_NAMES)
        if host not in ("", "0.0.0.0", "::"):
            names.add(f"[{host}]" if ":" in host else host)
        return frozenset(n for n in names if n)


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class PersonConsole(AppService):
    """textual-serve's bridge to one console process, started for one person: no shell (the command
    is a list), and the person's session in the environment of that process alone."""

    def __init__(self, command: tuple[str, ...], person: PersonSession, **kwargs: Any) -> None:
        super().__init__(shlex.join(command), **kwargs)
        self.argv = command
        self.person = person

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        environment = super()._build_environment(width=width, height=height)
        # the serve process's own secrets stay with it: the console gets its person's DSN only
        for name in ("LEASECTL_DSN", "DATABASE_URL", "PGPASSWORD", "LEASECTL_WEB_USERS"):
            environment.pop(name, None)
        environment[SESSION_ENV] = self.person.to_env()
        environment[PARENT_ENV] = str(os.getpid())  # the console dies with this process
        return environment

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height))
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def end(self, grace: float = 5.0) -> None:
        """Stop the console: ask it to quit, then kill it if it does not within `grace` seconds."""
        try:
            await asyncio.wait_for(self.stop(), grace)
        except (TimeoutError, Exception):  # noqa: BLE001 - whatever happened, the process must go
            pass
        process = self._process
        if process is not None and process.returncode is None:
            process.kill()
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                log.warning("console process %s did not exit after SIGKILL", process.pid)


@dataclass(eq=False)  # a tab is itself, kept in a set
class Tab:
    """One open browser tab: its websocket and its console."""

    socket: web.WebSocketResponse
    console: PersonConsole
    opened: float = field(default_factory=time.monotonic)


class WebConsole:
    """The aiohttp application of `leasectl serve`."""

    def __init__(self, config: ServeConfig, *, users: dict[str, WebUser] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._users_given = users
        self.clock = clock
        self.sessions = Sessions(idle=config.idle_seconds, lifetime=config.lifetime_seconds)
        self.limits = SignInLimits()
        self.tabs: dict[str, set[Tab]] = {}
        self.downloads = DownloadManager()
        self.journal = Lane(config.dsn, application_name="leasectl-serve")
        self._journal_lock = asyncio.Lock()
        # scrypt takes ~50 ms of CPU and 16 MiB: at most two at once, so a flood of sign-ins
        # queues instead of taking the machine
        self._checking = asyncio.Semaphore(2)
        self._reaper: asyncio.Task[None] | None = None
        self._limited_said: dict[str, tuple[float, int]] = {}
        self.started_consoles = 0

    # ---------------------------------------------------------------- people and their sessions
    def users(self) -> dict[str, WebUser]:
        """Read at every sign-in: adding or removing a person takes effect without a restart. A file
        that does not parse (being edited by hand) signs nobody in meanwhile: UsersUnreadable."""
        if self._users_given is not None:
            return self._users_given
        try:
            return load_users(self.config.users_file)
        except LeasectlError as exc:
            log.error("users file: %s", exc)
            raise UsersUnreadable(str(exc)) from None

    def person_session(self, user: WebUser) -> PersonSession:
        config = self.config
        dsn = as_login(config.dsn, user.db_user)
        read_dsn = as_login(config.read_dsn, user.db_user) if config.read_dsn else None
        because = None
        if user.read_only:
            because = f"{user.name} signs in as a viewer"
        elif config.read_only:
            because = "leasectl serve --read-only"
        return PersonSession(person=user.name, role=user.role, operator=user.operator_name, dsn=dsn,
                             read_dsn=read_dsn, read_only_because=because, label=config.label,
                             shown_dsn=masked_dsn(dsn), poll_seconds=config.poll_seconds)

    def remote(self, request: web.Request) -> str:
        peer = request.remote or "?"
        if self.config.trusted_header and peer in self.config.trusted_proxies:
            forwarded = request.headers.get("X-Forwarded-For", "").split(",")[0].strip()
            if forwarded:
                return f"{forwarded} via {peer}"
        return peer

    async def journal_sign_in(self, person: str, outcome: str, remote: str, reason: str | None = None) -> bool:
        """Journal one sign-in event; False (and a line on stderr) if the database did not take it."""
        person, remote = printable(person), printable(remote)
        reason = printable(reason) if reason is not None else None

        def write(conn: Any) -> int:
            return record_sign_in(conn, person=person, outcome=outcome, remote=remote, reason=reason)

        async with self._journal_lock:  # one lane, one user at a time; the loop never waits on it
            try:
                await asyncio.to_thread(self.journal.act, write)
                return True
            except LeasectlError as exc:
                log.error("sign-in journal: could not record %s %r from %r: %s", outcome, person, remote, exc)
                return False

    def session_of(self, request: web.Request) -> WebSession | None:
        session = self.sessions.find(request.cookies.get(self.cookie_name), self.clock())
        header = self.config.trusted_header
        if session is not None and header and request.headers.get(header, "").strip() != session.person:
            return None  # the proxy now names someone else: this cookie is not theirs
        return session

    @property
    def cookie_name(self) -> str:
        return COOKIE_SECURE if self.config.secure_cookies else COOKIE_PLAIN

    def set_cookie(self, response: web.StreamResponse, token: str) -> None:
        response.set_cookie(self.cookie_name, token, path="/", httponly=True, samesite="Strict",
                            secure=self.config.secure_cookies, max_age=int(self.config.lifetime_seconds))

    def same_origin(self, request: web.Request) -> bool:
        return allowed_origin(request.headers.get("Origin"), self.config.scheme, self.config.names,
                              self.config.public_port)

    # ---------------------------------------------------------------- the application
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard], client_max_size=64 * 1024)
        app.add_routes([
            web.get("/", self.handle_index),
            web.get("/login", self.handle_login_page),
            web.post("/login", self.handle_login),
            web.post("/logout", self.handle_logout),
            web.get("/ws", self.handle_websocket),
            web.get("/download/{key}", self.handle_download),
            web.static("/static/terminal", TEXTUAL_STATIC, show_index=False),
            web.static("/static/leasectl", OWN_STATIC, show_index=False),
        ])
        app.on_response_prepare.append(self._headers)
        app.on_startup.append(self._start_reaper)
        app.on_shutdown.append(self._shut_down)
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        config = self.config
        if not allowed_host(request.headers.get("Host"), config.names, config.public_port, config.scheme):
            return plain(421, "This server does not answer to that host name (Host header); "
                              "open it by one of its own names.")
        if config.trusted_header and (request.remote or "") not in config.trusted_proxies:
            return plain(403, "This server is reached through its reverse proxy only.")
        try:
            response: web.StreamResponse = await handler(request)
        except UsersUnreadable:
            return plain(503, "The server's users file cannot be read just now: nobody signs in until it can. "
                              "Try again in a minute.")
        return response

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        """On every answer as it is sent (pages, refusals, downloads, errors alike)."""
        config = self.config
        headers = response.headers
        headers.setdefault("Content-Security-Policy", CSP)
        headers.setdefault("X-Frame-Options", "DENY")
        headers.setdefault("X-Content-Type-Options", "nosniff")
        # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the
        # sign-in form, which the Origin check must refuse
        headers.setdefault("Referrer-Policy", "same-origin")
        headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
        if not request.path.startswith("/static/"):
            headers.setdefault("Cache-Control", "no-store")
        if config.secure_cookies:
            headers.setdefault("Strict-Transport-Security", "max-age=31536000")

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request) or await self.proxy_sign_in(request)
        if session is None:
            if self.config.trusted_header:
                return plain(403, "The reverse proxy named nobody this server knows.")
            return redirect("/login")
        self.sessions.touch(session, self.clock())
        user = self.users().get(session.person)
        if user is None:  # removed from the users file since: their session ends now
            await self.end_session(session, "removed from the users file", outcome="expired")
            return redirect("/login")
        response = web.Response(text=page("console.html", person=html.escape(user.name), role=html.escape(user.role),
                                      operator=html.escape(user.operator_name),
                                      font_size=str(font_size(request.query.get("fontsize")))),
                            content_type="text/html")
        if NEW_TOKEN in request:  # signed in by the proxy's header just now
            self.set_cookie(response, request[NEW_TOKEN])
        return response

    async def handle_login_page(self, request: web.Request) -> web.StreamResponse:
        if self.config.trusted_header:
            return redirect("/")
        message = {"expired": "Your session ended: sign in again.",
                   "out": "Signed out."}.get(request.query.get("why", ""), "")
        return web.Response(text=login_page(message), content_type="text/html")

    async def handle_login(self, request: web.Request) -> web.StreamResponse:
        if self.config.trusted_header:
            return plain(404, "Sign-in is the reverse proxy's here.")
        if not self.same_origin(request):
            return plain(403, "Refused: a sign-in is accepted from this server's own page only (Origin).")
        remote = self.remote(request)
        try:
            form = await request.post()
        except ValueError:
            return plain(400, "The sign-in form could not be read.")
        name = str(form.get("name", ""))[:200]
        password = str(form.get("password", ""))[:1024]
        now = self.clock()
        wait = self.limits.attempt(name, remote, now)  # counted now: a burst cannot outrun the count
        if wait > 0:
            await self.journal_limited(name, remote, wait, now)
            return web.Response(status=429, text=login_page(
                f"Too many failed tries. Try again in {minutes(wait)}.", error=True), content_type="text/html",
                headers={"Retry-After": str(int(wait) + 1)})
        user = self.users().get(name)
        async with self._checking:
            good = await asyncio.to_thread(verify_password, user.password if user else None, password)
        if not good or user is None:
            reason = "wrong password" if user is not None and user.password else (
                "no password set: this person signs in through the reverse proxy" if user is not None
                else "no such person")
            await self.journal_sign_in(name, "refused", remote, reason)
            return web.Response(status=401, text=login_page("Wrong name or password.", error=True),
                                content_type="text/html")
        if not await self.journal_sign_in(name, "signed_in", remote):
            return web.Response(status=503, text=login_page(
                "The database does not answer, so the sign-in cannot be journaled: nobody signs in until it does.",
                error=True), content_type="text/html")
        self.limits.succeeded(name, remote, now)
        session = self.sessions.start(name, now)
        response = redirect("/")
        self.set_cookie(response, session.token)
        return response

    async def journal_limited(self, name: str, remote: str, wait: float, now: float) -> None:
        """A refused-unchecked try, journaled at most once a minute per address, with how many were
        not: a flood of them cannot fill the journal nor queue real sign-ins behind its writes."""
        last, untold = self._limited_said.get(remote, (None, 0))
        if last is not None and now - last < LIMITED_SAID_EVERY:
            self._limited_said[remote] = (last, untold + 1)
            return
        self._limited_said[remote] = (now, 0)
        more = f"; {untold} more from this address since the last such row" if untold else ""
        await self.journal_sign_in(name, "rate_limited", remote,
                                   f"too many failed tries: refused unchecked for {wait:.0f} s more{more}")

    async def proxy_sign_in(self, request: web.Request) -> WebSession | None:
        """Behind a trusted proxy: the person its header names, signed in on their first page."""
        header = self.config.trusted_header
        if not header:
            return None
        name = request.headers.get(header, "").strip()
        remote = self.remote(request)
        if not name:
            await self.journal_sign_in("", "refused", remote, f"the proxy sent no {header} header")
            return None
        user = self.users().get(name)
        if user is None:
            await self.journal_sign_in(name, "refused", remote, f"{header} names nobody in the users file")
            return None
        if not await self.journal_sign_in(name, "signed_in", remote, f"by the reverse proxy's {header}"):
            return None
        session = self.sessions.start(name, self.clock())
        request[NEW_TOKEN] = session.token
        return session

    async def handle_logout(self, request: web.Request) -> web.StreamResponse:
        if not self.same_origin(request):
            return plain(403, "Refused: a sign-out is accepted from this server's own page only (Origin).")
        session = self.session_of(request)
        if session is not None:
            await self.end_session(session, "signed out", outcome="signed_out")
        response = redirect("/login?why=out")
        response.del_cookie(self.cookie_name, path="/")
        return response

    async def end_session(self, session: WebSession, why: str, *, outcome: str = "expired",
                          journal: bool = True) -> None:
        self.sessions.end(session.token)
        if journal:
            await self.journal_sign_in(session.person, outcome, "-", why)
        for tab in list(self.tabs.pop(session.token, ())):
            await tab.socket.close(code=4001, message=why[:120].encode())
            await tab.console.end()

    # ---------------------------------------------------------------- the console's websocket
    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if not self.same_origin(request):
            log.warning("websocket refused: Origin %r from %s", request.headers.get("Origin"), self.remote(request))
            return plain(403, "Refused: the console's websocket opens from this server's own page only (Origin).")
        session = self.session_of(request)
        if session is None:
            return plain(401, "Sign in first.")
        user = self.users().get(session.person)
        if user is None:
            await self.end_session(session, "removed from the users file")
            return plain(401, "Sign in first.")
        if self.open_tabs() >= self.config.max_consoles:
            return plain(503, f"This server runs at most {self.config.max_consoles} consoles at once; "
                              "close another tab or try again later.")
        width = bounded(request.query.get("width"), 80, MIN_COLUMNS, MAX_COLUMNS)
        height = bounded(request.query.get("height"), 24, MIN_ROWS, MAX_ROWS)
        socket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE)
        await socket.prepare(request)
        console = PersonConsole(self.config.console_command, self.person_session(user),
                                write_bytes=socket.send_bytes, write_str=socket.send_str, close=socket.close,
                                download_manager=self.downloads)
        tab = Tab(socket, console)
        self.tabs.setdefault(session.token, set()).add(tab)
        self.started_consoles += 1
        try:
            await console.start(width, height)
            await self._relay(socket, console, session)
        finally:
            self.tabs.get(session.token, set()).discard(tab)
            await console.end()
            if not socket.closed:
                await socket.close()
        return socket

    async def _relay(self, socket: web.WebSocketResponse, console: PersonConsole, session: WebSession) -> None:
        """The tab's messages to its console. Anything not of textual.js's four kinds is dropped."""
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                continue
            if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
                continue
            kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
            if kind == "stdin" and isinstance(data, str):
                self.sessions.touch(session, self.clock())
                await console.send_bytes(data.encode("utf-8", "replace"))
            elif kind == "resize" and isinstance(data, dict):
                await console.set_terminal_size(bounded(data.get("width"), 80, MIN_COLUMNS, MAX_COLUMNS),
                                                bounded(data.get("height"), 24, MIN_ROWS, MAX_ROWS))
            elif kind == "ping" and isinstance(data, str):
                await socket.send_json(["pong", data[:32]])
            elif kind == "blur":
                await console.blur()
            elif kind == "focus":
                await console.focus()

    async def handle_download(self, request: web.Request) -> web.StreamResponse:
        """A file the console exported, to the tab of the session that asked for it and nobody else."""
        session = self.session_of(request)
        key = request.match_info["key"]
        try:
            meta = await self.downloads.get_download_metadata(key)
        except KeyError:
            return plain(404, "no such download")
        mine = {tab.console.app_service_id for tab in self.tabs.get(session.token, ())} if session else set()
        if meta.app_service.app_service_id not in mine:
            return plain(404, "no such download")
        response = web.StreamResponse()
        response.headers["Content-Type"] = meta.mime_type + (f"; charset={meta.encoding}" if meta.encoding else "")
        safe_name = "".join(ch for ch in meta.file_name if ch.isalnum() or ch in "._-") or "export"
        response.headers["Content-Disposition"] = f'attachment; filename="{safe_name}"'
        await response.prepare(request)
        async for chunk in self.downloads.download(key):
            await response.write(chunk)
        await response.write_eof()
        return response

    def open_tabs(self) -> int:
        return sum(len(tabs) for tabs in self.tabs.values())

    # ---------------------------------------------------------------- expiry
    async def _start_reaper(self, _app: web.Application) -> None:
        await asyncio.to_thread(remove_orphaned_export_directories)  # a serve killed before left some
        self._reaper = asyncio.create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY)
            await self.reap()

    async def reap(self) -> None:
        """End every session whose time is up: journal it, close its tabs, stop their consoles."""
        for session, why in self.sessions.reap(self.clock()):
            await self.end_session(session, why)
        # a console killed (SIGKILL, the OOM killer) could not remove its downloads' directory
        await asyncio.to_thread(remove_orphaned_export_directories)
        if not self.tabs:
            return
        try:
            people = self.users()
        except UsersUnreadable:  # a file being edited by hand: keep everyone until it parses again
            return
        if not people:  # emptied (an editor truncating it first): not read as "everyone removed"
            return
        for session in self.sessions.live():
            if session.person not in people:
                await self.end_session(session, "removed from the users file")

    async def _shut_down(self, _app: web.Application) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for token in list(self.tabs):
            for tab in list(self.tabs.pop(token, ())):
                await tab.socket.close(code=1001, message=b"server shutting down")
                await tab.console.end()
        await asyncio.to_thread(self.journal.close)


# ---------------------------------------------------------------- pages
class UsersUnreadable(LeasectlError):
    """The users file does not parse just now."""


def as_login(dsn: str, login: str | None) -> str:
    """serve's DSN for a person's login: the user replaced and serve's own password dropped (theirs,
    if the server asks, comes from libpq's password file; serve's is never offered for them)."""
    if not login:
        return dsn
    parts = conninfo_to_dict(dsn)
    parts.pop("password", None)
    parts["user"] = login
    return make_conninfo("", **parts)


def printable(text: str) -> str:
    """A text for the journal and the log: NUL and control characters replaced (a NUL cannot even
    be sent as text; a newline or an escape would forge a line of a log)."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def redirect(location: str) -> web.Response:
    """A 303 returned, not raised: the guard's headers go on it like on any answer."""
    return web.Response(status=303, headers={"Location": location})


def plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def bounded(value: object, default: int, low: int, high: int) -> int:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return default
    return max(low, min(high, number))


def font_size(value: str | None) -> int:
    return bounded(value, 16, 8, 32)


def minutes(seconds: float) -> str:
    whole = int(seconds + 59) // 60
    return f"{whole} minute{'s' if whole != 1 else ''}"


def page(name: str, **values: str) -> str:
    text = (HERE / "templates" / name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace("{{ " + key + " }}", value)
    return text


def login_page(message: str = "", *, error: bool = False) -> str:
    shown = f'<p class="{"error" if error else "note"}" role="alert">{html.escape(message)}</p>' if message else ""
    return page("login.html", message=shown)


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


def run(config: ServeConfig, *, announce: Callable[[str], None] = print) -> None:
    """Serve until SIGINT/SIGTERM."""
    logging.basicConfig(level=os.environ.get("LEASECTL_SERVE_LOG", "INFO"), format="%(asctime)s %(message)s")
    console = WebConsole(config)
    context = tls_context(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key else None
    host = f"[{config.host}]" if ":" in config.host else config.host
    shown = config.public_url or f"{config.scheme}://{host}:{config.port}/"
    # said once the socket is bound (run_app prints after its sites start), not before a refusal
    web.run_app(console.make_app(), host=config.host, port=config.port, ssl_context=context,
                print=lambda _line: announce(f"leasectl serve: the console at {shown} (Ctrl+C stops it)"),
                access_log=None, handle_signals=True)
