"""Past months of history for the retention and archived-audit tests: realistic calls (the audit
benchmark's shapes, queries/audit/bench_seed_*.sql, whose histories `audit verify` finds clean)
dated inside a month that has ended, written in exact mode (superuser), after that month's
partition was created (migration 0021) so that they land in it, not in the default partition."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from console.db.connect import Conn, run, run_one

TOOL = dict(name="bench_audit", side_effect="read_only", lease_seconds=60, heartbeat_seconds=10,
            missed_heartbeats=2, jitter_seconds=10, max_attempts=5, stage_timeout_seconds=None,
            description="history fixture")
EVENTS_PER_CALL = 10


def months_ago(n: int, now: datetime | None = None) -> date:
    """The first day of the month n months before this one (UTC)."""
    today = (now or datetime.now(UTC)).date().replace(day=1)
    year, month = divmod(today.year * 12 + today.month - 1 - n, 12)
    return date(year, month + 1, 1)


def seed_month(conn: Conn, month: date, calls: int, *, start: int = 0, partition: bool = True) -> list[int]:
    """`calls` calls with ten events each, 25 s apart from the month's second day on; returns the
    month's first and last event id. `partition`: create the month's partition first (not before
    migration 0021, when job_events is one table)."""
    run(conn, "admin/register_tool", **TOOL)
    if partition:
        run_one(conn, "admin/create_event_partition", month=month)
    base = datetime(month.year, month.month, 2, tzinfo=UTC)
    assert base + timedelta(seconds=25 * (start + calls) + 100) < datetime(month.year, month.month, 28, tzinfo=UTC)
    run(conn, "demo/exact_mode", on=True)
    try:
        run(conn, "audit/bench_seed_events", start=start, count=calls, base=base)
        run(conn, "audit/bench_seed_calls", start=start, count=calls, base=base)
    finally:
        run(conn, "demo/exact_mode", on=False)
    row = conn.execute("select min(id), max(id) from job_events where at >= %s and at < %s",
                       (base, base + timedelta(days=26))).fetchone()
    return [row["min"], row["max"]]
