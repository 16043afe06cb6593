"""A live screen whose body is a CallTable (Triage, Calls): its ages tick, its selection is the
call the actions act on, and `enter` (or a second click) opens that call."""

from __future__ import annotations

from datetime import datetime

from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.livetable import LiveTable
from console.shared.models import JobSummary


class CallListScreen(PollingScreen):
    def tick(self, now: datetime) -> None:
        self.query_one(CallTable).tick(now)

    def selected_job(self) -> JobSummary | None:
        return self.query_one(CallTable).selected

    def action_open_call(self) -> None:
        job = self.selected_job()
        if job is not None:
            self.app.push_screen(DetailScreen(job.id))

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_call()
