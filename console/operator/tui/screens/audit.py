"""6 Audit: the history across every call, read-only. Events newest first by keyset pages (`[` `]`),
or the operator journal (`j`: every cancel, mark terminal, approval, drain and abort, applied,
refused or failed); a filter of its own (`job:` `owner:` `operator:` `kind:` `since:` `until:`
`at:`); with `job:` and `at:` the answer to "who held it then" stands on top (from the history
alone, console.core.audit's rules); `e` exports what the view shows for the filter -- the events,
or the operator journal's rows (JSONL or CSV, off the UI thread, with progress, under a temporary
name); `enter` opens the call's detail at that event. Each row names the login that wrote it and
marks a name that is not that login's own (console.operator.present.logins).

Once retention archived months of the history, a line under the filter says where the online
history begins and what the archive holds, and the screen keeps to console/core/history.py: a
filter that reaches before it shows nothing and says ARCHIVED (never a partial page as whole),
who held a call whose history begins in the archive is answered "archived", rows with no start
are said to be the online part only, and `]` past the oldest online page says the rest is archived."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Label, Static

from console.core.audit import (
    AUDIT_LIMITS,
    AuditFilter,
    AuditPage,
    OperatorAction,
    audit_grammar,
    parse_audit_filter,
)
from console.core.models import ZOMBIE_KINDS, Event
from console.db import audit as audit_db
from console.db.connect import Conn
from console.db.lane import open_session
from console.db.reads import resolve
from console.operator.files import atomic_write
from console.operator.present.audit import (
    OUTCOME_STYLE,
    action_detail,
    action_words,
    archive_banner,
    history_warning,
    oldest_page_words,
    online_part_note,
    owner_answer,
)
from console.operator.present.calls import event_words
from console.operator.present.logins import LOGIN_MARK, LOGIN_STYLE, claimed, is_operator_kind, login_cell
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import CLEAR_FILTER_BINDING, PollingScreen, page_bindings
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.screens.export import ExportDialog
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.errors import LeasectlError
from console.shared.text import counted, sanitize

PAGE = 200
LOUD = (*ZOMBIE_KINDS, "ownership_unknown", "operator_action_failed")

# login: the database role that wrote the row (db_role), beside the name the client gave (present.logins)
EVENT_COLUMNS = [
    Column("at", "at (UTC)", 23, 0), Column("call", "call", 8, 0), Column("event", "event", 20, 0),
    Column("token", "tok", 3, 1), Column("actor", "actor", 12, 2), Column("login", "login", 12, 2),
    Column("state", "state", 24, 3), Column("owner", "owner", 20, 4), Column("details", "details", 48, 5),
]
JOURNAL_COLUMNS = [
    Column("at", "at (UTC)", 23, 0), Column("operator", "operator", 10, 0), Column("login", "login", 12, 1),
    Column("action", "action", 13, 0), Column("outcome", "outcome", 8, 0), Column("target", "call / agent", 12, 1),
    Column("reason", "reason · why (a refusal, an error and its cause)", 44, 2),
]
LOGIN_NOTE = f" · {LOGIN_MARK} login: an operator's name that is not that login's own"


def stamp(value: datetime) -> str:
    """`2026-12-03 02:13:00.123`, in UTC (the column says so)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def event_cells(e: Event) -> dict[str, Cell]:
    state, owner, details = event_words(e)
    operator = is_operator_kind(e.kind)
    return {"at": Cell(stamp(e.at)), "call": Cell(str(e.job_id)[:8], "bold"),
            "event": Cell(e.kind, "bold red" if e.kind in LOUD else "bold"),
            "actor": Cell(e.actor or "—", LOGIN_STYLE if claimed(e.actor, e.db_role, operator=operator) else ""),
            "login": Cell(*login_cell(e.actor, e.db_role, operator=operator)),
            "token": Cell("" if e.fencing_token is None else e.fencing_token), "state": Cell(state),
            "owner": Cell(owner), "details": Cell(details, "dim")}


def action_cells(a: OperatorAction) -> dict[str, Cell]:
    target = str(a.job_id)[:8] if a.job_id else f"{a.agent_id or '—'} (subtree)"
    why = action_detail(a)
    return {"at": Cell(stamp(a.at)),
            "operator": Cell(a.operator or "—",
                             LOGIN_STYLE if claimed(a.operator, a.db_role, operator=True) else "bold"),
            "login": Cell(*login_cell(a.operator, a.db_role, operator=True)), "action": Cell(action_words(a)),
            "outcome": Cell(a.outcome, OUTCOME_STYLE.get(a.outcome, "")), "target": Cell(target),
            "reason": Cell(f"{a.reason or '—'}" + (f" · {why}" if why else ""))}


class AuditScreen(PollingScreen):
    """Ownership history across calls, the operator journal, export"""

    CSS_PATH = "audit.tcss"
    AUTO_FOCUS = "#audit-events"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_event", "Open", tooltip="The call's detail, at that event"),
        Binding("j", "toggle_view", "Journal", tooltip="Switch between the events and the operator journal"),
        Binding("e", "export", "Export", tooltip="Write what the filter selects to a file (JSONL or CSV)"),
        *page_bindings("events"),
        CLEAR_FILTER_BINDING,
    ]
    poll_seconds = 5.0  # history only grows; NOTIFY wakes it sooner

    def __init__(self) -> None:
        super().__init__()
        self.filter_value: AuditFilter = AuditFilter()
        self.view = "events"
        self.cursors: list[int | None] = [None]  # each page's before_id, for going back
        self.page: AuditPage | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        yield FilterBar(placeholder=audit_grammar())
        yield FilterLine("/ filters (job: owner: operator: kind: since: until: at:) · j journal · e export")
        yield Static(id="audit-archive")
        yield Static(id="audit-answer")
        yield Label("", id="audit-title")
        yield LiveTable(EVENT_COLUMNS, id="audit-events")
        yield LiveTable(JOURNAL_COLUMNS, id="audit-journal")
        yield Static(id="audit-empty")
        yield Footer()

    # ------------------------------------------------------------------ data
    def load(self, conn: Conn) -> AuditPage:
        return audit_db.screen_page(conn, self.filter_value, view=self.view, before_id=self.cursors[-1], limit=PAGE)

    def db_now_of(self, data: AuditPage) -> datetime:
        return data.db_now

    def show(self, data: AuditPage) -> None:
        self.page = data
        banner = self.query_one("#audit-archive", Static)
        words = archive_banner(data)
        banner.set_class(words is not None, "shown")
        banner.set_class(data.refused is not None, "refused")
        if words is not None:
            banner.update(words)
        answer = self.query_one("#audit-answer", Static)
        answer.set_class(data.owner_archived is not None, "archived")
        if data.owner is not None:
            warning = history_warning(data.owner)
            answer.update(Group(Text("who held it then — from the history alone", style="bold"),
                                *((warning,) if warning is not None else ()), owner_answer(data.owner)))
            answer.add_class("shown")
        elif data.owner_archived is not None:
            answer.update(Group(Text("who held it then", style="bold"),
                                Text.assemble(("ARCHIVED", "bold yellow"),
                                              " — " + sanitize(data.owner_archived.removeprefix("archived: "),
                                                               max_chars=600))))
            answer.add_class("shown")
        else:
            answer.remove_class("shown")
        events = self.query_one("#audit-events", LiveTable)
        journal = self.query_one("#audit-journal", LiveTable)
        events.display = data.view == "events"
        journal.display = data.view == "journal"
        if data.view == "events":
            keyed_rows(events, [(str(e.id), event_cells(e)) for e in data.events])
            count = len(data.events)
            marked = any(claimed(e.actor, e.db_role, operator=is_operator_kind(e.kind)) for e in data.events)
        else:
            keyed_rows(journal, [(f"{a.source}:{a.event_id}", action_cells(a)) for a in data.actions])
            count = len(data.actions)
            marked = any(claimed(a.operator, a.db_role, operator=True) for a in data.actions)
        title = Text(
            "Events across every call — newest first, in the order they were written" if data.view == "events" else
            "Operator journal: every call and every shutdown — newest first", style="bold")
        if marked:
            title.append(LOGIN_NOTE, style=LOGIN_STYLE)
        self.query_one("#audit-title", Label).update(title)
        empty = self.query_one("#audit-empty", Static)
        empty.display = count == 0
        if data.problem:
            empty.update(Text(f"{data.problem} — change job: with / (esc clears the filter).", style="bold red"))
        elif data.refused:
            empty.update(Text.assemble(("ARCHIVED", "bold yellow"),
                                       " — " + sanitize(data.refused.removeprefix("archived: "), max_chars=600)
                                       + ". Nothing is shown: change the filter with / (esc clears it).",
                                       style="yellow"))
        elif count == 0:
            empty.update(Text("Nothing here matches the filter " + sanitize(self.filter_value.describe(), max_chars=120)
                              + " (esc clears it)." if not self.filter_value.empty else
                              "No history yet." if data.view == "events" else "No operator action yet.",
                              style="bold yellow" if not self.filter_value.empty else "dim"))
        self.show_filter_line()

    def show_filter_line(self) -> None:
        page = Text()
        data = self.page
        if data is not None and data.view == "events":
            n = len(data.events)
            page.append(f"page {len(self.cursors)}", style="bold")
            page.append(f" · {counted(n, 'event')}" + (" (more: ])" if n == PAGE else "") + " · newest first")
        elif data is not None:
            page.append("operator journal", style="bold")
            page.append(f" · {counted(len(data.actions), 'action')} · newest first")
            if self.filter_value.owner or self.filter_value.kind:
                page.append(" · owner: and kind: select events, not the journal", style="yellow")
        self.query_one(FilterLine).show_filter(self.filter_value.describe(), extra=page)

    # ------------------------------------------------------------------ the filter
    def parse_filter_text(self, text: str) -> AuditFilter:
        return parse_audit_filter(text, now=self.now())

    def filter_changed(self) -> None:
        self.cursors = [None]
        self.show_filter_line()
        self.refetch()

    def filter_applied(self) -> None:
        self._table().focus()

    # ------------------------------------------------------------------ views and pages
    def _table(self) -> LiveTable:
        return self.query_one("#audit-journal" if self.view == "journal" else "#audit-events", LiveTable)

    def action_toggle_view(self) -> None:
        self.view = "journal" if self.view == "events" else "events"
        self.cursors = [None]
        self.query_one("#audit-events", LiveTable).display = self.view == "events"
        self.query_one("#audit-journal", LiveTable).display = self.view == "journal"
        self._table().focus()
        self.refetch()

    def action_next_page(self) -> None:
        data = self.page
        if self.view != "events" or data is None:
            self.app.notify("The journal shows its newest actions; narrow it with / (operator: since: until:).")
            return
        if len(data.events) < PAGE:
            self.app.notify(oldest_page_words(data.history) if data.history.archived and data.online_part
                            else "This is the oldest page.")
            return
        self.cursors.append(data.events[-1].id)
        self.refetch()

    # ------------------------------------------------------------------ opening
    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        self.action_open_event()

    def action_open_event(self) -> None:
        data = self.page
        key = self._table().cursor_key
        if data is None or key is None:
            self.app.notify("Select an event first.", severity="warning")
            return
        if self.view == "events":
            found = next((e for e in data.events if str(e.id) == key), None)
            if found is not None:
                self.app.push_screen(DetailScreen(found.job_id, at_event=found.id))
            return
        action = next((a for a in data.actions if f"{a.source}:{a.event_id}" == key), None)
        if action is None:
            return
        if action.job_id is None:
            self.app.notify(f"A {action.action} of {action.agent_id}'s subtree: the Fleet (4) and Reconciliations "
                            "(5) screens show it.", title="A shutdown, not a call")
            return
        self.app.push_screen(DetailScreen(action.job_id, at_event=action.event_id))

    # ------------------------------------------------------------------ export
    def action_export(self) -> None:
        session = self.leasectl.session
        f = self.filter_value
        journal = self.view == "journal"  # what the view shows when `e` is pressed is what is written
        # once history was archived, a filter with no start is written from where the online history
        # begins (and one that reaches before it is refused by the export itself: nothing written)
        note = online_part_note(self.page.history) if self.page is not None and self.page.online_part else ""
        archived = f" {note[:1].upper()}{note[1:]}." if note else ""
        stamp_now = (self.now() or datetime.now().astimezone()).strftime("%Y%m%d-%H%M%S")

        def write(path: Path, fmt: str, progress, cancelled) -> int:
            def on_progress(done: int, total: int | None) -> None:
                if cancelled():
                    raise LeasectlError("export stopped: nothing was written")
                progress(done, total)

            # its own session: a long export never holds up the screens' reads
            with open_session(session.dsn, limits=AUDIT_LIMITS, read_only=session.read_only_requested) as conn:
                job_id = resolve(conn, f.job) if f.job else None
                with atomic_write(path, newline="" if fmt == "csv" else None) as handle:
                    if journal:
                        # what the journal view shows: its filter (operator:, job:, since:, until:/at:)
                        summary = audit_db.export_journal(conn, handle, fmt=fmt or "jsonl", operator=f.operator,
                                                          job_id=job_id, since=f.since, until=f.upto,
                                                          on_progress=on_progress)
                    else:
                        summary = audit_db.export(conn, handle, fmt=fmt or "jsonl", since=f.since, until=f.upto,
                                                  job_id=job_id, owner=f.owner, operator=f.operator, kind=f.kind,
                                                  on_progress=on_progress)
            return int(summary["events"])

        if journal:
            selected = " ".join(f"{k}:{v}" for k, v in f.text.items() if k not in ("owner", "kind"))
            self.app.push_screen(ExportDialog(
                "Export the operator journal",
                f"Every operator action the filter selects ({sanitize(selected or 'no filter', max_chars=120)}) "
                "across calls and shutdowns, newest first as the journal lists it, with the keys of `leasectl "
                "audit actions --json` and the login that wrote each (db_role): typed JSONL or CSV with a header. "
                f"Read-only.{archived}", f"leasectl-journal-{stamp_now}.jsonl", write, formats=["jsonl", "csv"]))
            return
        selected = f.describe() or "no filter: the whole history"
        self.app.push_screen(ExportDialog(
            "Export the history", f"Every job_events row the filter selects ({sanitize(selected, max_chars=120)}), "
            "oldest first, with the login that wrote each (db_role): typed JSONL (one object a line) or CSV with "
            f"a header. Read-only.{archived}",
            f"leasectl-audit-{stamp_now}.jsonl", write, formats=["jsonl", "csv"]))

    def commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Export the history", "What the view shows for the filter, to a file (e)",
                            self.action_export)
        yield SystemCommand("Operator journal", "Switch between events and the journal (j)", self.action_toggle_view)
