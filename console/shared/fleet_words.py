"""How the fleet is put into words, the same in the console and the CLI (no Textual here)."""

from __future__ import annotations

from datetime import datetime

from console.shared.health import counted, format_seconds
from console.shared.models import FleetAgent, HeldGrant, Shutdown

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


def seconds(value: float) -> str:
    return format_seconds(max(value, 0))


def window_left(s: Shutdown, now: datetime | None = None) -> float | None:
    """Seconds left in the current phase's window, by the database's clock (ticking with `now`)."""
    if now is None or s.phase_started_at is None:
        return s.window_left_seconds
    return (s.phase_started_at - now).total_seconds() + (s.phase_window_seconds or s.window_seconds)


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


def tree_prefixes(agents: list[FleetAgent]) -> list[str]:
    """Box-drawing prefixes for agents listed parents-first (preorder), as `tree` draws them."""
    # a node is its parent's last child when no sibling follows before the parent's subtree ends
    last = [False] * len(agents)
    sibling_follows: dict[int, bool] = {}
    for i in range(len(agents) - 1, -1, -1):
        depth = agents[i].depth
        last[i] = not sibling_follows.get(depth, False)
        sibling_follows = {d: v for d, v in sibling_follows.items() if d < depth}
        sibling_follows[depth] = True
    prefixes: list[str] = []
    rails: list[str] = []  # per depth below the root: "│  " while that branch has siblings to come
    for i, agent in enumerate(agents):
        depth = agent.depth
        if depth == 0:
            prefixes.append("")
            rails = []
            continue
        del rails[depth - 1:]
        prefixes.append("".join(rails) + ("└─ " if last[i] else "├─ "))
        rails.append("   " if last[i] else "│  ")
    return prefixes


def subtree(agents: list[FleetAgent], root_id: str) -> list[FleetAgent]:
    """The root and everything below it, from agents listed parents first (preorder)."""
    for i, agent in enumerate(agents):
        if agent.id == root_id:
            below = []
            for other in agents[i + 1:]:
                if other.depth <= agent.depth:
                    break
                below.append(other)
            return [agent, *below]
    return []
