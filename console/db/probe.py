"""Does a database answer? Connect and one round trip (queries/meta/ping.sql), bounded in time, for
`leasectl contexts` and the console's context picker (ctrl+o): every context asked at once, each
with its own deadline, so one that hangs (a firewall that drops packets, a host that does not
resolve) costs its deadline and never holds up the answers of the others."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from console.db.connect import connect, ping
from console.db.fanout import ask_all
from console.shared.config import SessionLimits
from console.shared.contexts import Answer
from console.shared.dsn import mask_secrets

PROBE_SECONDS = 3
_PROBE_LIMITS = SessionLimits(statement_timeout_ms=PROBE_SECONDS * 1000, lock_timeout_ms=1000,
                              idle_in_transaction_ms=PROBE_SECONDS * 1000)


def brief(message: str) -> str:
    """libpq's long first line cut to what it says: `connection to server at "db", port 5432
    failed: Connection refused` -> `Connection refused`."""
    text = message.strip().splitlines()[0] if message.strip() else "no answer"
    for prefix in ("cannot connect to the database: ", "connection failed: "):
        text = text.removeprefix(prefix)
    if " failed: " in text:
        text = text.rsplit(" failed: ", 1)[1]
    return text.strip() or "no answer"


def probe(dsn: str, timeout: int = PROBE_SECONDS) -> Answer:
    """Connect (read-only, libpq's connect_timeout = `timeout`), ping, close."""
    started = time.monotonic()
    try:
        with connect(dsn, limits=_PROBE_LIMITS, read_only=True, application_name="leasectl-contexts",
                     connect_timeout=timeout) as conn:
            ping(conn)
    except Exception as exc:  # noqa: BLE001 - any failure is the answer: down, and why
        return Answer(answers=False, error=brief(mask_secrets(str(exc) or type(exc).__name__, dsn)))
    return Answer(answers=True, answered_in_ms=round((time.monotonic() - started) * 1000))


def probe_all(dsns: Mapping[str, str], timeout: int = PROBE_SECONDS,
              on_answer: Callable[[str, Answer], None] | None = None) -> dict[str, Answer]:
    """Every DSN asked at once (console.db.fanout); what has not answered `timeout` + 1 s later is
    down ("no answer within 3 s"): libpq's connect_timeout is per address, and a name with several
    addresses could take longer. `on_answer(name, answer)` hears each as it comes (the console's
    picker fills its rows one by one)."""

    def unanswered(_name: str, dsn: str, error: BaseException | None) -> Answer:
        if error is None:
            return Answer(answers=False, error=f"no answer within {timeout} s")
        return Answer(answers=False, error=brief(mask_secrets(str(error) or type(error).__name__, dsn)))

    return ask_all(dsns, lambda _name, dsn: probe(dsn, timeout), timeout + 1, unanswered, on_answer)


__all__ = ["PROBE_SECONDS", "Answer", "brief", "probe", "probe_all"]
