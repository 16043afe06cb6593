"""The leasectl command line: thin. It parses options and calls the functions the console uses.

Exit codes (contract): 0 done, 1 anything else, 2 bad input, 3 refused by a guard.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from console.config import resolve_dsn
from console.errors import LeasectlError

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

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

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
    from console.doctor import diagnose

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
        err.print(f"[bold red]{len(failed)} check(s) failed[/]")
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the `leasectl` command."""
    app(prog_name="leasectl")


if __name__ == "__main__":  # pragma: no cover
    main()
