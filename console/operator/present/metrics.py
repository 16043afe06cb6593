"""The metrics in words, for `leasectl metrics` and screen 7 alike: the columns, each
value's text and its colour of urgency (triage's colours: console.operator.present.words.STYLE).
Every value that came from the database (a tool, model, provider or service name) passes `sanitize`."""

from __future__ import annotations

from typing import NamedTuple

from rich.console import Group
from rich.table import Table
from rich.text import Text

from console.core.health import Urgency
from console.core.metrics import MetricsGroup, MetricsReport
from console.operator.present.words import STYLE, when
from console.shared.text import format_seconds, sanitize

NO_KEY = "(none)"


class MetricColumn(NamedTuple):
    """A column of screen 7's table: at 80 columns the group, its live troubles and its lease stay
    (priority 0 and 1); the history's columns give way first (the sparklines below show them)."""

    field: str
    label: str
    width: int
    priority: int


COLUMNS = [
    MetricColumn("key", "group", 16, 0),
    MetricColumn("running", "run", 3, 0),
    MetricColumn("expired_leases", "expired", 7, 0),
    MetricColumn("outcome_unknown", "unknown", 7, 0),
    MetricColumn("cancel_unheard", "unheard", 7, 0),
    MetricColumn("oldest_heartbeat_age_seconds", "beat age", 8, 1),
    MetricColumn("min_lease_left_seconds", "lease left", 10, 1),
    MetricColumn("renewal_failures", "renew fail", 10, 2),
    MetricColumn("reclaimed", "reclaimed", 9, 2),
    MetricColumn("stale_writes_rejected", "stale", 5, 3),
    MetricColumn("lock_timeouts", "lock", 4, 3),
    MetricColumn("statement_timeouts", "stmt", 4, 3),
    MetricColumn("queue_wait_p95", "queue p95", 9, 3),
    MetricColumn("start_confirm_p95", "start p95", 9, 4),
    MetricColumn("queue_wait_p50", "queue p50", 9, 5),
    MetricColumn("start_confirm_p50", "start p50", 9, 5),
    MetricColumn("past_deadline", "past dl", 7, 6),
    MetricColumn("accept_wait_p95", "accept p95", 10, 6),
    MetricColumn("accept_wait_p50", "accept p50", 10, 7),
]

# a count that is not zero: how urgent (None: plain)
COUNT_URGENCY: dict[str, Urgency] = {
    "expired_leases": "bad", "outcome_unknown": "bad", "cancel_unheard": "warn", "renewal_failures": "warn",
    "stale_writes_rejected": "warn", "reclaimed": "watch", "lock_timeouts": "warn", "statement_timeouts": "warn",
    "past_deadline": "bad",
}


def key_words(key: str | None) -> tuple[str, str]:
    return (NO_KEY, STYLE["none"]) if key is None else (sanitize(key, max_chars=60), "bold")


def duration_words(seconds: float | None) -> str:
    """`0.42s`, `7.5s`, `2m05s`; `—` when nothing was measured."""
    if seconds is None:
        return "—"
    if abs(seconds) < 10:
        return f"{seconds:.2f}s" if abs(seconds) < 1 else f"{seconds:.1f}s"
    return format_seconds(seconds, signed=True)


def group_words(group: MetricsGroup) -> dict[str, tuple[str, str]]:
    """Each column's text and style for one group."""
    cells: dict[str, tuple[str, str]] = {"key": key_words(group.key)}
    for field, urgency in COUNT_URGENCY.items():
        value = getattr(group, field)
        cells[field] = (str(value), STYLE[urgency] if value else STYLE["none"])
    cells["running"] = (str(group.running), STYLE["ok"] if group.running else STYLE["none"])
    age = group.oldest_heartbeat_age_seconds
    cells["oldest_heartbeat_age_seconds"] = (duration_words(age), STYLE["none"] if age is None else "")
    left = group.min_lease_left_seconds
    if left is None:
        cells["min_lease_left_seconds"] = ("—", STYLE["none"])
    elif left < 0:
        cells["min_lease_left_seconds"] = (duration_words(left), STYLE["bad"])  # negative: expired that long ago
    else:
        cells["min_lease_left_seconds"] = (duration_words(left), STYLE["ok"])
    for name, quantiles in (("queue_wait", group.queue_wait_seconds), ("start_confirm", group.start_confirm_seconds),
                            ("accept_wait", group.accept_wait_seconds)):
        for q in ("p50", "p95"):
            value = getattr(quantiles, q)
            cells[f"{name}_{q}"] = (duration_words(value), STYLE["none"] if value is None else "")
    return cells


def window_words(seconds: float) -> str:
    return format_seconds(seconds)


def report_title(report: MetricsReport) -> str:
    return (f"metrics by {report.by}: live now, history over the last {window_words(report.window_seconds)} "
            f"(database clock {when(report.at)})")


NOW_COLUMNS = [("running", "running"), ("expired_leases", "expired\nleases"),
               ("outcome_unknown", "outcome\nunknown"), ("cancel_unheard", "cancel\nunheard"),
               ("oldest_heartbeat_age_seconds", "oldest\nheartbeat"), ("min_lease_left_seconds", "least\nlease left"),
               ("past_deadline", "past\ndeadline")]
COUNT_COLUMNS = [("renewal_failures", "renewal\nfailures"), ("reclaimed", "reclaimed"),
                 ("stale_writes_rejected", "stale writes\nrejected"), ("lock_timeouts", "lock\ntimeouts"),
                 ("statement_timeouts", "statement\ntimeouts")]
LATENCY_COLUMNS = [("queue_wait_p50", "queue wait\np50"), ("queue_wait_p95", "queue wait\np95"),
                   ("start_confirm_p50", "start confirm\np50"), ("start_confirm_p95", "start confirm\np95"),
                   ("accept_wait_p50", "accept wait\np50"), ("accept_wait_p95", "accept wait\np95")]


def _table(title: str, by: str, columns: list[tuple[str, str]], groups: list[MetricsGroup]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold", show_edge=False,
                  pad_edge=False)
    table.add_column(by, no_wrap=True, overflow="ellipsis", max_width=24)
    for _field, header in columns:
        table.add_column(header, justify="right", no_wrap=True, min_width=max(len(x) for x in header.split("\n")))
    for group in groups:
        cells = group_words(group)
        table.add_row(Text(*cells["key"]), *(Text(*cells[field]) for field, _header in columns))
    return table


def screen_title(report: MetricsReport) -> str:
    """Screen 7's line above the table (the header already has the database's clock)."""
    return f"by {report.by}: live now; history over the last {window_words(report.window_seconds)}"


def metrics_table(report: MetricsReport) -> Group:
    """`leasectl metrics`: one row per group in two tables (what is true now; what happened in the
    window), urgent values coloured as triage colours them."""
    return Group(
        Text(report_title(report), style="bold"),
        _table("now", report.by, NOW_COLUMNS, report.groups),
        Text(""),
        _table(f"over the last {window_words(report.window_seconds)}", report.by, COUNT_COLUMNS, report.groups),
        Text(""),
        _table(f"over the last {window_words(report.window_seconds)}: latency", report.by, LATENCY_COLUMNS,
               report.groups),
    )


SPARKS = [  # (series of MinuteSeries, label, urgency when not all zero)
    ("renewal_failures", "renewal fails/min", "warn"),
    ("reclaims", "reclaims/min", "watch"),
    ("stale_writes_rejected", "stale writes/min", "warn"),
    ("queue_wait_p95", "queue wait p95", "watch"),
    ("outcome_unknown", "outcome unknown", "bad"),
]


def spark_summary(name: str, values: list[float]) -> str:
    """What a sparkline's right edge says: the hour's total for counts, the last value else."""
    if name == "queue_wait_p95":
        return f"max {duration_words(max(values, default=0.0))}"
    if name == "outcome_unknown":
        return f"now {int(values[-1]) if values else 0}"
    return f"{int(sum(values))} in 1h"
