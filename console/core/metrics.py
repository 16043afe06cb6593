"""The metrics' rows: what `leasectl metrics`, its exporter and screen 7 share.

The JSON of `leasectl metrics --json` is a contract (docs/contract.md §7): the names of
`MetricsGroup`'s fields are its keys, exactly, and nothing else is in a group.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from console.core.models import ToolSettings
from console.shared.errors import BadInput
from console.shared.text import sanitize

# service: the external service a tool calls (tools.service, migration 0014; docs/seeds.md §000)
By = Literal["tool", "model", "provider", "service"]
REPORT_BYS: tuple[str, ...] = get_args(By)  # what `leasectl metrics --by` takes
# what screen 7's `b` cycles through: each is a key of the filter grammar, so `enter` opens Calls
# filtered to the group (the grammar has no service key: a service is several tools)
BYS: tuple[str, ...] = ("tool", "model", "provider")
DEFAULT_WINDOW_SECONDS = 3600.0
SPARK_MINUTES = 60


def check_by(value: str) -> By:
    """`--by`: tool, model, provider or service; anything else is bad input (exit 2)."""
    if value not in REPORT_BYS:
        raise BadInput(f"--by '{sanitize(value, max_chars=40)}': use tool, model, provider or service")
    return value  # type: ignore[return-value]


class Row(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Quantiles(Row):
    p50: float | None = None
    p95: float | None = None


class MetricsGroup(Row):
    """One group (a tool, a model, a provider or a service): the contract's keys, in the contract's
    order (accept_wait_seconds and past_deadline: docs/seeds.md §000 and §004, migration 0014)."""

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
    accept_wait_seconds: Quantiles = Quantiles()  # from acceptance upstream (accepted_at) to the claim
    cancel_unheard: int = 0
    outcome_unknown: int = 0
    past_deadline: int = 0  # running (or asked to cancel) past the call's deadline
    lock_timeouts: int = 0
    statement_timeouts: int = 0

    @classmethod
    def from_row(cls, row: dict) -> MetricsGroup:
        return cls.model_validate({
            **row,
            "queue_wait_seconds": {"p50": row.get("queue_wait_p50"), "p95": row.get("queue_wait_p95")},
            "start_confirm_seconds": {"p50": row.get("start_confirm_p50"), "p95": row.get("start_confirm_p95")},
            "accept_wait_seconds": {"p50": row.get("accept_wait_p50"), "p95": row.get("accept_wait_p95")},
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
    paused_tools: list[ToolSettings] = []  # migration 0016: tools whose calls wait for a resume


# ----------------------------------------------------------------------------- the exporter's rows


class LiveRow(Row):
    """Unfinished calls of one tool, model, provider and state (queries/metrics/live.sql)."""

    tool: str
    side_effect: str
    service: str | None = None  # the tool's (tools.service)
    model: str | None = None
    provider: str | None = None
    state: str | None = None  # None: the tool has no unfinished call
    calls: int = 0
    oldest_heartbeat_age_seconds: float | None = None
    min_lease_left_seconds: float | None = None
    expired_leases: int = 0
    cancel_unheard: int = 0
    past_deadline: int = 0
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


# Calls in outcome_unknown get a series each (leasectl_outcome_unknown_call{id, tool, side_effect} 1),
# so that an alert can say which call and carry `leasectl --context C show ID`. Bounded, because every
# label set is a time series Prometheus keeps in memory and in its index for as long as it lives and
# then for its retention: call ids are unbounded over time, and the day a provider fails thousands of
# calls can fall into outcome_unknown at once -- the very moment Prometheus must keep working and the
# page must stay readable. At most this many per exporter, the longest waiting first (a call listed
# stays listed until it leaves the state: its alert does not flap as others arrive); the rest are
# counted in leasectl_outcome_unknown_unlisted_calls, and past a handful the single commands matter
# less than the Approvals screen and its bulk actions anyway.
LISTED_UNKNOWN = 50


@dataclass(frozen=True)
class WaitingCall:
    """One call in outcome_unknown with a series of its own."""

    id: str
    tool: str
    side_effect: str


@dataclass(frozen=True)
class WaitingCalls:
    """The calls in outcome_unknown listed one by one (at most LISTED_UNKNOWN), and how many wait in all."""

    listed: tuple[WaitingCall, ...]
    waiting: int


class Scrape(Row):
    """One read of everything /metrics shows, in one snapshot."""

    live: list[LiveRow]
    totals: list[TotalRow]
    orphaned_agents: int = 0  # migration 0018's rule (queries/views/orphans.sql)
    # the calls in outcome_unknown one by one, read in the same snapshot (None: not read)
    waiting: WaitingCalls | None = None


class AcceptWaitTotals:
    """The folded part of the histogram leasectl_accept_wait_seconds, kept by the exporter.

    Migration 0008's rollup holds only the metrics of leasectl_metric_events; accept wait is not
    one of them, and adding it would take a migration. So the exporter folds it itself, by the
    rollup's own watermark (leasectl_metric_folds.folded_through: no event at or below it can
    still appear): the claims up to the watermark are read once (at the first scrape: the whole
    history's claims) and added to as the watermark moves; the claims after it are read on every
    scrape, like totals.sql's tail (queries/metrics/accept_wait.sql). A restarted exporter reads
    the same totals again, so the counters never go backwards -- unless history was pruned, which
    Prometheus then sees as a counter reset."""

    def __init__(self) -> None:
        self.through = 0  # every claim with an id up to this is in `folded`
        self.folded: dict[tuple[str, str, str, float], tuple[int, float]] = {}
        self.buckets: list[float] = []

    def add(self, rows: list[TotalRow], *, through: int) -> None:
        """Fold the claims of (self.through, through], read in one statement."""
        for row in rows:
            key = (row.tool, row.model, row.provider, row.le)
            n, seconds = self.folded.get(key, (0, 0.0))
            self.folded[key] = (n + row.n, seconds + row.seconds)
            self.buckets = row.buckets
        self.through = through

    def restart(self) -> None:
        """The watermark went back (another database behind the same DSN): count again from zero."""
        self.through = 0
        self.folded = {}
        self.buckets = []

    def with_tail(self, tail: list[TotalRow]) -> list[TotalRow]:
        """The folded rows plus the tail's, as totals.sql shapes them."""
        merged = dict(self.folded)
        buckets = self.buckets
        for row in tail:
            key = (row.tool, row.model, row.provider, row.le)
            n, seconds = merged.get(key, (0, 0.0))
            merged[key] = (n + row.n, seconds + row.seconds)
            buckets = row.buckets
        return [TotalRow(metric="accept_wait", tool=tool, model=model, provider=provider, le=le, n=n, seconds=seconds,
                         buckets=buckets)
                for (tool, model, provider, le), (n, seconds) in sorted(merged.items())]


class FoldResult(Row):
    folded: int
    folded_through: int
