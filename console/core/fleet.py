"""The fleet's shape as the console draws it: the time left in a shutdown's window, the delegation
tree's prefixes, a subtree. Words are in console/operator/present/fleet.py."""

from __future__ import annotations

from datetime import datetime

from console.core.models import FleetAgent, Shutdown


def window_left(s: Shutdown, now: datetime | None = None) -> float | None:
    """Seconds left in the current phase's window, by the database's clock (ticking with `now`)."""
    if now is None or s.phase_started_at is None:
        return s.window_left_seconds
    return (s.phase_started_at - now).total_seconds() + (s.phase_window_seconds or s.window_seconds)


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
