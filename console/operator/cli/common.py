"""What every command shares: the app, the terminal, the options that may stand before or after
the command, the error handler, and the way to a database.

Exit codes (contract): 0 done, 1 anything else (database unreachable, not allowed), 2 bad input or
not confirmed (nothing changed), 3 refused by a guard, 4 a violation found by `audit verify`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Annotated, Any, TypeVar

import psycopg
import typer
from pydantic import BaseModel
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.segment import Segment

from console.db.connect import Conn, translate_error
from console.db.lane import open_session
from console.shared.contexts import Context, Overrides, contexts_path, read_only_reason, resolve_context, settle
from console.shared.dsn import mask_secrets
from console.shared.errors import (
    EXIT_BAD_INPUT,
    EXIT_REFUSED,
    BadInput,
    DatabaseUnavailable,
    LeasectlError,
    ReadOnlySession,
)
from console.shared.text import sanitize, terminal_safe

F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="leasectl",
    help="Operator console for long-running agent tool calls kept in PostgreSQL.",
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class TerminalConsole(Console):
    """A rich console whose every drawn segment passes `terminal_safe`: whatever a message forgot
    to sanitize reaches the terminal as text, never as an escape. Rich's own control segments
    (cursor moves of a progress bar) are its own and pass."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(terminal_safe(segment.text), segment.style)
            for segment in buffer)


def _pipe_width(stream: Any) -> int | None:
    """Tables on a pipe or in a file: rich would draw them 80 columns wide and cut ids, owners and
    headers (`st…`); a reader there has no width to fit, so a wide one (COLUMNS still decides)."""
    try:
        on_terminal = stream.isatty()
    except (AttributeError, ValueError):
        on_terminal = False
    return None if on_terminal or os.environ.get("COLUMNS") else 200


out = TerminalConsole(highlight=False, soft_wrap=True, emoji=False, width=_pipe_width(sys.stdout))
err = TerminalConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def print_json(value: object) -> None:
    """Machine-readable output: exact values, ASCII only (every control, bidi or non-ASCII
    character escaped as \\uXXXX), so it is safe on a terminal and loses nothing."""
    sys.stdout.write(json.dumps(value, default=str, ensure_ascii=True, indent=2) + "\n")
    sys.stdout.flush()


def show_rows(rows: Sequence[BaseModel], *, as_json: bool, table: Callable[[Any], RenderableType],
               none: str) -> None:
    """A list command's answer: the rows as JSON (an empty list is an answer there), or their table;
    with no rows, `none` on stderr instead of an empty table (it says more, and on a pipe a table's
    header alone is only noise)."""
    if as_json:
        print_json([r.model_dump(mode="json") for r in rows])
    elif not rows:
        err.print(none)
    else:
        out.print(table(rows))


def _said(text: str) -> str:
    """A message as printed: one line of visible characters, with no password in it (a DSN or
    libpq's words about one; console.shared.dsn)."""
    return escape(sanitize(mask_secrets(text)))


def friendly(fn: F) -> F:
    """Turn leasectl errors into a message and their exit code; never show a traceback for them.
    A lost connection the data layer did not see (a transaction's BEGIN or COMMIT in a read) is
    "database unreachable", not an internal error."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return fn(*args, **kwargs)
            except psycopg.Error as exc:
                lost = translate_error(exc, "leasectl")
                if not isinstance(lost, DatabaseUnavailable):
                    raise
                raise lost from exc
        except LeasectlError as exc:
            err.print(f"[bold red]error:[/] {_said(str(exc))}")
            if exc.hint:
                err.print(f"[dim]hint:[/] {_said(exc.hint)}")
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get("LEASECTL_DEBUG"):
                raise
            err.print(f"[bold red]internal error:[/] {escape(type(exc).__name__)}: {_said(str(exc))}")
            err.print("[dim]hint:[/] run again with LEASECTL_DEBUG=1 for the details, and report it")
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


# ----------------------------------------------------------------------------- the options


class Before(BaseModel):
    """The options given before the command (`leasectl --dsn X jobs`); merged with the same
    options given after it, so that neither position is ever silently ignored. `context` is the
    --context given (None: not given); `context_name` the context this invocation runs in (--context,
    else LEASECTL_CONTEXT), looked up in contexts.toml when a command first needs it
    (`chosen_context`, which keeps it in `chosen`): `leasectl jobs --help` works whatever the name."""

    dsn: str | None = None
    read_only: bool = False
    operator: str | None = None
    poll: float | None = None
    context: str | None = None
    context_name: str | None = None
    chosen: Context | None = None


# set by the root callback, which runs before every command of this invocation
_before: ContextVar[Before | None] = ContextVar("leasectl_before", default=None)


def set_before(options: Before) -> None:
    _before.set(options)


def before() -> Before:
    return _before.get() or Before()


def _merge(name: str, early: str | None, late: str | None) -> str | None:
    if early is not None and late is not None and early != late:
        # both values are shown so that the person sees which is which; a DSN never with its password
        raise BadInput(f"{name} is given twice, before the command ('{sanitize(mask_secrets(early))}') and after "
                       f"it ('{sanitize(mask_secrets(late))}'): give it once")
    return late if late is not None else early


def chosen_context() -> Context | None:
    """The context this invocation runs in (--context or LEASECTL_CONTEXT), or None; an unknown name
    is BadInput naming the known ones (exit 2), a contexts.toml that does not parse too. Every
    command that connects comes here (dsn_option, operator_option, read_only_option)."""
    early = before()
    if early.chosen is None and early.context_name is not None:
        if not early.context_name.strip():
            raise BadInput("--context is empty (an unset variable?): give a context's name, or leave it out")
        early.chosen = resolve_context(early.context_name)
    return early.chosen


def dsn_option(late: str | None) -> str:
    """The DSN: --dsn (either position), else the context's dsn (--context, LEASECTL_CONTEXT), else
    LEASECTL_DSN, DATABASE_URL, libpq's PG* variables (console.shared.contexts.settle)."""
    given = _merge("--dsn", before().dsn, late)
    if given is not None and not given.strip():
        # `--dsn "$DB"` with DB unset: falling back to LEASECTL_DSN could reach another database
        raise BadInput("--dsn is empty (an unset variable?): give a connection string, or leave --dsn "
                       "out to use the context's, LEASECTL_DSN, DATABASE_URL or libpq's PG* variables")
    return settle(chosen_context(), Overrides(dsn=given)).dsn


def operator_option(late: str | None) -> str:
    """Your name: --operator (either position), else the context's operator, else LEASECTL_OPERATOR, $USER."""
    name = settle(chosen_context(), Overrides(operator=_merge("--operator", before().operator, late))).operator
    if not name.strip():
        raise BadInput("--operator must not be empty: it is journaled with the action")
    return name.strip()


def read_only_why() -> str | None:
    """Why this invocation may not act: --read-only, or its context's `read_only = true` (which no
    option undoes); None when it may."""
    return read_only_reason(chosen_context(), Overrides(read_only=before().read_only))


def read_only_option() -> bool:
    return read_only_why() is not None


def command_line_overrides() -> Overrides:
    """What the command line said, for the console: it keeps --operator and --read-only across a
    switch of context (ctrl+o)."""
    early = before()
    return Overrides(dsn=early.dsn, operator=early.operator, read_only=early.read_only)


def refuse_if_read_only(what: str) -> None:
    why = read_only_why()
    if why is not None:
        cause = "--read-only was given" if why == "started with --read-only" else f"this session is read-only ({why})"
        raise ReadOnlySession(f"refused: {cause}, and {what} changes data. Nothing was sent to the database.")


def read_dsn_option(late: str | None) -> str | None:
    """The replica reads go to: the context's read_dsn, unless --dsn chose another database."""
    return settle(chosen_context(), Overrides(dsn=_merge("--dsn", before().dsn, late))).read_dsn


def connect_for_reading(dsn: str | None, *, replica: bool = True) -> Conn:
    """A connection with leasectl's limits on a compatible schema; read-only in the database
    (and as leasectl_auditor where the role may) when --read-only was given. On the context's
    replica (read_dsn) when it has one, unless `replica` is False: a read an action builds on, or
    a check that the primary answers, goes to the primary (a stale read there would only get the
    action refused by its guard, but it need not)."""
    where = (read_dsn_option(dsn) if replica else None) or dsn_option(dsn)
    try:
        return open_session(where, read_only=read_only_option(), check_schema=True)
    except DatabaseUnavailable as exc:
        raise _in_context(exc, where) from None


def _in_context(exc: DatabaseUnavailable, where: str) -> DatabaseUnavailable:
    """A database the context named does not answer: the hint points at the context's entry, not
    at --dsn and the environment, which were not where the DSN came from."""
    context = chosen_context()
    if context is None or where not in (context.dsn, context.read_dsn):
        return exc
    key = "read_dsn" if where == context.read_dsn and where != context.dsn else "dsn"
    return type(exc)(str(exc), hint=f"context {context.name}: check its {key} in {contexts_path()} "
                                    "(`leasectl contexts` says which contexts answer)")


def connect_for_acting(dsn: str | None, what: str) -> Conn:
    refuse_if_read_only(what)
    return connect_for_reading(dsn, replica=False)


def confirm(question: str) -> None:
    """Ask on stderr, read the answer from stdin. Anything but yes, or no answer at all, changes
    nothing and exits 2 (bad input: the question was not answered yes)."""
    try:
        answered = typer.confirm(question, default=False, err=True)
    except typer.Abort:  # end of input: nobody said yes
        answered = False
    if not answered:
        err.print("not confirmed: nothing changed (pass --yes to skip the question)")
        raise typer.Exit(EXIT_BAD_INPUT)


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def typed_confirmation(expected: str, what: str) -> None:
    """A confirmation sized to the blast radius: the operator types the count (or the words).
    It needs a terminal: with none, and no --yes, nothing changes (exit 2)."""
    if not stdin_is_terminal():
        err.print("no terminal to confirm on: nothing changed (pass --yes to act without the question)")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        typed = typer.prompt(f"Type '{expected}' to {what} (anything else changes nothing)", default="",
                             show_default=False, err=True)
    except typer.Abort:
        typed = ""
    if typed.strip() != expected:
        err.print("not confirmed: nothing changed")
        raise typer.Exit(EXIT_BAD_INPUT)


def answer(applied: bool, message: str, detail: str) -> None:
    """The database's answer to an action: applied (exit 0) or refused by its guard (exit 3)."""
    if applied:
        out.print(f"[bold green]applied:[/] {escape(message)}")
        out.print(f"[dim]{escape(detail)}[/]")
        return
    err.print(f"[bold red]refused:[/] {escape(message)}")
    err.print(f"[dim]{escape(detail)}[/]")
    raise typer.Exit(EXIT_REFUSED)


# ----------------------------------------------------------------------------- shared annotations

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", show_default=False,
                 help="PostgreSQL connection string; wins over the context's dsn (else the context's, "
                      "LEASECTL_DSN, DATABASE_URL, PG* variables); before or after the command"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (contract column names)")]
JobArgument = Annotated[str, typer.Argument(help="Call id, or a unique prefix of it", show_default=False)]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why (required; journaled with your name)",
                                           show_default=False)]  # required: an empty one is refused
OperatorOption = Annotated[str | None, typer.Option("--operator", help="Your name in the journal (default: the "
                                                                       "context's operator, else $USER); wins over "
                                                                       "the context's; before or after the command")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask; act on the state just read")]
