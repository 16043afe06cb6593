"""4 Fleet: the agent delegation tree and the shutdowns (docs/seeds.md §003).

Each agent with its state, when it was last seen, its running and queued calls and the grants
it still holds; the shutdowns under way with the time left in their window (by the database's
clock, ticking). `d` drains and `x` aborts the selected agent's subtree through the same dialog
rules as the call actions; `enter` on a finished shutdown opens its reconciliation record.
Migration 0018: an orphaned agent (its ancestor terminated or silent while it still runs) is
labelled ORPHANED; proposals (an agent's, or the supervisor's for an orphan) come first among the
shutdowns and start only when a human accepts one (`a`) -- or declines it (`n`); each agent's
generation, and the agent it replaces, is shown (the upgrade path: drain, reconcile, restart).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Footer, Label, Static

from console.core.filters import AGENT_KEYS
from console.core.fleet import subtree, tree_prefixes
from console.core.models import FleetAgent, FleetSnapshot, Shutdown, ShutdownMode
from console.db import reads
from console.db.connect import Conn
from console.operator.present.calls import label_grid
from console.operator.present.fleet import (
    AGENT_STATE_STYLE,
    ID_CHARS,
    ORPHAN_MEANING,
    generation_words,
    grant_words,
    live_grants_of,
    orphan_words,
    shutdown_phase,
    stopped_label,
    subtree_counts,
    subtree_words,
)
from console.operator.present.words import clock
from console.operator.tui.cells import Cell
from console.operator.tui.screens.base import CLEAR_FILTER_BINDING, FieldListScreen
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.shared.text import counted, format_seconds, sanitize

AGENT_COLUMNS = [Column("agent", "agent", 26, 0), Column("state", "state", 11, 0), Column("gen", "gen", 3, 3),
                 Column("seen", "seen ago", 8, 0),
                 Column("stopped", "stopped", 9, 1), Column("running", "calls", 5, 2), Column("queued", "queued", 6, 3),
                 Column("grants", "grants", 9, 4), Column("kind", "kind", 9, 5)]
SHUTDOWN_COLUMNS = [Column("id", "shutdown", 8, 0), Column("subtree", "subtree", 30, 0),
                    Column("phase", "phase", 44, 0), Column("mode", "mode", 5, 1), Column("by", "asked by", 10, 2),
                    Column("reason", "reason", 44, 3)]


def _seen(agent: FleetAgent, now: datetime | None) -> Cell:
    if agent.last_seen_at is None:
        return Cell("never", "dim")
    age = (now - agent.last_seen_at).total_seconds() if now else agent.last_seen_age_seconds or 0
    # an agent that is shutting down and silent is the one that ends up unaccounted
    loud = agent.state in ("draining", "aborting", "reconciling") and agent.terminated_confirmed_at is None
    style = "bold red" if loud and age > 30 else ("yellow" if age > 60 and agent.state != "terminated" else "")
    return Cell(format_seconds(age), style)


class FleetScreen(FieldListScreen[FleetAgent]):
    """The agent tree and shutdowns: drain or abort"""

    CSS_PATH = "fleet.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "drain", "Drain subtree", tooltip="Drain the selected agent's subtree (reason, window)"),
        Binding("x", "abort", "Abort subtree", tooltip="Abort the selected agent's subtree (reason, window)"),
        Binding("r", "revoke", "Revoke grant", tooltip="Revoke one live grant of the selected agent (reason)"),
        Binding("a", "accept_proposal", "Accept proposal",
                tooltip="Start the proposed shutdown over the selected agent or shutdown (reason)"),
        Binding("n", "decline_proposal", "Decline proposal", show=False,
                tooltip="Decline the proposed shutdown over the selected agent or shutdown (reason)"),
        Binding("enter", "open_record", "Open record", tooltip="On a finished shutdown: its reconciliation record"),
        Binding("tab", "switch_table", "Next table", show=False, tooltip="Agents ↔ shutdowns"),
        CLEAR_FILTER_BINDING,
    ]
    FILTER_KEYS = AGENT_KEYS

    def __init__(self) -> None:
        super().__init__()
        self.snapshot = FleetSnapshot(agents=[], shutdowns=[])

    def compose(self) -> ComposeResult:
        yield from self.filter_chrome("/ filters agents (agent: kind: state:)")
        yield from self.list_beside_pane("agents", "Agents — the delegation tree (calls = running calls)",
                                         AGENT_COLUMNS, "No agent is registered.")
        with Vertical(id="fleet-bottom"):
            yield Label("Shutdowns — proposals, then under way (tab: select one, a/n: accept/decline a proposal, "
                        "enter: its record)", classes="section-title")
            yield LiveTable(SHUTDOWN_COLUMNS, id="shutdowns")
        yield Footer()

    # ------------------------------------------------------------------ data
    def load(self, conn: Conn) -> tuple[FleetSnapshot, datetime]:
        snapshot = reads.fleet(conn)
        if snapshot.agents:
            return snapshot, snapshot.agents[0].db_now
        if snapshot.shutdowns:
            return snapshot, snapshot.shutdowns[0].db_now
        return snapshot, reads.db_info(conn).db_now

    def db_now_of(self, data: tuple[FleetSnapshot, datetime]) -> datetime:
        return data[1]

    def show(self, data: tuple[FleetSnapshot, datetime]) -> None:
        self.snapshot = data[0]
        now = self.now() or data[1]
        agents = self.snapshot.agents
        prefixes = dict(zip((a.id for a in agents), tree_prefixes(agents), strict=True))
        self.show_list(agents, "agents", lambda a: a.id, lambda a: self._agent_cells(prefixes[a.id], a, now), "agent")
        keyed_rows(self.query_one("#shutdowns", LiveTable),
                   [(str(s.id), self._shutdown_cells(s, now)) for s in self.snapshot.shutdowns])
        self._describe()

    def matches(self, row: FleetAgent) -> bool:
        return self.filter_value.matches({"agent": row.id, "kind": row.kind, "state": row.state})

    @staticmethod
    def _agent_cells(prefix: str, a: FleetAgent, now: datetime | None) -> dict[str, Cell]:
        grants = f"{a.live_grants}" + (f" +{a.expired_grants} exp." if a.expired_grants else "")
        return {"agent": Cell(prefix + sanitize(a.id, max_chars=ID_CHARS), "bold" if a.depth == 0 else ""),
                "kind": Cell(a.kind), "gen": Cell(f"g{a.generation}", "bold" if a.replaces else "dim"),
                "state": (Cell("ORPHANED", "bold red") if a.orphaned
                          else Cell(a.state, AGENT_STATE_STYLE.get(a.state, ""))),
                "seen": _seen(a, now),
                "running": Cell(a.running_calls or "·", "bold" if a.running_calls else "dim"),
                "queued": Cell(a.queued_calls or "·", "dim"),
                "grants": Cell(grants, "bold yellow" if a.live_grants and a.state != "running" else ""),
                "stopped": Cell(*stopped_label(a))}

    @staticmethod
    def _shutdown_cells(s: Shutdown, now: datetime | None) -> dict[str, Cell]:
        loud = s.state == "terminated" and bool(s.unaccounted)
        phase_style = "bold red" if loud else ("bold yellow" if s.state not in ("terminated", "declined") else "dim")
        return {"id": Cell(s.short_id, "bold"), "subtree": Cell(subtree_words(s, compact=True)),
                "mode": Cell(s.mode, "bold red" if s.mode == "abort" else ""),
                "phase": Cell(shutdown_phase(s, now), phase_style), "by": Cell(s.requested_by),
                "reason": Cell(s.reason)}

    def tick(self, now: datetime) -> None:
        shutdowns = self.query_one("#shutdowns", LiveTable)
        for s in self.snapshot.shutdowns:
            if s.state in ("draining", "aborting", "reconciling"):
                shutdowns.update_cells(str(s.id), {"phase": self._shutdown_cells(s, now)["phase"]})
        agents = self.query_one("#agents", LiveTable)
        for a in self.shown:
            agents.update_cells(a.id, {"seen": _seen(a, now)})

    # ------------------------------------------------------------------ the filter
    def filter_changed(self) -> None:
        self.show((self.snapshot, self.db_now or datetime.now().astimezone()))

    # ------------------------------------------------------------------ selection
    def selected_agent(self) -> FleetAgent | None:
        return self.query_one("#agents", LiveTable).cursor_item(self.shown, lambda a: a.id)

    def selected_shutdown(self) -> Shutdown | None:
        return self.query_one("#shutdowns", LiveTable).cursor_item(self.snapshot.shutdowns, lambda s: str(s.id))

    def on_live_table_row_highlighted(self, event: LiveTable.RowHighlighted) -> None:
        self._describe()

    def action_switch_table(self) -> None:
        agents, shutdowns = self.query_one("#agents", LiveTable), self.query_one("#shutdowns", LiveTable)
        (agents if self.focused is shutdowns else shutdowns).focus()

    def on_descendant_focus(self) -> None:
        self._describe()  # the pane follows the table in focus: an agent, or a shutdown

    def on_live_table_row_selected(self, event: LiveTable.RowSelected) -> None:
        if event.table.id == "shutdowns":
            self.action_open_record()

    def commands(self) -> Iterable[SystemCommand]:
        agent = self.selected_agent()
        if agent is not None and self.check_action("drain", ()) and self.check_action("abort", ()):
            yield SystemCommand(f"Drain the subtree of {sanitize(agent.id, max_chars=40)}",
                                "New calls refused, running ones finish in a window (d)", self.action_drain)
            yield SystemCommand(f"Abort the subtree of {sanitize(agent.id, max_chars=40)}",
                                "Cancel now, fence the unconfirmed (x)", self.action_abort)

    def _describe(self) -> None:
        focused_shutdowns = self.focused is self.query_one("#shutdowns", LiveTable)
        shutdown = self.selected_shutdown() if focused_shutdowns else None
        if shutdown is not None:
            self.query_one("#agents-detail", Static).update(self._shutdown_story(shutdown))
            return
        self.describe_selected("#agents-detail", self.selected_agent(), "Select an agent to see its subtree.",
                               self._agent_story)

    def _agent_story(self, agent: FleetAgent) -> Group:
        tree = subtree(self.snapshot.agents, agent.id)
        grid = label_grid()

        def line(label: str, value: object, style: str = "") -> None:
            grid.add_row(Text(label), Text(sanitize(value, max_chars=300), style=style))

        line("agent", agent.id, "bold")
        line("kind", agent.kind)
        line("parent", agent.parent_id or "— (a root)")
        line("state", agent.state, AGENT_STATE_STYLE.get(agent.state, ""))
        line("generation", generation_words(agent))
        if agent.orphaned:
            line("ORPHANED", orphan_words(agent, self.now()), "bold red")
        line("started", clock(agent.started_at))
        line("last seen", clock(agent.last_seen_at) if agent.last_seen_at else "never")
        if agent.state != "running":
            line("stopped", f"confirmed {clock(agent.terminated_confirmed_at)}" if agent.terminated_confirmed_at
                 else "NOT confirmed", "green" if agent.terminated_confirmed_at else "bold red")
        line("its calls", f"{agent.running_calls} running, {agent.queued_calls} queued")
        line("its grants", f"{agent.live_grants} live, {agent.expired_grants} expired (not revoked)")
        now = self.now()
        for grant in [g for g in self.snapshot.grants if g.agent_id == agent.id][:8]:
            expired = now is not None and grant.expires_at <= now
            # held by an agent that is shutting down: the control plane will revoke it
            line("holds", grant_words(grant, now), "dim" if expired else ("yellow" if agent.state != "running" else ""))
        under_way = next((s for s in self.snapshot.shutdowns if s.id == agent.shutdown_id), None)
        if under_way:
            line("shutdown", f"{under_way.mode} of {under_way.root_agent_id}: {shutdown_phase(under_way, now)}",
                 "bold yellow")
        proposal = next((s for s in self.snapshot.shutdowns if s.id == agent.proposal_id), None)
        if proposal:
            line("proposed", f"{proposal.mode} of {proposal.root_agent_id} by {proposal.requested_by}: "
                             f"{proposal.reason}", "bold yellow")
        subtree_text = Text()
        subtree_text.append(f"\nSubtree: {subtree_counts(tree)}.", style="bold")
        if agent.orphaned:
            subtree_text.append(f"\n{ORPHAN_MEANING}.", style="red")
        if proposal:
            subtree_text.append("\na accepts the proposal (the supervisor carries it out), n declines it.",
                                style="bold")
        elif agent.state == "running" and under_way is None:
            subtree_text.append("\nd drains it (calls finish in a window), x aborts it (cancel now).", style="dim")
        return Group(grid, subtree_text)

    def _shutdown_story(self, s: Shutdown) -> Group:
        grid = label_grid()
        for label, value, style in (
                ("shutdown", str(s.id), "bold"), ("subtree", f"{s.root_agent_id} ({counted(s.agents, 'agent')})", ""),
                ("mode", s.mode, ""), ("asked by", s.requested_by, ""), ("reason", s.reason, ""),
                ("decided by", s.decided_by or "—", ""), ("replacement", s.replacement_agent_id or "—", ""),
                ("requested", clock(s.requested_at), ""), ("draining", clock(s.draining_at), ""),
                ("aborting", clock(s.aborting_at), ""), ("reconciling", clock(s.reconciling_at), ""),
                ("finished", clock(s.finished_at), ""), ("now", shutdown_phase(s, self.now()), "bold")):
            grid.add_row(Text(label), Text(sanitize(value, max_chars=300), style=style))
        if s.state == "proposed":
            after = Text("\nProposed: nothing happens until a human decides — a accepts, n declines.",
                         style="bold yellow")
        elif s.state == "declined":
            after = Text("\nDeclined: it never started.", style="dim")
        elif s.record_id is None:
            after = Text("\nNo reconciliation record yet: nothing is terminated before it is written.", style="dim")
        elif s.unaccounted:
            after = Text(f"\n{counted(s.unaccounted, 'agent')} UNACCOUNTED — enter opens the record.", style="bold red")
        else:
            after = Text("\nEvery agent confirmed it stopped — enter opens the record.", style="green")
        return Group(grid, after)

    # ------------------------------------------------------------------ actions
    def action_drain(self) -> None:
        self._shutdown("drain")

    def action_abort(self) -> None:
        self._shutdown("abort")

    def _shutdown(self, mode: ShutdownMode) -> None:
        agent = self.selected_agent()
        if not self.ready_to_act(agent, "an agent"):
            return
        if agent.state != "running":
            self.app.notify(f"{sanitize(agent.id, max_chars=60)} is {agent.state}: its subtree is already shutting "
                            "down or stopped.", title="Nothing to do", severity="warning")
            return
        from console.operator.tui.screens.shutdown import ShutdownDialog

        grants = live_grants_of(subtree(self.snapshot.agents, agent.id), self.snapshot.grants, self.now())
        self.app.push_screen(ShutdownDialog(mode, agent, self.snapshot.agents, grants, seen_at=self.fetched_at),
                             lambda _result: self.wake())

    def action_revoke(self) -> None:
        agent = self.selected_agent()
        if not self.ready_to_act(agent, "an agent"):
            return
        now = self.now()
        grants = live_grants_of([agent], self.snapshot.grants, now)
        if not grants:
            self.app.notify(f"{sanitize(agent.id, max_chars=60)} holds no live grant.", title="Nothing to revoke",
                            severity="warning")
            return
        from console.operator.tui.screens.revoke import RevokeDialog

        self.app.push_screen(RevokeDialog(agent, grants, now, seen_at=self.fetched_at), lambda _result: self.wake())

    def _proposal(self) -> Shutdown | None:
        """The proposal the selection points at: the shutdown in focus, or the one over the agent."""
        if self.focused is self.query_one("#shutdowns", LiveTable):
            chosen = self.selected_shutdown()
        else:
            agent = self.selected_agent()
            chosen = next((s for s in self.snapshot.shutdowns if agent and s.id == agent.proposal_id), None)
        if chosen is not None and chosen.state == "proposed":
            return chosen
        # nothing proposed selected: the one proposal there is, if there is just one
        proposed = [s for s in self.snapshot.shutdowns if s.state == "proposed"]
        return proposed[0] if len(proposed) == 1 else None

    def action_accept_proposal(self) -> None:
        self._decide(accept=True)

    def action_decline_proposal(self) -> None:
        self._decide(accept=False)

    def _decide(self, *, accept: bool) -> None:
        proposal = self._proposal()
        if proposal is None:
            self.app.notify("Select a proposed shutdown (tab moves to the shutdowns), or an agent under one.",
                            title="No proposal", severity="warning")
            return
        from console.operator.tui.screens.decide import DecideDialog

        self.app.push_screen(DecideDialog(proposal, self.snapshot.agents, accept=accept, seen_at=self.fetched_at),
                             lambda _result: self.wake())

    def action_open_record(self) -> None:
        shutdown = self.selected_shutdown()
        if shutdown is None or self.focused is not self.query_one("#shutdowns", LiveTable):
            self.app.notify("Select a finished shutdown (tab moves to the shutdowns).", severity="warning")
            return
        if shutdown.record_id is None:
            self.app.notify("No reconciliation record yet: the shutdown is still under way.", severity="warning")
            return
        from console.operator.tui.screens.reconciliations import RecordScreen

        self.app.push_screen(RecordScreen(shutdown.record_id))
