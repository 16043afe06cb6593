"""The web console's rules of signing in (`leasectl serve`): how many tries, how long a session
lives, and what an Origin or Host may be. No I/O: the server (console/operator/web/server.py)
feeds them the clock and the requests, the tests feed them instants.

* Tries: a person's name and a browser's address each get `MAX_FAILURES` failed tries within
  `FAILURE_WINDOW`; past that, every attempt is refused unanswered (no password is checked) until
  the oldest failure leaves the window. Per name, so that a password cannot be guessed from many
  addresses; per address, so that one address cannot walk through every name. A success clears
  its name's count (a person who finally types it right is not held back by their own typos).
* Sessions: a random 256-bit token (the cookie's value, never derived from the person) names a
  session held in the server's memory; it ends after `idle` without a keystroke or a page, or
  `lifetime` after sign-in whatever happens, or when its person signs out. A restarted server
  forgets every session: everyone signs in again (nothing to steal from a disk).
* Origins and hosts: see `allowed_origin` and `allowed_host`.
"""

from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from pydantic import BaseModel

MAX_FAILURES = 5
MAX_FAILURES_PER_ADDRESS = 20
FAILURE_WINDOW = 15 * 60.0
IDLE_SECONDS = 30 * 60.0
LIFETIME_SECONDS = 12 * 3600.0
# web_sign_ins.outcome (migration 0025)
OUTCOMES = ("signed_in", "refused", "rate_limited", "signed_out", "expired")


class SignIn(BaseModel):
    """One row of the sign-in journal (queries/web/sign_ins.sql)."""

    id: int
    at: datetime
    person: str
    outcome: str
    remote: str
    reason: str | None
    db_role: str


class TryLimiter:
    """Failed sign-ins per key (a person's name, a browser's address) in a sliding window."""

    def __init__(self, limit: int, window: float = FAILURE_WINDOW) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, key: str, now: float) -> deque[float]:
        failures = self._failures.get(key)
        if failures is None:
            return deque()
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            del self._failures[key]
        return failures

    def wait(self, key: str, now: float) -> float:
        """Seconds before `key` may try again: 0 when it may now."""
        failures = self._recent(key, now)
        if len(failures) < self.limit:
            return 0.0
        return max(0.0, failures[len(failures) - self.limit] + self.window - now)

    def failed(self, key: str, now: float) -> None:
        self._recent(key, now)
        self._failures.setdefault(key, deque()).append(now)
        # a key's memory is bounded: only the last `limit` failures decide anything
        failures = self._failures[key]
        while len(failures) > self.limit:
            failures.popleft()

    def clear(self, key: str) -> None:
        self._failures.pop(key, None)

    def forgive(self, key: str, at: float) -> None:
        """Take back one try counted at `at` (a try that turned out right)."""
        failures = self._failures.get(key)
        if failures is None:
            return
        for i in range(len(failures) - 1, -1, -1):
            if failures[i] == at:
                del failures[i]
                break
        if not failures:
            del self._failures[key]

    def __len__(self) -> int:
        return len(self._failures)


@dataclass
class SignInLimits:
    """Both limiters, asked together: a try waits for the longer of the two."""

    by_person: TryLimiter = field(default_factory=lambda: TryLimiter(MAX_FAILURES))
    by_address: TryLimiter = field(default_factory=lambda: TryLimiter(MAX_FAILURES_PER_ADDRESS))

    def wait(self, person: str, address: str, now: float) -> float:
        return max(self.by_person.wait(person.casefold(), now), self.by_address.wait(address, now))

    def attempt(self, person: str, address: str, now: float) -> float:
        """Ask and count at once: 0 when the try may go on, and it is then counted as failed until
        `succeeded` says otherwise; else the seconds to wait (nothing counted). Counted before the
        password is checked, not after: tries sent at the same moment would otherwise all pass the
        limit while the first is still being checked."""
        wait = self.wait(person, address, now)
        if wait == 0:
            self.failed(person, address, now)
        return wait

    def failed(self, person: str, address: str, now: float) -> None:
        self.by_person.failed(person.casefold(), now)
        self.by_address.failed(address, now)

    def succeeded(self, person: str, address: str | None = None, at: float | None = None) -> None:
        """A right password: its name starts afresh, and the try `attempt` counted at `at` for its
        address is taken back."""
        self.by_person.clear(person.casefold())
        if address is not None and at is not None:
            self.by_address.forgive(address, at)


@dataclass
class WebSession:
    token: str
    person: str
    started: float
    last_seen: float

    def ends_at(self, idle: float, lifetime: float) -> float:
        return min(self.last_seen + idle, self.started + lifetime)

    def why_ended(self, now: float, idle: float, lifetime: float) -> str | None:
        if now >= self.started + lifetime:
            return f"the session's lifetime of {span(lifetime)} ended"
        if now >= self.last_seen + idle:
            return f"no keystroke for {span(idle)}"
        return None


def span(seconds: float) -> str:
    """12 h, 30 min, 1 h 30 min, 45 s: a session's limits as a person reads them."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p) or "0 s"


class Sessions:
    """The signed-in sessions, by token."""

    def __init__(self, *, idle: float = IDLE_SECONDS, lifetime: float = LIFETIME_SECONDS) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self._by_token: dict[str, WebSession] = {}

    def start(self, person: str, now: float) -> WebSession:
        session = WebSession(token=secrets.token_urlsafe(32), person=person, started=now, last_seen=now)
        self._by_token[session.token] = session
        return session

    def find(self, token: str | None, now: float) -> WebSession | None:
        """The live session the token names; None for none, a forged one or one that has ended
        (ended ones are taken out by `reap`, which journals them)."""
        if not token:
            return None
        session = self._by_token.get(token)
        if session is None or session.why_ended(now, self.idle, self.lifetime) is not None:
            return None
        return session

    def touch(self, session: WebSession, now: float) -> None:
        session.last_seen = max(session.last_seen, now)

    def end(self, token: str) -> WebSession | None:
        return self._by_token.pop(token, None)

    def reap(self, now: float) -> list[tuple[WebSession, str]]:
        """Take out every session that has ended, each with why."""
        ended = []
        for token, session in list(self._by_token.items()):
            why = session.why_ended(now, self.idle, self.lifetime)
            if why is not None:
                del self._by_token[token]
                ended.append((session, why))
        return ended

    def live(self) -> list[WebSession]:
        return list(self._by_token.values())

    def __len__(self) -> int:
        return len(self._by_token)


# --- where a request may come from ---------------------------------------------------------------

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def split_host(host: str) -> tuple[str, int | None]:
    """'name:port' (or '[v6]:port') as the Host header has it, lowercased; the port None if absent."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        name, rest = host[: end + 1], host[end + 1:]
    else:
        name, _, port_text = host.partition(":")
        rest = f":{port_text}" if port_text else ""
    if rest.startswith(":") and rest[1:].isdigit():
        return name, int(rest[1:])
    return name, None


def allowed_host(host: str | None, names: frozenset[str], port: int, scheme: str = "http") -> bool:
    """Whether a request's Host header names this server: one of its names at its port (no port:
    the scheme's own, as a proxy's `Host $host` sends it). A page on a name the attacker controls
    that resolves to this machine (DNS rebinding) carries its own name in Host and is refused,
    though same-origin rules would let its scripts read the answers."""
    if not host:
        return False
    name, given_port = split_host(host)
    if given_port is None:
        given_port = 443 if scheme == "https" else 80
    return name in names and given_port == port


def allowed_origin(origin: str | None, scheme: str, names: frozenset[str], port: int) -> bool:
    """Whether a browser's Origin is this server's own page: same scheme, one of its names, its
    port. A missing Origin is refused: every browser sends one with a websocket and with a POST,
    so a request without it did not come from our page. `null` (a sandboxed frame, a file) is no
    origin of ours."""
    if not origin or origin == "null":
        return False
    try:
        parts = urlsplit(origin)
        port_given = parts.port  # raises for a port that is not one (`:8022.evil`, `:99999`)
    except ValueError:
        return False
    if parts.scheme != scheme or parts.path not in ("", "/") or parts.query or parts.username is not None:
        return False
    default = 443 if scheme == "https" else 80
    given = port_given if port_given is not None else default
    host = (parts.hostname or "").lower()
    shown = f"[{host}]" if ":" in host else host
    return shown in names and given == port
