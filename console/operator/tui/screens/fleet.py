"""4 Fleet: the agent delegation tree and the shutdowns (seed 003).

Each agent with its state, when it was last seen, its running and queued calls and the grants
it still holds; the shutdowns under way with the time left in their window (by the database's
clock, ticking). `d` drains and `x` aborts the selected agent's subtree through the same dialog
rules as the call actions; `enter` on a finished shutdown opens its reconciliation record.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Label, Static

from console.db import reads
from console.db.connect import Conn
from console.operator.tui.cells import plain, selected_row_key
from console.operator.tui.screens.base import PollingScreen
from console.operator.tui.widgets.status import TopChrome
from console.shared.fleet_words import (
    AGENT_STATE_STYLE,
    grant_words,
    shutdown_phase,
    stopped_label,
    subtree,
    tree_prefixes,
)
from console.shared.health import counted, format_seconds
from console.shared.models import FleetAgent, FleetSnapshot, Shutdown, ShutdownMode
from console.shared.text import sanitize

AGENT_COLUMNS = (("agent", "agent", 26), ("kind", "kind", 9), ("state", "state", 11), ("seen", "seen ago", 8),
                 ("running", "calls", 5), ("queued", "queued", 6), ("grants", "grants", 9),
                 ("stopped", "stopped", 9))
SHUTDOWN_COLUMNS = (("id", "shutdown", 8), ("subtree", "subtree", 20), ("mode", "mode", 5),
                    ("phase", "phase", 44), ("by", "asked by", 10), ("reason", "reason", 44))


def _seen(agent: FleetAgent, now: datetime | None) -> Text:
    if agent.last_seen_at is None:
        return plain("never", "dim")
    age = (now - agent.last_seen_at).total_seconds() if now else agent.last_seen_age_seconds or 0
    # an agent that is shutting down and silent is the one that ends up unaccounted
    loud = agent.state in ("draining", "aborting", "reconciling") and agent.terminated_confirmed_at is None
    style = "bold red" if loud and age > 30 else ("yellow" if age > 60 and agent.state != "terminated" else "")
    return plain(format_seconds(age), style)


class FleetScreen(PollingScreen):
    CSS_PATH = "fleet.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "drain", "Drain subtree", tooltip="Drain the selected agent's subtree (reason, window)"),
        Binding("x", "abort", "Abort subtree", tooltip="Abort the selected agent's subtree (reason, window)"),
        Binding("enter", "open_record", "Open record",
                tooltip="On a finished shutdown: its reconciliation record"),
        Binding("tab", "switch_table", "Next table", show=False, tooltip="Agents ↔ shutdowns"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.snapshot = FleetSnapshot(agents=[], shutdowns=[])
        self.db_now: datetime | None = None

    def compose(self) -> ComposeResult:
        yield TopChrome()
        with Horizontal(id="fleet-top"):
            with Vertical(id="fleet-left"):
                yield Label("Agents — the delegation tree (calls = running calls)", classes="section-title")
                agents: DataTable[Text] = DataTable(id="agents", cursor_type="row", zebra_stripes=True)
                yield agents
                yield Static("No agent is registered.", id="no-agents")
            with VerticalScroll(id="agent-pane"):
                yield Static(id="agent-detail")
        with Vertical(id="fleet-bottom"):
            yield Label("Shutdowns — under way first (tab: select one, enter: its record)", classes="section-title")
            shutdowns: DataTable[Text] = DataTable(id="shutdowns", cursor_type="row", zebra_stripes=True)
            yield shutdowns
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#agents", DataTable)
        for key, label, width in AGENT_COLUMNS:
            table.add_column(label, key=key, width=width)
        table = self.query_one("#shutdowns", DataTable)
        for key, label, width in SHUTDOWN_COLUMNS:
            table.add_column(label, key=key, width=width)
        super().on_mount()

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
        self.snapshot, self.db_now = data
        now = self.lapp.db_time() or self.db_now
        agents = self.query_one("#agents", DataTable)
        selected = selected_row_key(agents)
        agents.clear()
        for prefix, a in zip(tree_prefixes(self.snapshot.agents), self.snapshot.agents, strict=True):
            name = Text(no_wrap=True, overflow="ellipsis")
            name.append(prefix, style="dim")
            name.append(sanitize(a.id), style="bold" if a.depth == 0 else "")
            grants = f"{a.live_grants}" + (f" +{a.expired_grants} exp." if a.expired_grants else "")
            agents.add_row(name, plain(a.kind), plain(a.state, AGENT_STATE_STYLE.get(a.state, "")), _seen(a, now),
                           plain(a.running_calls or "·", "bold" if a.running_calls else "dim"),
                           plain(a.queued_calls or "·", "dim"),
                           plain(grants, "bold yellow" if a.live_grants and a.state != "running" else ""),
                           self._stopped(a), key=a.id)
        if selected in {a.id for a in self.snapshot.agents}:
            agents.move_cursor(row=agents.get_row_index(selected), animate=False)
        agents.display = bool(self.snapshot.agents)
        self.query_one("#no-agents", Static).display = not self.snapshot.agents
        shutdowns = self.query_one("#shutdowns", DataTable)
        selected = selected_row_key(shutdowns)
        shutdowns.clear()
        for s in self.snapshot.shutdowns:
            shutdowns.add_row(*self._shutdown_cells(s, now), key=str(s.id))
        if selected in {str(s.id) for s in self.snapshot.shutdowns}:
            shutdowns.move_cursor(row=shutdowns.get_row_index(selected), animate=False)
        self._describe()

    @staticmethod
    def _stopped(a: FleetAgent) -> Text:
        return plain(*stopped_label(a))

    @staticmethod
    def _shutdown_cells(s: Shutdown, now: datetime | None) -> list[Text]:
        loud = s.state == "terminated" and bool(s.unaccounted)
        phase_style = "bold red" if loud else ("bold yellow" if s.state != "terminated" else "dim")
        return [plain(s.short_id, "bold"), plain(f"{s.root_agent_id} ({s.agents})"),
                plain(s.mode, "bold red" if s.mode == "abort" else ""),
                plain(shutdown_phase(s, now), phase_style), plain(s.requested_by), plain(s.reason)]

    def tick(self, now: datetime) -> None:
        shutdowns = self.query_one("#shutdowns", DataTable)
        for s in self.snapshot.shutdowns:
            if s.state not in ("terminated", "requested"):
                shutdowns.update_cell(str(s.id), "phase", self._shutdown_cells(s, now)[3])
        agents = self.query_one("#agents", DataTable)
        for a in self.snapshot.agents:
            agents.update_cell(a.id, "seen", _seen(a, now))

    # ------------------------------------------------------------------ selection
    def selected_agent(self) -> FleetAgent | None:
        key = selected_row_key(self.query_one("#agents", DataTable))
        return next((a for a in self.snapshot.agents if a.id == key), None)

    def selected_shutdown(self) -> Shutdown | None:
        key = selected_row_key(self.query_one("#shutdowns", DataTable))
        return next((s for s in self.snapshot.shutdowns if str(s.id) == key), None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._describe()

    def action_switch_table(self) -> None:
        agents, shutdowns = self.query_one("#agents", DataTable), self.query_one("#shutdowns", DataTable)
        (agents if self.focused is shutdowns else shutdowns).focus()

    def on_descendant_focus(self) -> None:
        self._describe()  # the pane follows the table in focus: an agent, or a shutdown

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "shutdowns":
            self.action_open_record()

    def _describe(self) -> None:
        pane = self.query_one("#agent-detail", Static)
        focused_shutdowns = self.focused is self.query_one("#shutdowns", DataTable)
        shutdown = self.selected_shutdown() if focused_shutdowns else None
        if shutdown is not None:
            pane.update(self._shutdown_story(shutdown))
            return
        agent = self.selected_agent()
        if agent is None:
            pane.update(Text("Select an agent to see its subtree.", style="dim"))
            return
        tree = subtree(self.snapshot.agents, agent.id)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column()

        def line(label: str, value: object, style: str = "") -> None:
            grid.add_row(Text(label), Text(sanitize(value), style=style))

        line("agent", agent.id, "bold")
        line("kind", agent.kind)
        line("parent", agent.parent_id or "— (a root)")
        line("state", agent.state, AGENT_STATE_STYLE.get(agent.state, ""))
        line("started", agent.started_at.strftime("%H:%M:%S"))
        line("last seen", agent.last_seen_at.strftime("%H:%M:%S") if agent.last_seen_at else "never")
        if agent.state != "running":
            line("stopped", agent.terminated_confirmed_at.strftime("confirmed %H:%M:%S")
                 if agent.terminated_confirmed_at else "NOT confirmed",
                 "green" if agent.terminated_confirmed_at else "bold red")
        line("its calls", f"{agent.running_calls} running, {agent.queued_calls} queued")
        line("its grants", f"{agent.live_grants} live, {agent.expired_grants} expired (not revoked)")
        now = self.lapp.db_time()
        for grant in [g for g in self.snapshot.grants if g.agent_id == agent.id][:8]:
            expired = now is not None and grant.expires_at <= now
            # held by an agent that is shutting down: the control plane will revoke it
            line("holds", grant_words(grant, now), "dim" if expired else ("yellow" if agent.state != "running" else ""))
        under_way = next((s for s in self.snapshot.shutdowns if s.id == agent.shutdown_id), None)
        if under_way:
            line("shutdown", f"{under_way.mode} of {under_way.root_agent_id}: "
                             f"{shutdown_phase(under_way, self.lapp.db_time())}", "bold yellow")
        subtree_text = Text()
        subtree_text.append(f"\nSubtree: {counted(len(tree), 'agent')}, ", style="bold")
        subtree_text.append(f"{counted(sum(a.running_calls for a in tree), 'running call')}, "
                            f"{sum(a.queued_calls for a in tree)} queued, "
                            f"{counted(sum(a.live_grants for a in tree), 'live grant')}.")
        if agent.state == "running" and under_way is None:
            subtree_text.append("\nd drains it (calls finish in a window), x aborts it (cancel now).", style="dim")
        pane.update(Group(grid, subtree_text))

    def _shutdown_story(self, s: Shutdown) -> Group:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column()

        def at(value: datetime | None) -> str:
            return value.strftime("%H:%M:%S") if value else "—"

        for label, value, style in (
                ("shutdown", str(s.id), "bold"), ("subtree", f"{s.root_agent_id} ({s.agents} agents)", ""),
                ("mode", s.mode, ""), ("asked by", s.requested_by, ""), ("reason", s.reason, ""),
                ("requested", at(s.requested_at), ""), ("draining", at(s.draining_at), ""),
                ("aborting", at(s.aborting_at), ""), ("reconciling", at(s.reconciling_at), ""),
                ("finished", at(s.finished_at), ""), ("now", shutdown_phase(s, self.lapp.db_time()), "bold")):
            grid.add_row(Text(label), Text(sanitize(value), style=style))
        if s.record_id is None:
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
        if agent is None:
            self.app.notify("Select an agent first.", severity="warning")
            return
        if not self.actions_allowed():
            return
        if agent.state != "running":
            self.app.notify(f"{agent.id} is {agent.state}: its subtree is already shutting down or stopped.",
                            title="Nothing to do", severity="warning")
            return
        from console.operator.tui.screens.shutdown import ShutdownDialog

        self.app.push_screen(ShutdownDialog(mode, agent, self.snapshot.agents, seen_at=self.lapp.data_age()),
                             lambda _result: self.wake())

    def action_open_record(self) -> None:
        shutdown = self.selected_shutdown()
        if shutdown is None or self.focused is not self.query_one("#shutdowns", DataTable):
            self.app.notify("Select a finished shutdown (tab moves to the shutdowns).", severity="warning")
            return
        if shutdown.record_id is None:
            self.app.notify("No reconciliation record yet: the shutdown is still under way.", severity="warning")
            return
        from console.operator.tui.screens.reconciliations import RecordScreen

        self.app.push_screen(RecordScreen(shutdown.record_id))

