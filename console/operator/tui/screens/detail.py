"""Call detail (enter): every field, who owned it and when, what operators did, the lineage, its
chain told as one story, and the history -- the same words as `leasectl show` and `leasectl
history` (console.operator.present).

The chain (docs/seeds.md §000 stages, §004 the chain's deadline): every stage of the call's chain in
order, who held it, how it ended, how long it waited and ran, how much of the chain's deadline was
left when it started and when it ended, the slowest stage marked (console.operator.present.chains);
a call that is a chain of one gets one quiet line instead.

The payload is neither fetched nor shown until `p` asks: it may hold personal data, and it may be
megabytes. `p` fetches, off the UI thread, its real size and a bounded beginning; `e` exports the
whole of it (payload and result) to a file.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Static

from console.core.chains import Chain
from console.core.models import CallDetail, Job, JobSummary, PayloadPreview
from console.db import chains, reads
from console.db.connect import Conn
from console.operator import present
from console.operator.files import atomic_write
from console.operator.present.chains import chain_of_one, chain_story
from console.operator.tui.failures import describe_failure
from console.operator.tui.screens.base import BACK_BINDING, CALL_ACTION_BINDINGS, PollingScreen
from console.operator.tui.screens.export import ExportDialog
from console.operator.tui.widgets.status import TopChrome
from console.shared.errors import BadInput
from console.shared.text import sanitize

NARROW = 110  # the app's -narrow breakpoint


class DetailScreen(PollingScreen):
    CSS_PATH = "detail.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        BACK_BINDING,
        Binding("p", "toggle_payload", "Payload", tooltip="Reveal (a bounded beginning of) the payload and result"),
        Binding("e", "export_document", "Export", tooltip="Write the whole payload and result to a file"),
        *CALL_ACTION_BINDINGS,
    ]

    def __init__(self, job_id: uuid.UUID, at_event: int | None = None) -> None:
        super().__init__()
        self.job_id = job_id
        self.at_event = at_event  # opened from the Audit screen at this event: highlighted, scrolled to
        self.crumb = f"call {str(job_id)[:8]}"
        self.detail: CallDetail | None = None
        self.chain: Chain | None = None
        self.reveal = False
        self.preview: PayloadPreview | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        # on a small terminal the panes stack and this outer column scrolls (detail.tcss)
        with VerticalScroll(id="detail-body"):
            with Horizontal(id="top"):
                with VerticalScroll(id="fields-pane"):
                    yield Static(id="fields")
                    yield Static(id="payload")
                with VerticalScroll(id="story-pane"):
                    yield Static(id="timeline")
                    yield Static(id="lineage")
                    yield Static(id="chain-note")
            with VerticalScroll(id="chain-pane"):
                yield Static(id="chain")
            with VerticalScroll(id="history-pane"):
                yield Static(id="history")
        yield Footer()

    def load(self, conn: Conn) -> tuple[CallDetail, Chain | None]:
        return chains.call_detail_with_chain(conn, self.job_id)

    def db_now_of(self, data: tuple[CallDetail, Chain | None]) -> datetime:
        return data[0].job.db_now if data[0].job else datetime.now().astimezone()

    def show(self, answer: tuple[CallDetail, Chain | None]) -> None:
        data, self.chain = answer
        previous = self.detail.job if self.detail else None
        self.detail = data
        if data.job is None:
            self.query_one("#fields", Static).update(Text(f"No call {self.job_id}: it does not exist (any more).",
                                                          style="bold red"))
            return
        self._show_fields(data.job, self.now())
        # a history archived in part is never replayed from what is left (console/core/history.py)
        held = (present.archived_history_note(data.history_archived_before) if data.history_archived_before
                else present.ownership_table(data.job.id, data.events))
        self.query_one("#timeline", Static).update(Group(held, Text(""), present.operator_actions(data.events)))
        self.query_one("#lineage", Static).update(present.lineage_table(data.lineage))
        self._show_chain(self.now() or data.job.db_now)
        history = present.history_table(data.events, compact=self.size.width < NARROW)
        at = next((i for i, e in enumerate(data.events) if e.id == self.at_event), None)
        if at is not None:
            history.rows[at].style = "reverse"
        self.query_one("#history", Static).update(history)
        if previous is None and at is not None:
            self.call_after_refresh(self._scroll_to_event, at, len(history.columns) < 7)
        elif previous is None and self.size.width >= NARROW:
            # the latest events first in view (the refusals of a zombie, the last operator action)
            self.call_after_refresh(self.query_one("#history-pane", VerticalScroll).scroll_end, animate=False)
        if self.reveal and previous is not None and previous.state != data.job.state:
            self._fetch_preview()  # the result may have just arrived
        self._show_payload()

    def _scroll_to_event(self, index: int, compact: bool) -> None:
        """Bring the highlighted event into view: as far down as the history above it is tall."""
        if self.detail is None:
            return
        pane = self.query_one("#history-pane", VerticalScroll)
        above = present.history_table(self.detail.events[:index], compact=compact)
        width = max(pane.scrollable_content_region.width, 20)
        lines = len(self.app.console.render_lines(above, self.app.console.options.update_width(width), pad=False))
        if self.size.width >= NARROW:
            pane.scroll_to(y=max(lines - 4, 0), animate=False)
        else:  # stacked panes: the outer column scrolls
            body = self.query_one("#detail-body", VerticalScroll)
            body.scroll_to(y=max(pane.virtual_region.y + lines - 4, 0), animate=False)

    def tick(self, now: datetime) -> None:
        if self.detail and self.detail.job:
            self._show_fields(self.detail.job, now)
            if self.chain is not None and not self.chain.over:
                self._show_chain(now)

    def _show_fields(self, job: Job, now: datetime | None) -> None:
        """The call's fields; its trace a link (clickable where the terminal makes links) by the
        context's `trace_url`, when the console runs in a context that has one."""
        context = self.leasectl.session.context
        template = context.trace_url if context is not None else None
        self.query_one("#fields", Static).update(present.fields_grid(present.call_fields(job, now,
                                                                                         trace_url=template)))

    def _show_chain(self, now: datetime) -> None:
        """The chain as one story in a pane of its own; a chain of one, one quiet line under the lineage."""
        chain = self.chain
        lone = chain is None or chain.lone
        self.query_one("#chain-note", Static).display = lone
        self.query_one("#chain-pane", VerticalScroll).display = not lone
        if lone:
            self.query_one("#chain-note", Static).update(chain_of_one(chain))
        else:
            assert chain is not None
            self.query_one("#chain", Static).update(chain_story(chain, now, compact=self.size.width < NARROW))

    def selected_job(self) -> JobSummary | None:
        return self.detail.job if self.detail else None

    # ------------------------------------------------------------------ the payload, on demand
    def _show_payload(self) -> None:
        job = self.detail.job if self.detail else None
        if job is None:
            return
        text = Text()
        text.append("payload ", style="bold")
        if not self.reveal:
            text.append(f"sha256 {job.payload_hash or '—'}, {job.payload_size or 0:,} bytes stored (compressed) — ")
            text.append("p previews the payload and result, e exports them whole", style="italic")
        elif self.preview is None:
            text.append("fetching…", style="dim")
        else:
            text.append_text(self._preview_words(self.preview))
        self.query_one("#payload", Static).update(text)

    @staticmethod
    def _preview_words(p: PayloadPreview) -> Text:
        text = Text()
        text.append(f"({p.payload_bytes or 0:,} bytes as text; p hides it again)\n", style="dim")
        text.append(sanitize(p.payload_preview or "null", single_line=False))
        if p.payload_cut:
            text.append(f"\n… the first {p.max_chars:,} characters of {p.payload_bytes or 0:,} bytes; e exports the "
                        "whole payload and result to a file (or leasectl show ID --json)", style="bold yellow")
        text.append("\nresult ", style="bold")
        text.append(f"({p.result_bytes or 0:,} bytes as text)\n", style="dim")
        text.append(sanitize(p.result_preview or "null", single_line=False))
        if p.result_cut:
            text.append(f"\n… the first {p.max_chars:,} characters; e exports the whole result", style="bold yellow")
        return text

    def action_toggle_payload(self) -> None:
        self.reveal = not self.reveal
        if self.reveal:
            self._fetch_preview()
        self._show_payload()

    def _fetch_preview(self) -> None:
        self.aside.read("payload", lambda conn: reads.payload_preview(conn, self.job_id), self._previewed,
                        self._not_previewed)

    def _previewed(self, preview: PayloadPreview | None) -> None:
        self.preview = preview
        self._show_payload()
        self.call_after_refresh(self.query_one("#payload", Static).scroll_visible, animate=False, top=True)

    def _not_previewed(self, error: BaseException | None) -> None:
        self.query_one("#payload", Static).update(Text(
            "payload: could not fetch it — " + describe_failure(error, "the payload preview"), style="bold red"))

    # ------------------------------------------------------------------ export
    def action_export_document(self) -> None:
        job_id = self.job_id
        session = self.leasectl.session

        def write(path: Path, _fmt: str, progress, cancelled) -> int:
            found = session.read(lambda conn: reads.job_document(conn, job_id))
            if found is None:
                raise BadInput(f"no call {job_id}")
            with atomic_write(path) as out:
                json.dump(found.model_dump(mode="json"), out, ensure_ascii=False, indent=2)
            progress(1, 1)
            return 1

        self.app.push_screen(ExportDialog(f"Export call {str(job_id)[:8]}", "The whole call as JSON: every field, "
                                          "the payload and the result (they may hold personal data).",
                                          f"call-{str(job_id)[:8]}.json", write))
