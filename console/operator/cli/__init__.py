"""The leasectl command line: thin. It parses options and calls the functions the console uses.

`leasectl` alone opens the console. `--dsn` and `--operator` may stand before the command or
after it; given in both places with different values they are refused, never one of them silently
ignored. `--read-only` and `--context` stand before the command (after it, an unknown option:
refused). A context (`--context NAME` or LEASECTL_CONTEXT, console.shared.contexts) is found in
contexts.toml before any command runs: an unknown name exits 2 naming the known ones.
Exit codes: see console.operator.cli.common.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Annotated

import typer
from rich.markup import escape

import console
from console.operator.cli import admin, audit, calls, fleet  # noqa: F401 - each registers its commands
from console.operator.cli import bulk as bulk_commands  # noqa: F401 - `bulk status|stop|resume`
from console.operator.cli import contexts as contexts_commands  # noqa: F401 - `contexts [--json]`
from console.operator.cli import metrics as metrics_commands  # noqa: F401 - `metrics`, `metrics serve`
from console.operator.cli import serve as serve_commands  # noqa: F401 - `serve`, `serve users`
from console.operator.cli import triage as triage_commands  # noqa: F401 - `triage [--all-contexts]`
from console.operator.cli import views as views_commands  # noqa: F401 - `views save|list|delete`
from console.operator.cli.common import (
    Before,
    app,
    chosen_context,
    command_line_overrides,
    dsn_option,
    err,
    friendly,
    operator_option,
    read_dsn_option,
    read_only_option,
    read_only_why,
    set_before,
)
from console.shared.contexts import CONTEXT_ENV, chosen_name
from console.shared.errors import BadInput


def version() -> str:
    try:
        return metadata.version("leasectl")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return console.__version__


def _show_version(value: bool) -> None:
    if value:
        print(f"leasectl {version()}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    dsn: Annotated[str | None, typer.Option("--dsn", show_default=False, help="PostgreSQL connection string; "
                                            "wins over the context's dsn (else the context's, LEASECTL_DSN, "
                                            "DATABASE_URL, PG* variables)")] = None,
    context: Annotated[str | None, typer.Option("--context", show_default=False, metavar="NAME",
                                                help=f"A context of contexts.toml (else {CONTEXT_ENV}): its "
                                                     "dsn, operator and read_only; --dsn and --operator win "
                                                     "over its own; `leasectl contexts` lists them")] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="No action is possible; the database "
                                                                "session itself is read-only (so is a context's "
                                                                "read_only = true)")] = False,
    operator: Annotated[str | None, typer.Option("--operator", help="Your name in the journal (default: the "
                                                                    "context's operator, else $USER)")] = None,
    poll: Annotated[float | None, typer.Option("--poll", min=0.2, help="Seconds between the console's "
                                               "refreshes (NOTIFY refreshes sooner); default 2")] = None,
    show_version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                               help="Print the version and exit")] = False,
) -> None:
    """Open the console (when no command is given)."""
    set_before(Before(dsn=dsn, read_only=read_only, operator=operator, poll=poll, context=context,
                      context_name=_context_name(context, ctx.invoked_subcommand)))
    if ctx.invoked_subcommand is None:
        friendly(_run_console)(poll)
    elif poll is not None and ctx.invoked_subcommand != "demo":
        friendly(_refuse)("--poll is an option of the console (leasectl with no command, or leasectl demo)")


def _refuse(message: str) -> None:
    raise BadInput(message)


# commands that make their own database: LEASECTL_CONTEXT does not send them anywhere (the demo
# writes a simulated fleet: an explicit --context sends it there, as --dsn does; the screenshots
# are taken on a throwaway database, whatever the options say)
_OWN_DATABASE = frozenset({"demo", "screenshots"})


def _context_name(explicit: str | None, command: str | None) -> str | None:
    """The context this invocation runs in: --context, else LEASECTL_CONTEXT (console.shared.contexts).
    It is looked up when a command first needs it (common.chosen_context: an unknown name exits 2)."""
    if command == "screenshots" or (command in _OWN_DATABASE and explicit is None):
        return None
    return chosen_name(explicit)


def _run_console(poll: float | None) -> None:
    from console.db.session import ConsoleSession
    from console.operator.tui.app import LeasectlApp

    session = ConsoleSession(dsn_option(None), operator=operator_option(None), read_only=read_only_option(),
                             read_only_because=read_only_why(), context=chosen_context(),
                             overrides=command_line_overrides(), read_dsn=read_dsn_option(None))
    LeasectlApp(session, poll_seconds=poll or 2.0).run()


def _undecodable_argument() -> str | None:
    """An argument that is not valid UTF-8 (Python keeps its bytes as lone surrogates)."""
    for arg in sys.argv[1:]:
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            return arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return None


def main() -> None:
    """Entry point of the `leasectl` command."""
    bad = _undecodable_argument()
    if bad is not None:
        err.print(f"[bold red]error:[/] the argument '{escape(bad)}' is not valid UTF-8: nothing was done")
        raise SystemExit(2)
    app(prog_name="leasectl")


__all__ = ["app", "main", "version"]
