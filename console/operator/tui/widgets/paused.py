"""The paused tools' line (migration 0016), shown by Triage and Metrics: who paused which tool,
why, and how many of its calls wait; hidden while no tool is paused."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from console.core.models import ToolSettings
from console.operator.present.tools import paused_summary


class PausedLine(Static):
    DEFAULT_CSS = """
    PausedLine {
        height: auto;
        max-height: 2;
        padding: 0 1;
        display: none;
    }
    """

    def show_tools(self, tools: list[ToolSettings], now: datetime) -> None:
        summary = paused_summary(tools, now)
        self.display = summary is not None
        self.update(Text(summary or "", style="bold yellow"))
