"""The calls table: rows keyed by call id, rebuilt only where a call changed, ages re-rendered
every second from the database's clock without touching the database."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from console.core.models import JobSummary
from console.operator.tui.cells import Cell, age_cells, health_cell, side_effect_cell, state_cell
from console.operator.tui.widgets.livetable import Column, LiveTable


def default_cells(job: JobSummary) -> dict[str, Cell]:
    return {
        "id": Cell(job.short_id, "bold"),
        "tool": Cell(job.tool),
        "class": side_effect_cell(job.side_effect),
        "state": state_cell(job.state),
        "owner": Cell(job.owner_id or "—"),
        "token": Cell(job.fencing_token),
        "attempt": Cell(f"{job.attempt}/{job.max_attempts}" if job.max_attempts else job.attempt),
        "health": health_cell(job.health, job.state),
        "agent": Cell(job.agent_id or "—"),
        "key": Cell(job.idempotency_key),
        "model": Cell(job.model or "—"),
        "created": Cell(job.created_at.strftime("%H:%M:%S")),
    }


class CallTable(LiveTable):
    def __init__(self, columns: Sequence[Column | tuple[str, str, int]], *,
                 cells: Callable[[JobSummary], dict[str, Cell]] = default_cells, id: str | None = None,
                 markable: bool = False) -> None:
        super().__init__(columns, id=id, markable=markable)
        self._make_cells = cells
        self.jobs: dict[str, JobSummary] = {}

    @property
    def selected(self) -> JobSummary | None:
        key = self.cursor_key
        return self.jobs.get(key) if key is not None else None

    def sync(self, rows: Sequence[JobSummary], now: datetime) -> str | None:
        """Show `rows` in this order; cells are built only for rows that are new or changed (an
        unchanged row costs one comparison). Returns the key of the selected call if it just left
        the list, so the screen can say so instead of silently acting on the row that moved up."""
        selected = self.cursor_key
        keys = [str(r.id) for r in rows]
        changed: dict[str, dict[str, Cell]] = {}
        fresh: dict[str, JobSummary] = {}
        for key, job in zip(keys, rows, strict=True):
            old = self.jobs.get(key)
            # frozen models: comparing their field dicts is what == does, minus pydantic's overhead
            if old is None or old.__dict__ != job.__dict__:
                changed[key] = {**self._make_cells(job), **age_cells(job, now)}
            fresh[key] = job
        self.jobs = fresh
        self.set_rows(keys, changed)
        return selected if selected is not None and selected not in fresh else None

    def tick(self, now: datetime) -> None:
        """Re-render the ages of the rows on screen (the others are redrawn when scrolled to)."""
        for key in self.visible_keys():
            self.update_cells(key, age_cells(self.jobs[key], now))
