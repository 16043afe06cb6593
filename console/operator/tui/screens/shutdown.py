"""The drain/abort dialog (Fleet screen, `d` / `x`): the same rules as the call actions.

What will change, shown as the subtree itself (each agent with its running and queued calls, every
live grant the control plane will revoke), the guard it relies on (the agent is still running and
no shutdown over its subtree is under way), the query it runs, a required reason and the window.
The answer is the database's: requested, or refused with what is true now. Journaled in fleet_events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from console.core.fleet import subtree
from console.core.models import FleetAgent, HeldGrant, ShutdownMode, ShutdownRequested
from console.db import actions
from console.db.connect import Conn
from console.operator import present
from console.operator.tui.screens.action import GuardedDialog
from console.shared.text import counted, sanitize

DEFAULT_WINDOW = {"drain": 300, "abort": 60}


class ShutdownDialog(GuardedDialog):
    CSS_PATH = ["action.tcss", "shutdown.tcss"]  # type: ignore[assignment]
    query_name = "operator/request_shutdown"

    def __init__(self, mode: ShutdownMode, root: FleetAgent, agents: list[FleetAgent], grants: list[HeldGrant], *,
                 seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.mode: ShutdownMode = mode
        self.root = root
        self.subtree_agents = subtree(agents, root.id) or [root]
        self.grants = grants

    def title_text(self) -> Text:
        title = Text()
        title.append(f"{'Drain' if self.mode == 'drain' else 'Abort'} the subtree of ", style="bold")
        title.append(sanitize(self.root.id, max_chars=60), style="bold")
        title.append(f"  {counted(len(self.subtree_agents), 'agent')}", style="dim")
        return title

    def what_changes(self) -> Text:
        tree = self.subtree_agents
        running = sum(a.running_calls for a in tree)
        queued = sum(a.queued_calls for a in tree)
        grants = sum(a.live_grants for a in tree)
        text = Text()
        text.append("What will change: ", style="bold")
        text.append(f"these {counted(len(tree), 'agent')} stop taking new calls; "
                    f"{counted(queued, 'queued call')} cancelled before starting. ")
        if self.mode == "drain":
            text.append(f"The window lets {counted(running, 'running call')} finish; ")
            text.append("what still runs at its end is aborted.", style="bold yellow")
        else:
            text.append(f"{counted(running, 'running call')}: cancel requested ", style="bold yellow")
            text.append("(NOT stopped: each worker must confirm); what is unconfirmed at the end of the window "
                        "is fenced out, and an unverifiable side effect goes to approvals.")
        text.append(f" Then the control plane revokes {counted(grants, 'live grant')} and writes the reconciliation "
                    "record; agents that never confirm are listed UNACCOUNTED. Nothing happens until "
                    "`leasectl supervise` runs.")
        return text

    def extra_fields(self) -> Iterable[Widget]:
        yield Label(f"Window in seconds ({'to finish' if self.mode == 'drain' else 'to confirm cancels'}):")
        yield Input(value=str(DEFAULT_WINDOW[self.mode]), id="window", type="number")

    def blast_radius(self) -> Iterable[Widget]:
        yield Static(present.subtree_summary(self.mode, self.subtree_agents, self.grants), id="subtree")

    def guard_words(self) -> Text:
        text = Text()
        text.append("Guard: ", style="bold")
        text.append("only if ")
        text.append(sanitize(self.root.id, max_chars=60), style="bold")
        text.append(" is still ")
        text.append(self.root.state, style="bold")
        text.append(" and no shutdown of it, an ancestor or a descendant is under way")
        text.append(f"{self.seen_words()}; otherwise nothing happens and you are told why.")
        return text

    def last_field(self) -> str:
        return "window"

    def collect(self) -> dict[str, object] | None:
        field = self.query_one("#window", Input)
        try:
            window = float(field.value)
        except ValueError:
            window = 0.0
        if not 0 < window <= actions.MAX_WINDOW_SECONDS:
            self._say(Text(f"The window is a number of seconds, more than 0 and at most "
                           f"{actions.MAX_WINDOW_SECONDS}.", style="bold red"))
            field.focus()
            return None
        return {"window": window}

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, Any]) -> object:
        return actions.request_shutdown(conn, self.root.id, mode=self.mode, operator=operator, reason=reason,
                                        window_seconds=float(fields["window"]))

    def answer(self, result: object) -> Text:
        text = Text()
        if isinstance(result, ShutdownRequested):
            text.append("REQUESTED — ", style="bold green")
        else:
            text.append("REFUSED — ", style="bold red")
        text.append(present.shutdown_message(result))  # type: ignore[arg-type]
        request_id = getattr(result, "request_id", None)
        if request_id:
            text.append(f"\nrequest {request_id} is in the fleet journal.", style="dim")
        return text
