"""The revoke dialog (Fleet screen, `r`): take one grant of the selected agent back without a
shutdown (migration 0017), under the same rules as every action: what will change, the guard it
relies on, a required reason; the database's answer. Journaled as operator_revoke."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Label, Select

from console.core.models import FleetAgent, GrantRow, HeldGrant
from console.db import actions
from console.db.connect import Conn
from console.operator import present
from console.operator.present.fleet import grant_words
from console.operator.tui.screens.action import ChoiceSelect, GuardedDialog
from console.shared.text import counted, sanitize


class RevokeDialog(GuardedDialog):
    CSS_PATH = "action.tcss"
    query_name = "operator/revoke_grant"

    def __init__(self, agent: FleetAgent, grants: list[HeldGrant], now: datetime | None, *,
                 seen_at: float | None = None) -> None:
        super().__init__(seen_at=seen_at)
        self.agent = agent
        self.grants = grants
        self.at = now

    def title_text(self) -> Text:
        title = Text()
        title.append("Revoke a grant of ", style="bold")
        title.append(sanitize(self.agent.id, max_chars=60), style="bold")
        title.append(f"  {counted(len(self.grants), 'live grant')}", style="dim")
        return title

    def what_changes(self) -> Text:
        text = Text()
        text.append("What will change: ", style="bold")
        text.append("the grant you choose is revoked now, as the control plane revokes it at a shutdown; the "
                    "agent's next use of it is refused. Its calls and its other grants are left as they are.")
        return text

    def extra_fields(self) -> Iterable[Widget]:
        yield Label("The grant:")
        options = [(sanitize(grant_words(g, self.at), max_chars=120), str(g.id)) for g in self.grants]
        # one grant: it is the one; several: nothing preselected (a guess would be journaled as yours)
        if len(options) == 1:
            yield ChoiceSelect(options, prompt="choose…", allow_blank=False, value=options[0][1], id="grant")
        else:
            yield ChoiceSelect(options, prompt="choose…", allow_blank=True, id="grant")

    def guard_words(self) -> Text:
        return Text.assemble(("Guard: ", "bold"), f"only if the grant is not revoked yet{self.seen_words()}; "
                             "otherwise nothing happens and you are told who revoked it.")

    def last_field(self) -> str:
        # enter in the reason applies: the grant is chosen already when the agent holds one; with
        # several, a blank choice is refused and focused (collect), and enter there moves on
        return "reason"

    def collect(self) -> dict[str, object] | None:
        chosen = self.query_one("#grant", Select)
        if chosen.value is Select.BLANK:
            self._say(Text("Choose the grant to revoke.", style="bold red"))
            chosen.focus()
            return None
        return {"grant": str(chosen.value)}

    def perform(self, conn: Conn, operator: str, reason: str, fields: dict[str, object]) -> object:
        return actions.revoke_grant(conn, str(fields["grant"]), operator=operator, reason=reason)

    def answer(self, result: object) -> Text:
        assert isinstance(result, tuple)
        applied, revoked = result
        assert isinstance(revoked, GrantRow)
        text = Text()
        text.append("REVOKED — " if applied else "REFUSED — ", style="bold green" if applied else "bold red")
        text.append(present.grant_summary(revoked))
        return text
