"""The schema, doctor, the demo and the pictures; `admin retention`, the history's retention."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from console.db.connect import connect
from console.db.migrate import LOCK_WAIT_S
from console.db.migrate import migrate as run_migrations
from console.operator.cli.common import (
    DsnOption,
    OperatorOption,
    app,
    before,
    chosen_context,
    command_line_overrides,
    confirm,
    dsn_option,
    err,
    friendly,
    operator_option,
    out,
    print_json,
    read_only_option,
    read_only_why,
    refuse_if_read_only,
)
from console.operator.doctor import diagnose
from console.shared.errors import BadInput
from console.shared.text import counted, sanitize
from console.shared.times import parse_duration

admin_app = typer.Typer(name="admin", no_args_is_help=True, add_completion=False,
                        help="The schema owner's tasks: the history's retention.")
app.add_typer(admin_app, name="admin")


@app.command()
@friendly
def migrate(
    dsn: DsnOption = None,
    wait: Annotated[float, typer.Option("--wait", min=0.001, help="How long to wait, in seconds, for another "
                                        "migrator's lock (two deploys at once: the second then finds the schema done)")]
    = LOCK_WAIT_S,
) -> None:
    """Create or upgrade the schema (idempotent; serialised between concurrent migrators)."""
    refuse_if_read_only("migrate")
    with connect(dsn_option(dsn)) as conn:
        report = run_migrations(conn, lock_wait_s=wait)
    for notice in report.notices:
        err.print(f"[yellow]notice:[/] {escape(sanitize(notice))}")
    if report.applied:
        out.print(f"applied {', '.join(report.applied)}; schema version {report.version}")
    else:
        out.print(f"schema version {report.version}: up to date")


@app.command()
@friendly
def doctor(dsn: DsnOption = None) -> None:
    """Check connection, schema version, roles, triggers and tool lease sizing; say what to fix."""
    checks = diagnose(dsn_option(dsn))
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    table.add_column("fix", overflow="fold")
    colors = {"ok": "green", "warn": "yellow", "fail": "bold red"}
    for c in checks:
        # tool names, role names and server text come from the database: shown as text
        table.add_row(escape(sanitize(c.name, max_chars=80)), f"[{colors[c.status]}]{c.status.upper()}[/]",
                      escape(sanitize(c.detail, single_line=False)), escape(sanitize(c.fix, single_line=False)))
    out.print(table)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        err.print(f"[bold red]{counted(len(failed), 'check')} failed[/]")
        raise typer.Exit(1)


@app.command()
@friendly
def demo(
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Where the demo's PostgreSQL keeps its data "
                                                                     "(reused across runs)")] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Start over with an empty database")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same situations in the same order")] = 7,
    no_tui: Annotated[bool, typer.Option("--no-tui", help="Run only the fleet (point another console or the "
                                                          "CLI at it)")] = False,
    dsn: Annotated[str | None, typer.Option("--dsn", show_default=False,
                                            help="Run the fleet on this database instead (so does an explicit "
                                                 "--context; LEASECTL_CONTEXT alone does not)")] = None,
    duration: Annotated[float | None, typer.Option("--duration", min=1, help="Stop after this many seconds "
                                                                            "(--no-tui)")] = None,
    tempo: Annotated[float, typer.Option("--tempo", min=0.05, max=10, help="Multiply every duration (leases, "
                                                                          "timeouts, schedule) by this")] = 1.0,
    operator: OperatorOption = None,
) -> None:
    """A live simulated fleet on an embedded PostgreSQL, with every trouble the console exists for."""
    from console.demo.run import Announcer, DemoOptions, default_data_dir, log_to_file, run_demo

    # an explicit --context sends the demo there as --dsn does (the root callback leaves
    # LEASECTL_CONTEXT alone for the demo: a variable never points a simulated fleet at a database)
    explicit_dsn = dsn if dsn is not None else (before().dsn or chosen_context())
    options = DemoOptions(data_dir=data_dir or default_data_dir(), reset=reset, seed=seed, tui=not no_tui,
                          dsn=dsn_option(dsn) if explicit_dsn else None, duration=duration, tempo=tempo,
                          operator=operator_option(operator))
    read_only = read_only_option()
    poll = before().poll
    context, why, overrides = chosen_context(), read_only_why(), command_line_overrides()

    def open_console(demo_dsn: str) -> None:
        from console.db.session import ConsoleSession
        from console.operator.tui.app import LeasectlApp

        session = ConsoleSession(demo_dsn, operator=options.operator, read_only=read_only, label="leasectl_demo",
                                 read_only_because=why, context=context, overrides=overrides)
        LeasectlApp(session, poll_seconds=poll or 2.0).run()

    run_demo(options, Announcer(time.monotonic(), log_to_file(options.data_dir) if options.tui else None),
             open_console if options.tui else None)


@app.command()
@friendly
def screenshots(
    directory: Annotated[Path, typer.Option("--out", help="Directory for the SVG files")] = Path("screenshots"),
) -> None:
    """Write an SVG of every screen and dialog (the fixed demo scenario, at its pinned instant)."""
    from console.demo.embedded import throwaway_server
    from console.demo.scenario import load_fixed_scenario
    from console.operator.tui.pictures import SHOTS, capture

    if directory.exists() and not directory.is_dir():
        raise BadInput(f"--out {sanitize(str(directory))} is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    with throwaway_server() as dsn:
        with connect(dsn) as conn:
            run_migrations(conn)
            load_fixed_scenario(conn)
        # the prepared ones last: what they add to the scenario is in no other picture
        for shot in sorted(SHOTS, key=lambda s: s.prepare is not None):
            path = asyncio.run(capture(dsn, shot, directory))
            out.print(f"{escape(str(path))}  [dim]{escape(shot.title)}[/]")


@admin_app.command("retention")
@friendly
def retention_command(
    keep: Annotated[str, typer.Option("--keep", help="Keep this much history online (90d, 2160h); every whole "
                                                     "month that ended before it is archived and dropped",
                                      show_default=False)],
    archive: Annotated[str, typer.Option("--archive", help="Directory for the archive files and manifest.json "
                                                           "(created if missing)", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", help="Archive and drop without asking")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (journaled with your name)",
                                               show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable report")] = False,
    dsn: DsnOption = None,
    operator: OperatorOption = None,
) -> None:
    """Archive every whole month of the history older than --keep, verify it, then drop it.

    Each month is written to DIR/job_events-YYYY-MM.jsonl.gz (the rows of `audit export`), read
    back and held against the database (rows, first and last id) before its manifest entry (with
    the file's sha256) is written; only then is its partition dropped, journaled as yours. Killed
    at any point, a month is still in the database or in a verified archive, never neither; run
    again, it goes on where it stopped. Needs the schema owner's login (as migrate does)."""
    from console.db import retention as retention_db
    from console.operator.archive import ArchiveDir, file_name
    from console.operator.present.retention import month_line, plan_table, summary
    from console.operator.retention import RETENTION_LIMITS, RetentionReport, archive_in, check_may_archive, plan

    refuse_if_read_only("admin retention")
    keep_for = timedelta(seconds=parse_duration(keep, what="--keep"))
    name = operator_option(operator)
    target = ArchiveDir.for_writing(archive)
    with connect(dsn_option(dsn), limits=RETENTION_LIMITS) as conn:
        check_may_archive(conn)
        cutoff, months = plan(conn, keep_for)
        if not months and not retention_db.default_months(conn, cutoff):  # nothing written before the question
            report = RetentionReport(cutoff=cutoff, archive=str(target.path))
            if as_json:
                print_json(report.record())
            else:
                err.print(f"nothing to archive: no whole month of the history ended before {cutoff:%Y-%m-%d %H:%M} UTC")
            return
        if not as_json:
            out.print(plan_table(months, [file_name(m.month) for m in months], target.path, cutoff))
        if not yes:
            confirm(f"Archive {counted(len(months), 'month')} to {target.path} and drop them from the database?")
        report = archive_in(conn, keep_for, target, operator=name, reason=reason,
                            on_month=None if as_json else lambda m: out.print(month_line(m)))
    if as_json:
        print_json(report.record())
    else:
        err.print(summary(report))
