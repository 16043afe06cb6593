"""`leasectl bulk`: bulk operations (migration 0023) -- a bulk action over more than 1,000 calls, or
one started with --background, worked in batches here or by the supervisor.

  leasectl bulk status [ID] [--json]       every operation (the live ones first), or one with the
                                           calls it did not apply
  leasectl bulk stop ID --reason R         the batches in flight finish, no other begins (journaled)
  leasectl bulk resume ID                  work a running operation here, in the foreground

Starting one is `leasectl cancel|mark-terminal|approve-retry --where FILTER` (console/operator/cli/
calls.py), which asks first as any bulk action does (the plan's counts by class and state, and the
count typed); `work_here` is the foreground worker both use.

Exit codes: 0 done (every call applied, or the list/stop answered), 2 bad input (no such operation,
a bad id), 3 refused or not all applied (some call refused, failed or skipped; stopped before the
end; a stop of an operation that is over), 1 anything else.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from console.core.bulk import BulkOperation, operation_document
from console.db import bulk
from console.db.connect import Conn
from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    OperatorOption,
    ReasonOption,
    app,
    connect_for_acting,
    connect_for_reading,
    err,
    friendly,
    operator_option,
    out,
    print_json,
)
from console.operator.present import bulk as words
from console.shared.errors import EXIT_REFUSED, BadInput, DatabaseUnavailable, LeasectlError

bulk_app = typer.Typer(name="bulk", add_completion=False, no_args_is_help=False,
                       help="Bulk operations (an action over more than 1,000 calls, or --background): their "
                            "progress; stop or resume one.")
app.add_typer(bulk_app)

OperationArgument = Annotated[str, typer.Argument(help="The operation's id, or a unique prefix of it",
                                                  show_default=False)]
OptionalOperation = Annotated[str | None, typer.Argument(help="An operation's id (or a unique prefix): that one, "
                                                              "with the calls it did not apply", show_default=False)]

# a foreground worker says how far it got at least this often on a pipe (a terminal has its bar)
_LINE_EVERY = 0.1


def worker_name(operator: str) -> str:
    """Who worked a batch, as the operation records it."""
    return f"cli:{operator}@{socket.gethostname()}:{os.getpid()}"


@bulk_app.callback(invoke_without_command=True)
def _bulk(ctx: typer.Context) -> None:
    """Bulk operations: `bulk status [ID]`, `bulk stop ID --reason R`, `bulk resume ID`."""
    if ctx.invoked_subcommand is None:
        friendly(status)(None, as_json=False, limit=50, dsn=None)


@bulk_app.command()
@friendly
def status(operation: OptionalOperation = None, as_json: JsonOption = False,
           limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many operations (the live ones "
                                              "first, then the newest); with ID, this many calls not applied")] = 50,
           dsn: DsnOption = None) -> None:
    """Every bulk operation, or one (ID) with its progress and the calls it did not apply.

    The list: running and stopping first, then the newest. One: what it does, its state, done of
    total, applied / refused / failed / skipped, who started it and who stopped it, the last error
    a worker met, and the calls not applied (refused, failed, skipped) with why."""
    with connect_for_reading(dsn, replica=False) as conn:
        if operation is None:
            found = bulk.operations(conn, limit=limit)
            if as_json:
                print_json([operation_document(op) for op in found])
            elif not found:
                err.print("no bulk operation was ever started (a bulk action over more than 1,000 calls, or one "
                          "with --background, starts one)")
            else:
                out.print(words.operations_table(found))
            return
        op = _one(conn, operation)
        calls = bulk.not_applied(conn, op.id, limit=limit)
    if as_json:
        print_json(operation_document(op, calls))
        return
    out.print(words.operation_panel(op, calls, limit=limit))


def _one(conn: Conn, ref: str) -> BulkOperation:
    found = bulk.operation(conn, bulk.resolve(conn, ref))
    if found is None:  # gone between the two reads
        raise BadInput(f"no bulk operation {ref}")
    return found


@bulk_app.command()
@friendly
def stop(operation: OperationArgument, reason: ReasonOption, operator: OperatorOption = None,
         dsn: DsnOption = None) -> None:
    """Stop a running bulk operation (journaled with your name and reason).

    The batches in flight finish (their calls are settled), no other begins, the calls not reached
    are never sent; nothing applied is undone. Stopping one that is over is refused (exit 3)."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "bulk stop") as conn:
        op = _one(conn, operation)
        stopped, now = bulk.stop(conn, op.id, operator=who, reason=reason)
    if stopped:
        out.print(words.operation_panel(now))
        out.print("[bold green]stopped[/]" if now.state == "stopped" else
                  "[bold yellow]stopping:[/] a batch in flight finishes first; `leasectl bulk status "
                  f"{now.short_id}` shows it stopped")
        return
    if now.state == "stopping":
        out.print(f"already stopping (asked by {now.stop_requested_by}): the batches in flight finish, no other begins")
        return
    err.print(f"[bold red]refused:[/] operation {now.short_id} is {now.state}: there is nothing to stop "
              "(journaled as bulk_stop_refused)")
    raise typer.Exit(EXIT_REFUSED)


@bulk_app.command()
@friendly
def resume(operation: OperationArgument, operator: OperatorOption = None, dsn: DsnOption = None) -> None:
    """Work a running bulk operation here, in the foreground, with its progress.

    After its CLI was stopped or killed, or beside another worker (the supervisor): no call is ever
    sent twice. It was confirmed when it was started: nothing is asked. Exit 0 when every call was
    applied, 3 otherwise."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "bulk resume") as conn:
        op = _one(conn, operation)
        if op.state != "running":
            err.print(words.operation_panel(op))
            err.print(f"[bold red]refused:[/] operation {op.short_id} is {op.state}: only a running operation is "
                      "resumed")
            raise typer.Exit(EXIT_REFUSED)
        err.print(words.state_words(op))
        ended = work_here(conn, op, who)
    finish(ended)


def work_here(conn: Conn, op: BulkOperation, operator: str) -> BulkOperation:
    """Work the operation in this process until it is over (or stopped): a bar on a terminal, a
    line now and then on a pipe. ctrl-c leaves it running for `bulk resume` or the supervisor."""
    worker = worker_name(operator)
    shown = [op.done, op.state]

    def line(now: BulkOperation) -> None:
        if [now.done, now.state] == shown:
            return
        if now.state != shown[1] or now.done - int(shown[0]) >= max(1, int(now.total * _LINE_EVERY)):
            shown[:] = [now.done, now.state]
            err.print(words.progress_line(now))

    try:
        if err.is_terminal:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), console=err) as bar:
                task = bar.add_task(f"{op.action} {op.short_id}", total=op.total, completed=op.done,
                                    counts=_counts(op))

                def moved(now: BulkOperation) -> None:
                    bar.update(task, completed=now.done, counts=_counts(now))

                return bulk.work(conn, op.id, worker=worker, progress=moved)
        return bulk.work(conn, op.id, worker=worker, progress=line)
    except KeyboardInterrupt:
        err.print(f"[bold yellow]interrupted:[/] operation {op.short_id} is still running — `leasectl bulk resume "
                  f"{op.short_id}` carries on here; a supervisor takes it over after "
                  f"{bulk.WORKER_IDLE_SECONDS:.0f} s without progress; `leasectl bulk stop {op.short_id}` stops it. "
                  "The batch in flight was not committed: none of its calls was acted on.")
        raise typer.Exit(130) from None
    except LeasectlError as exc:
        if not isinstance(exc, DatabaseUnavailable):
            _note(conn, op.id, str(exc), worker)
        raise


def _counts(op: BulkOperation) -> str:
    return f"{op.applied:,} applied, {op.refused:,} refused, {op.failed:,} failed"


def _note(conn: Conn, operation_id: uuid.UUID, error: str, worker: str) -> None:
    try:
        bulk.note_error(conn, operation_id, error, worker=worker)
    except LeasectlError:  # the error itself is what the operator hears
        pass


def finish(op: BulkOperation) -> None:
    """The answer of a foreground run: exit 0 when every call was applied, 3 otherwise."""
    out.print(words.ended_words(op))
    if op.not_applied:
        out.print(f"`leasectl bulk status {op.short_id}` lists the calls not applied and why")
    if not op.all_applied:
        raise typer.Exit(EXIT_REFUSED)
