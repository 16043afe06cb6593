"""One-line notices over Triage's table, hidden while there is nothing to say: the paused tools
(migration 0016; Triage and Metrics) -- who paused which tool, why, how many of its calls wait --
and the orphaned agents (migration 0018; Triage) -- children still running under a terminated or
silent ancestor, and whether a proposal to stop them waits for a human."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from console.core.models import Orphan, ToolSettings
from console.operator.present.fleet import orphans_summary
from console.operator.present.tools import paused_summary


class NoticeLine(Static):
    DEFAULT_CSS = """
    NoticeLine {
        height: auto;
        max-height: 2;
        padding: 0 1;
        display: none;
    }
    """

    def say(self, words: str | None, style: str) -> None:
        self.display = words is not None
        self.update(Text(words or "", style=style))


class PausedLine(NoticeLine):
    def show_tools(self, tools: list[ToolSettings], now: datetime) -> None:
        self.say(paused_summary(tools, now), "bold yellow")


class OrphansLine(NoticeLine):
    def show_orphans(self, orphans: list[Orphan], now: datetime) -> None:
        self.say(orphans_summary(orphans, now), "bold red")
