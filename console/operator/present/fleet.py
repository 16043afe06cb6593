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
    InFlightCall,
    Orphan,
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
    "moved": "cyan",
}
RESOLUTION_MEANING = {
    "completed": "finished with a result",
    "failed": "failed",
    "cancelled": "cancelled, confirmed by its worker (or before it ran again)",
    "never_started": "queued when the shutdown came: never started",
    "cancel_unconfirmed": "stopped without its worker confirming: fenced out, may have run on",
    "outcome_unknown": "an unverifiable side effect may have happened: a human decides (approvals)",
    "moved": "queued when the shutdown came: moved to the new generation, it runs there",
}
ORPHAN_MEANING = ("ORPHANED: an ancestor is terminated or silent while this agent still runs (calls, grants "
                  "or heartbeats); the supervisor proposes an abort of its subtree, a human decides")


def agent_state_text(agent: FleetAgent) -> Text:
    """`running`, or `running ORPHANED` (loud) when its ancestor is gone (migration 0018)."""
    text = Text(agent.state, AGENT_STATE_STYLE.get(agent.state, ""))
    if agent.orphaned:
        text.append(" ORPHANED", style="bold red")
    return text


def orphan_words(agent: FleetAgent, now: datetime | None = None) -> str:
    """`orphaned: planner-1 silent for 12 minutes` / `... is terminated`; empty when it is not."""
    if not agent.orphaned:
        return ""
    ancestor = sanitize(agent.orphan_of or "?", max_chars=ID_CHARS)
    if agent.orphan_why == "terminated":
        return f"orphaned: {ancestor} is terminated"
    since = agent.orphan_since
    silent = format_seconds(((now or agent.db_now) - since).total_seconds()) if since else "long"
    return f"orphaned: {ancestor} silent for {silent}"


def generation_words(agent: FleetAgent) -> str:
    """`g2 (replaces planner-1)`, or `g1`."""
    if agent.replaces:
        return f"g{agent.generation} (replaces {sanitize(agent.replaces, max_chars=ID_CHARS)})"
    return f"g{agent.generation}"


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
    if s.state == "proposed":
        return "proposed · waits for a human decision"
    if s.state == "declined":
        return f"declined by {sanitize(s.decided_by or '?', max_chars=80)}"
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
    for column in ("agent", "kind", "gen", "state", "seen ago", "running", "queued", "grants", "stopped"):
        tree.add_column(column, no_wrap=True, overflow="ellipsis", min_width=widest if column == "agent" else None,
                        justify="right" if column in ("running", "queued") else "left")
    for prefix, a in zip(prefixes, snapshot.agents, strict=True):
        grants = f"{a.live_grants}" + (f" +{a.expired_grants} expired" if a.expired_grants else "")
        tree.add_row(agent_name(prefix, a), one_line(a.kind, max_chars=40), Text(generation_words(a)),
                     agent_state_text(a),
                     Text(format_seconds(a.last_seen_age_seconds) if a.last_seen_at else "never"),
                     Text(str(a.running_calls)), Text(str(a.queued_calls)), Text(grants), Text(*stopped_label(a)))
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
    return [tree, shutdowns_table(snapshot.shutdowns), held]


def subtree_words(s: Shutdown, *, compact: bool = False) -> str:
    """`planner-1 (4 agents) → planner-2`: the subtree, and the generation that takes its queued calls
    (compact, for a table cell: `planner-1 (4) → planner-2`)."""
    size = str(s.agents) if compact else counted(s.agents, "agent")
    words = f"{sanitize(s.root_agent_id, max_chars=ID_CHARS)} ({size})"
    if s.replacement_agent_id:
        words += f" → {sanitize(s.replacement_agent_id, max_chars=ID_CHARS)}"
        if s.calls_moved and not compact:
            words += f" ({counted(s.calls_moved, 'call')} moved)"
    return words


def shutdowns_table(shutdowns: list[Shutdown]) -> Table:
    """`leasectl fleet` and `leasectl shutdowns`: proposals first (they wait for a human), then those
    under way, then the finished."""
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                  title="shutdowns", title_justify="left")
    for column in ("shutdown", "subtree", "mode", "phase", "asked by", "reason", "asked"):
        table.add_column(column, overflow="fold", no_wrap=column in ("shutdown", "mode"))
    for s in shutdowns:
        loud = (s.state == "terminated" and bool(s.unaccounted)) or s.state == "proposed"
        asked = sanitize(s.requested_by, max_chars=80) + (
            f"; {'accepted' if s.state != 'declined' else 'declined'} by {sanitize(s.decided_by, max_chars=80)}"
            if s.decided_by else "")
        table.add_row(Text(s.short_id, style="bold"), t(subtree_words(s)), Text(s.mode),
                      Text(shutdown_phase(s), ("bold yellow" if s.state == "proposed" else "bold red") if loud else ""),
                      t(asked, max_chars=200), t(s.reason, max_chars=300),
                      Text(format_seconds((s.db_now - s.requested_at).total_seconds()) + " ago"))
    if any(s.state == "proposed" for s in shutdowns):
        table.caption = ("a proposal starts nothing by itself: leasectl shutdowns accept ID --reason R "
                         "(or decline ID)")
        table.caption_justify = "left"
    return table


def proposal_summary(s: Shutdown) -> str:
    """What an accept starts, in one line (plain text; the CLI escapes it)."""
    return (f"shutdown {s.short_id}: {s.state} {s.mode} of {subtree_words(s)}, proposed by "
            f"{sanitize(s.requested_by, max_chars=80)}: {sanitize(s.reason, max_chars=300)}")


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
    to = f" → {sanitize(record.replacement_agent_id, max_chars=ID_CHARS)}" if record.replacement_agent_id else ""
    asked = (f"proposed by {sanitize(record.requested_by, max_chars=ID_CHARS)}, accepted by "
             f"{sanitize(record.decided_by, max_chars=ID_CHARS)}" if record.decided_by
             else f"asked by {sanitize(record.requested_by, max_chars=ID_CHARS)}")
    title.append(f" · {record.mode} of {sanitize(record.root_agent_id, max_chars=ID_CHARS)}{to} {asked}: "
                 f"{sanitize(record.reason, max_chars=300)}")
    took = (record.written_at - record.requested_at).total_seconds() if record.requested_at else None
    title.append(f"\nrequested {when(record.requested_at)} · written {when(record.written_at)} by "
                 f"{sanitize(record.written_by, max_chars=ID_CHARS)}"
                 + (f" ({format_seconds(took)} later)" if took else ""), style="dim")
    return title


def call_meaning(call: InFlightCall) -> str:
    """What a record's call resolution means, with where it moved or why it did not (migration 0018)."""
    extra = call.model_extra or {}
    if extra.get("moved_to"):
        return f"queued when the shutdown came: moved to {sanitize(str(extra['moved_to']), max_chars=ID_CHARS)}, " \
               "it runs in the new generation"
    meaning = RESOLUTION_MEANING.get(call.resolution, "")
    if extra.get("not_moved"):
        meaning += f" (not moved: {sanitize(str(extra['not_moved']), max_chars=200)})"
    return meaning


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
                                                   f"{call_meaning(call)}"))
    if not record.in_flight:
        body.add_row(Text("in flight", style="dim"), Text("no call was in flight"))
    for g in record.grants_revoked:
        body.add_row(Text("revoked", style="dim"), grant_line(g, revoked=True))
    for g in record.grants_expired:
        body.add_row(Text("expired", style="dim"), grant_line(g, revoked=False))
    return Panel(body, title=Text(head, style="bold"), title_align="left",
                 border_style="red" if record.children_unaccounted else "")



def orphans_summary(orphans: list[Orphan], now: datetime) -> str | None:
    """Triage's line: `2 ORPHANED agents — code-1, sandbox-1 (planner-1 silent for 12m): an abort is
    proposed, waiting for a human (4 Fleet, a accepts)`; None when there is none."""
    if not orphans:
        return None
    names = ", ".join(sanitize(o.agent_id, max_chars=40) for o in orphans[:4]) + (
        f" and {len(orphans) - 4} more" if len(orphans) > 4 else "")
    causes = sorted({(o.ancestor_id, o.why, o.since) for o in orphans}, key=lambda c: c[2])
    ancestor, why, since = causes[0]
    silent = f"silent for {format_seconds((now - since).total_seconds())}"
    cause = f"{sanitize(ancestor, max_chars=40)} " + ("is terminated" if why == "terminated" else silent)
    pending = sum(1 for o in orphans if o.proposal_id is not None)
    then = ("a shutdown is proposed, waiting for a human (4 Fleet: a accepts, n declines)" if pending
            else "4 Fleet shows them; the supervisor proposes a shutdown")
    return f"{counted(len(orphans), 'ORPHANED agent')} — {names} ({cause}): {then}"
