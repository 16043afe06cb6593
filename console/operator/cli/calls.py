"""Calls: list, show, history, and the three guarded actions (cancel, mark terminal, approve a retry)."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from console.db import actions, reads
from console.operator import present
from console.operator.cli.common import (
    DsnOption,
    JobArgument,
    JsonOption,
    OperatorOption,
    ReasonOption,
    YesOption,
    answer,
    app,
    confirm,
    connect_for_acting,
    connect_for_reading,
    err,
    friendly,
    operator_option,
    out,
    print_json,
)
from console.shared.errors import BadInput
from console.shared.filters import JobFilter
from console.shared.models import Action, Applied, TerminalState

TokenOption = Annotated[int | None, typer.Option("--token", min=0, help="The fencing token you saw: the "
                                                 "action is refused if it changed (no question asked)")]


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
    try:
        where = JobFilter(state=state, tool=tool, owner=owner, agent=agent, key_prefix=key, health=health)
    except ValidationError as exc:
        raise BadInput(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    with connect_for_reading(dsn) as conn:
        rows = reads.jobs(conn, where, limit=limit)
    if as_json:
        print_json([r.model_dump(mode="json") for r in rows])
        return
    out.print(present.jobs_table(rows))
    if not rows:
        err.print("no calls match")


@app.command()
@friendly
def show(job: JobArgument, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Everything about one call (payload included with --json)."""
    with connect_for_reading(dsn) as conn:
        job_id = reads.resolve(conn, job)
        found = reads.job_document(conn, job_id) if as_json else reads.job(conn, job_id)
    if found is None:  # deleted between the two reads
        raise BadInput(f"no call {job}")
    if as_json:
        print_json(found.model_dump(mode="json"))
        return
    out.print(present.job_panel(found))


@app.command()
@friendly
def history(job: JobArgument, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The ownership and state history of one call, with every operator action."""
    with connect_for_reading(dsn) as conn:
        job_id = reads.resolve(conn, job)
        events = reads.history(conn, job_id)
    if as_json:
        print_json([e.model_dump(mode="json") for e in events])
        return
    out.print(present.history_group(job_id, events))


def _act(action: Action, job: str, reason: str, token: int | None, operator: str | None, yes: bool,
         dsn: str | None, *, terminal_state: str | None = None, force: bool = False) -> None:
    if not reason.strip():
        raise BadInput("--reason must not be empty: it is journaled with the action")
    who = operator_option(operator)
    with connect_for_acting(dsn, f"{action.replace('_', '-')}") as conn:
        job_id = reads.resolve(conn, job)
        current = reads.job(conn, job_id)
        if current is None:
            raise BadInput(f"no call {job}")
        seen_token = current.fencing_token if token is None else token
        if token is None:
            err.print(present.describe_for_confirmation(current))
            if not yes:
                confirm(f"{present.action_verb(action, terminal_state)} this call (guard: state {current.state}, "
                        f"token {seen_token})?")
        result = actions.perform(conn, action, job_id, seen_state=current.state, seen_token=seen_token,
                                 operator=who, reason=reason, terminal_state=terminal_state, force=force)
    answer(isinstance(result, Applied), present.action_message(result), f"request {result.request_id}")


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
    if as_state not in TerminalState.__args__:  # type: ignore[attr-defined]
        raise BadInput(f"--as '{as_state}': use succeeded, failed or cancelled")
    _act("mark_terminal", job, reason, token, operator, yes, dsn, terminal_state=as_state, force=force)


@app.command("approve-retry")
@friendly
def approve_retry(job: JobArgument, reason: ReasonOption, token: TokenOption = None,
                  operator: OperatorOption = None, yes: YesOption = False, dsn: DsnOption = None) -> None:
    """Allow one more attempt of a call whose outcome is unknown (never by its own executor)."""
    _act("approve_retry", job, reason, token, operator, yes, dsn)
