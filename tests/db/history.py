"""Past history for the retention, archived-audit and history-benchmark code: realistic calls (the
audit benchmark's shapes, queries/audit/bench_seed_*.sql, whose histories `audit verify` finds
clean) dated in the past, written in exact mode (superuser), after their months' partitions were
created (migration 0021) so that they land in them, not in the default partition."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta

from console.db.connect import Conn, run, run_one

TOOL = dict(name="bench_audit", side_effect="read_only", lease_seconds=60, heartbeat_seconds=10,
            missed_heartbeats=2, jitter_seconds=10, max_attempts=5, stage_timeout_seconds=None,
            description="history fixture")
EVENTS_PER_CALL = 10
STEP = 25  # seconds between two calls' starts (queries/audit/bench_seed_events.sql)
BATCH = 10_000  # calls (100,000 events) a seeding statement


def months_ago(n: int, now: datetime | None = None) -> date:
    """The first day of the month n months before this one (UTC)."""
    today = (now or datetime.now(UTC)).date().replace(day=1)
    year, month = divmod(today.year * 12 + today.month - 1 - n, 12)
    return date(year, month + 1, 1)


def seed_calls(conn: Conn, calls: int, base: datetime, *, start: int = 0, months: Iterable[date] = (),
               on_batch: Callable[[int], None] | None = None) -> None:
    """Calls start+1 .. start+calls (ten events each, call g starting at base + 25 s x g), in
    batches of BATCH; `months`' partitions created first. The tool must be registered."""
    for month in months:
        run_one(conn, "admin/create_event_partition", month=month)
    run(conn, "demo/exact_mode", on=True)
    try:
        for first in range(start, start + calls, BATCH):
            count = min(BATCH, start + calls - first)
            run(conn, "audit/bench_seed_events", start=first, count=count, base=base)
            run(conn, "audit/bench_seed_calls", start=first, count=count, base=base)
            if on_batch:
                on_batch(first - start + count)
    finally:
        run(conn, "demo/exact_mode", on=False)


def seed_month(conn: Conn, month: date, calls: int, *, start: int = 0, partition: bool = True) -> list[int]:
    """`calls` calls 25 s apart from the month's second day on; returns the month's first and last
    event id. `partition`: create the month's partition first (not before migration 0021, when
    job_events is one table)."""
    run(conn, "admin/register_tool", **TOOL)
    base = datetime(month.year, month.month, 2, tzinfo=UTC)
    assert base + timedelta(seconds=STEP * (start + calls) + 100) < datetime(month.year, month.month, 28, tzinfo=UTC)
    seed_calls(conn, calls, base, start=start, months=[month] if partition else [])
    row = conn.execute("select min(id), max(id) from job_events where at >= %s and at < %s",
                       (base, base + timedelta(days=26))).fetchone()
    return [row["min"], row["max"]]
