"""The decision on a proposed shutdown (Fleet screen, `a` accepts, `n` declines; migration 0018): an
agent, or the supervisor for an orphan, proposed a drain or an abort of a subtree; nothing happens
until a human decides. Under the same rules as every action: what will change, the guard it relies
on, a required reason; the database's answer. Journaled as shutdown_accepted / shutdown_declined."""

from __future__ import annotations

from rich.text import Text

from console.core.fleet import subtree
from console.core.models import FleetAgent, Shutdown
from console.db import actions
from console.db.connect import Conn
from console.operator.present.actions import decision_message
from console.operator.present.fleet import subtree_counts, subtree_words
from console.operator.tui.screens.action import GuardedDialog
from console.shared.text import sanitize


class DecideDialog(GuardedDialog):
    CSS_PATH = "action.tcss"
    query_name = "operator/decide_shutdown"

    def __init__(self, proposal: Shutdown, agents: list[FleetAgent], *, accept: bool,
                 seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.proposal = proposal
        self.accept = accept
        self.subtree_agents = subtree(agents, proposal.root_agent_id)

    def title_text(self) -> Text:
        title = Text()
        title.append(f"{'Accept' if self.accept else 'Decline'} the proposed {self.proposal.mode} of ", style="bold")
        title.append(sanitize(subtree_words(self.proposal), max_chars=120), style="bold")
        return title

    def what_changes(self) -> Text:
        p = self.proposal
        text = Text()
        text.append("Proposed by ", style="dim")
        text.append(sanitize(p.requested_by, max_chars=80), style="bold")
        text.append(f": {sanitize(p.reason, max_chars=300)}\n", style="")
        text.append("What will change: ", style="bold")
        if self.accept:
            text.append(f"the {p.mode} becomes requested and the supervisor carries it out on "
                        f"{subtree_counts(self.subtree_agents)}: " + (
                            "no new calls, running ones get the window to finish" if p.mode == "drain"
                            else "running calls are asked to cancel, the unconfirmed are fenced out")
                        + "; then the reconciliation record.")
        else:
            text.append("nothing runs; the proposal is closed as declined with your name, and the supervisor does "
                        "not propose it again for the same silence.")
        return text

    def guard_words(self) -> Text:
        return Text.assemble(("Guard: ", "bold"), f"only if it is still proposed{self.seen_words()}; otherwise "
                             "nothing happens and you are told who decided it.")

    def last_field(self) -> str:
        return "reason"

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, object]) -> object:
        return actions.decide_shutdown(conn, self.proposal.id, accept=self.accept, operator=operator, reason=reason)

    def answer(self, result: object) -> Text:
        applied, words = decision_message(self.accept, result)  # type: ignore[arg-type]
        text = Text()
        text.append(("ACCEPTED — " if self.accept else "DECLINED — ") if applied else "REFUSED — ",
                    style="bold green" if applied else "bold red")
        text.append(words)
        return text
