"""Does a database answer? Connect and one round trip (queries/meta/ping.sql), bounded in time, for
`leasectl contexts` and the console's context picker (ctrl+o): every context asked at once, each
with its own deadline, so one that hangs (a firewall that drops packets, a host that does not
resolve) costs its deadline and never holds up the answers of the others."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from console.db.connect import connect, ping
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
    """Every DSN asked at once, each on its own thread; what has not answered `timeout` + 1 s
    later is down ("no answer within 3 s"): libpq's connect_timeout is per address, and a name
    with several addresses could take longer. `on_answer(name, answer)` hears each as it comes
    (the console's picker fills its rows one by one); the threads are daemons, so one still
    hanging never keeps the process alive."""
    answers: dict[str, Answer] = {}
    lock = threading.Lock()

    def ask(name: str, dsn: str) -> None:
        answer = probe(dsn, timeout)
        with lock:
            if name in answers:  # the deadline has already spoken for it
                return
            answers[name] = answer
        if on_answer is not None:
            on_answer(name, answer)

    threads = [threading.Thread(target=ask, args=(name, dsn), name=f"probe-{name}", daemon=True)
               for name, dsn in dsns.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout + 1
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    late: list[tuple[str, Answer]] = []
    with lock:
        for name in dsns:
            if name not in answers:
                answers[name] = Answer(answers=False, error=f"no answer within {timeout} s")
                late.append((name, answers[name]))
    for name, answer in late:
        if on_answer is not None:
            on_answer(name, answer)
    return {name: answers[name] for name in dsns}


__all__ = ["PROBE_SECONDS", "Answer", "brief", "probe", "probe_all"]
