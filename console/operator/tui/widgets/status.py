"""The header line and the trouble banner: where am I, as whom, how fresh is what I see."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from console.shared.health import format_seconds
from console.shared.text import sanitize


class TopChrome(Vertical):
    """Status line and trouble banner, stacked: two docked widgets would overlap each other."""

    DEFAULT_CSS = """
    TopChrome {
        dock: top;
        height: auto;
    }
    """

    def compose(self) -> ComposeResult:
        yield StatusBar()
        yield TroubleBanner()


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text;
        padding: 0 1;
    }
    """

    def render_status(self, *, screen: str, database: str, operator: str, read_only: str | None,
                      db_time: datetime | None, age: float | None, stale: bool, listening: bool) -> None:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("leasectl", style="bold")
        line.append(f" {screen}", style="bold cyan")
        line.append("  db ")
        line.append(sanitize(database), style="bold")
        line.append("  operator ")
        line.append(sanitize(operator), style="bold")
        line.append("  ")
        if read_only:
            line.append(" READ-ONLY ", style="bold black on yellow")
        else:
            line.append(" read-write ", style="bold black on green")
        line.append("  db time ")
        line.append(db_time.strftime("%H:%M:%S") if db_time else "--:--:--", style="bold")
        line.append("  data ")
        if age is None:
            line.append("loading…", style="dim")
        else:
            line.append(f"{format_seconds(age)} old", style="bold red" if stale else "green")
        line.append("  ")
        line.append("● live" if listening else "○ polling", style="green" if listening else "yellow")
        self.update(line)


class TroubleBanner(Static):
    DEFAULT_CSS = """
    TroubleBanner {
        height: auto;
        background: $error;
        color: $text;
        text-style: bold;
        padding: 0 1;
        display: none;
    }
    TroubleBanner.shown {
        display: block;
    }
    """

    def show_trouble(self, message: str | None) -> None:
        if message:
            self.update(Text(message))
            self.add_class("shown")
        else:
            self.remove_class("shown")
