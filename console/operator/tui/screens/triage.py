"""1 Triage: what is wrong now, and where. Opens first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Footer, Static

from console.core.filters import JobFilter, grammar, memory_filter
from console.core.health import HEALTH_RANK
from console.core.history import Archived
from console.core.models import Counts, JobSummary, TriageSnapshot
from console.db import audit, reads
from console.db.connect import Conn
from console.operator.present.audit import archived_answer, left_out
from console.operator.present.words import clock, one_line
from console.operator.tui.screens.calllist import PAST_POLL_SECONDS, CallListScreen, no_match_words
from console.operator.tui.widgets.calltable import CallTable
from console.operator.tui.widgets.counts import CountsStrip
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import Column
from console.operator.tui.widgets.paused import OrphansLine, PausedLine
from console.operator.tui.widgets.status import TopChrome
from console.shared.text import counted
from console.shared.times import Instant, parse_past

# at 80 columns: the id, its health, the lease and the heartbeat stay; the rest gives way first
COLUMNS = [
    Column("id", "call", 8, 0), Column("health", "lease health", 18, 0), Column("lease", "lease left", 14, 0),
    Column("heartbeat", "beat", 6, 0), Column("tool", "tool", 16, 1), Column("state", "state", 16, 2),
    Column("deadline", "deadline", 9, 3), Column("class", "side effect", 12, 4), Column("owner", "owner", 11, 5),
    Column("token", "tok", 3, 6), Column("attempt", "try", 3, 7),
]


class TriageScreen(CallListScreen):
    """Calls that need attention, worst first"""

    CSS_PATH = "triage.tcss"
    AUTO_FOCUS = "#attention"

    def __init__(self) -> None:
        super().__init__()
        self.snapshot: TriageSnapshot | None = None
        self.as_of: Instant | None = None

    def as_of_words(self) -> str:
        return self.as_of.describe() if self.as_of else (self.where.at or "")

    def tick(self, now: datetime) -> None:
        if self.where.at is None:  # the past does not tick
            super().tick(now)

    def parse_filter_text(self, text: str) -> JobFilter:
        """The calls' grammar, without payload: (this screen filters in memory the calls it read,
        which carry no payload): bad input that says where payloads are searched."""
        memory_filter(text, "Triage")
        return super().parse_filter_text(text)

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield CountsStrip()
        yield PausedLine()
        yield OrphansLine()
        yield FilterBar(placeholder=grammar())
        yield FilterLine()
        yield CallTable(COLUMNS, id="attention", markable=True)
        yield Static(id="empty")
        yield Static(id="recent")
        yield Static(id="marks", classes="marks")
        yield Footer()

    def load(self, conn: Conn) -> TriageSnapshot:
        if self.where.at is not None:  # the past: rebuilt from the history, not the current rows
            now = reads.db_info(conn).db_now
            if self.as_of is None:  # an age (at:2h) is resolved once, when the filter is applied: T stays put
                self.as_of = parse_past(self.where.at, now=now, what="at:")
            try:
                start = audit.past_start(conn, self.as_of.at)
                calls = audit.jobs_at(conn, self.as_of.at, self.where.now(), limit=PAST_LIMIT, start=start)
            except Archived as exc:  # said on the screen, never a partial past, never a failed refresh
                self._archived = (archived_answer(exc), True)
                return past_triage([], now)
            self._archived = (left_out(start), False)
            return past_triage(calls, now)
        return reads.triage(conn)

    def db_now_of(self, data: TriageSnapshot) -> datetime:
        return data.counts.db_now

    # what the last fetch found of archived history (set on the fetch's thread, read when it is shown)
    _archived: tuple[Text | None, bool] = (None, False)

    def show(self, data: TriageSnapshot) -> None:
        self.snapshot = data
        note, refused = self._archived if self.where.at is not None else (None, False)
        self.note_archived(note, refused=refused)
        self.query_one(CountsStrip).update_counts(data.counts)
        rows = [r for r in data.rows if self.where.matches(r)]
        past = self.where.at is not None and self.as_of is not None
        self.sync_table(rows, self.as_of.at if past and self.as_of else (self.now() or data.counts.db_now))
        self.show_filter_line(matched=len(rows) if not self.where.empty else None, total=len(data.rows))
        self.query_one("#recent", Static).update(self._recent(data))
        self.query_one(PausedLine).show_tools(data.paused_tools, data.counts.db_now)
        self.query_one(OrphansLine).show_orphans(data.orphans, data.counts.db_now)
        empty = self.query_one("#empty", Static)
        empty.display = not rows
        if not rows:
            c = data.counts
            if not self.where.empty:
                empty.update(Text(no_match_words(self.where), style="bold yellow"))
            else:
                empty.update(f"Nothing needs attention: every lease is healthy ({counted(c.running, 'running call')}, "
                             f"{c.queued:,} queued).")

    def filter_changed(self) -> None:
        self.poll_seconds = PAST_POLL_SECONDS if self.where.at is not None else None
        if self.where.at is not None or (self.snapshot is not None and self.as_of is not None):
            self.as_of = None
            self.refetch()  # the past (or back to now) is another read, not another view of this one
            self.show_filter_line()
        elif self.snapshot is not None:
            self.show(self.snapshot)
        else:
            self.show_filter_line()

    def _recent(self, data: TriageSnapshot) -> Table:
        table = Table(title="recently (10 min, UTC)", title_justify="left", title_style="bold", expand=True,
                      show_edge=False, show_header=False, box=None, padding=(0, 1))
        # the time and the call never give way: they say when and which
        table.add_column(no_wrap=True, style="dim", min_width=8)
        table.add_column(no_wrap=True, style="bold", min_width=8)
        table.add_column(no_wrap=True, max_width=18)
        table.add_column(overflow="ellipsis", no_wrap=True, ratio=1)
        table.add_column(no_wrap=True, style="dim", max_width=16)
        for e in data.recent[:8]:
            style = "bold red" if "zombie" in e.what or "unknown" in e.what or "not applied" in e.what else (
                "yellow" if "despite" in e.what or "refused" in e.what or "failed" in e.what else "")
            table.add_row(Text(clock(e.at)), Text(str(e.job_id)[:8]), one_line(e.tool, max_chars=40),
                          one_line(e.what, style, max_chars=300), one_line(e.actor or "", max_chars=40))
        if not data.recent:
            table.add_row("", "", "", Text("nothing notable", "dim"), "")
        return table


PAST_LIMIT = 10_000  # calls rebuilt for triage at an instant of the past


def past_triage(calls: Sequence[JobSummary], now: datetime) -> TriageSnapshot:
    """Triage as it was: the counts and the calls that needed attention then, from calls rebuilt
    from the history (heartbeats are not journaled: "stale beats" is not said of the past)."""
    def n(predicate: Callable[[JobSummary], bool]) -> int:
        return sum(1 for c in calls if predicate(c))

    at = calls[0].db_now if calls else now
    counts = Counts(needs_human=n(lambda c: c.state == "outcome_unknown"),
                    # a call past its deadline lost its lease with it: expired, as the live count says
                    expired_unswept=n(lambda c: c.health in ("lease_expired", "past_deadline", "past_max_hold")),
                    past_deadline=n(lambda c: c.health == "past_deadline"),
                    cancel_unheard=n(lambda c: c.health == "cancel_unheard"),
                    over_stage_timeout=n(lambda c: c.health == "over_stage_timeout"),
                    running=n(lambda c: c.state == "running"),
                    cancel_requested=n(lambda c: c.state == "cancel_requested"),
                    queued=n(lambda c: c.state == "queued"), zombies=n(lambda c: c.health == "zombie"),
                    failed_last_hour=n(lambda c: c.state == "failed" and c.finished_at is not None
                                       and (at - c.finished_at).total_seconds() <= 3600),
                    db_now=now)
    attention = sorted((c for c in calls if c.health not in (None, "healthy")),
                       key=lambda c: (HEALTH_RANK.get(c.health or "healthy", 9), c.created_at))
    return TriageSnapshot(counts=counts, rows=attention[:200], recent=[])
