"""7 Metrics: the seeds' minimum metrics by tool, model or provider (docs/seeds.md §000.15: split them, or a
browser's timeouts drown in ordinary searches), and the last hour per minute (docs/seeds.md §004.10: what shows
a hang before the user does). `b` switches the grouping; `enter` opens the group's calls."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Label, Sparkline, Static

from console.core.filters import JobFilter
from console.core.metrics import BYS, By, MetricsGroup, MetricsScreenData
from console.db import metrics
from console.db.connect import Conn
from console.operator.present.metrics import COLUMNS, NO_KEY, SPARKS, group_words, screen_title, spark_summary
from console.operator.present.words import STYLE
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.screens.calls import CallsScreen
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.paused import PausedLine
from console.operator.tui.widgets.status import TopChrome
from console.shared.text import sanitize

NONE_KEY = "\x00none"  # the row of calls without a model (or provider): no real name can be this


def row_key(group: MetricsGroup) -> str:
    return NONE_KEY if group.key is None else group.key


class GroupCallsScreen(CallsScreen):
    """2 Calls, filtered to one metrics group; esc goes back to the metrics."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the metrics"),
    ]

    def __init__(self, where: JobFilter, crumb: str) -> None:
        super().__init__(where=where)
        self.crumb = crumb


class MetricsScreen(PollingScreen):
    """The seeds' metrics by tool, model or provider, and the last hour per minute"""

    CSS_PATH = "metrics.tcss"
    AUTO_FOCUS = "#groups"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "switch_by", "Tool/model/provider", tooltip="Group by tool, then model, then provider"),
        Binding("enter", "open_group", "Its calls", tooltip="The calls of the selected group (Calls, filtered)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.by: By = "tool"
        self.data: MetricsScreenData | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield Static(id="metrics-title")
        yield PausedLine()
        yield LiveTable([Column(c.field, c.label, c.width, c.priority) for c in COLUMNS], id="groups")
        yield Static(id="no-groups")
        with Vertical(id="sparks"):
            yield Label("last hour, per minute (all groups)", id="sparks-title")
            for name, label, _urgency in SPARKS:
                with Horizontal(classes="spark-row"):
                    yield Label(label, classes="spark-label")
                    yield Sparkline([0.0], summary_function=max, id=f"spark-{name}")
                    yield Label("", id=f"spark-sum-{name}", classes="spark-sum")
        yield Footer()

    # ------------------------------------------------------------------ data
    def load(self, conn: Conn) -> MetricsScreenData:
        return metrics.screen(conn, by=self.by)

    def db_now_of(self, data: MetricsScreenData) -> datetime:
        return data.report.at

    def show(self, data: MetricsScreenData) -> None:
        if data.report.by != self.by:  # a fetch of the previous grouping came back after `b`
            self.fetch()
            return
        self.data = data
        report = data.report
        title = Text(screen_title(report), style="bold")
        following = BYS[(BYS.index(report.by) + 1) % len(BYS)]
        title.append(f"   b: by {following}", style="dim")
        self.query_one("#metrics-title", Static).update(title)
        self.query_one(PausedLine).show_tools(data.paused_tools, report.at)
        table = self.query_one("#groups", LiveTable)
        rows = []
        for group in report.groups:
            words = group_words(group)
            rows.append((row_key(group), {field: Cell(text, style) for field, (text, style) in words.items()}))
        keyed_rows(table, rows)
        table.display = bool(rows)
        empty = self.query_one("#no-groups", Static)
        empty.display = not rows
        if not rows:
            empty.update(Text(f"No {report.by} has calls or history in the last hour.", style="dim"))
        series = data.minutes
        for name, _label, urgency in SPARKS:
            values: list[float] = getattr(series, name)
            spark = self.query_one(f"#spark-{name}", Sparkline)
            spark.data = values
            busy = any(values)
            spark.set_class(busy, f"-{urgency}")
            spark.set_class(not busy, "-quiet")
            self.query_one(f"#spark-sum-{name}", Label).update(
                Text(spark_summary(name, values), style=STYLE[urgency] if busy else STYLE["none"]))  # type: ignore[index]

    # ------------------------------------------------------------------ keys
    def action_switch_by(self) -> None:
        self.by = BYS[(BYS.index(self.by) + 1) % len(BYS)]  # type: ignore[assignment]
        self.query_one("#metrics-title", Static).update(Text(f"by {self.by}: loading…", style="bold"))
        self.refetch()

    def selected_group(self) -> MetricsGroup | None:
        if self.data is None:
            return None
        return self.query_one("#groups", LiveTable).cursor_item(self.data.report.groups, row_key)

    def action_open_group(self) -> None:
        group = self.selected_group()
        if not self.chosen(group, "a group"):
            return
        if group.key is None:
            self.app.notify(f"These calls have no {self.by}: the filter grammar cannot select them.",
                            title="Nothing to filter by", severity="warning")
            return
        where = JobFilter(**{self.by: group.key})
        self.app.push_screen(GroupCallsScreen(where, f"{self.by} {sanitize(group.key, max_chars=40)}"))

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_group()


__all__ = ["NO_KEY", "GroupCallsScreen", "MetricsScreen"]
