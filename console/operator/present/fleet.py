"""The fleet in words (docs/seeds.md §003): the agent tree, shutdowns, grants, a shutdown's blast radius and
the reconciliation record, the same in `leasectl fleet`/`reconciliations` and on screens 4 and 5."""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from console.core.fleet import tree_prefixes, window_left
from console.core.models import (
    FleetAgent,
    FleetSnapshot,
    GrantEntry,
    GrantRow,
    HeldGrant,
    ReconciliationRecord,
    Shutdown,
)
from console.operator.present.words import one_line, t, when
from console.shared.text import counted, format_seconds, sanitize

AGENT_STATE_STYLE = {
    "running": "green",
    "draining": "bold yellow",
    "aborting": "bold red",
    "reconciling": "bold magenta",
    "terminated": "dim",
}
AGENT_STATE_MEANING = {
    "running": "takes new calls",
    "draining": "no new calls; running ones finish within the window (a shutdown is under way)",
    "aborting": "no new calls; running ones are asked to cancel and must confirm",
    "reconciling": "nothing runs any more; the control plane is writing the record",
    "terminated": "stopped, with a reconciliation record; 'NEVER' under stopped = it never confirmed",
}
RESOLUTION_STYLE = {
    "completed": "green",
    "failed": "red",
    "cancelled": "",
    "never_started": "dim",
    "cancel_unconfirmed": "bold yellow",
    "outcome_unknown": "bold magenta",
}
RESOLUTION_MEANING = {
    "completed": "finished with a result",
    "failed": "failed",
    "cancelled": "cancelled, confirmed by its worker (or before it ran again)",
    "never_started": "queued when the shutdown came: never started",
    "cancel_unconfirmed": "stopped without its worker confirming: fenced out, may have run on",
    "outcome_unknown": "an unverifiable side effect may have happened: a human decides (approvals)",
}


def stopped_label(agent: FleetAgent) -> tuple[str, str]:
    """Whether the agent confirmed it stopped, and how loud to say it."""
    if agent.terminated_confirmed_at is not None:
        return "confirmed", "green"
    if agent.state == "running":
        return "—", "dim"
    if agent.state == "terminated":
        return "NEVER", "bold red"  # terminated without confirming: unaccounted in its record
    return "not yet", "yellow"


def grant_words(grant: HeldGrant, now: datetime | None = None) -> str:
    """`credential vault:prod-db (from code-1, expires in 39m)`, by the database's clock."""
    left = (grant.expires_at - now).total_seconds() if now else grant.expires_in_seconds
    when = f"expires in {seconds(left)}" if left > 0 else f"EXPIRED {seconds(-left)} ago, not revoked"
    return f"{grant.kind} {grant.resource} (from {grant.issued_by}, {when})"


def grant_summary(g: GrantRow) -> str:
    """`leasectl revoke`: one grant in a line (plain text; the CLI escapes it)."""
    held = f"grant {str(g.id)[:8]} ({sanitize(g.kind, max_chars=40)} {sanitize(g.resource, max_chars=120)}) " \
           f"held by {sanitize(g.agent_id, max_chars=ID_CHARS)}"
    if g.revoked_at is not None:
        return f"{held}: revoked by {sanitize(g.revoked_by or '?', max_chars=80)} at {when(g.revoked_at)}"
    left = "" if g.expires_in_seconds is None else (
        f", expires in {format_seconds(g.expires_in_seconds)}" if g.expires_in_seconds > 0 else ", expired")
    return held + f", issued by {sanitize(g.issued_by or '?', max_chars=80)}{left}"


def seconds(value: float) -> str:
    return format_seconds(max(value, 0))



def shutdown_phase(s: Shutdown, now: datetime | None = None) -> str:
    """`draining · 42 seconds left of 1 minute`, in the database's clock."""
    if s.state == "requested":
        return "requested · waiting for the supervisor (`leasectl supervise`)"
    if s.state == "terminated":
        if s.unaccounted:
            return f"terminated · {counted(s.unaccounted, 'agent')} UNACCOUNTED"
        return "terminated · every agent confirmed"
    window = seconds(s.phase_window_seconds or s.window_seconds)
    left = window_left(s, now)
    if left is None:
        return s.state
    if left <= 0:
        after = {"draining": "aborting what still runs", "aborting": "fencing unconfirmed calls",
                 "reconciling": "writing the record"}[s.state]
        return f"{s.state} · window of {window} over: {after}"
    if s.state == "reconciling":
        return f"reconciling · agents may still confirm for {seconds(left)}"
    return f"{s.state} · {seconds(left)} left of {window}"


ID_CHARS = 60  # agent ids are worker-chosen: a 3,000-character one must not push a record off screen


def agent_name(prefix: str, agent: FleetAgent) -> Text:
    name = Text(prefix, style="dim", no_wrap=True, overflow="ellipsis")
    name.append(sanitize(agent.id, max_chars=ID_CHARS), style="bold" if agent.depth == 0 else "")
    return name


def fleet_tables(snapshot: FleetSnapshot) -> list[Table]:
    """`leasectl fleet`: the tree, the shutdowns, the grants still held."""
    tree = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, title="agents",
                 title_justify="left")
    prefixes = tree_prefixes(snapshot.agents)
    widest = max((len(p) + len(sanitize(a.id, max_chars=ID_CHARS)) for p, a in zip(prefixes, snapshot.agents,
                                                                                    strict=True)), default=5)
    for column in ("agent", "kind", "state", "seen ago", "running", "queued", "grants", "stopped"):
        tree.add_column(column, no_wrap=True, overflow="ellipsis", min_width=widest if column == "agent" else None,
                        justify="right" if column in ("running", "queued") else "left")
    for prefix, a in zip(prefixes, snapshot.agents, strict=True):
        grants = f"{a.live_grants}" + (f" +{a.expired_grants} expired" if a.expired_grants else "")
        tree.add_row(agent_name(prefix, a), one_line(a.kind, max_chars=40),
                     Text(a.state, AGENT_STATE_STYLE.get(a.state, "")),
                     Text(format_seconds(a.last_seen_age_seconds) if a.last_seen_at else "never"),
                     Text(str(a.running_calls)), Text(str(a.queued_calls)), Text(grants), Text(*stopped_label(a)))
    shutdowns = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                      title="shutdowns", title_justify="left")
    for column in ("shutdown", "subtree", "mode", "phase", "requested by", "reason", "requested"):
        shutdowns.add_column(column, overflow="fold", no_wrap=column in ("shutdown", "mode"))
    for s in snapshot.shutdowns:
        loud = s.state == "terminated" and bool(s.unaccounted)
        shutdowns.add_row(Text(s.short_id, style="bold"),
                          t(f"{sanitize(s.root_agent_id, max_chars=ID_CHARS)} ({counted(s.agents, 'agent')})"),
                          Text(s.mode),
                          Text(shutdown_phase(s), "bold red" if loud else ""), t(s.requested_by, max_chars=80),
                          t(s.reason, max_chars=300),
                          Text(format_seconds((s.db_now - s.requested_at).total_seconds()) + " ago"))
    held = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                 title="grants held (not revoked)", title_justify="left")
    for column in ("agent", "kind", "resource", "issued by", "expires"):
        held.add_column(column, overflow="fold")
    for g in snapshot.grants:
        left = g.expires_in_seconds
        held.add_row(t(g.agent_id, "bold", max_chars=ID_CHARS), Text(g.kind), t(g.resource, max_chars=200),
                     t(g.issued_by, max_chars=ID_CHARS),
                     Text(f"in {format_seconds(left)}" if left > 0 else f"EXPIRED {format_seconds(-left)} ago",
                          "" if left > 0 else "dim"))
    return [tree, shutdowns, held]


def subtree_counts(tree: list[FleetAgent]) -> str:
    """`4 agents, 2 running calls, 1 queued call, 1 live grant`: the blast radius of a shutdown."""
    return ", ".join((counted(len(tree), "agent"),
                      counted(sum(a.running_calls for a in tree), "running call"),
                      counted(sum(a.queued_calls for a in tree), "queued call"),
                      counted(sum(a.live_grants for a in tree), "live grant")))


def live_grants_of(tree: list[FleetAgent], grants: list[HeldGrant], now: datetime | None = None) -> list[HeldGrant]:
    ids = {a.id for a in tree}
    return [g for g in grants if g.agent_id in ids
            and ((g.expires_at - now).total_seconds() if now else g.expires_in_seconds) > 0]


def subtree_summary(mode: str, tree: list[FleetAgent], grants: list[HeldGrant],
                    now: datetime | None = None) -> Group:
    """What a drain or abort of this subtree will touch, as read now: each agent with its running
    and queued calls, and every live grant the control plane will revoke."""
    title = Text()
    title.append(f"{mode} of the subtree of {sanitize(tree[0].id, max_chars=ID_CHARS)}: ", style="bold")
    title.append(subtree_counts(tree))
    agents = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("agent", "kind", "state", "running", "queued", "live grants"):
        agents.add_column(column, no_wrap=True, overflow="ellipsis",
                          justify="right" if column in ("running", "queued", "live grants") else "left")
    for prefix, a in zip(tree_prefixes(tree), tree, strict=True):
        agents.add_row(agent_name(prefix, a), one_line(a.kind, max_chars=30), Text(a.state),
                       Text(str(a.running_calls)), Text(str(a.queued_calls)), Text(str(a.live_grants)))
    body: list[Text | Table] = [title, agents]
    held = live_grants_of(tree, grants, now)
    if held:
        body.append(Text("live grants the control plane will revoke:", style="bold"))
        for g in held:
            left = (g.expires_at - now).total_seconds() if now else g.expires_in_seconds
            body.append(t(f"  {g.kind} {sanitize(g.resource, max_chars=120)} of "
                          f"{sanitize(g.agent_id, max_chars=ID_CHARS)} (expires in {format_seconds(left)})"))
    return Group(*body)


# ----------------------------------------------------------------------------- reconciliation records


def unaccounted_block(record: ReconciliationRecord) -> Text:
    """The most important field, first and loud."""
    text = Text()
    if not record.children_unaccounted:
        text.append("Every agent of the subtree confirmed it stopped.", style="bold green")
        return text
    text.append(f"{counted(len(record.children_unaccounted), 'agent').upper()} UNACCOUNTED", style="bold white on red")
    text.append(" — no confirmation of stopping. Every live grant of the subtree was revoked by the control "
                "plane, but what was started outside may still be running.\n", style="bold red")
    for child in record.children_unaccounted:
        text.append(f"  {sanitize(child.agent_id, max_chars=ID_CHARS)}", style="bold red")
        seen = when(child.last_seen_at) if child.last_seen_at else "never"
        text.append(f"  {sanitize(child.kind or '', max_chars=40)}, child of "
                    f"{sanitize(child.parent_id or '—', max_chars=ID_CHARS)}, last seen {seen}\n")
    return text


def grant_line(g: GrantEntry, *, revoked: bool) -> Text:
    text = Text()
    text.append(f"{sanitize(g.kind, max_chars=40)} ", style="bold")
    text.append(f"{sanitize(g.resource, max_chars=200)} of {sanitize(g.agent_id, max_chars=ID_CHARS)}")
    expiry = f", expires {when(g.expires_at)}" if g.expires_at else ""
    if revoked:
        text.append(f" — revoked by {sanitize(g.revoked_by or '?', max_chars=ID_CHARS)} at {when(g.revoked_at)}"
                    f"{expiry}", style="dim")
    else:
        text.append(f" — had expired at {when(g.expires_at)}, not revoked", style="dim")
    return text


def record_title(record: ReconciliationRecord) -> Text:
    title = Text()
    title.append(f"reconciliation {record.short_id}", style="bold")
    title.append(f" · {record.mode} of {sanitize(record.root_agent_id, max_chars=ID_CHARS)} asked by "
                 f"{sanitize(record.requested_by, max_chars=ID_CHARS)}: {sanitize(record.reason, max_chars=300)}")
    took = (record.written_at - record.requested_at).total_seconds() if record.requested_at else None
    title.append(f"\nrequested {when(record.requested_at)} · written {when(record.written_at)} by "
                 f"{sanitize(record.written_by, max_chars=ID_CHARS)}"
                 + (f" ({format_seconds(took)} later)" if took else ""), style="dim")
    return title


def resolution_words(resolution: str) -> tuple[str, str]:
    return resolution.replace("_", " "), RESOLUTION_STYLE.get(resolution, "")


def reconciliation_panel(record: ReconciliationRecord) -> Panel:
    """`leasectl reconciliations`: one record, the unaccounted agents first."""
    body = Table.grid(padding=(0, 2))
    body.add_column(no_wrap=True)
    body.add_column(overflow="fold")
    head, _, when_written = record_title(record).plain.partition("\n")
    body.add_row(Text("written", style="dim"), Text(when_written, style="dim"))
    body.add_row(Text("unaccounted", style="bold red" if record.children_unaccounted else "green"),
                 unaccounted_block(record))
    body.add_row(Text("confirmed", style="dim"),
                 t(", ".join(sanitize(c.agent_id, max_chars=ID_CHARS) for c in record.children_confirmed) or "—"))
    for call in record.in_flight:
        words, style = resolution_words(call.resolution)
        body.add_row(Text("in flight", style="dim"),
                     Text.assemble((words, style), f"  {str(call.job_id)[:8]} {sanitize(call.tool, max_chars=60)} "
                                                   f"(agent {sanitize(call.agent_id, max_chars=ID_CHARS)}) — "
                                                   f"{RESOLUTION_MEANING.get(call.resolution, '')}"))
    if not record.in_flight:
        body.add_row(Text("in flight", style="dim"), Text("no call was in flight"))
    for g in record.grants_revoked:
        body.add_row(Text("revoked", style="dim"), grant_line(g, revoked=True))
    for g in record.grants_expired:
        body.add_row(Text("expired", style="dim"), grant_line(g, revoked=False))
    return Panel(body, title=Text(head, style="bold"), title_align="left",
                 border_style="red" if record.children_unaccounted else "")

