"""Call detail (enter): every field, who owned it and when, what operators did, the lineage.
The payload shows as a hash and a size until `p` reveals it: payloads may carry personal data."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, ClassVar

from pydantic import BaseModel
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Static

from console.db import reads
from console.db.connect import Conn
from console.operator.tui.cells import STYLE, health_cell, live_ages, plain, side_effect_cell, state_cell
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.widgets.status import TopChrome
from console.shared.health import HEALTH_MEANING, format_seconds
from console.shared.models import Event, Job, JobSummary, LineageRow
from console.shared.text import sanitize


class CallDetail(BaseModel):
    job: Job | None
    events: list[Event]
    lineage: list[LineageRow]


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if value else "—"


def _json(value: Any) -> str:
    if value is None:
        return "—"
    return sanitize(json.dumps(value, ensure_ascii=False, sort_keys=True))


class DetailScreen(PollingScreen):
    CSS_PATH = "detail.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Back to the list"),
        Binding("p", "toggle_payload", "Payload", tooltip="Reveal or hide the payload and result"),
        Binding("c", "cancel_call", "Cancel", tooltip="Request a cancel of this call"),
        Binding("t", "mark_terminal", "Mark terminal", tooltip="Close the call after checking outside"),
        Binding("a", "approve_retry", "Approve retry", tooltip="Outcome unknown: allow one more attempt"),
    ]

    def __init__(self, job_id: uuid.UUID) -> None:
        super().__init__()
        self.job_id = job_id
        self.crumb = f"call {str(job_id)[:8]}"
        self.detail: CallDetail | None = None
        self.reveal = False

    def compose(self) -> ComposeResult:
        yield TopChrome()
        with Horizontal(id="top"):
            with VerticalScroll(id="fields-pane"):
                yield Static(id="fields")
            with VerticalScroll(id="story-pane"):
                yield Static(id="timeline")
                yield Static(id="lineage")
        with VerticalScroll(id="history-pane"):
            yield Static(id="history")
            yield Static(id="payload")
        yield Footer()

    def load(self, conn: Conn) -> CallDetail:
        job = reads.job(conn, self.job_id)
        if job is None:
            return CallDetail(job=None, events=[], lineage=[])
        return CallDetail(job=job, events=reads.history(conn, self.job_id), lineage=reads.lineage(conn, self.job_id))

    def db_now_of(self, data: CallDetail) -> datetime:
        return data.job.db_now if data.job else datetime.now().astimezone()

    def show(self, data: CallDetail) -> None:
        self.detail = data
        if data.job is None:
            self.query_one("#fields", Static).update(Text(f"No call {self.job_id}: it does not exist (any more).",
                                                          style="bold red"))
            return
        now = self.lapp.db_time() or data.job.db_now
        self.query_one("#fields", Static).update(self._fields(data.job, now))
        self.query_one("#timeline", Static).update(self._timeline(data.events))
        self.query_one("#lineage", Static).update(self._lineage(data.lineage))
        self.query_one("#history", Static).update(self._history(data.events))
        self.query_one("#payload", Static).update(self._payload(data.job))

    def tick(self, now: datetime) -> None:
        if self.detail and self.detail.job:
            self.query_one("#fields", Static).update(self._fields(self.detail.job, now))

    def selected_job(self) -> JobSummary | None:
        return self.detail.job if self.detail else None

    # ------------------------------------------------------------------ rendering
    def _fields(self, job: Job, now: datetime) -> Table:
        ages = {name: cell.as_text() for name, cell in live_ages(job, now).items()}
        table = Table.grid(padding=(0, 2))
        table.add_column(style="dim", no_wrap=True)
        table.add_column()
        title = Text()
        title.append(f"call {job.id}", style="bold")
        table.add_row(Text(""), title)

        def row(label: str, value: Text | str) -> None:
            table.add_row(Text(label), value if isinstance(value, Text) else plain(value))

        row("tool", Text.assemble(plain(job.tool, "bold"), "  ", side_effect_cell(job.side_effect).as_text()))
        row("state", state_cell(job.state).as_text())
        row("lease health", Text.assemble(health_cell(job.health).as_text(), "  ",
                                          plain(HEALTH_MEANING.get(job.health, ""), "dim")))
        row("owner", job.owner_id or "—")
        row("fencing token", str(job.fencing_token))
        row("attempt", f"{job.attempt} of {job.max_attempts}")
        row("heartbeat age", ages["heartbeat"])
        row("lease left", ages["lease"])
        row("lease until", _when(job.lease_until))
        row("lease sizing", f"L={job.lease_seconds}s  H={job.heartbeat_seconds}s  R={job.missed_heartbeats}  "
                            f"J={job.jitter_seconds}s  stage timeout="
                            f"{format_seconds(job.stage_timeout_seconds) if job.stage_timeout_seconds else '—'}")
        row("idempotency key", job.idempotency_key)
        row("agent / session", f"{job.agent_id or '—'} / {job.session_id or '—'}")
        row("model / provider", f"{job.model or '—'} / {job.provider or '—'}")
        row("created", _when(job.created_at))
        row("claimed", _when(job.claimed_at))
        row("deadline", Text.assemble(plain(_when(job.deadline_at)), "  ", ages["deadline"]) if job.deadline_at
            else "—")
        row("finished", _when(job.finished_at))
        if job.cancel_requested_at:
            stopped = ("cancel confirmed" if job.state == "cancelled" else
                       "completed DESPITE the cancel" if job.completed_despite_cancel else
                       "requested — NOT stopped: the worker has not confirmed")
            row("cancel", Text.assemble(plain(f"{_when(job.cancel_requested_at)} by {job.cancel_requested_by}: "),
                                        plain(job.cancel_requested_reason or ""), "  ",
                                        plain(stopped, STYLE["warn"])))
        if job.side_effect_started_at or job.external_request_id:
            row("side effect", f"started {_when(job.side_effect_started_at)}  request {job.external_request_id or '—'}")
        if job.retry_approved_by:
            row("retry approved", f"{_when(job.retry_approved_at)} by {job.retry_approved_by}: "
                                  f"{job.retry_approved_reason or ''}")
        if job.terminal_reason:
            row("terminal reason", job.terminal_reason)
        if job.error is not None:
            row("error", plain(_json(job.error), "red"))
        return table

    def _timeline(self, events: list[Event]) -> Group:
        table = Table(title="ownership", title_justify="left", expand=True, show_edge=False)
        for column in ("owner", "token", "from", "to", "ended"):
            table.add_column(column, no_wrap=column != "ended", overflow="fold")
        for stretch in reads.ownership_timeline(events):
            table.add_row(plain(stretch.owner or "—", "bold"), plain(stretch.fencing_token),
                          plain(stretch.since.strftime("%H:%M:%S")),
                          plain(stretch.until.strftime("%H:%M:%S") if stretch.until else "now"),
                          plain(stretch.how_it_ended or "holds it"))
        actions = Table(title="operator actions", title_justify="left", expand=True, show_edge=False)
        for column in ("at", "operator", "action", "outcome", "reason"):
            actions.add_column(column, overflow="fold")
        for e in events:
            if e.kind.startswith("operator_"):
                outcome = e.details.get("outcome", "")
                refusal = e.details.get("refusal") or e.details.get("error") or ""
                actions.add_row(plain(e.at.strftime("%H:%M:%S")), plain(e.actor or "—", "bold"),
                                plain(e.kind.removeprefix("operator_").replace("_", " ")),
                                plain(f"{outcome} {refusal}".strip(),
                                      STYLE["ok"] if outcome == "applied" else STYLE["warn"]),
                                plain(e.reason or ""))
        if not actions.row_count:
            return Group(table, Text(""), Text("operator actions: none", style="italic dim"))
        return Group(table, Text(""), actions)

    def _lineage(self, lineage: list[LineageRow]) -> Table:
        table = Table(title="idempotency-key lineage", title_justify="left", expand=True, show_edge=False)
        for column in ("call", "key", "state", "token", "relation"):
            table.add_column(column, overflow="fold")
        for r in lineage:
            table.add_row(plain(str(r.id)[:8]), plain(r.idempotency_key), state_cell(r.state).as_text(),
                          plain(r.fencing_token), plain(r.relation))
        if not lineage:
            table.add_row(plain("—"), plain("no other call shares this key's stem or request"), "", "", "")
        return table

    def _history(self, events: list[Event]) -> Table:
        table = Table(title=f"history ({len(events)} events)", title_justify="left", expand=True, show_edge=False)
        for column in ("at", "event", "actor", "token", "state", "owner", "details"):
            table.add_column(column, overflow="fold", no_wrap=column in ("at", "token"))
        for e in events:
            state = f"{e.state_from or ''} → {e.state_to}" if e.state_to and e.state_from != e.state_to else (
                e.state_to or "")
            owner = (f"{e.owner_from or '—'} → {e.owner_to or '—'}" if e.owner_from != e.owner_to
                     else (e.owner_to or ""))
            details = {k: v for k, v in e.details.items() if v is not None}
            if e.reason:
                details["reason"] = e.reason
            style = "bold red" if e.kind in ("heartbeat_lost", "result_rejected", "receiver_rejected",
                                              "ownership_unknown") else ""
            table.add_row(plain(e.at.strftime("%H:%M:%S.%f")[:-3]), plain(e.kind, style or "bold"),
                          plain(e.actor or "—"), plain("" if e.fencing_token is None else e.fencing_token),
                          plain(state), plain(owner), plain(_json(details) if details else ""))
        return table

    def _payload(self, job: Job) -> Text:
        text = Text()
        text.append("payload ", style="bold")
        if not self.reveal:
            text.append(f"sha256 {job.payload_hash or '—'}, {job.payload_size or 0} bytes stored — ")
            text.append("press p to reveal payload and result", style="italic")
            return text
        text.append("(p hides it again)\n", style="dim")
        text.append(sanitize(json.dumps(job.payload, indent=2, ensure_ascii=False), single_line=False))
        text.append("\nresult\n", style="bold")
        text.append(sanitize(json.dumps(job.result, indent=2, ensure_ascii=False), single_line=False))
        return text

    # ------------------------------------------------------------------ keys
    def action_back(self) -> None:
        self.app.pop_screen()

    def action_toggle_payload(self) -> None:
        self.reveal = not self.reveal
        if self.detail and self.detail.job:
            self.query_one("#payload", Static).update(self._payload(self.detail.job))


