"""One call put into words, the same in `leasectl show` and in the console's call detail: its
fields, who owned it and when, what operators did, its lineage and its history."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

from console.core.models import LIVE_STATES, ZOMBIE_KINDS, Event, Job, JobSummary, LineageRow, ServiceCheck
from console.core.ownership import ENDINGS, Holding, ownership
from console.operator.present.logins import is_operator_kind, legend_if_claimed, usual_login, who_text
from console.operator.present.words import (
    HEALTH_MEANING,
    STYLE,
    clock,
    health_words,
    live_ages,
    one_line,
    side_effect_words,
    state_label,
    state_style,
    t,
    when,
)
from console.shared.contexts import trace_link
from console.shared.text import counted, format_seconds, sanitize

LOUD_EVENTS = (*ZOMBIE_KINDS, "ownership_unknown")
# a detail value of an event is shown whole up to this many characters (then cut with a marker)
DETAILS_CHARS = 1_000


def json_text(value: Any, *, max_chars: int | None = 2_000) -> str:
    if value is None:
        return "—"
    return sanitize(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str), max_chars=max_chars)


def call_fields(job: Job | JobSummary, now: datetime | None = None, *,
                trace_url: str | None = None) -> list[tuple[str, Text]]:
    """Every field of a call as (label, value), in the order a person reads them; the ages from the
    database's clock at `now` (the console ticks it), else as read. `trace_url`: the context's
    template (console.shared.contexts), which makes the call's trace a link."""
    moment = now or job.db_now
    ages = live_ages(job, moment)
    rows: list[tuple[str, Text]] = []

    def row(label: str, value: Text | str, style: str = "") -> None:
        rows.append((label, value if isinstance(value, Text) else t(value, style)))

    side_effect, side_style = side_effect_words(job.side_effect)
    row("call", Text(str(job.id), style="bold"))
    row("tool", Text.assemble(t(job.tool, "bold", max_chars=200), "  ", (side_effect, side_style)))
    row("state", Text(state_label(job.state), style=state_style(job.state)))
    health, health_style = health_words(job.health, job.state)
    row("lease health", Text.assemble((health, health_style), "  ",
                                      (HEALTH_MEANING.get(job.health or "", "") if health != "—" else "", "dim")))
    row("owner", job.owner_id or "—")
    row("fencing token", str(job.fencing_token))
    row("attempt", f"{job.attempt} of {job.max_attempts}")
    row("heartbeat age", Text(*ages["heartbeat"]))
    row("lease left", Text(*ages["lease"]))
    row("lease until", when(job.lease_until) if job.state in LIVE_STATES else "—")
    stage = format_seconds(job.stage_timeout_seconds) if job.stage_timeout_seconds else "—"
    row("lease sizing", f"L={job.lease_seconds:g}s  H={job.heartbeat_seconds:g}s  "
                        f"R={getattr(job, 'missed_heartbeats', None) or '?'}  J={job.jitter_seconds:g}s  "
                        f"stage timeout={stage}" if job.lease_seconds is not None and job.heartbeat_seconds is not None
        and job.jitter_seconds is not None else "—")
    row("idempotency key", job.idempotency_key)
    row("agent / session", f"{sanitize(job.agent_id or '—', max_chars=200)} / "
                           f"{sanitize(job.session_id or '—', max_chars=200)}")
    row("model / provider", f"{sanitize(job.model or '—', max_chars=200)} / "
                            f"{sanitize(job.provider or '—', max_chars=200)}")
    # a chain, a priority, an upstream acceptance or a trace: shown when the call has one
    # (migration 0014; the console's detail tells the whole chain)
    if job.parent_id is not None or job.stage:
        row("chain", f"stage {job.stage} of chain {str(job.chain_id)[:8]}, made by "
                     f"{str(job.parent_id)[:8] if job.parent_id else '—'}")
    if job.priority:
        row("priority", f"{job.priority} (higher is claimed first)")
    if job.trace_id:
        row("trace", job.trace_id)
        link = trace_link(trace_url, job.trace_id)
        if link is not None:
            row("trace link", trace_link_text(link))
    if job.accepted_at is not None and job.accepted_at < job.created_at:
        row("accepted", f"{when(job.accepted_at)} upstream, "
                        f"{format_seconds((job.created_at - job.accepted_at).total_seconds())} before it was made")
    row("created", when(job.created_at))
    row("claimed", when(job.claimed_at))
    row("deadline", Text.assemble(when(job.deadline_at), "  ", Text(*ages["deadline"])) if job.deadline_at else "—")
    row("finished", when(job.finished_at))
    if job.cancel_requested_at:
        stopped = ("cancel confirmed" if job.state == "cancelled" else
                   "completed DESPITE the cancel" if job.completed_despite_cancel else
                   "requested — NOT stopped: the worker has not confirmed")
        row("cancel", Text.assemble(t(f"{when(job.cancel_requested_at)} by {sanitize(job.cancel_requested_by)}: "),
                                    t(job.cancel_requested_reason or ""), "  ", (stopped, STYLE["warn"])))
    if job.side_effect_started_at or job.external_request_id:
        row("side effect", f"started {when(job.side_effect_started_at)}, request "
                           f"{sanitize(job.external_request_id or '—', max_chars=200)}")
    if job.retry_approved_by:
        row("retry approved", f"{when(job.retry_approved_at)} by {sanitize(job.retry_approved_by, max_chars=200)}: "
                              f"{sanitize(job.retry_approved_reason or '', max_chars=2_000)}")
    check = getattr(job, "check", None)
    if check is not None:
        row("check", f"the service said {check.found} at {when(check.checked_at)} (token {check.token})",
            STYLE["warn"] if check.found != "not_done" else "")
    if job.terminal_reason:
        row("terminal reason", job.terminal_reason)
    error = getattr(job, "error", None)
    if error is not None:
        row("error", json_text(error), "red")
    return rows


def payload_words(job: JobSummary) -> str:
    size = job.payload_size or 0
    return (f"sha256 {job.payload_hash or '—'}, {size:,} bytes stored (compressed) — hidden: it may hold "
            "personal data")


def label_grid(gap: int = 1) -> Table:
    """Two columns, a dim label that never wraps beside its value folded to fit: how a call's
    fields, what the approver reads and an agent's or a shutdown's story are laid out."""
    grid = Table.grid(padding=(0, gap))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def fields_grid(fields: list[tuple[str, Text]]) -> Table:
    grid = label_grid(gap=2)
    for label, value in fields:
        grid.add_row(Text(label), value)
    return grid


def trace_link_text(link: str) -> Text:
    """A trace's URL, a terminal hyperlink where the terminal makes them (OSC 8: Rich's `link`
    style, which Textual passes on too), and the URL itself as the words, to copy where it does not."""
    return Text(link, style=Style(link=link, underline=True), overflow="fold")


def job_panel(job: Job, *, trace_url: str | None = None) -> Panel:
    """`leasectl show`: the call's fields (the payload as its hash and size: --json has it); its
    trace a link by the context's `trace_url`."""
    grid = fields_grid([*call_fields(job, trace_url=trace_url), ("payload", t(payload_words(job)))])
    return Panel(grid, title=Text(f"call {str(job.id)[:8]}", style="bold"), expand=False,
                 subtitle=Text("payload and result: leasectl show ID --json", style="dim"))


ID_CHARS = 8  # the shortest id prefix a list shows (`leasectl show` takes any unique prefix)
# worker- and agent-chosen values get a bound of their own, cut with an ellipsis beyond it
TOOL_WIDTH, OWNER_WIDTH = 32, 24


def id_prefix_chars(ids: Iterable[uuid.UUID], least: int = ID_CHARS) -> int:
    """How many characters of the id tell every listed call apart (at least `least`): two calls
    whose ids share their first eight characters are shown with as many as it takes."""
    texts = {str(i) for i in ids}
    chars = least
    while chars < 36 and len({text[:chars] for text in texts}) < len(texts):
        chars += 1
    return chars


def jobs_table(rows: list[JobSummary]) -> Table:
    """`leasectl jobs`: the id column is as wide as the prefix that tells the listed calls apart,
    never wraps and never gives way. Rich shares out a table too wide for the terminal by
    shrinking its wrapable columns first and only then every column alike: tool and owner (free
    text: a 150-character tool name) are therefore the wrapable ones, bounded besides, and their
    cells stay on one line, cut with an ellipsis."""
    chars = id_prefix_chars(r.id for r in rows)
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("call", no_wrap=True, min_width=chars, max_width=chars)
    bounds = {"tool": TOOL_WIDTH, "owner": OWNER_WIDTH}
    for column in ("tool", "state", "owner", "token", "try", "beat", "lease left", "health", "created"):
        table.add_column(column, no_wrap=column not in bounds, overflow="ellipsis", max_width=bounds.get(column),
                         min_width=6 if column in bounds else None)
    for r in rows:
        ages = live_ages(r, r.db_now)
        health, health_style = health_words(r.health, r.state)
        table.add_row(Text(str(r.id)[:chars], style="bold"), one_line(r.tool),
                      Text(state_label(r.state), state_style(r.state)),
                      one_line(r.owner_id or "—"), Text(str(r.fencing_token)), Text(f"{r.attempt}/{r.max_attempts}"),
                      Text(*ages["heartbeat"]), Text(*ages["lease"]), Text(health, health_style),
                      Text(format_seconds((r.db_now - r.created_at).total_seconds()) + " ago"))
    return table


def ownership_table(job_id: uuid.UUID, events: list[Event]) -> Table:
    """Who held the call, with which token, from when to when, and how each stretch ended: the one
    replay (console/core/ownership.py) that `show --json` and `audit owner` answer from. A lease
    that ran out ends its stretch at its expiry, whoever reclaimed the call later."""
    table = Table(title="ownership", title_justify="left", expand=True, show_edge=False, box=box.SIMPLE_HEAD)
    for column in ("owner", "token", "from", "to", "ended"):
        table.add_column(column, no_wrap=column in ("token", "from", "to"), overflow="fold",
                         max_width=20 if column == "owner" else None, ratio=2 if column == "ended" else None)
    for stretch in ownership(job_id, events):
        table.add_row(one_line(stretch.owner_id, "bold", max_chars=80), Text(str(stretch.fencing_token)),
                      Text(clock(stretch.held_from)), Text(clock(stretch.held_until) if stretch.held_until else "now"),
                      t(how_it_ended(stretch), max_chars=300))
    if not table.row_count:
        table.add_row(Text("—"), Text(""), Text(""), Text(""), Text("nobody has held it", style="dim"))
    return table


FOUND_WORDS = {"done": "it was done", "not_done": "it was NOT done (the request could be sent again)",
               "unknown": "it could not tell (so a human decides)"}


def service_check(check: ServiceCheck) -> tuple[str, str]:
    """`16:02:11  w-erp-2 asked about req-1 (token 2): it was NOT done`, and its details, for an
    approver: what the service said, not what a worker assumed (docs/seeds.md §004)."""
    who = sanitize(check.actor or "?", max_chars=80)
    request = sanitize(check.request or "its earlier request", max_chars=120)
    found = FOUND_WORDS.get(check.found or "", sanitize(check.found or "?", max_chars=40))
    said = json_text(check.details, max_chars=300) if check.details not in (None, {}) else ""
    return f"{clock(check.at)}  {who} asked about {request} (token {check.fencing_token}): {found}", said


def how_it_ended(stretch: Holding) -> str:
    """`lease expired; reclaimed by w-2 at 21:13:30`, `succeeded`, `fenced out by alice`."""
    if stretch.ended_by is None:
        return "holds it"
    by = sanitize(stretch.end_actor, max_chars=80) if stretch.end_actor else None
    if stretch.ended_by == "expired":
        words = "lease expired"
        if stretch.end_kind in ("claimed", "reclaimed") and by:
            words += f"; reclaimed by {by}"
        elif stretch.end_state and by:
            words += f"; then {stretch.end_state.replace('_', ' ')} ({by})"
        if stretch.ended_at_event is not None:
            words += f" at {clock(stretch.ended_at_event)}"
        return words
    if stretch.ended_by == "fenced":
        return f"fenced out{f' by {by}' if by else ''} (token raised while its lease was live)"
    if stretch.ended_by == "reclaimed":
        return f"reclaimed{f' by {by}' if by else ''} while its lease was live: {ENDINGS['reclaimed']}"
    words = stretch.ended_by.replace("_", " ")
    return f"{words} by {by}" if by and by != stretch.owner_id else words


def operator_actions(events: list[Event]) -> RenderableType:
    """Every operator action on the call, applied, refused or failed, with name and reason (and the
    login that journaled it when the name is not that login's own: present.logins)."""
    table = Table(title="operator actions", title_justify="left", expand=True, show_edge=False, box=box.SIMPLE_HEAD)
    for column in ("at", "operator", "action", "outcome", "reason"):
        table.add_column(column, overflow="fold", no_wrap=column == "at",
                         max_width=20 if column == "operator" else None)
    for e in events:
        if not e.kind.startswith("operator_"):
            continue
        outcome = str(e.details.get("outcome", ""))
        refusal = e.details.get("refusal") or e.details.get("error") or ""
        action = e.details.get("action") if e.kind == "operator_action_failed" else e.kind.removeprefix("operator_")
        table.add_row(Text(when(e.at, with_day=False)), who_text(e.actor, e.db_role, operator=True, style="bold",
                                                                  stacked=True),
                      Text(str(action or "").replace("_", " ")),
                      t(f"{outcome} {refusal}".strip(), STYLE["ok"] if outcome == "applied" else STYLE["warn"],
                        max_chars=300),
                      t(e.reason or "", max_chars=DETAILS_CHARS))
    if not table.row_count:
        return Text("operator actions: none", style="italic dim")
    return table


def lineage_table(lineage: list[LineageRow]) -> Table:
    table = Table(title="idempotency-key lineage", title_justify="left", expand=True, show_edge=False,
                  box=box.SIMPLE_HEAD)
    for column in ("call", "key", "state", "token", "relation"):
        table.add_column(column, overflow="fold", max_width=32 if column == "key" else None)
    for r in lineage:
        table.add_row(Text(str(r.id)[:8]), one_line(r.idempotency_key, max_chars=120),
                      Text(state_label(r.state), state_style(r.state)), Text(str(r.fencing_token)), Text(r.relation))
    if not lineage:
        table.add_row(Text("—"), Text("no other call shares this key's stem or request", style="dim"),
                      Text(""), Text(""), Text(""))
    return table


def event_words(e: Event) -> tuple[str, str, str]:
    """(state, owner, details) of one history row."""
    state = (f"{e.state_from or ''} → {e.state_to}" if e.state_to and e.state_from and e.state_from != e.state_to
             else e.state_to or "")
    owner = (f"{sanitize(e.owner_from or '—', max_chars=80)} → {sanitize(e.owner_to or '—', max_chars=80)}"
             if e.owner_from != e.owner_to else sanitize(e.owner_to or "", max_chars=80))
    details = {k: v for k, v in e.details.items() if v is not None}
    if e.reason:
        details["reason"] = e.reason
    return state, owner, json_text(details, max_chars=DETAILS_CHARS) if details else ""


def history_table(events: list[Event], *, title: str | None = None, compact: bool = False) -> Table:
    """Every event of the call, oldest first: ownership, state, side effects, worker events and
    operator actions. Details wrap (never cut silently) up to DETAILS_CHARS. `compact` (a narrow
    terminal) folds the state and owner changes into the details column. The actor is marked with
    the login that wrote the row when the name is not that login's own (present.logins), and the
    caption then says what the mark means."""
    day = events[0].at.strftime("%Y-%m-%d") if events else ""
    usual = usual_login([e.db_role for e in events])
    table = Table(title=title or f"history ({counted(len(events), 'event')}, from {day}, times UTC"
                  + (f"; written by login {sanitize(usual, max_chars=80)} unless a row names another" if usual else "")
                  + ")",
                  title_justify="left",
                  expand=True, show_edge=False, box=box.SIMPLE_HEAD,
                  caption=legend_if_claimed([(e.actor, e.db_role, is_operator_kind(e.kind)) for e in events]),
                  caption_justify="left")
    words = [event_words(e) for e in events]
    # long owner names (worker-chosen) would starve the details: fold them into the details instead
    compact = compact or max((len(state) + len(owner) for state, owner, _ in words), default=0) > 44
    columns = ("at", "event", "actor", "token", "details") if compact else (
        "at", "event", "actor", "token", "state", "owner", "details")
    # worker-chosen names (an actor, an owner) are bounded so that the details keep their room (the
    # login that wrote a row goes under its actor's name, not beside it)
    widest = {"event": 22, "actor": 20, "state": 26, "owner": 30}
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in ("at", "token"), max_width=widest.get(column),
                         ratio=3 if column == "details" else None)
    for e, (state, owner, details) in zip(events, words, strict=True):
        event = t(e.kind, "bold red" if e.kind in LOUD_EVENTS else "bold", max_chars=60)
        head = [Text(when(e.at, with_day=False)), event,
                who_text(e.actor, e.db_role, operator=is_operator_kind(e.kind), stacked=True, usual=usual),
                Text("" if e.fencing_token is None else str(e.fencing_token))]
        if compact:
            moves = "  ".join(part for part in (state, f"owner {owner}" if owner else "") if part)
            table.add_row(*head, Text(f"{moves}  {details}".strip()))
        else:
            table.add_row(*head, Text(state), Text(owner), Text(details))
    return table


def archived_history_note(archived_before: datetime) -> Text:
    """A call whose history began before the online history does: what is shown is its online part."""
    return Text.assemble(("ARCHIVED", "bold yellow"),
                         f" — this call's history before {when(archived_before)} is archived (leasectl admin "
                         "retention): what follows is its online part only; `leasectl audit verify --archive DIR` "
                         "reads the rest")


def history_group(job_id: uuid.UUID, events: list[Event]) -> Group:
    """`leasectl history`."""
    return Group(Text(f"history of call {job_id}", style="bold"), history_table(events))


def describe_for_confirmation(job: JobSummary) -> Text:
    """What an action will be guarded by, as just read: the state and token the operator saw."""
    text = Text()
    text.append(f"call {job.id}", style="bold")
    text.append(f" ({sanitize(job.tool, max_chars=80)}): state ")
    text.append(job.state, style="bold")
    text.append(f", owner {sanitize(job.owner_id or '—', max_chars=80)}, fencing token ")
    text.append(str(job.fencing_token), style="bold")
    if job.state in LIVE_STATES and job.lease_left_seconds is not None:
        lease, _style = live_ages(job, job.db_now)["lease"]
        text.append(f", lease left {lease}")
    return text
