"""Calls: list, show, history, and the guarded actions (console/core/actions.py: cancel, mark
terminal, approve a retry), a command each."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from console.core.actions import ACTIONS, ActionSpec, action_named
from console.core.filters import filter_from_options, grammar, parse_selection
from console.core.models import TERMINAL_STATES, Applied
from console.db import actions, bulk, reads
from console.db.connect import Conn
from console.operator import present
from console.operator.cli.bulk import finish, work_here
from console.operator.cli.common import (
    DsnOption,
    JobArgument,
    JsonOption,
    OperatorOption,
    ReasonOption,
    YesOption,
    answer,
    app,
    chosen_context,
    confirm,
    connect_for_acting,
    connect_for_reading,
    err,
    friendly,
    operator_option,
    out,
    print_json,
    show_rows,
    typed_confirmation,
)
from console.operator.present import bulk as present_bulk
from console.shared.contexts import trace_link
from console.shared.errors import EXIT_REFUSED, BadInput
from console.shared.text import sanitize

TokenOption = Annotated[int | None, typer.Option("--token", min=0, help="The fencing token you saw: the "
                                                 "action is refused if it changed (no question asked)")]
OptionalJob = Annotated[str | None, typer.Argument(help="Call id, or a unique prefix of it (or use --where)",
                                                   show_default=False)]
WhereOption = Annotated[str | None, typer.Option("--where", help="Every call this filter selects, e.g. "
                                                 "'state:running tool:web_search health:zombie' (over 1,000 calls: "
                                                 "a bulk operation, worked in batches, resumable; `leasectl bulk`)",
                                                 show_default=False)]
BackgroundOption = Annotated[bool, typer.Option("--background", help="With --where: start a bulk operation the "
                                                "supervisor works (whatever the count) and return; `leasectl bulk "
                                                "status ID` follows it")]


T = TypeVar("T")

TABLE_LIMIT = 10_000  # calls a list holds in memory (models, a table)
STREAMED_LIMIT = 1_000_000  # calls `jobs --at --json` writes as the server builds them


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
    limit: Annotated[int, typer.Option(min=1, max=STREAMED_LIMIT, help="At most this many calls, newest first "
                                       f"(up to {TABLE_LIMIT:,}; with --at and --json, which stream, up to "
                                       f"{STREAMED_LIMIT:,})")] = 50,
    at: Annotated[str | None, typer.Option("--at", show_default=False, help="Every call as it was at this "
                                           "instant (ISO 8601, or an age: 2h), rebuilt from the history; "
                                           "--state, --owner and --health then mean then")] = None,
    where: Annotated[str | None, typer.Option("--where", show_default=False,
                                              help="The console's filter, e.g. 'state:running class:unverifiable "
                                                   "model:gpt-5.1 id:8f1b' (every key of `/`; with the options "
                                                   "above, calls that match both)")] = None,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """List calls, newest first (with --at, as they were at that instant)."""
    chosen = filter_from_options({"--state": state, "--tool": tool, "--owner": owner, "--agent": agent,
                                  "--key": key, "--health": health})
    if where is not None:
        # the grammar of `/` and of bulk --where, parsed once (core/filters.py); an empty --where is bad
        # input here too: an unset variable must not list every call without a word
        chosen = parse_selection(where, option="--where").merged(chosen)
        if chosen.at is not None:
            if at is not None and at != chosen.at:
                raise BadInput(f"--at {at} and at:{chosen.at} in --where say two instants: give one")
            at, chosen = chosen.at, chosen.now()
    if limit > TABLE_LIMIT and not (at is not None and as_json):
        raise BadInput(f"--limit {limit:,}: at most {TABLE_LIMIT:,} (only `--at ... --json` streams its rows, "
                       f"up to {STREAMED_LIMIT:,})")
    if at is not None:
        from console.operator.cli.audit import jobs_as_of  # the auditor's past

        rows = jobs_as_of(dsn, at, chosen, limit, as_json=as_json)
        if rows is None:  # written as they were read
            return
    else:
        with connect_for_reading(dsn) as conn:
            rows = reads.jobs(conn, chosen, limit=limit)
    show_rows(rows, as_json=as_json, table=present.jobs_table, none="no calls match")


def _of_one_call(job: str, dsn: str | None, read: Callable[[Conn, uuid.UUID], T]) -> tuple[uuid.UUID, T]:
    """The call JOB names (an id or a unique prefix), and what `read` finds of it on the same connection."""
    with connect_for_reading(dsn) as conn:
        job_id = reads.resolve(conn, job)
        return job_id, read(conn, job_id)


@app.command()
@friendly
def show(job: JobArgument, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Everything about one call (payload included with --json)."""
    _, found = _of_one_call(job, dsn, reads.job_document if as_json else reads.job)
    if found is None:  # deleted between the two reads
        raise BadInput(f"no call {job}")
    # the context's trace_url makes the call's trace a link (null without a template or a trace)
    context = chosen_context()
    template = context.trace_url if context is not None else None
    if as_json:
        print_json({**found.model_dump(mode="json"), "trace_url": trace_link(template, found.trace_id)})
        return
    out.print(present.job_panel(found, trace_url=template))


@app.command()
@friendly
def history(job: JobArgument, as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """The ownership and state history of one call, with every operator action."""
    job_id, (events, archived_before) = _of_one_call(job, dsn, reads.history_and_start)
    if archived_before is not None:  # the JSON keeps its shape: said on stderr, before the rows
        err.print(present.archived_history_note(archived_before))
    if as_json:
        print_json([e.model_dump(mode="json") for e in events])
        return
    out.print(present.history_group(job_id, events))


def _act(action: str, job: str | None, where: str | None, reason: str, token: int | None, operator: str | None,
         yes: bool, dsn: str | None, chain: bool = False, background: bool = False, **choices: object) -> None:
    spec = action_named(action)
    if chain:
        if job is None or where is not None or token is not None:
            raise BadInput("--chain takes one call (JOB): the action then goes to every unfinished call of its "
                           "chain, without --where or --token")
        with connect_for_acting(dsn, spec.command) as conn:
            current = reads.job(conn, reads.resolve(conn, job))
        if current is None:
            raise BadInput(f"no call {job}")
        where = f"chain:{current.chain_id}"
        job = None
    if not reason.strip():
        raise BadInput("--reason must not be empty: it is journaled with the action")
    if job is not None and where is not None:
        raise BadInput("give one call (JOB) or --where FILTER, not both")
    if job is None and where is None:
        raise BadInput("give the call (JOB, an id or a unique prefix) or --where FILTER for every call it selects",
                       hint=grammar())
    if where is not None:
        if token is not None:
            raise BadInput("--token guards one call; with --where each call is guarded by the token read for it")
        _bulk(spec, where, reason, operator, yes, dsn, background=background, **choices)
        return
    if background:
        raise BadInput("--background starts a bulk operation: it goes with --where FILTER (or --chain)")
    assert job is not None
    who = operator_option(operator)
    with connect_for_acting(dsn, spec.command) as conn:
        job_id = reads.resolve(conn, job)
        current = reads.job(conn, job_id)
        if current is None:
            raise BadInput(f"no call {job}")
        seen_token = current.fencing_token if token is None else token
        if token is None:
            err.print(present.describe_for_confirmation(current))
            if not yes:
                confirm(f"{present.action_verb(spec.name, **choices)} this call "
                        f"({present.guard_of(spec.name).short(current.state, seen_token)})?")
        result = actions.perform(conn, spec.name, job_id, seen_state=current.state, seen_token=seen_token,
                                 operator=who, reason=reason, **choices)
    answer(isinstance(result, Applied), present.action_message(result), f"request {result.request_id}")


def _bulk(spec: ActionSpec, where: str, reason: str, operator: str | None, yes: bool, dsn: str | None,
          background: bool = False, **choices: object) -> None:
    """Every call the filter selects, each guarded by the state and token read for it in one
    snapshot; the count typed to confirm. Up to 1,000 calls they are sent at once; over 1,000 (or
    with --background) the plan becomes a bulk operation (console/operator/cli/bulk.py), worked here
    in batches with its progress, or by the supervisor with --background. Exit 0 when every call was
    applied (or the operation was started in the background), 3 when any was refused, failed or
    skipped (the summary says which), 2 for a bad filter or more calls than an operation takes."""
    selected = parse_selection(where)
    who = operator_option(operator)
    actions.checked_words(reason, who)
    with connect_for_acting(dsn, spec.command) as conn:
        plan = bulk.plan(spec.name, bulk.selection(conn, where=selected), **choices)
        if not plan.send and not plan.skipped:
            err.print(f"no call matches {sanitize(selected.describe(), max_chars=200)}: nothing to do")
            return
        err.print(present_bulk.plan_words(plan))
        if not plan.send:
            err.print("nothing to send: every selected call was skipped (see why above)")
            raise typer.Exit(EXIT_REFUSED)
        as_operation = background or plan.is_operation
        if as_operation:
            err.print(present_bulk.operation_question(plan))
        if not yes:
            typed_confirmation(present_bulk.confirmation(plan), present_bulk.question(plan))
        if as_operation:
            op = bulk.start(conn, plan, operator=who, reason=reason, filter_text=where, background=background)
            err.print(present_bulk.started_words(op, here=not background))
            if background:
                return
            ended = work_here(conn, op, who)
            finish(ended)
            return
        result = bulk.apply(conn, plan, operator=who, reason=reason)
    out.print(present_bulk.result_table(result))
    out.print(present_bulk.result_words(result))
    if not result.all_applied:
        raise typer.Exit(EXIT_REFUSED)


# ----------------------------------------------------------------------------- one command per action
# Generated from console.core.actions.ACTIONS: `leasectl <command> [JOB] --reason R [its choices]
# [--where F] [--token N] [--operator O] [--yes] [--dsn D]`, its help from its words.

AsOption = Annotated[str, typer.Option("--as", help="succeeded, failed or cancelled", show_default=False)]
ChainOption = Annotated[bool, typer.Option("--chain", help="Every unfinished call of JOB's chain (its earlier "
                                                           "and later stages), asked like --where")]
ForceOption = Annotated[bool, typer.Option("--force", help="Even if the owner holds a live lease: fences it "
                                                           "out (its heartbeat and result are rejected)")]


def _checked_as(value: object) -> object:
    if value not in TERMINAL_STATES:
        raise BadInput(f"--as '{value}': use succeeded, failed or cancelled" if value
                       else "--as is required: succeeded, failed or cancelled")
    return value


# each choice an action may take (console.core.actions.CHOICES): its option's parameter, annotation,
# default, and the check of what was typed
CHOICE_OPTIONS: dict[str, tuple[str, Any, object, Any]] = {
    "terminal_state": ("as_state", AsOption, "", _checked_as),
    "force": ("force", ForceOption, False, bool),
}
BEFORE_CHOICES = (("job", OptionalJob, None), ("reason", ReasonOption, ""))
AFTER_CHOICES = (("where", WhereOption, None), ("background", BackgroundOption, False), ("token", TokenOption, None),
                 ("operator", OperatorOption, None), ("yes", YesOption, False), ("dsn", DsnOption, None))


def action_command(spec: ActionSpec) -> Any:
    """The command of one action: the common options around its own choices' (typer reads the
    signature set here as it reads a written one)."""

    def command(**given: Any) -> None:
        choices = {}
        for choice in spec.params:
            parameter, _annotation, _default, check = CHOICE_OPTIONS[choice]
            choices[choice] = check(given.pop(parameter))
        _act(spec.name, given["job"], given["where"], given["reason"], given["token"], given["operator"],
             given["yes"], given["dsn"], chain=given.get("chain", False), background=given["background"], **choices)

    own = tuple(CHOICE_OPTIONS[choice][:3] for choice in spec.params)
    if spec.reaches_chain:
        own += (("chain", ChainOption, False),)
    parameters = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation,
                                    default=default)
                  for name, annotation, default in (*BEFORE_CHOICES, *own, *AFTER_CHOICES)]
    command.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    command.__name__ = command.__qualname__ = spec.name
    command.__doc__ = present.words_of(spec.name).command_help
    return friendly(command)


for _spec in ACTIONS.values():
    app.command(_spec.command)(action_command(_spec))
