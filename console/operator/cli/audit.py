"""`leasectl audit`: the auditor's tools. Read-only: every command works as a login role of
leasectl_auditor and under --read-only. TIME is ISO 8601 (without an offset: local time, and the
output says which zone it used) or an age (`90s`, `15m`, `2h`, `3d`: that long before the
database's clock). Exit codes as elsewhere (0 done, 1 anything else, 2 bad input), plus 4 when
`audit verify` finds a violation.

Once retention archived months of the history, every answer here keeps to console/core/history.py:
an answer that rests on archived events is refused (exit 1; with --json a JSON object with
`archived: true`, `archived_before` and `error`), and an answer given with no start covers the
online history only and says so on stderr."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from console.core.audit import ACTIONS, AUDIT_LIMITS, EXPORT_FORMATS, FLEET_EXPORT_KEYS, OUTCOMES
from console.core.filters import JobFilter
from console.core.history import Archived, HistoryStart, json_time
from console.core.models import JobSummary
from console.db import audit as audit_db
from console.db import reads
from console.db.connect import Conn
from console.db.lane import open_session
from console.operator import archive_history
from console.operator.cli.common import (
    DsnOption,
    JobArgument,
    JsonOption,
    app,
    dsn_option,
    err,
    friendly,
    out,
    print_json,
    read_dsn_option,
    show_rows,
)
from console.operator.files import BackgroundWriter, atomic_write, stdout_writer, writable_target
from console.operator.present import audit as words
from console.shared.errors import EXIT_VIOLATION, BadInput, LeasectlError
from console.shared.text import counted, sanitize
from console.shared.times import TIME_FORMS, Instant, check_range, parse_past, parse_time

audit_app = typer.Typer(name="audit", no_args_is_help=True, add_completion=False,
                        help="Read-only audit of the history: who held a call when, what operators did, the "
                             "whole history exported, and verified.")
app.add_typer(audit_app, name="audit")

TIME_HELP = f"TIME: {TIME_FORMS}"
SinceOption = Annotated[str | None, typer.Option("--since", help=f"From this time on ({TIME_HELP})",
                                                 show_default=False)]
UntilOption = Annotated[str | None, typer.Option("--until", help=f"Up to this time ({TIME_HELP})",
                                                 show_default=False)]


def connect_for_audit(dsn: str | None) -> Conn:
    """A reading session with the auditor's limits (0002 gives leasectl_auditor the same), read-only
    in the database, and as leasectl_auditor whenever the login is a member: a NOINHERIT member has
    the role's privileges only once it takes the role. The audit commands only read: on the context's
    replica (read_dsn) when it has one."""
    return open_session(read_dsn_option(dsn) or dsn_option(dsn), read_only=True, limits=AUDIT_LIMITS,
                        check_schema=True)


def _time(conn: Conn, text: str | None, what: str) -> Instant | None:
    return parse_time(text, now=audit_db.now(conn), what=what) if text is not None else None


def _since(conn: Conn, text: str | None) -> Instant | None:
    """The start of a range: not after the database's clock. The history holds nothing after now,
    so a range starting later is empty by construction, most likely a zone or a year mistyped."""
    return parse_past(text, now=audit_db.now(conn), what="--since") if text is not None else None


def _range(conn: Conn, since: str | None, until: str | None) -> tuple[Instant | None, Instant | None]:
    start, end = _since(conn, since), _time(conn, until, "--until")
    check_range(start, end)
    return start, end


def _job(conn: Conn, job: str | None) -> Any:
    return reads.resolve(conn, job) if job is not None else None


@contextmanager
def _archived(as_json: bool, *, answer_on_stdout: bool = False) -> Iterator[None]:
    """An answer that rests on archived history (console.core.history.Archived): with --json the
    refusal as a JSON object on stdout, then the message on stderr (friendly); `answer_on_stdout`:
    the words on stdout instead (`audit owner`, whose answer it is). Exit 1 either way."""
    try:
        yield
    except Archived as exc:
        if as_json:
            print_json(exc.record())
        elif answer_on_stdout:
            out.print(words.archived_answer(exc))
            raise typer.Exit(exc.exit_code) from None
        raise


def _online_part(start: HistoryStart, online_part: bool) -> None:
    """An answer given with no start once history was archived says what it covers (stderr)."""
    if online_part:
        err.print(f"[yellow]{words.online_part_note(start)}[/]")


def _zone_note(*instants: Instant | None) -> None:
    """Say which zone a time without an offset was read in (the output's times are UTC)."""
    for i in instants:
        if i is not None and i.zone.startswith("local"):
            err.print(f"[dim]'{sanitize(i.text, max_chars=60)}' read as {sanitize(i.zone)}: {i.at.isoformat()}[/]")


# ----------------------------------------------------------------------------- owner


@audit_app.command("owner")
@friendly
def owner_command(
    job: JobArgument,
    at: Annotated[str, typer.Option("--at", help=f"The instant ({TIME_HELP})", show_default=False)],
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """Who held the call's lease at that instant (from the history alone).

    With which token, from when until when, and how it ended. A renewal is not an ownership change;
    a lease that ran out is not held after it ran out; exactly at the claim it is held, exactly at
    the expiry it is not. When the call's history begins in the archive (retention removed its first
    events), the answer is "archived", never one from the rest of it (exit 1); --json carries
    archived_before (null when nothing was archived) in every answer."""
    with connect_for_audit(dsn) as conn:
        job_id = reads.resolve(conn, job)
        instant = parse_past(at, now=audit_db.now(conn), what="--at")
        with _archived(as_json, answer_on_stdout=True):
            answer, start = audit_db.owner_answer(conn, job_id, instant)
    if as_json:
        print_json({**answer.contract(), "archived_before": json_time(start.archived_before)})
        return
    _zone_note(instant)
    out.print(words.owner_group(answer, start))


# ----------------------------------------------------------------------------- actions


@audit_app.command("actions")
@friendly
def actions_command(
    operator: Annotated[str | None, typer.Option("--operator", help="Only this operator's actions",
                                                 show_default=False)] = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this call (an id or a unique prefix)",
                                            show_default=False)] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only calls of this agent, and shutdowns of "
                                              "the subtree it roots", show_default=False)] = None,
    action: Annotated[str | None, typer.Option("--action", help=" | ".join(ACTIONS), show_default=False)] = None,
    outcome: Annotated[str | None, typer.Option("--outcome", help=" | ".join(OUTCOMES), show_default=False)] = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first")] = 100,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """The operator journal across every call and every shutdown, newest first.

    Applied, refused and failed (a lock or statement timeout) cancels, mark-terminals, approvals,
    drains, aborts, and pauses and resumes of a tool. Filters combine. Each row names the database
    login that wrote it (db_role), and marks an operator name that is not that login's own."""
    if action is not None and action not in ACTIONS:
        raise BadInput(f"--action {sanitize(action, max_chars=40)}: use {', '.join(ACTIONS)}")
    if outcome is not None and outcome not in OUTCOMES:
        raise BadInput(f"--outcome {sanitize(outcome, max_chars=40)}: use {', '.join(OUTCOMES)}")
    with connect_for_audit(dsn) as conn:
        start, end = _range(conn, since, until)
        with _archived(as_json):
            history, online_part, rows = audit_db.actions_answer(
                conn, operator=operator, job_id=_job(conn, job), agent=agent, action=action, outcome=outcome,
                since=start.at if start else None, until=end.at if end else None, limit=limit)
    _online_part(history, online_part)
    if as_json:
        print_json([r.record() for r in rows])
        return
    _zone_note(start, end)
    out.print(words.actions_block(rows))
    if not rows:
        err.print("no operator action matches")


# ----------------------------------------------------------------------------- sign-ins


@audit_app.command("sign-ins")
@friendly
def sign_ins_command(
    person: Annotated[str | None, typer.Option("--person", help="Only attempts naming this person",
                                               show_default=False)] = None,
    outcome: Annotated[str | None, typer.Option("--outcome", help="signed_in | refused | rate_limited | signed_out "
                                                "| expired", show_default=False)] = None,
    since: SinceOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first")] = 100,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """The web console's sign-in journal (`leasectl serve`), newest first: every attempt, refused and
    rate-limited ones included, every sign-out and every session that expired, with the browser's
    address and the serve login that wrote it."""
    from console.db.web import OUTCOMES as SIGN_IN_OUTCOMES
    from console.db.web import sign_ins
    from console.operator.present.web import sign_ins_table

    if outcome is not None and outcome not in SIGN_IN_OUTCOMES:
        raise BadInput(f"--outcome {sanitize(outcome, max_chars=40)}: use {', '.join(SIGN_IN_OUTCOMES)}")
    with connect_for_audit(dsn) as conn:
        start = _since(conn, since)
        rows = sign_ins(conn, person=person, outcome=outcome, since=start.at if start else None, limit=limit)
    show_rows(rows, as_json=as_json, table=sign_ins_table,
              none="no sign-in matches (the web console, `leasectl serve`, journals every attempt here)")


# ----------------------------------------------------------------------------- export


def _target(output: str | None) -> Path | None:
    """The file to write (files.writable_target), checked before anything is read: bad input
    writes nothing. `-` is standard output."""
    if output is None or output == "-":
        return None
    return writable_target(output, what="--output")


class _Signals:
    """While an export runs, SIGTERM and SIGHUP (`timeout`, a closed terminal, a service stop) end
    it the way Ctrl-C does: through the handlers that remove the temporary file and say so.
    Without this the process died at once and left its .partial file behind. A signal the process
    inherited as ignored (nohup) stays ignored; once the file is complete (`finished`), a signal
    is ignored, so that the message never says 'nothing was written' of a file just renamed."""

    def __init__(self) -> None:
        self.finished = False
        self._previous: dict[signal.Signals, Any] = {}

    def _interrupt(self, signum: int, frame: object) -> None:
        if not self.finished:
            raise KeyboardInterrupt

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                current = signal.getsignal(sig)
                if current not in (signal.SIG_IGN, None):
                    self._previous[sig] = signal.signal(sig, self._interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _progress(to_file: bool) -> Progress | None:
    """A progress bar on a terminal (stderr) while writing to a file; nothing at all when stderr is
    not a terminal, nor when the rows themselves go to the terminal (the bar would mix into them)."""
    if not err.is_terminal or not to_file:
        return None
    return Progress(TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), TextColumn("events"),
                    TimeElapsedColumn(), console=err, transient=True)


def _reader_left(what: str, how_far: str) -> NoReturn:
    """The reader of stdout went away (`| head`): say so on stderr, exit 1; never a traceback."""
    _silence_stdout()
    err.print(f"[bold red]{what}[/]: the reader closed the pipe ({how_far}); the output is incomplete")
    raise typer.Exit(1) from None


def _silence_stdout() -> None:
    """The reader went away: later flushes of stdout (at exit) must not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


@audit_app.command("export")
@friendly
def export_command(
    since: SinceOption = None,
    until: UntilOption = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this call's events (an id or a unique prefix)",
                                            show_default=False)] = None,
    fmt: Annotated[str, typer.Option("--format", help="jsonl (typed, one object a line) or csv (with a "
                                                      "header; details as JSON text)")] = "jsonl",
    output: Annotated[str | None, typer.Option("--output", help="Write to this file (under a temporary name, "
                                                "renamed when complete); default: standard output",
                                                show_default=False)] = None,
    fleet: Annotated[bool, typer.Option("--fleet", help="The fleet journal instead (fleet_events: drains, "
                                        "aborts, refusals, state changes, grants revoked), keys "
                                        + ", ".join(FLEET_EXPORT_KEYS))] = False,
    # db_role is in every export now; the flag stays accepted so that scripts that pass it still run
    with_db_role: Annotated[bool, typer.Option("--with-db-role", hidden=True)] = False,
    dsn: DsnOption = None,
) -> None:
    """Every job_events row in the range, oldest first (typed JSONL or CSV).

    Keys id, job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to,
    lease_until, details, then reason, request_id and db_role (the database login that wrote the
    row). With --fleet: every fleet_events row instead (drains, aborts and the rest of the fleet
    journal). Streamed in bounded memory; an interrupted export says so, exits non-zero, and never
    leaves a partial file."""
    if fmt not in EXPORT_FORMATS:
        raise BadInput(f"--format {sanitize(fmt, max_chars=20)}: use jsonl or csv")
    if fleet and job is not None:
        raise BadInput("--job selects a call's events; the fleet journal (--fleet) belongs to no call",
                       hint="leave out --job, or --fleet; `leasectl audit actions --agent A` lists a subtree's "
                            "drains and aborts")
    path = _target(output)
    done = [0]
    bar = _progress(path is not None)
    task: TaskID | None = None

    def progress(count: int, total: int | None) -> None:
        done[0] = count
        if bar is not None and task is not None:
            bar.update(task, completed=count, total=total)

    with connect_for_audit(dsn) as conn:
        start, end = _range(conn, since, until)
        arguments: dict[str, Any] = dict(fmt=fmt, since=start.at if start else None, until=end.at if end else None,
                                         on_progress=progress)
        if not fleet:  # the fleet's journal is never archived
            arguments["job_id"] = _job(conn, job)
            # refused before anything is opened or written; the export holds its own snapshot to it too
            history, online_part = audit_db.range_rule(conn, arguments["since"], arguments["until"],
                                                       job_id=arguments["job_id"])
            _online_part(history, online_part)
        write = audit_db.export_fleet if fleet else audit_db.export
        _zone_note(start, end)
        try:
            with _Signals() as signals, bar if bar is not None else nullcontext():
                if bar is not None:
                    task = bar.add_task("export", total=None)
                if path is not None:
                    with atomic_write(path, newline="") as handle:
                        summary = write(conn, handle, **arguments)
                else:
                    summary = write(conn, stdout_writer(), for_terminal=sys.stdout.isatty(), **arguments)
                signals.finished = True
        except KeyboardInterrupt:
            where = (f"nothing was written to {sanitize(str(path))} (no partial file)" if path is not None
                     else "the output above is incomplete")
            err.print(f"[bold red]interrupted[/] after {counted(done[0], 'event')}: {where}")
            raise typer.Exit(1) from None
        except BrokenPipeError:
            # counted per batch: the reader may have had part of the next one too
            _reader_left("export stopped", f"{counted(done[0], 'event')} had been written in full before it")
        except OSError as exc:  # a full disk, a file system that refuses the name: nothing is left behind
            where = (f"nothing was written to {sanitize(str(path), max_chars=200)} (no partial file)"
                     if path is not None else "the output is incomplete")
            if path is None:
                _silence_stdout()
            raise LeasectlError(f"export stopped after {counted(done[0], 'event')}: {exc.strerror or exc}; {where}") \
                from None
    if path is not None or err.is_terminal:
        span = (f", {words.when(summary['first_at'])} .. {words.when(summary['last_at'])}"
                if summary["events"] else "")
        target = sanitize(str(path)) if path is not None else "standard output"
        what = "fleet event" if fleet else "event"
        err.print(f"wrote {counted(summary['events'], what)} to {target} ({fmt}, oldest first{span})")


# ----------------------------------------------------------------------------- verify


@audit_app.command("verify")
@friendly
def verify_command(
    since: SinceOption = None,
    archive: Annotated[str | None, typer.Option("--archive", help="The directory `leasectl admin retention` "
                                                "wrote: every archived month checked against what the database "
                                                "registered, and replayed with the online history",
                                                show_default=False)] = None,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """Replay each call's history and check the protocol held (exit 4 on a violation).

    Leases never overlapped (two owners at one instant), tokens never fell, a finished call finished
    once, every ownership change has its event, and no worker login wrote what only the database, an
    operator or another name may (each event's db_role against its kind). Exit 0 when all hold, 4
    when any violation is found (each listed with the call, the events and why).

    Once history was archived: with --archive DIR, every month the database registered is checked
    against the directory (its manifest entry as registered, its file's sha256, rows and ids, each
    row inside its month: any mismatch is a violation) and each call is replayed with its archived
    events before its online ones. Without it, a call whose history begins in the archive is not
    replayed (counted, never a violation)."""
    with connect_for_audit(dsn) as conn:
        start = _since(conn, since)
        with _archived(as_json):
            if archive is None:
                report = audit_db.verify(conn, since=start.at if start else None)
            else:
                with archive_history.prepared(archive, audit_db.archived_months(conn)) as check:
                    report = audit_db.verify(conn, since=start.at if start else None, archive=check.feed)
                report = archive_history.with_archive(report, check)
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        _zone_note(start)
        out.print(words.verify_words(report))
    if not report.ok:
        raise typer.Exit(EXIT_VIOLATION)


# ----------------------------------------------------------------------------- jobs --at


def jobs_as_of(dsn: str | None, at: str, where: JobFilter, limit: int, *, as_json: bool) -> list[JobSummary] | None:
    """`leasectl jobs --at TIME`: every call as it was then, from the history only (same keys as
    `jobs --json`, plus as_of), with the auditor's session. With --json the calls are written here
    as the server builds them, streamed (None is returned); else they come back as models for the
    table. The past is said plainly, on stderr (stdout stays the rows)."""
    with connect_for_audit(dsn) as conn:
        instant = parse_past(at, now=audit_db.now(conn), what="--at")
        with _archived(as_json):
            start = audit_db.past_start(conn, instant.at)
        if as_json:
            _write_past(conn, instant, where, limit, start)
            rows = None
        else:
            rows = list[JobSummary](audit_db.jobs_at(conn, instant.at, where, limit, start=start))
    err.print(f"[bold]as it was at {words.instant_words(instant.at, instant.zone)}[/] — rebuilt from the history "
              "(heartbeats are not journaled: no heartbeat ages; the lease as the next event found it)")
    if start.archived_before is not None:
        err.print(f"[yellow]{words.past_note(start)}[/]")
    return rows


def _write_past(conn: Conn, instant: Instant, where: JobFilter, limit: int, start: HistoryStart) -> None:
    """The calls at `instant` to standard output as they stream; an interrupted or cut stream says
    so and exits 1 (the list on stdout is then incomplete: its closing bracket is missing). The
    counts said are of calls written in full (BackgroundWriter.done)."""
    writer = BackgroundWriter(stdout_writer(), depth=4)  # two batches, each with its mark
    try:
        with _Signals() as signals:
            audit_db.write_jobs_at(conn, writer, instant.at, where, limit, on_progress=writer.mark, start=start)
            writer.close()
            signals.finished = True
    except KeyboardInterrupt:
        writer.abandon()
        err.print(f"[bold red]interrupted[/] after {counted(writer.done, 'call')} written in full: the list above is "
                  "incomplete")
        raise typer.Exit(1) from None
    except BrokenPipeError:
        writer.abandon()
        _reader_left("stopped", f"{counted(writer.done, 'call')} had been written in full before it")
    except (LeasectlError, OSError) as exc:  # the database went away, a full disk: said, then as always
        writer.abandon()
        if writer.done:
            err.print(f"[bold red]stopped[/] after {counted(writer.done, 'call')} written in full: the list above is "
                      "incomplete")
        if isinstance(exc, OSError):
            raise LeasectlError(f"writing the calls failed: {exc.strerror or exc}") from None
        raise
