"""What retention works on (console/operator/retention.py): a month of the history that may leave
the database, and what it holds. Plain values: the database fills them (console/db/retention.py),
the words show them (console/operator/present/retention.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal


@dataclass(frozen=True)
class Month:
    """One month's partition of job_events (migration 0021), whole and ended."""

    month: date
    partition: str
    range_from: datetime
    range_to: datetime
    estimated_rows: int | None  # from the statistics (none before the first ANALYZE)


@dataclass(frozen=True)
class Facts:
    """What the database holds for a month: to be held against its archive read back."""

    rows: int
    first_id: int | None
    last_id: int | None


Outcome = Literal["archived"]


@dataclass(frozen=True)
class MonthResult:
    month: str
    file: str
    rows: int
    first_id: int | None
    last_id: int | None
    sha256: str | None
    outcome: Outcome  # archived: written, verified, dropped from the database

    def record(self) -> dict[str, Any]:
        return {"month": self.month, "file": self.file, "rows": self.rows, "first_id": self.first_id,
                "last_id": self.last_id, "sha256": self.sha256, "outcome": self.outcome}


@dataclass
class RetentionReport:
    cutoff: datetime
    archive: str
    months: list[MonthResult] = field(default_factory=list)
    archived_before: datetime | None = None
    adopted: list[str] = field(default_factory=list)  # months moved out of the default partition first

    def record(self) -> dict[str, Any]:
        return {"cutoff": self.cutoff.isoformat(), "archive": self.archive,
                "archived_before": self.archived_before.isoformat() if self.archived_before else None,
                "months": [m.record() for m in self.months]}
