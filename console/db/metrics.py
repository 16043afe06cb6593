"""The metrics' reads: `leasectl metrics`, its exporter and screen 7.

Every function takes a connection and returns typed rows (console.core.metrics); the SQL is in
queries/metrics/. Nothing here writes but `fold`, which only moves history totals into the
rollup (migration 0008), off the hot path.
"""

from __future__ import annotations

from datetime import datetime

from console.core.metrics import (
    LISTED_UNKNOWN,
    SPARK_MINUTES,
    AcceptWaitTotals,
    By,
    FoldResult,
    LiveRow,
    MetricsGroup,
    MetricsReport,
    MetricsScreenData,
    MinuteSeries,
    Scrape,
    TotalRow,
    WaitingCall,
    WaitingCalls,
    check_by,
)
from console.core.models import ToolSettings
from console.db.connect import Conn, rows_as, run, run_one


def report(conn: Conn, *, window_seconds: float, by: By | str = "tool") -> MetricsReport:
    """One group per tool, model, provider or service: live values now, history values over the window,
    read in one snapshot."""
    chosen = check_by(by)
    with conn.transaction():
        run(conn, "meta/snapshot")
        return _report(conn, window_seconds, chosen, _clock(conn))[0]


def _clock(conn: Conn) -> datetime:
    row = run_one(conn, "metrics/clock")
    assert row is not None
    now: datetime = row["now"]
    return now


def _report(conn: Conn, window_seconds: float, by: By, now: datetime) -> tuple[MetricsReport, list]:
    rows = run(conn, "metrics/groups", now=now, window_seconds=window_seconds, by=by, minutes=SPARK_MINUTES)
    report = MetricsReport(window_seconds=window_seconds, by=by, at=now,
                           groups=[MetricsGroup.from_row(r) for r in rows])
    return report, (rows[0]["minutes"] if rows else [])


def _minutes(minute_rows: list, outcome_unknown_now: int, count: int = SPARK_MINUTES) -> MinuteSeries:
    """Per-minute series of the last `count` minutes, oldest first, from groups.sql's `minutes`
    ([minutes ago, metric, count, p95]). The level of calls waiting in outcome_unknown is rebuilt
    backwards from the count now and the moves in and out of it."""
    series: dict[str, list[float]] = {name: [0.0] * count for name in (
        "renewal_failures", "reclaims", "stale_writes_rejected", "queue_wait", "outcome_unknown_entered",
        "outcome_unknown_left")}
    for minutes_ago, metric, n, p95 in minute_rows:
        index = count - 1 - int(minutes_ago)
        if 0 <= index < count and metric in series:
            series[metric][index] = float(p95 if metric == "queue_wait" else n)
    level = [0.0] * count
    waiting = float(outcome_unknown_now)
    for index in range(count - 1, -1, -1):
        level[index] = max(waiting, 0.0)
        waiting -= series["outcome_unknown_entered"][index] - series["outcome_unknown_left"][index]
    return MinuteSeries(renewal_failures=series["renewal_failures"], reclaims=series["reclaims"],
                        stale_writes_rejected=series["stale_writes_rejected"],
                        queue_wait_p95=series["queue_wait"], outcome_unknown=level)


def screen(conn: Conn, *, by: By | str = "tool", window_seconds: float = 3600.0) -> MetricsScreenData:
    """Screen 7's refresh: the groups and the last hour's minutes, from one scan of the window."""
    chosen = check_by(by)
    with conn.transaction():
        run(conn, "meta/snapshot")
        groups, minute_rows = _report(conn, window_seconds, chosen, _clock(conn))
        paused = run(conn, "views/tools", name=None, paused_only=True)
    series = _minutes(minute_rows, sum(g.outcome_unknown for g in groups.groups))
    return MetricsScreenData(report=groups, minutes=series, paused_tools=rows_as(ToolSettings, paused))


EVERY_ID = 9223372036854775807  # the largest bigint: "every event after the watermark"


def scrape(conn: Conn, accept: AcceptWaitTotals | None = None) -> Scrape:
    """Everything /metrics shows: the unfinished calls now and the history totals, one snapshot.
    `accept` is the exporter's fold of the accept-wait histogram (AcceptWaitTotals): what it holds
    is not read again; without it, every claim of the history is read."""
    kept = accept if accept is not None else AcceptWaitTotals()
    with conn.transaction():
        run(conn, "meta/snapshot")
        live = [LiveRow.model_validate(r) for r in run(conn, "metrics/live")]
        folds = run_one(conn, "metrics/folds")
        after = folds["folded_through"] if folds else 0
        totals = [TotalRow.model_validate(r) for r in run(conn, "metrics/totals", after=after)]
        if kept.through > after:
            kept.restart()
        if kept.through < after:
            # below the watermark nothing new can appear: read once, kept (even should this read fail later)
            kept.add([TotalRow.model_validate(r) for r in run(conn, "metrics/accept_wait", after=kept.through,
                                                               through=after)], through=after)
        tail = [TotalRow.model_validate(r) for r in run(conn, "metrics/accept_wait", after=after, through=EVERY_ID)]
        orphans = run(conn, "views/orphans")
        listed = run(conn, "metrics/outcome_unknown_calls", limit=LISTED_UNKNOWN)
    waiting = WaitingCalls(listed=tuple(WaitingCall(str(r["id"]), r["tool"], r["side_effect"]) for r in listed),
                           waiting=int(listed[0]["waiting"]) if listed else 0)
    return Scrape(live=live, totals=[*totals, *kept.with_tail(tail)], orphaned_agents=len(orphans), waiting=waiting)


def fold(conn: Conn, *, lag_seconds: float = 60.0) -> FoldResult:
    """Fold the history that is safely behind us into the rollup (the exporter's background job)."""
    row = run_one(conn, "metrics/fold", lag_seconds=lag_seconds)
    assert row is not None
    return FoldResult.model_validate(row)
