"""The header line and the trouble banner: where am I, as whom, how fresh is what I see.

Both watch the app's `freshness` (they never get pushed into) and tick on their own timer, so
the clock and the data age keep moving under a dialog while the operator types a reason.
"""

from __future__ import annotations

from typing import cast

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from console.operator.present.contexts import context_badge, replica_note
from console.operator.tui.state import ConsoleApp, Freshness, trouble_banner
from console.shared.text import format_seconds, sanitize

CRUMB_SEPARATOR = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "


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


class _WatchesFreshness(Static):
    def on_mount(self) -> None:
        self.watch(self.app, "freshness", self._changed, init=True)
        self.set_interval(1.0, self.redraw)

    @property
    def console_app(self) -> ConsoleApp:
        return cast(ConsoleApp, self.app)

    def _changed(self, _freshness: Freshness) -> None:
        self.redraw()

    def redraw(self) -> None:
        raise NotImplementedError


class StatusBar(_WatchesFreshness):
    """`prod-eu 1 Triage > call 1a2b3c4d  data 1s old (live)  db time 02:13:07  read-write  dana@leasectl`.

    The context comes first, always (`no context: host/db` without one; a production context in
    its colour, as k9s does), then freshness: on a narrow terminal the end of the line is what
    gives way, so the operator never loses where the console is nor whether it can be trusted."""

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text;
        padding: 0 1;
    }
    """

    def breadcrumb(self) -> str:
        titles = getattr(self.app, "SCREEN_TITLES", {})
        path = [titles.get(self.app.current_mode or "", "")]
        for screen in self.app.screen_stack:
            if crumb := getattr(screen, "crumb", None):
                path.append(crumb)
            if screen is self.screen:  # the path up to this header's own screen, not above it
                break
        return CRUMB_SEPARATOR.join(p for p in path if p)

    def redraw(self) -> None:
        app = self.console_app
        f = app.freshness
        now = app.clock.monotonic()
        stale = f.stale(now, app.poll_seconds)
        age = f.age(now)
        db_time = f.db_time(now)
        session = app.session
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append_text(context_badge(session.context, session.shown_dsn or session.dsn,
                                       overridden=session.dsn_overridden))
        line.append(" ")
        line.append(self.breadcrumb(), style="bold cyan")
        line.append("  data ")
        if age is None:
            line.append("loading…", style="dim")
        else:
            line.append(f"{format_seconds(age)} old", style="bold red" if stale else "green")
        line.append(" ")
        if f.live(now, app.poll_seconds):
            line.append("● live", style="green")
        elif f.trouble is not None:
            line.append("✕ no connection" if f.trouble_kind == "unreachable" else "✕ not refreshing",
                        style="bold red")
        else:
            line.append("○ polling", style="yellow")
        if session.read_dsn and session.replica is not None:  # reads from the context's replica
            words, style = replica_note(session.replica.replica, session.replica.caught_up,
                                        session.replica.lag_seconds)
            line.append("  ")
            line.append(words, style=style)
        line.append("  db time ")
        line.append(db_time.strftime("%H:%M:%S") if db_time else "--:--:--", style="bold")
        line.append("  ")
        if session.read_only_reason:
            line.append(" READ-ONLY ", style="bold black on yellow")
        else:
            line.append(" read-write ", style="bold black on green")
        line.append("  ")
        line.append(sanitize(session.operator, max_chars=40), style="bold")
        line.append("@")
        line.append(sanitize(session.display_name, max_chars=60), style="bold")
        self.update(line)


class TroubleBanner(_WatchesFreshness):
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

    def redraw(self) -> None:
        message = trouble_banner(self.console_app)
        if message:
            self.update(Text(sanitize(message, max_chars=400)))
            self.add_class("shown")
        else:
            self.remove_class("shown")
