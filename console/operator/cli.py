"""The leasectl command line: thin. It parses options and calls the functions the console uses.

Exit codes (contract): 0 done, 1 anything else, 2 bad input, 3 refused by a guard.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from console.shared.config import resolve_dsn
from console.shared.errors import LeasectlError

if TYPE_CHECKING:
    from console.shared.models import ShutdownMode

F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="leasectl",
    help="Operator console for long-running agent tool calls kept in PostgreSQL.",
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
bench_app = typer.Typer(help="Benchmarks (figures printed with their conditions).", add_completion=False)

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", show_default=False,
                 help="PostgreSQL connection string (else LEASECTL_DSN, DATABASE_URL, PG* variables)"),
]


def friendly(fn: F) -> F:
    """Turn leasectl errors into a message and their exit code; never show a traceback for them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LeasectlError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}")
            if exc.hint:
                err.print(f"[dim]hint:[/] {escape(exc.hint)}")
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get("LEASECTL_DEBUG"):
                raise
            err.print(f"[bold red]internal error:[/] {escape(type(exc).__name__)}: {escape(str(exc))}")
            err.print("[dim]hint:[/] run again with LEASECTL_DEBUG=1 for the details, and report it")
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


# ----------------------------------------------------------------------------- schema


@app.command()
@friendly
def migrate(dsn: DsnOption = None) -> None:
    """Create or upgrade the schema (idempotent; serialised between concurrent migrators)."""
    from console.db.connect import connect
    from console.db.migrate import migrate as run_migrations

    with connect(resolve_dsn(dsn)) as conn:
        report = run_migrations(conn)
    for notice in report.notices:
        err.print(f"[yellow]notice:[/] {escape(notice)}")
    if report.applied:
        out.print(f"applied {', '.join(report.applied)}; schema version {report.version}")
    else:
        out.print(f"schema version {report.version}: up to date")


@app.command()
@friendly
def doctor(dsn: DsnOption = None) -> None:
    """Check connection, schema version, roles, triggers and tool lease sizing; say what to fix."""
    from console.operator.doctor import diagnose
    from console.shared.health import counted

    checks = diagnose(resolve_dsn(dsn))
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    table.add_column("fix", overflow="fold")
    colors = {"ok": "green", "warn": "yellow", "fail": "bold red"}
    for c in checks:
        table.add_row(escape(c.name), f"[{colors[c.status]}]{c.status.upper()}[/]", escape(c.detail),
                      escape(c.fix))
    out.print(table)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        err.print(f"[bold red]{counted(len(failed), 'check')} failed[/]")
        raise typer.Exit(1)


# ----------------------------------------------------------------------------- the console


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    dsn: DsnOption = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="No action is possible; the database "
                                                                "session itself is read-only")] = False,
    operator: Annotated[str | None, typer.Option("--operator", help="Your name in the journal "
                                                                    "(default: $USER)")] = None,
    poll: Annotated[float, typer.Option("--poll", min=0.2, help="Seconds between refreshes "
                                                                "(NOTIFY refreshes sooner)")] = 2.0,
) -> None:
    """Open the console (when no command is given)."""
    if ctx.invoked_subcommand is not None:
        return
    friendly(_run_console)(dsn, read_only, operator, poll)


def _run_console(dsn: str | None, read_only: bool, operator: str | None, poll: float) -> None:
    from console.db.session import ConsoleSession
    from console.operator.tui.app import LeasectlApp
    from console.shared.config import default_operator

    resolved = resolve_dsn(dsn)
    session = ConsoleSession(resolved, operator=operator or default_operator(), read_only=read_only)
    LeasectlApp(session, poll_seconds=poll).run()


# ----------------------------------------------------------------------------- reads

JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (contract column names)")]
JobArgument = Annotated[str, typer.Argument(help="Call id, or a unique prefix of it", show_default=False)]


def _connect(dsn: str | None):  # type: ignore[no-untyped-def]
    from console.db.connect import connect
    from console.db.migrate import check_compatible

    conn = connect(resolve_dsn(dsn))
    try:
        check_compatible(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _print_json(value: object) -> None:
    out.print_json(json.dumps(value, default=str))


@app.command()
@friendly
def jobs(
    state: Annotated[str | None, typer.Option(help="queued, running, cancel_requested, succeeded, failed, "
                                                   "cancelled, outcome_unknown")] = None,
    tool: Annotated[str | None, typer.Option(help="Tool name")] = None,
    owner: Annotated[str | None, typer.Option(help="Worker that owns (or last owned) the call")] = None,
    agent: Annotated[str | None, typer.Option(help="Agent id")] = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key prefix")] = None,
    health: Annotated[str | None, typer.Option(help="Lease health label, e.g. heartbeat_late")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many calls, newest first")] = 50,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """List calls, newest first."""
    from pydantic import ValidationError

    from console.db import reads
    from console.shared.errors import BadInput

    try:
        where = reads.JobFilter(state=state, tool=tool, owner=owner, agent=agent, key_prefix=key, health=health)
    except ValidationError as exc:
        raise BadInput(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    with _connect(dsn) as conn:
        rows = reads.jobs(conn, where, limit=limit)
    if as_json:
        _print_json([r.model_dump(mode="json") for r in rows])
        return
    from console.operator.present import jobs_table

    out.print(jobs_table(rows))
    if not rows:
        err.print("no calls match")


@app.command()
@friendly
def show(job: JobArgument, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Everything about one call (payload included with --json)."""
    from console.db import reads

    with _connect(dsn) as conn:
        found = reads.job(conn, reads.resolve(conn, job))
    assert found is not None
    if as_json:
        _print_json(found.model_dump(mode="json"))
        return
    from console.operator.present import job_panel

    out.print(job_panel(found))


@app.command()
@friendly
def history(job: JobArgument, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The ownership and state history of one call, with every operator action."""
    from console.db import reads

    with _connect(dsn) as conn:
        job_id = reads.resolve(conn, job)
        events = reads.history(conn, job_id)
    if as_json:
        _print_json([e.model_dump(mode="json") for e in events])
        return
    from console.operator.present import history_table

    out.print(history_table(job_id, events))


# ----------------------------------------------------------------------------- actions

ReasonOption = Annotated[str, typer.Option("--reason", help="Why (required; journaled with your name)",
                                           show_default=False)]
TokenOption = Annotated[int | None, typer.Option("--token", min=0, help="The fencing token you saw: the "
                                                 "action is refused if it changed (no question asked)")]
OperatorOption = Annotated[str | None, typer.Option("--operator", help="Your name in the journal "
                                                                       "(default: $USER)")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask; act on the state just read")]


def _act(action: str, job: str, reason: str, token: int | None, operator: str | None, yes: bool,
         dsn: str | None, **extra: object) -> None:
    from console.db import actions, reads
    from console.shared.config import default_operator
    from console.shared.errors import BadInput
    from console.shared.models import Applied

    if not reason.strip():
        raise BadInput("--reason must not be empty: it is journaled with the action")
    who = operator or default_operator()
    with _connect(dsn) as conn:
        job_id = reads.resolve(conn, job)
        current = reads.job(conn, job_id)
        assert current is not None
        seen_token = current.fencing_token if token is None else token
        if token is None:
            from console.operator.present import describe_for_confirmation

            err.print(describe_for_confirmation(current))
            if not yes:
                verb = {"cancel": "Cancel", "mark_terminal": f"Mark it {extra.get('terminal_state')}",
                        "approve_retry": "Approve a retry of"}[action]
                try:
                    confirmed = typer.confirm(f"{verb} this call (guard: state {current.state}, "
                                              f"token {seen_token})?", default=False, err=True)
                except typer.Abort:  # end of input: nobody said yes
                    confirmed = False
                if not confirmed:
                    err.print("not confirmed: nothing changed (pass --yes to skip the question)")
                    raise typer.Exit(1)
        fn = {"cancel": actions.cancel, "mark_terminal": actions.mark_terminal,
              "approve_retry": actions.approve_retry}[action]
        result = fn(conn, job_id, seen_state=current.state, seen_token=seen_token, operator=who,  # type: ignore[operator]
                    reason=reason, **extra)
    _answer(isinstance(result, Applied), result.message, f"request {result.request_id}")


def _answer(applied: bool, message: str, detail: str) -> None:
    """The database's answer to an action: applied (exit 0) or refused by its guard (exit 3)."""
    if applied:
        out.print(f"[bold green]applied:[/] {escape(message)}")
        out.print(f"[dim]{escape(detail)}[/]")
        return
    err.print(f"[bold red]refused:[/] {escape(message)}")
    err.print(f"[dim]{escape(detail)}[/]")
    raise typer.Exit(3)


@app.command()
@friendly
def cancel(job: JobArgument, reason: ReasonOption, token: TokenOption = None, operator: OperatorOption = None,
           yes: YesOption = False, dsn: DsnOption = None) -> None:
    """Cancel a call: queued -> cancelled; running -> cancel requested (not stopped until the worker confirms)."""
    _act("cancel", job, reason, token, operator, yes, dsn)


@app.command("mark-terminal")
@friendly
def mark_terminal(
    job: JobArgument,
    reason: ReasonOption,
    as_state: Annotated[str, typer.Option("--as", help="succeeded, failed or cancelled", show_default=False)],
    force: Annotated[bool, typer.Option("--force", help="Even if the owner holds a live lease: fences it "
                                                        "out (its heartbeat and result are rejected)")] = False,
    token: TokenOption = None,
    operator: OperatorOption = None,
    yes: YesOption = False,
    dsn: DsnOption = None,
) -> None:
    """Close a call after checking outside what really happened."""
    from console.shared.errors import BadInput

    if as_state not in ("succeeded", "failed", "cancelled"):
        raise BadInput(f"--as {as_state!r}: use succeeded, failed or cancelled")
    _act("mark_terminal", job, reason, token, operator, yes, dsn, terminal_state=as_state, force=force)


@app.command("approve-retry")
@friendly
def approve_retry(job: JobArgument, reason: ReasonOption, token: TokenOption = None,
                  operator: OperatorOption = None, yes: YesOption = False, dsn: DsnOption = None) -> None:
    """Allow one more attempt of a call whose outcome is unknown (never by its own executor)."""
    _act("approve_retry", job, reason, token, operator, yes, dsn)


# ----------------------------------------------------------------------------- fleet (seed 003)

AgentArgument = Annotated[str, typer.Argument(help="The agent at the root of the subtree", show_default=False)]
WindowOption = Annotated[float, typer.Option("--window", help="Seconds for in-flight calls (drain: to finish; "
                                                              "abort: to confirm their cancel)")]


@app.command()
@friendly
def fleet(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The agent tree (state, last seen, live calls, grants held) and the shutdowns."""
    from console.db import reads

    with _connect(dsn) as conn:
        snapshot = reads.fleet(conn)
    if as_json:
        _print_json(snapshot.model_dump(mode="json"))
        return
    from console.operator.present import fleet_tables

    for table in fleet_tables(snapshot):
        out.print(table)
    if not snapshot.agents:
        err.print("no agent is registered")


def _shutdown(mode: ShutdownMode, agent: str, reason: str, window: float, operator: str | None,
              dsn: str | None) -> None:
    from console.db import actions
    from console.shared.config import default_operator
    from console.shared.models import ShutdownRequested

    with _connect(dsn) as conn:
        result = actions.request_shutdown(conn, agent, mode=mode, operator=operator or default_operator(),
                                          reason=reason, window_seconds=window)
    if isinstance(result, ShutdownRequested):
        _answer(True, result.message, f"shutdown {result.shutdown.id}, request {result.request_id}; "
                                      "`leasectl supervise` carries it out")
    else:
        _answer(False, result.message, f"request {result.request_id} (journaled in fleet_events)")


@app.command()
@friendly
def drain(agent: AgentArgument, reason: ReasonOption, window: WindowOption = 300.0,
          operator: OperatorOption = None, dsn: DsnOption = None) -> None:
    """Drain a subtree: new calls refused, queued ones cancelled, running ones get the window to
    finish; then what still runs is aborted, and the supervisor writes the reconciliation record."""
    _shutdown("drain", agent, reason, window, operator, dsn)


@app.command()
@friendly
def abort(agent: AgentArgument, reason: ReasonOption, window: WindowOption = 60.0,
          operator: OperatorOption = None, dsn: DsnOption = None) -> None:
    """Abort a subtree: running calls get cancel requested; what is unconfirmed at the end of the
    window is fenced (an unverifiable side effect -> outcome unknown), then reconciled."""
    _shutdown("abort", agent, reason, window, operator, dsn)


@app.command()
@friendly
def reconciliations(
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many records, newest first")] = 20,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """Reconciliation records, newest first: unaccounted children, in-flight calls and how each
    resolved, grants revoked vs. expired."""
    from console.db import reads

    with _connect(dsn) as conn:
        records = reads.reconciliations(conn, limit=limit)
    if as_json:
        _print_json([r.contract() for r in records])
        return
    from console.operator.present import reconciliation_panel

    for record in records:
        out.print(reconciliation_panel(record))
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
    """Run the control plane: carry out drains and aborts, write reconciliation records, sweep
    expired leases. Safe to run several at once and to kill at any moment."""
    import signal
    import threading

    from console.control.supervisor import Supervisor, TickReport

    def show(report: TickReport) -> None:
        for line in report.notes:
            out.print(escape(line))
        for line in report.failures:
            err.print(f"[yellow]will retry:[/] {escape(line)}")

    with _connect(dsn):  # fail fast, with the usual message, on a wrong DSN or an old schema
        pass
    supervisor = Supervisor(resolve_dsn(dsn), supervisor_id=supervisor_id, interval=interval,
                            sweep_interval=sweep_interval, on_report=show)
    if once:
        report = supervisor.once()
        show(report)
        for line in report.waiting:
            out.print(f"[dim]waiting:[/] {escape(line)}")
        if not (report.notes or report.waiting or report.failures):
            err.print("nothing to do")
        raise typer.Exit(1 if report.failures else 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    err.print(f"supervising as {escape(supervisor.supervisor_id)} (ctrl+c stops)")
    try:
        supervisor.run(stop)
    except KeyboardInterrupt:
        stop.set()


# ----------------------------------------------------------------------------- demo


@app.command()
@friendly
def demo(
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Where the demo's PostgreSQL keeps its data "
                                                                     "(reused across runs)")] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Start over with an empty database")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same situations in the same order")] = 7,
    no_tui: Annotated[bool, typer.Option("--no-tui", help="Run only the fleet (point another console or the "
                                                          "CLI at it)")] = False,
    dsn: DsnOption = None,
    duration: Annotated[float | None, typer.Option("--duration", min=1, help="Stop after this many seconds "
                                                                            "(--no-tui)")] = None,
    tempo: Annotated[float, typer.Option("--tempo", min=0.05, max=10, help="Multiply every duration (leases, "
                                                                          "timeouts, schedule) by this")] = 1.0,
    operator: Annotated[str | None, typer.Option("--operator", help="Your name in the journal")] = None,
) -> None:
    """A live simulated fleet on an embedded PostgreSQL, with every trouble the console exists for."""
    import time

    from console.demo.run import Announcer, DemoOptions, default_data_dir, log_to_file, run_demo
    from console.shared.config import default_operator

    options = DemoOptions(data_dir=data_dir or default_data_dir(), reset=reset, seed=seed, tui=not no_tui,
                          dsn=resolve_dsn(dsn) if dsn else None, duration=duration, tempo=tempo,
                          operator=operator or default_operator())

    def open_console(demo_dsn: str) -> None:
        from console.db.session import ConsoleSession
        from console.operator.tui.app import LeasectlApp

        LeasectlApp(ConsoleSession(demo_dsn, operator=options.operator, label="leasectl_demo")).run()

    run_demo(options, Announcer(time.monotonic(), log_to_file(options.data_dir) if options.tui else None),
             open_console if options.tui else None)


# ----------------------------------------------------------------------------- pictures


@app.command()
@friendly
def screenshots(
    directory: Annotated[Path, typer.Option("--out", help="Directory for the SVG files")] = Path("screenshots"),
) -> None:
    """Write an SVG of every screen and dialog (the fixed demo scenario, at its pinned instant)."""
    import asyncio

    from console.db.connect import connect
    from console.db.migrate import migrate as run_migrations
    from console.demo.embedded import throwaway_server
    from console.demo.scenario import load_fixed_scenario
    from console.operator.tui.pictures import SHOTS, capture

    directory.mkdir(parents=True, exist_ok=True)
    with throwaway_server() as dsn:
        with connect(dsn) as conn:
            run_migrations(conn)
            load_fixed_scenario(conn)
        for shot in SHOTS:
            path = asyncio.run(capture(dsn, shot, directory))
            out.print(f"{escape(str(path))}  [dim]{escape(shot.title)}[/]")


def main() -> None:
    """Entry point of the `leasectl` command."""
    app(prog_name="leasectl")


if __name__ == "__main__":  # pragma: no cover
    main()
