"""The fleet (docs/seeds.md §003): the agent tree, drain and abort of a subtree, reconciliation records, the
control plane; and its tools: their fair-share settings and the pause that throttles a flaky vendor without
stopping a worker (docs/seeds.md §000; migration 0016)."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import typer
from rich.markup import escape

from console.control.supervisor import Supervisor, TickReport
from console.core.fleet import subtree
from console.core.models import ShutdownMode, ShutdownRequested
from console.db import actions, reads
from console.operator import present
from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    OperatorOption,
    ReasonOption,
    answer,
    app,
    confirm,
    connect_for_acting,
    connect_for_reading,
    dsn_option,
    err,
    friendly,
    operator_option,
    out,
    print_json,
    refuse_if_read_only,
    show_rows,
)
from console.operator.present.actions import decision_message
from console.operator.present.tools import pause_message, tools_table
from console.shared.errors import BadInput
from console.shared.text import sanitize

AgentArgument = Annotated[str, typer.Argument(help="The agent at the root of the subtree", show_default=False)]
WindowOption = Annotated[float, typer.Option("--window", help="Seconds for in-flight calls (drain: to finish; "
                                                              "abort: to confirm their cancel)")]
ShutdownYesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not show the subtree and ask; act")]


@app.command()
@friendly
def fleet(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The agent tree (state, last seen, live calls, grants held) and the shutdowns."""
    with connect_for_reading(dsn) as conn:
        snapshot = reads.fleet(conn)
    if as_json:
        print_json(snapshot.model_dump(mode="json"))
        return
    for table in present.fleet_tables(snapshot):
        out.print(table)
    if not snapshot.agents:
        err.print("no agent is registered")


ReplacementOption = Annotated[str | None, typer.Option(
    "--replacement", help="The upgrade path: an agent registered to replace this one (agent/register.sql's "
                          "`replaces`); the subtree's queued calls move to its generation instead of being cancelled")]


def _shutdown(mode: ShutdownMode, agent: str, reason: str, window: float, operator: str | None, yes: bool,
              dsn: str | None, replacement: str | None = None) -> None:
    if not reason.strip():
        raise BadInput("--reason must not be empty: it is journaled with the request")
    who = operator_option(operator)
    with connect_for_acting(dsn, mode) as conn:
        snapshot = reads.fleet(conn)
        tree = subtree(snapshot.agents, agent)
        if not tree:
            raise BadInput(f"no agent {sanitize(agent)}", hint="`leasectl fleet` lists the agents")
        # the blast radius first: what the shutdown will touch, as read now
        err.print(present.subtree_summary(mode, tree, snapshot.grants))
        if replacement:
            err.print(f"queued calls move to {escape(sanitize(replacement, max_chars=80))}'s generation")
        if not yes:
            confirm(f"{mode.capitalize()} this subtree ({present.subtree_counts(tree)})?")
        result = actions.request_shutdown(conn, agent, mode=mode, operator=who, reason=reason,
                                          window_seconds=window, replacement=replacement)
    if isinstance(result, ShutdownRequested):
        answer(True, present.shutdown_message(result), f"shutdown {result.shutdown.id}, request {result.request_id}; "
                                                       "`leasectl supervise` carries it out")
    else:
        answer(False, present.shutdown_message(result), f"request {result.request_id} (journaled in fleet_events)")


@app.command()
@friendly
def drain(agent: AgentArgument, reason: ReasonOption, window: WindowOption = 300.0,
          replacement: ReplacementOption = None,
          operator: OperatorOption = None, yes: ShutdownYesOption = False, dsn: DsnOption = None) -> None:
    """Drain a subtree: no new calls, queued ones cancelled, running ones get the window to finish.

    Then what still runs is aborted, and the supervisor writes the reconciliation record. With
    --replacement (the upgrade path) queued calls move to the new generation instead. Without
    --yes it shows the subtree (agents, running and queued calls, live grants) and asks."""
    _shutdown("drain", agent, reason, window, operator, yes, dsn, replacement)


@app.command()
@friendly
def abort(agent: AgentArgument, reason: ReasonOption, window: WindowOption = 60.0,
          replacement: ReplacementOption = None,
          operator: OperatorOption = None, yes: ShutdownYesOption = False, dsn: DsnOption = None) -> None:
    """Abort a subtree: running calls get cancel requested, the unconfirmed are fenced at the end.

    An unverifiable side effect goes to outcome unknown; then the subtree is reconciled. Without
    --yes it shows the subtree (agents, running and queued calls, live grants) and asks."""
    _shutdown("abort", agent, reason, window, operator, yes, dsn, replacement)


shutdowns_app = typer.Typer(name="shutdowns", add_completion=False, no_args_is_help=False,
                            help="Shutdowns and proposals: list them; accept or decline a proposal.")
app.add_typer(shutdowns_app)
ShutdownArgument = Annotated[str, typer.Argument(help="The shutdown's id, or a unique prefix of it",
                                                 show_default=False)]


@shutdowns_app.callback(invoke_without_command=True)
@friendly
def shutdowns(ctx: typer.Context, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Proposals first (an agent's, or the supervisor's for an orphan: they wait for a human), then
    the shutdowns under way, then the finished."""
    if ctx.invoked_subcommand is not None:
        return
    with connect_for_reading(dsn) as conn:
        found = reads.fleet(conn).shutdowns
    show_rows(found, as_json=as_json, table=present.shutdowns_table, none="no shutdown was ever requested or proposed")


def _decide(accept: bool, shutdown_id: str, reason: str, window: float | None, operator: str | None, yes: bool,
            dsn: str | None) -> None:
    verb = "accept" if accept else "decline"
    who = operator_option(operator)
    with connect_for_acting(dsn, verb) as conn:
        found = reads.shutdown_by_prefix(conn, shutdown_id)
        if found.state == "proposed" and not yes:
            err.print(present.proposal_summary(found))
            if accept:
                tree = subtree(reads.fleet(conn).agents, found.root_agent_id)
                err.print(f"it will {found.mode} {present.subtree_counts(tree)}")
            confirm(f"{verb.capitalize()} this proposal?")
        result = actions.decide_shutdown(conn, found.id, accept=accept, operator=who, reason=reason,
                                         window_seconds=window)
    applied, words = decision_message(accept, result)
    answer(applied, words, f"journaled as shutdown_{verb}{'ed' if accept else 'd'} with your name and reason"
           if applied else "`leasectl shutdowns` shows who decided it")


@shutdowns_app.command("accept")
@friendly
def accept(shutdown_id: ShutdownArgument, reason: ReasonOption,
           window: Annotated[float | None, typer.Option("--window", help="Seconds for in-flight calls (default: "
                                                                       "the proposal's)")] = None,
           operator: OperatorOption = None, yes: ShutdownYesOption = False, dsn: DsnOption = None) -> None:
    """Accept a proposed shutdown: it becomes requested, and the supervisor carries it out.

    Without --yes it shows the proposal and the subtree it would stop, and asks."""
    _decide(True, shutdown_id, reason, window, operator, yes, dsn)


@shutdowns_app.command("decline")
@friendly
def decline(shutdown_id: ShutdownArgument, reason: ReasonOption, operator: OperatorOption = None,
            yes: ShutdownYesOption = False, dsn: DsnOption = None) -> None:
    """Decline a proposed shutdown: it never starts (the supervisor does not propose it again for the
    same silence)."""
    _decide(False, shutdown_id, reason, None, operator, yes, dsn)


@app.command()
@friendly
def reconciliations(
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many records, newest first")] = 20,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """Reconciliation records, newest first: unaccounted children first, then calls and grants."""
    with connect_for_reading(dsn) as conn:
        records = reads.reconciliations(conn, limit=limit)
    if as_json:
        print_json([r.contract() for r in records])
        return
    for record in records:
        out.print(present.reconciliation_panel(record))
    if not records:
        err.print("no reconciliation record yet")


@app.command()
@friendly
def supervise(
    once: Annotated[bool, typer.Option("--once", help="One pass (sweep, then one step of every shutdown), "
                                                      "then exit")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between passes (a requested "
                                                                        "shutdown wakes it sooner)")] = 1.0,
    sweep_interval: Annotated[float, typer.Option("--sweep-interval", min=0.1, help="Seconds between "
                                                  "expired-lease sweeps")] = 5.0,
    supervisor_id: Annotated[str | None, typer.Option("--id", help="Name written into reconciliation "
                                                      "records (default supervisor@host:pid)")] = None,
    dsn: DsnOption = None,
) -> None:
    """Run the control plane: drains, aborts, reconciliation records, the expired-lease sweep.

    Safe to run several at once and to kill at any moment."""
    refuse_if_read_only("supervise")

    def show(report: TickReport) -> None:
        for line in report.notes:
            out.print(escape(sanitize(line)))
        for line in report.failures:
            err.print(f"[yellow]will retry:[/] {escape(sanitize(line))}")

    with connect_for_reading(dsn, replica=False):  # fail fast, with the usual message, on a wrong DSN or an old schema
        pass
    supervisor = Supervisor(dsn_option(dsn), supervisor_id=supervisor_id, interval=interval,
                            sweep_interval=sweep_interval, on_report=show,
                            on_note=lambda text: err.print(f"[yellow]note:[/] {escape(sanitize(text))}"))
    if once:
        report = supervisor.once()
        show(report)
        for line in report.waiting:
            out.print(f"[dim]waiting:[/] {escape(sanitize(line))}")
        if not (report.notes or report.waiting or report.failures):
            err.print("nothing to do")
        raise typer.Exit(1 if report.failures else 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    err.print(f"supervising as {escape(sanitize(supervisor.supervisor_id))} (ctrl+c stops)")
    try:
        supervisor.run(stop)
    except KeyboardInterrupt:
        stop.set()


# ----------------------------------------------------------------------------- tools

ToolArgument = Annotated[str, typer.Argument(help="The tool's registered name", show_default=False)]


@app.command("tools")
@friendly
def list_tools(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Registered tools: class, calls running and queued, caps, hold, attempts; paused ones first."""
    with connect_for_reading(dsn) as conn:
        found = reads.tools(conn)
    show_rows(found, as_json=as_json, table=tools_table, none="no tool is registered")


@app.command()
@friendly
def pause(tool: ToolArgument, reason: ReasonOption, operator: OperatorOption = None,
          dsn: DsnOption = None) -> None:
    """Pause a tool: none of its calls is claimed until it is resumed; running ones go on. Journaled."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "pause") as conn:
        result = actions.pause_tool(conn, tool, operator=who, reason=reason)
    answer(*pause_message("pause", result))


@app.command()
@friendly
def resume(tool: ToolArgument,
           reason: Annotated[str, typer.Option("--reason", help="Why (journaled with your name)")] = "resumed",
           operator: OperatorOption = None, dsn: DsnOption = None) -> None:
    """Resume a paused tool: its queued calls are claimed again. Journaled with the pause it ends."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "resume") as conn:
        result = actions.resume_tool(conn, tool, operator=who, reason=reason)
    answer(*pause_message("resume", result))


GrantArgument = Annotated[str, typer.Argument(help="The grant's id, or a unique prefix of it", show_default=False)]


@app.command()
@friendly
def revoke(grant_id: GrantArgument,
           reason: ReasonOption, operator: OperatorOption = None,
           yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not show the grant and ask; act")] = False,
           dsn: DsnOption = None) -> None:
    """Revoke one grant (as the control plane, journaled with your name and reason).

    Without --yes it shows the grant (holder, kind, resource, expiry) and asks."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "revoke") as conn:
        found = reads.grant(conn, grant_id)
        if found.revoked_at is None and not yes:
            err.print(present.grant_summary(found))
            confirm("Revoke this grant?")
        applied, now = actions.revoke_grant(conn, str(found.id), operator=who, reason=reason)
    answer(applied, present.grant_summary(now), "the holder's next use of it is refused; `leasectl audit actions "
                                             "--action revoke` shows who revoked it and why")
