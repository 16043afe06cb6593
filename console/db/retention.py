"""What retention asks the database (console/operator/retention.py does the files): the months old
enough, what each holds, the metric rollup brought up to them, and the last step that drops one.
The SQL is queries/admin/ and migration 0021's functions, the schema owner's."""

from __future__ import annotations

import time
from datetime import date, datetime

from console.core.retention import Facts, Month
from console.db.connect import Conn, run, run_one
from console.shared.errors import LeasectlError, RowLocked
from console.shared.faults import crash_at

# how long the detach may wait for the history's lock, and how often it tries: a detach queued
# behind a long reader would hold every writer of the journal behind it
DETACH_LOCK_TIMEOUT_MS = 2_000
DETACH_ATTEMPTS = 5
# the rollup folds events older than a minute (0008); retention asks for no lag at all, and waits
# this long at most for the transactions that began before its watermark: xids are the whole
# server's, so a transaction in any database of the cluster (a backup, another application) holds
# the watermark back until it ends
FOLD_WAIT_SECONDS = 30.0


def default_months(conn: Conn, cutoff: datetime) -> list[date]:
    """The months of rows old enough still waiting in job_events_default (expected: none)."""
    return [r["month"] for r in run(conn, "admin/default_months", cutoff=cutoff)]


def adopt_default_rows(conn: Conn, cutoff: datetime) -> list[date]:
    """Rows old enough waiting in job_events_default get their month's partition first, so that no
    old row is left behind the months archived."""
    months = default_months(conn, cutoff)
    for month in months:
        run_one(conn, "admin/create_event_partition", month=month)
    return months


def months_before(conn: Conn, cutoff: datetime) -> list[Month]:
    return [Month(**r) for r in run(conn, "admin/retention_months", cutoff=cutoff)]


def facts(conn: Conn, month: Month) -> Facts:
    row = run_one(conn, "admin/month_facts", range_from=month.range_from, range_to=month.range_to)
    assert row is not None
    return Facts(rows=int(row["rows"]), first_id=row["first_id"], last_id=row["last_id"])


def fold_through(conn: Conn, last_id: int | None, *, wait_seconds: float = FOLD_WAIT_SECONDS) -> int:
    """Bring the metric rollup (0008) past `last_id`, so that the counters keep what is dropped;
    returns where it stands. The fold takes a watermark in two passes (every transaction that could
    still add an event below it must be over first): called again, a moment apart, until it is
    past `last_id` or `wait_seconds` have gone by."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.05
    while True:
        row = run_one(conn, "metrics/fold", lag_seconds=0)
        folded = int(row["folded_through"]) if row else 0
        if last_id is None or folded >= last_id or time.monotonic() >= deadline:
            return folded
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 1.0)


def drop_month(conn: Conn, month: Month, facts: Facts, *, sha256: str, file: str, actor: str,
               reason: str | None) -> datetime:
    """The last step (leasectl_archive_month): checks, detach, drop, register, journal, in one
    transaction; a lock it cannot have within DETACH_LOCK_TIMEOUT_MS is tried again a few times.
    Returns where the online history now begins."""
    run(conn, "admin/lock_timeout", milliseconds=DETACH_LOCK_TIMEOUT_MS)
    for attempt in range(1, DETACH_ATTEMPTS + 1):
        try:
            with conn.transaction():
                row = run_one(conn, "admin/archive_month", month=month.month, rows=facts.rows,
                              first_id=facts.first_id, last_id=facts.last_id, sha256=sha256, file=file,
                              actor=actor, reason=reason)
                assert row is not None
                crash_at("retention:detached")  # detached and dropped, not committed: all undone
            crash_at("retention:dropped")
            return row["archived_before"]
        except RowLocked:
            if attempt == DETACH_ATTEMPTS:
                raise LeasectlError(
                    f"the history stayed locked by other sessions {DETACH_ATTEMPTS} times "
                    f"({DETACH_LOCK_TIMEOUT_MS} ms each): {month.month:%Y-%m} was not dropped",
                    hint="its archive is written and verified; run the same command again later") from None
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")

