"""A lane: one long-lived connection to the database, made again after it is lost, with one
backoff for every user (the worker's claim and heartbeat connections, the console's read, action
and listen connections, the exporter's, the supervisor's).

What a lane does, in one place:

* it connects with `console.db.connect.connect` (our limits, application_name), drops to the
  auditor role when read-only, runs the user's setup (LISTEN, the display clock) and, if asked,
  checks the schema version -- on every new connection. Behind a connection pooler in
  transaction mode the limits, the role and the clock go with every transaction instead, and
  nothing LISTENs (console.db.pooler; `pooler` says which pooler the connection went through);
* a connection found lost (DatabaseUnavailable, or a driver error saying so) is dropped, counted
  and made again on the next use; any other error leaves a sound connection alone;
* it never sends anything twice by itself. `read` runs an idempotent read once more on a fresh
  connection when the reused one turns out dead; `act` asks a reused connection whether it is
  alive before an action leaves (meta/ping) -- that is an action's one retry, made before any of
  it was sent. An action whose COMMIT went unanswered is OutcomeUnknown
  (console.db.connect.action_transaction) and nobody resends it;
* it keeps the time of the next attempt (the count of failures starts over once a connection is
  made and set up): the loops that wait for the database (a worker's claims, a listener, the
  supervisor's ticks) wait with `pause`, the heartbeat schedules its next beat by `retry_in`. A
  call made by a person or a scraper is not held back: it connects when asked;
* its state says whether it is connected, since when it is down and when it tries again.

One lane is used by one thread at a time: `use`, `run`, `read`, `act` hold its lock for the whole
call (statements of the calls of one worker queue on its claim lane). `state` and `retry_in`
never wait for it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from console.db.connect import Conn, assume_auditor, connect, ping, translate_error
from console.db.migrate import check_compatible
from console.db.pooler import Pooler, pooler_of
from console.shared.config import APPLICATION_NAME, CONSOLE_LIMITS, SessionLimits
from console.shared.errors import DatabaseUnavailable

T = TypeVar("T")
log = logging.getLogger("leasectl.lane")

# The one reconnection policy. The first retry comes within half a second (a server restart is
# over in a second or two); the window doubles with each failure up to 10 s, so a database that
# stays away is asked by each client about every 5 s on average, and one that comes back is found
# within 10 s at worst.
RECONNECT_BASE_SECONDS = 0.5
RECONNECT_CAP_SECONDS = 10.0


def reconnect_delay(failures: int, *, base: float = RECONNECT_BASE_SECONDS, cap: float = RECONNECT_CAP_SECONDS,
                    rand: Callable[[], float] = random.random) -> float:
    """How long to wait after the `failures`-th failure in a row: "full jitter", a uniformly random
    part of a window that doubles from `base` up to `cap` (0 before any failure).

    Full jitter, not decorrelated jitter: a fleet that lost the database at one instant (a server
    restart) is spread evenly over the whole window at every attempt, which is the point -- with
    a fixed doubling every client tried at the same instants, and a thundering herd met the
    server as it came back. Decorrelated jitter (each delay drawn from the previous one times
    three) spreads a fleet too, but a lane's n-th delay then depends on its own history and has no
    bound but the cap; with full jitter the n-th delay is known to lie in [0, base * 2^(n-1)],
    which is what `state` reports and the tests check. A delay near zero costs one refused
    connection; the window still doubles after it."""
    if failures <= 0:
        return 0.0
    return rand() * reconnect_window(failures, base=base, cap=cap)


def reconnect_window(failures: int, *, base: float = RECONNECT_BASE_SECONDS,
                     cap: float = RECONNECT_CAP_SECONDS) -> float:
    """The upper bound of the delay after the `failures`-th failure in a row."""
    if failures <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(failures - 1, 64))


@dataclass
class Backoff:
    """The policy with its count: `failed()` gives the next delay, `succeeded()` starts over.
    `rand` is the random source (a seeded `random.Random(n).random` makes it deterministic); by
    default each backoff has its own, seeded by the operating system, so that no two processes or
    lanes draw the same delays."""

    base: float = RECONNECT_BASE_SECONDS
    cap: float = RECONNECT_CAP_SECONDS
    rand: Callable[[], float] = field(default_factory=lambda: random.Random().random)
    failures: int = 0

    def failed(self) -> float:
        self.failures += 1
        return reconnect_delay(self.failures, base=self.base, cap=self.cap, rand=self.rand)

    def succeeded(self) -> None:
        self.failures = 0

    @property
    def window(self) -> float:
        """The bound of the delay the last failure drew from."""
        return reconnect_window(self.failures, base=self.base, cap=self.cap)


@dataclass(frozen=True)
class LaneState:
    """What a lane can say about itself, at one instant."""

    name: str
    connected: bool
    failures: int  # failures in a row since the last connection that worked
    down_since: datetime | None  # the first failure of this outage (UTC); None while not down
    next_attempt_in: float | None  # seconds until the next attempt is due (0: now); None while not down
    last_error: str | None

    @property
    def down(self) -> bool:
        return self.down_since is not None


class LaneBusy(Exception):
    """Another thread held the lane longer than the caller was willing to wait."""


Dsn = str | Callable[[], str]


class Lane:
    """One connection, made again when it is lost; see the module's docstring."""

    def __init__(self, dsn: Dsn, *, application_name: str = APPLICATION_NAME,
                 limits: SessionLimits = CONSOLE_LIMITS, read_only: bool = False, check_schema: bool = False,
                 setup: Callable[[Conn], object] | None = None, backoff: Backoff | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        # a callable DSN is asked at each connection (a worker's `dsn` may change between them)
        self._dsn = dsn
        self.name = application_name
        self.limits = limits
        self.read_only = read_only
        self.check_schema = check_schema
        self.setup = setup
        self.backoff = backoff if backoff is not None else Backoff()
        self._clock = clock
        self._wall_clock = wall_clock
        self._conn: Conn | None = None
        self._lock = threading.Lock()  # the connection: one user at a time
        self._state_lock = threading.Lock()  # the bookkeeping below: never held across I/O
        self._down_since: datetime | None = None
        self._next_attempt_at: float | None = None
        self._last_error: str | None = None
        self._pooler: Pooler | None = None
        self._pooler_told = False

    @property
    def dsn(self) -> str:
        return self._dsn() if callable(self._dsn) else self._dsn

    # ------------------------------------------------------------------ what it says
    @property
    def state(self) -> LaneState:
        with self._state_lock:
            return LaneState(self.name, _usable(self._conn), self.backoff.failures, self._down_since,
                             self._retry_in(), self._last_error)

    @property
    def pooler(self) -> Pooler | None:
        """The connection pooler the last connection went through (console.db.pooler), if any."""
        return self._pooler

    def retry_in(self) -> float | None:
        """Seconds until the next attempt is due (0: now), or None when the lane is not down."""
        with self._state_lock:
            return self._retry_in()

    def _retry_in(self) -> float | None:
        if self._next_attempt_at is None:
            return None
        return max(self._next_attempt_at - self._clock(), 0.0)

    def pause(self, stop: threading.Event | None = None) -> bool:
        """Wait until the next attempt is due (at once when the lane is not down), or until `stop`
        is set. True when `stop` is set."""
        wait = self.retry_in() or 0.0
        if stop is None:
            if wait:
                time.sleep(wait)
            return False
        return stop.wait(wait) if wait else stop.is_set()

    # ------------------------------------------------------------------ using it
    @contextmanager
    def use(self, *, wait: float | None = None) -> Iterator[Conn]:
        """The connection, for this thread alone until the block ends (made now if there is none).
        `wait` bounds the wait for another thread's use (LaneBusy after it). A lost connection
        raises DatabaseUnavailable, whatever the driver said; nothing is retried."""
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            raise LaneBusy(f"{self.name}: busy")
        try:
            with self._using() as conn:
                yield conn
        finally:
            self._lock.release()

    def run(self, fn: Callable[[Conn], T], *, wait: float | None = None) -> T:
        """fn on the connection, once."""
        with self.use(wait=wait) as conn:
            return fn(conn)

    def read(self, fn: Callable[[Conn], T]) -> T:
        """An idempotent read (fn changes nothing: it may run twice). A connection that died while
        idle -- a server restart, pg_terminate_backend -- is found dead only when used: the read
        then runs once more on a fresh connection, so that a database that is back is not
        reported unreachable. A fresh connection that fails is an outage: DatabaseUnavailable."""
        with self._held():
            reused = _usable(self._conn)
            try:
                return self._attempt(fn)
            except DatabaseUnavailable as exc:
                if not reused:
                    raise
                log.info("%s: the connection was dead (%s); reading again on a fresh one", self.name, exc)
                return self._attempt(fn)

    def act(self, fn: Callable[[Conn], T]) -> T:
        """An action, never sent twice. A reused connection is first asked whether it is alive
        (meta/ping, one round trip) and made again if not: nothing of the action has left yet, so
        that is its one retry. If the connection dies once the action was sent, fn's own
        transaction (console.db.connect.action_transaction) says whether it cannot have committed
        (DatabaseUnavailable: nothing applied) or may have (OutcomeUnknown: look at the journal)."""
        with self._held():
            if _usable(self._conn):
                try:
                    self._attempt(ping)
                except DatabaseUnavailable as exc:
                    log.info("%s: the connection was dead (%s); the action goes on a fresh one", self.name, exc)
            return self._attempt(fn)

    def connect(self) -> None:
        """Open the connection now, if it is not open (it is otherwise opened when first used)."""
        with self.use():
            pass

    def drop(self, failure: BaseException | None = None) -> None:
        """Close the connection; the next use makes a new one. With `failure` (a user's own reason
        to give up on it), the failure is counted and the next attempt waits like after a loss."""
        with self._held():
            self._discard()
            if failure is not None:
                self._lost(failure)

    def close(self) -> None:
        """Close the connection (the lane can be used again: it reconnects)."""
        with self._held():
            self._discard()

    # ------------------------------------------------------------------ inside
    @contextmanager
    def _held(self) -> Iterator[None]:
        with self._lock:
            yield

    @contextmanager
    def _using(self) -> Iterator[Conn]:
        """The connection (the lock held by the caller), and what its errors mean for it."""
        conn = self._ensure()
        try:
            yield conn
        except DatabaseUnavailable as exc:  # OutcomeUnknown too: either way the connection is gone
            self._discard()
            self._lost(exc)
            raise
        except psycopg.Error as exc:
            # a driver error from outside console.db.connect.run (a transaction's BEGIN or COMMIT,
            # LISTEN's notifies): one that says the connection is lost is DatabaseUnavailable to
            # whoever called; any other stays what it is (a bug of ours, not the database's)
            error = translate_error(exc, self.name)
            if isinstance(error, DatabaseUnavailable):
                self._discard()
                self._lost(error)
                raise error from exc
            self._settle(conn, exc)
            raise
        except BaseException as exc:
            self._settle(conn, exc)
            raise

    def _attempt(self, fn: Callable[[Conn], T]) -> T:
        with self._using() as conn:
            return fn(conn)

    def _ensure(self) -> Conn:
        conn = self._conn
        if conn is not None and _usable(conn):
            return conn
        self._discard()
        try:
            conn = self._open()
        except DatabaseUnavailable as exc:
            self._lost(exc)
            raise
        with self._state_lock:
            self._conn = conn
            self._pooler = pooler_of(conn)
            self.backoff.succeeded()
            self._down_since = None
            self._next_attempt_at = None
            self._last_error = None
        if self._pooler is not None and not self._pooler_told:
            self._pooler_told = True  # once per lane: a reconnection finds the same pooler
            log.info("%s: through a connection pooler in %s mode (%s)", self.name, self._pooler.mode, self._pooler.how)
        return conn

    def _open(self) -> Conn:
        return open_session(self.dsn, limits=self.limits, read_only=self.read_only, application_name=self.name,
                            setup=self.setup, check_schema=self.check_schema)

    def _settle(self, conn: Conn, exc: BaseException) -> None:
        """After an error that did not say the connection was lost: keep the connection if it is
        sound and idle; a broken one is a loss, one left inside a transaction is closed."""
        if conn.broken:
            self._discard()
            self._lost(exc)
        elif conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            self._discard()

    def _lost(self, exc: BaseException) -> None:
        with self._state_lock:
            now = self._clock()
            delay = self.backoff.failed()
            if self._down_since is None:
                self._down_since = self._wall_clock()
            self._next_attempt_at = now + delay
            self._last_error = str(exc) or type(exc).__name__
        log.debug("%s: failure %d (%s); next attempt in %.2f s", self.name, self.backoff.failures, exc, delay)

    def _discard(self) -> None:
        with self._state_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it is already broken
                pass


def open_session(dsn: str, *, limits: SessionLimits = CONSOLE_LIMITS, read_only: bool = False,
                 application_name: str = APPLICATION_NAME, setup: Callable[[Conn], object] | None = None,
                 check_schema: bool = False, connect_timeout: int = 5) -> Conn:
    """The one connect-and-check: connect with our limits, drop to the auditor role when
    read-only (read-only by privilege where the login may, not only by
    default_transaction_read_only), run `setup`, check the schema if asked. The connection is
    closed again if any of it fails. Every lane opens its connections here; so do the one-shot
    sessions of the CLI and the exports."""
    conn = connect(dsn, limits=limits, read_only=read_only, application_name=application_name,
                   connect_timeout=connect_timeout)
    try:
        if read_only:
            assume_auditor(conn)
        if setup is not None:
            setup(conn)
        if check_schema:
            check_compatible(conn)
    except psycopg.Error as exc:
        conn.close()
        raise translate_error(exc, application_name) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _usable(conn: Conn | None) -> bool:
    return conn is not None and not conn.closed and not conn.broken


__all__ = ["RECONNECT_BASE_SECONDS", "RECONNECT_CAP_SECONDS", "Backoff", "Lane", "LaneBusy", "LaneState",
           "open_session", "reconnect_delay", "reconnect_window"]
