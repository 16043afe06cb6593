"""The metrics' rows: what `leasectl metrics`, its exporter and screen 7 share.

The JSON of `leasectl metrics --json` is a contract (docs/contract.md §7): the names of
`MetricsGroup`'s fields are its keys, exactly, and nothing else is in a group.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from console.shared.errors import BadInput
from console.shared.text import sanitize

By = Literal["tool", "model", "provider"]
BYS: tuple[str, ...] = get_args(By)
DEFAULT_WINDOW_SECONDS = 3600.0
SPARK_MINUTES = 60


def check_by(value: str) -> By:
    """`--by`: tool, model or provider; anything else is bad input (exit 2)."""
    if value not in BYS:
        raise BadInput(f"--by '{sanitize(value, max_chars=40)}': use tool, model or provider")
    return value  # type: ignore[return-value]


class Row(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Quantiles(Row):
    p50: float | None = None
    p95: float | None = None


class MetricsGroup(Row):
    """One group (a tool, a model or a provider): the contract's keys, in the contract's order."""

    key: str | None
    running: int = 0
    oldest_heartbeat_age_seconds: float | None = None
    min_lease_left_seconds: float | None = None
    expired_leases: int = 0
    renewal_failures: int = 0
    reclaimed: int = 0
    stale_writes_rejected: int = 0
    queue_wait_seconds: Quantiles = Quantiles()
    start_confirm_seconds: Quantiles = Quantiles()
    cancel_unheard: int = 0
    outcome_unknown: int = 0
    lock_timeouts: int = 0
    statement_timeouts: int = 0

    @classmethod
    def from_row(cls, row: dict) -> MetricsGroup:
        return cls.model_validate({
            **row,
            "queue_wait_seconds": {"p50": row.get("queue_wait_p50"), "p95": row.get("queue_wait_p95")},
            "start_confirm_seconds": {"p50": row.get("start_confirm_p50"), "p95": row.get("start_confirm_p95")},
        })


class MetricsReport(Row):
    """`leasectl metrics --json`: {"window_seconds", "by", "at", "groups"}."""

    window_seconds: float
    by: By
    at: datetime
    groups: list[MetricsGroup]

    def contract_json(self) -> dict:
        """The contract's JSON: exact values, a whole number of seconds as an integer."""
        data = self.model_dump(mode="json")
        if float(self.window_seconds).is_integer():
            data["window_seconds"] = int(self.window_seconds)
        return data


class MinuteSeries(Row):
    """Per-minute values of the last hour, oldest first (index -1 is the minute that ends now)."""

    renewal_failures: list[float]
    reclaims: list[float]
    stale_writes_rejected: list[float]
    queue_wait_p95: list[float]
    outcome_unknown: list[float]  # calls waiting in outcome_unknown at the end of each minute


class MetricsScreenData(Row):
    """What screen 7 shows, read in one snapshot."""

    report: MetricsReport
    minutes: MinuteSeries


# ----------------------------------------------------------------------------- the exporter's rows


class LiveRow(Row):
    """Unfinished calls of one tool, model, provider and state (queries/metrics/live.sql)."""

    tool: str
    side_effect: str
    model: str | None = None
    provider: str | None = None
    state: str | None = None  # None: the tool has no unfinished call
    calls: int = 0
    oldest_heartbeat_age_seconds: float | None = None
    min_lease_left_seconds: float | None = None
    expired_leases: int = 0
    cancel_unheard: int = 0
    db_now: datetime


class TotalRow(Row):
    """A history total of one metric, labels and bucket (queries/metrics/totals.sql)."""

    metric: str
    tool: str
    model: str
    provider: str
    le: float
    n: int
    seconds: float
    buckets: list[float]


class Scrape(Row):
    """One read of everything /metrics shows, in one snapshot."""

    live: list[LiveRow]
    totals: list[TotalRow]


class FoldResult(Row):
    folded: int
    folded_through: int
