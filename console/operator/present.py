"""How calls, actions and the fleet are put into words, for the CLI and the console alike: rich
renderables and plain strings, every value from the database sanitized on its way in."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, timedelta

import humanize
from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from console.shared.health import counted, format_seconds, health_label
from console.shared.models import (
    Action,
    ActionResult,
    Applied,
    Event,
    FleetAgent,
    FleetSnapshot,
    HeldGrant,
    Job,
    JobSummary,
    ReconciliationRecord,
    ShutdownRequested,
    ShutdownResult,
)
from console.shared.text import clip, sanitize


def action_verb(action: Action, terminal_state: str | None = None) -> str:
    """The verb of the question before an action: "Cancel this call?", "Mark as failed this call?"."""
    if action == "mark_terminal":
        return f"Mark as {terminal_state}"
    return "Cancel" if action == "cancel" else "Approve a retry of"


def action_message(result: ActionResult) -> str:
    """The database's answer to an action, in words; what is true now when it was refused."""
    if isinstance(result, Applied):
        if result.action == "cancel" and result.state == "cancel_requested":
            return ("cancel requested — NOT stopped yet: the worker hears it at its next heartbeat "
                    "and confirms; until then it may still be running")
        if result.action == "cancel":
            return "cancelled (it had not started)"
        if result.action == "approve_retry":
            return "retry approved: the call is queued again for one more attempt"
        fenced = f"; owner fenced out (token now {result.fencing_token})" if result.fenced else ""
        return f"marked {result.state}{fenced}"
    reason = sanitize(result.reason, max_chars=300)
    if result.now is None:
        return reason
    now = result.now
    return (f"{reason} — now state {now.state}, owner {sanitize(now.owner_id or '-', max_chars=80)}, "
            f"token {now.fencing_token}")


def shutdown_message(result: ShutdownResult) -> str:
    if isinstance(result, ShutdownRequested):
        s = result.shutdown
        return (f"{s.mode} of {sanitize(s.root_agent_id, max_chars=80)} requested ({s.agents} agents, window "
                f"{s.window_seconds:g}s): the supervisor carries it out and writes the reconciliation record "
                "before anything is terminated")
    return sanitize(result.reason, max_chars=300)


def _t(value: object, style: str = "") -> Text:
    return Text(sanitize(value), style=style)


def _age(seconds: float | None, *, future: bool = False) -> str:
    if seconds is None:
        return "—"
    if future:
        return ("in " if seconds >= 0 else "expired ") + humanize.naturaldelta(timedelta(seconds=abs(seconds))) + (
            "" if seconds >= 0 else " ago")
    return humanize.naturaldelta(timedelta(seconds=seconds)) + " ago"


def jobs_table(rows: list[JobSummary]) -> Table:
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("call", "tool", "state", "owner", "token", "try", "heartbeat", "lease", "health", "created"):
        # identity columns never wrap; the ages may
        table.add_column(column, no_wrap=column not in ("heartbeat", "lease", "created"),
                         overflow="ellipsis", min_width=4)
    for r in rows:
        live = r.state in ("running", "cancel_requested")
        table.add_row(_t(r.short_id, "bold"), _t(r.tool), _t(r.state), _t(r.owner_id or "—"),
                      _t(r.fencing_token), _t(f"{r.attempt}/{r.max_attempts}"),
                      _t(_age(r.heartbeat_age_seconds) if live else "—"),
                      _t(_age(r.lease_left_seconds, future=True) if live else "—"),
                      _t(health_label(r.health), "" if r.health == "healthy" else "bold yellow"),
                      _t(humanize.naturaltime(r.db_now - r.created_at)))
    return table


def job_panel(job: Job) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    live = job.state in ("running", "cancel_requested")
    rows = [
        ("id", job.id), ("tool", f"{job.tool} ({job.side_effect})"), ("state", job.state),
        ("lease health", health_label(job.health)), ("owner", job.owner_id or "—"),
        ("fencing token", job.fencing_token), ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("heartbeat", _age(job.heartbeat_age_seconds) if live else "—"),
        ("lease", _age(job.lease_left_seconds, future=True) if live else "—"),
        ("deadline", _age(job.deadline_left_seconds, future=True) if job.deadline_at else "—"),
        ("idempotency key", job.idempotency_key), ("agent / session", f"{job.agent_id or '—'} / "
                                                                      f"{job.session_id or '—'}"),
        ("created", job.created_at.isoformat()), ("finished", job.finished_at.isoformat() if job.finished_at else "—"),
    ]
    if job.cancel_requested_at:
        rows.append(("cancel", f"requested by {job.cancel_requested_by}: {job.cancel_requested_reason}"
                               + (" — completed despite it" if job.completed_despite_cancel else "")))
    if job.side_effect_started_at or job.external_request_id:
        rows.append(("side effect", f"started {job.side_effect_started_at} request {job.external_request_id}"))
    if job.retry_approved_by:
        rows.append(("retry approved", f"by {job.retry_approved_by}: {job.retry_approved_reason}"))
    if job.terminal_reason:
        rows.append(("terminal reason", job.terminal_reason))
    if job.error is not None:
        rows.append(("error", json.dumps(job.error, ensure_ascii=False)))
    rows.append(("payload", f"sha256 {job.payload_hash}, {job.payload_size} bytes (use --json to see it)"))
    for label, value in rows:
        grid.add_row(Text(label), _t(value))
    return Panel(grid, title=Text(f"call {str(job.id)[:8]}", style="bold"), expand=False)


def history_table(job_id: uuid.UUID, events: list[Event]) -> Group:
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("at (UTC)", "event", "actor", "token", "state", "owner", "reason / details"):
        table.add_column(column, overflow="fold", no_wrap=column in ("at (UTC)", "event", "token"))
    for e in events:
        state = (f"{e.state_from} → {e.state_to}" if e.state_from and e.state_to and e.state_from != e.state_to
                 else e.state_to or "")
        owner = f"{e.owner_from or '—'} → {e.owner_to or '—'}" if e.owner_from != e.owner_to else (e.owner_to or "")
        details = {k: v for k, v in e.details.items() if v is not None}
        extra = " ".join(filter(None, [e.reason or "", json.dumps(details, ensure_ascii=False) if details else ""]))
        table.add_row(_t(e.at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]), _t(e.kind, "bold"), _t(e.actor or "—"),
                      _t("" if e.fencing_token is None else e.fencing_token), _t(state), _t(owner), _t(extra))
    day = events[0].at.astimezone(UTC).strftime("%Y-%m-%d") if events else ""
    return Group(Text(f"history of call {job_id}  (from {day}, times UTC)", style="bold"), table)


def describe_for_confirmation(job: JobSummary) -> Text:
    text = Text()
    text.append(f"call {job.id}", style="bold")
    text.append(f" ({sanitize(job.tool)}): state ")
    text.append(job.state, style="bold")
    text.append(f", owner {sanitize(job.owner_id or '—')}, fencing token ")
    text.append(str(job.fencing_token), style="bold")
    if job.state in ("running", "cancel_requested") and job.lease_left_seconds is not None:
        text.append(f", lease {_age(job.lease_left_seconds, future=True)}")
    return text


def fleet_tables(snapshot: FleetSnapshot) -> list[Table]:
    from console.shared.fleet_words import AGENT_STATE_STYLE, shutdown_phase, stopped_label, tree_prefixes

    tree = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, title="agents",
                 title_justify="left")
    prefixes = tree_prefixes(snapshot.agents)
    widest = max((len(p) + len(sanitize(a.id)) for p, a in zip(prefixes, snapshot.agents, strict=True)), default=5)
    for column in ("agent", "kind", "state", "seen ago", "running", "queued", "grants", "stopped"):
        tree.add_column(column, no_wrap=True, overflow="ellipsis", min_width=widest if column == "agent" else None,
                        justify="right" if column in ("running", "queued") else "left")
    for prefix, a in zip(prefixes, snapshot.agents, strict=True):
        name = Text(prefix, style="dim")
        name.append(sanitize(a.id), style="bold" if a.depth == 0 else "")
        grants = f"{a.live_grants}" + (f" +{a.expired_grants} expired" if a.expired_grants else "")
        tree.add_row(name, _t(a.kind), _t(a.state, AGENT_STATE_STYLE.get(a.state, "")),
                     _t(format_seconds(a.last_seen_age_seconds) if a.last_seen_at else "never"),
                     _t(a.running_calls), _t(a.queued_calls), _t(grants),
                     _t(*stopped_label(a)))
    shutdowns = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                      title="shutdowns", title_justify="left")
    for column in ("shutdown", "subtree", "mode", "phase", "requested by", "reason", "requested"):
        shutdowns.add_column(column, overflow="fold", no_wrap=column in ("shutdown", "mode"))
    for s in snapshot.shutdowns:
        loud = s.state == "terminated" and bool(s.unaccounted)
        shutdowns.add_row(_t(s.short_id, "bold"), _t(f"{s.root_agent_id} ({s.agents} agents)"), _t(s.mode),
                          _t(shutdown_phase(s), "bold red" if loud else ""), _t(s.requested_by), _t(s.reason),
                          _t(format_seconds((s.db_now - s.requested_at).total_seconds()) + " ago"))
    held = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                 title="grants held (not revoked)", title_justify="left")
    for column in ("agent", "kind", "resource", "issued by", "expires"):
        held.add_column(column, overflow="fold")
    for g in snapshot.grants:
        left = g.expires_in_seconds
        held.add_row(_t(g.agent_id, "bold"), _t(g.kind), _t(g.resource), _t(g.issued_by),
                     _t(f"in {format_seconds(left)}" if left > 0 else f"EXPIRED {format_seconds(-left)} ago",
                        "" if left > 0 else "dim"))
    return [tree, shutdowns, held]


def reconciliation_panel(record: ReconciliationRecord) -> Panel:
    from console.shared.fleet_words import RESOLUTION_STYLE

    body = Table.grid(padding=(0, 2))
    body.add_column(no_wrap=True)
    body.add_column()
    unaccounted = record.children_unaccounted
    if unaccounted:
        body.add_row(Text(f"UNACCOUNTED ({len(unaccounted)})", style="bold red"),
                     _t(", ".join(f"{c.agent_id} ({c.kind}, last seen {c.last_seen_at or 'never'})"
                                  for c in unaccounted), "bold red"))
    else:
        body.add_row(Text("unaccounted", style="green"), Text("none: every agent confirmed it stopped", "green"))
    body.add_row(Text("confirmed", style="dim"),
                 _t(", ".join(c.agent_id for c in record.children_confirmed) or "—"))
    for call in record.in_flight:
        body.add_row(Text("in flight", style="dim"),
                     Text.assemble((sanitize(call.resolution), RESOLUTION_STYLE.get(call.resolution, "")),
                                   f"  {str(call.job_id)[:8]} {sanitize(call.tool)} (agent {sanitize(call.agent_id)})"))
    if not record.in_flight:
        body.add_row(Text("in flight", style="dim"), Text("no call was in flight"))
    for g in record.grants_revoked:
        body.add_row(Text("revoked", style="dim"),
                     _t(f"{g.kind} {g.resource} of {g.agent_id}, by {g.revoked_by}"))
    for g in record.grants_expired:
        body.add_row(Text("expired", style="dim"),
                     _t(f"{g.kind} {g.resource} of {g.agent_id}, expired {g.expires_at}"))
    title = Text(f"reconciliation {record.short_id}", style="bold")
    title.append(f" · {record.mode} of {sanitize(record.root_agent_id)} by {sanitize(record.requested_by)}: "
                 f"{sanitize(record.reason)} · written by {sanitize(record.written_by)} at {record.written_at}",
                 style="")
    return Panel(body, title=title, title_align="left", border_style="red" if unaccounted else "")


def subtree_counts(tree: list[FleetAgent]) -> str:
    """`4 agents, 2 running calls, 1 queued call, 1 live grant`: the blast radius of a shutdown."""
    return ", ".join((counted(len(tree), "agent"),
                      counted(sum(a.running_calls for a in tree), "running call"),
                      counted(sum(a.queued_calls for a in tree), "queued call"),
                      counted(sum(a.live_grants for a in tree), "live grant")))


def subtree_summary(mode: str, tree: list[FleetAgent], grants: list[HeldGrant]) -> Group:
    """What a drain or abort of this subtree will touch, as read now: each agent with its calls,
    and every live grant the control plane will revoke."""
    from console.shared.fleet_words import tree_prefixes

    title = Text()
    title.append(f"{mode} of the subtree of {sanitize(tree[0].id, max_chars=80)}: ", style="bold")
    title.append(subtree_counts(tree))
    agents = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("agent", "kind", "state", "running", "queued", "live grants"):
        agents.add_column(column, no_wrap=column != "agent", overflow="fold",
                          justify="right" if column in ("running", "queued", "live grants") else "left")
    for prefix, a in zip(tree_prefixes(tree), tree, strict=True):
        agents.add_row(Text(prefix, style="dim") + _t(clip(a.id, 60)), _t(clip(a.kind, 30)), _t(a.state),
                       _t(a.running_calls), _t(a.queued_calls), _t(a.live_grants))
    ids = {a.id for a in tree}
    held = [g for g in grants if g.agent_id in ids and g.expires_in_seconds > 0]
    lines: list[Text] = [title, Text()]
    body: list[object] = [*lines, agents]
    if held:
        body.append(Text("live grants the control plane will revoke:", style="bold"))
        for g in held:
            body.append(_t(f"  {clip(g.kind, 30)} {clip(g.resource, 80)} of {clip(g.agent_id, 60)} "
                           f"(expires in {format_seconds(g.expires_in_seconds)})"))
    return Group(*body)  # type: ignore[arg-type]
