"""A DataTable of calls that changes only what changed: rows keyed by call id, cells updated
in place, ages re-rendered every second without touching the database."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from console.models import JobSummary
from console.tui.cells import health_cell, live_ages, plain, side_effect_cell, state_cell

Column = tuple[str, str, int | None]  # key, label, width

TICKING = ("heartbeat", "lease", "deadline")


def same(a: Text, b: Text) -> bool:
    """Text equality that also sees a change of colour (rich's == compares text and spans only)."""
    return a.plain == b.plain and str(a.style) == str(b.style) and a.spans == b.spans


def default_cells(job: JobSummary) -> dict[str, Text]:
    return {
        "id": plain(job.short_id, "bold"),
        "tool": plain(job.tool),
        "class": side_effect_cell(job.side_effect),
        "state": state_cell(job.state),
        "owner": plain(job.owner_id or "—"),
        "token": plain(job.fencing_token),
        "attempt": plain(f"{job.attempt}/{job.max_attempts}" if job.max_attempts else job.attempt),
        "health": health_cell(job.health),
        "agent": plain(job.agent_id or "—"),
        "key": plain(job.idempotency_key),
        "created": plain(job.created_at.strftime("%H:%M:%S")),
    }


class CallTable(DataTable[Text]):
    """Rows are JobSummary; `sync` reconciles, `tick` re-renders the ages."""

    DEFAULT_CSS = """
    CallTable {
        height: 1fr;
    }
    """

    def __init__(self, columns: Sequence[Column], *, cells: Callable[[JobSummary], dict[str, Text]] = default_cells,
                 id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._columns = list(columns)
        self._cells = cells
        self.jobs: dict[str, JobSummary] = {}
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, label, width in self._columns:
            self.add_column(label, key=key, width=width)

    @property
    def selected(self) -> JobSummary | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:  # noqa: BLE001 - an empty or changing table
            return None
        return self.jobs.get(str(key.value))

    def sync(self, rows: Sequence[JobSummary], now: datetime) -> None:
        """Make the table show `rows` in this order, changing as little as possible."""
        selected = self.selected
        wanted = [str(r.id) for r in rows]
        by_key = {str(r.id): r for r in rows}
        for key in [k for k in self._order if k not in by_key]:
            self.remove_row(key)
            del self.jobs[key]
        column_keys = [c[0] for c in self._columns]
        for key, job in by_key.items():
            cells = {**self._cells(job), **live_ages(job, now)}
            if key in self.jobs:
                if self.jobs[key] != job:
                    old = {**self._cells(self.jobs[key]), **live_ages(self.jobs[key], now)}
                    for column in column_keys:
                        if not same(cells[column], old[column]):
                            self.update_cell(key, column, cells[column])
            else:
                self.add_row(*(cells[c] for c in column_keys), key=key)
            self.jobs[key] = job
        if list(self._row_order()) != wanted:
            self._reorder(wanted)
        self._order = wanted
        if selected is not None and str(selected.id) in by_key:
            self.move_cursor(row=self.get_row_index(str(selected.id)), animate=False)

    def tick(self, now: datetime) -> None:
        for key in self._order:
            job = self.jobs[key]
            for column, cell in live_ages(job, now).items():
                if column in self.columns and not same(self.get_cell(key, column), cell):
                    self.update_cell(key, column, cell)

    def _row_order(self) -> list[str]:
        return [str(row.key.value) for row in self.ordered_rows]

    def _reorder(self, wanted: list[str]) -> None:
        position = {key: i for i, key in enumerate(wanted)}
        keys = {id(cell): key for key in wanted for cell in [self.get_cell(key, self._columns[0][0])]}

        def order_of(row_values: tuple[Text, ...]) -> int:
            return position[keys[id(row_values[0])]]

        self.sort(self._columns[0][0], key=lambda first: order_of((first,)))

    def row_key_of(self, job_id: str) -> RowKey:
        return RowKey(job_id)
