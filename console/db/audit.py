"""What the auditor reads: ownership at an instant, the operator journal, the whole history exported
or verified, every call as it was at an instant. Read-only, from the history alone (the rules are
console.core.audit's); the SQL is queries/audit/. Once retention archived months of the history,
every answer here asks console.core.history first whether it rests on archived events: it is then
refused (Archived), never given from the part that is left; verify replays such calls only with
the archived events handed in (ArchiveFeed: the files are read by the operator's side, not here).

Exports and verify stream through a server-side (named) cursor inside one read-only snapshot: the
client holds one batch of rows at a time, whatever the range, and each FETCH is a short statement.
"""

from __future__ import annotations

import csv
import heapq
import json
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from datetime import datetime
from itertools import groupby, islice
from operator import itemgetter
from typing import Any, Literal, Protocol, cast

import psycopg
from psycopg.rows import RowFactory, dict_row, tuple_row

from console.core.audit import (
    EXPORT_KEYS,
    FLEET_EXPORT_KEYS,
    AuditFilter,
    AuditPage,
    JobAsOf,
    LoginCount,
    OperatorAction,
    VerifyReport,
    login_violation,
)
from console.core.filters import JobFilter
from console.core.history import (
    AliveAcross,
    Archived,
    ArchivedEvent,
    ArchivedMonth,
    ArchiveFeed,
    HistoryStart,
    call_archived,
    check_call,
    check_past,
    check_verify_since,
    json_time,
    range_online_part,
)
from console.core.models import Event
from console.core.ownership import CallReplay, OwnerAt, Step, Violation, owner_at
from console.db import sql
from console.db.connect import Conn, lines_as, run, run_one, translate_error
from console.db.pooler import set_up_transaction
from console.db.reads import db_info, history, payload_access, payload_search, resolve
from console.shared.errors import BadInput, LeasectlError
from console.shared.text import sanitize, terminal_safe
from console.shared.times import Instant

EXPORT_CURSOR = "leasectl_audit_export"
VERIFY_CURSOR = "leasectl_audit_verify"
ROWS_CURSOR = "leasectl_audit_verify_rows"
BATCH = 2_000  # rows per FETCH: the most the client holds at once
Progress = Callable[[int, int | None], None]


def now(conn: Conn) -> datetime:
    """The database's (display) clock: what an age such as `2h` is measured back from."""
    return db_info(conn).db_now


# ----------------------------------------------------------------------------- where the online history begins


def history_start(conn: Conn) -> HistoryStart:
    """Where the online history begins (archived_before; None when nothing was archived) and what
    the archive holds before it."""
    row = run_one(conn, "audit/history_start")
    return HistoryStart.model_validate(row) if row is not None else HistoryStart()


def archived_months(conn: Conn) -> list[ArchivedMonth]:
    """Every month retention archived, oldest first, as the database registered it."""
    return [ArchivedMonth.model_validate(r) for r in run(conn, "audit/archived_months")]


def whole_call(conn: Conn, start: HistoryStart, job_id: uuid.UUID) -> bool:
    """Whether nothing of the call's history is archived (console.core.history.call_archived)."""
    if not start.archived:
        return True
    call = run_one(conn, "audit/call_start", job_id=job_id)
    return call is not None and not call_archived(start, call["created_at"], call["first_kind"])


def range_rule(conn: Conn, since: datetime | None, until: datetime | None, *, job_id: uuid.UUID | None = None,
               since_name: str = "--since", until_name: str = "--until") -> tuple[HistoryStart, bool]:
    """A range of the history (of one call when job_id is given) held to the rule: Archived when it
    reaches before the online history; else where the history begins and whether the answer is
    the online part only (no start given, something archived: the caller says so)."""
    start = history_start(conn)
    whole = job_id is not None and whole_call(conn, start, job_id)
    return start, range_online_part(start, since, until, whole_call=whole, since_name=since_name,
                                    until_name=until_name)


# ----------------------------------------------------------------------------- owner


def owner(conn: Conn, job_id: uuid.UUID, at: Instant, *, start: HistoryStart | None = None) -> OwnerAt:
    """Who held the call's lease at `at`, from its history alone (one snapshot of it). Archived
    when part of the call's history is archived: never answered from the rest."""
    start = start if start is not None else history_start(conn)
    if start.archived:
        call = run_one(conn, "audit/call_start", job_id=job_id)
        check_call(start, job_id, call["created_at"] if call else None, call["first_kind"] if call else None, at.at)
    return owner_at(job_id, history(conn, job_id), at)


def owner_answer(conn: Conn, job_id: uuid.UUID, at: Instant) -> tuple[OwnerAt, HistoryStart]:
    """`leasectl audit owner`: the answer and where the online history begins, in one snapshot."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        start = history_start(conn)
        return owner(conn, job_id, at, start=start), start


# ----------------------------------------------------------------------------- the operator journal


def operator_actions(conn: Conn, *, operator: str | None = None, job_id: uuid.UUID | None = None,
                     agent: str | None = None, action: str | None = None, outcome: str | None = None,
                     since: datetime | None = None, until: datetime | None = None,
                     limit: int = 100) -> list[OperatorAction]:
    """Every operator action across calls and shutdowns, newest first; filters combine."""
    rows = run(conn, "audit/operator_actions", operator=operator, job_id=job_id, agent=agent, action=action,
               outcome=outcome, since=since, until=until, limit=limit)
    return [OperatorAction.model_validate(r) for r in rows]


def actions_answer(conn: Conn, *, operator: str | None = None, job_id: uuid.UUID | None = None,
                   agent: str | None = None, action: str | None = None, outcome: str | None = None,
                   since: datetime | None = None, until: datetime | None = None,
                   limit: int = 100) -> tuple[HistoryStart, bool, list[OperatorAction]]:
    """`leasectl audit actions`: the range held to the rule of an archived range (Archived when it
    reaches before the online history), then the journal, in one snapshot; with where the online
    history begins and whether the answer is its online part only (no --since)."""
    with conn.transaction():
        run(conn, "meta/snapshot")
        start, online_part = range_rule(conn, since, until, job_id=job_id)
        return start, online_part, operator_actions(conn, operator=operator, job_id=job_id, agent=agent,
                                                    action=action, outcome=outcome, since=since, until=until,
                                                    limit=limit)


# ----------------------------------------------------------------------------- the Audit screen


def events_page(conn: Conn, f: AuditFilter, *, job_id: uuid.UUID | None = None, before_id: int | None = None,
                limit: int = 200) -> list[Event]:
    """One keyset page of events across calls, newest first (the screen's `[` `]`)."""
    rows = run(conn, "audit/events_page", job_id=job_id, owner=f.owner, operator=f.operator, kind=f.kind,
               since=f.since, until=f.upto, before_id=before_id, limit=limit)
    return [Event.model_validate(r) for r in rows]


def screen_page(conn: Conn, f: AuditFilter, *, view: str = "events", before_id: int | None = None,
                limit: int = 200) -> AuditPage:
    """What the Audit screen shows, in one snapshot: a page of events (or of the operator journal)
    for the filter, and with job: and at: who held that call then."""
    shown: Literal["events", "journal"] = "journal" if view == "journal" else "events"
    with conn.transaction():
        run(conn, "meta/snapshot")
        current = now(conn)
        start = history_start(conn)
        try:
            job_id = resolve(conn, f.job) if f.job else None
        except BadInput as exc:
            return AuditPage(view=shown, problem=str(exc), db_now=current, history=start)
        instant = f.instant()
        answer, owner_archived = None, None
        if job_id is not None and instant is not None:
            try:
                answer = owner(conn, job_id, instant, start=start)
            except Archived as exc:
                owner_archived = str(exc)
        until_name = "at:" if f.at is not None and (f.until is None or f.at <= f.until) else "until:"
        try:
            online_part = range_online_part(start, f.since, f.upto,
                                            whole_call=job_id is not None and whole_call(conn, start, job_id),
                                            since_name="since:", until_name=until_name)
        except Archived as exc:
            return AuditPage(view=shown, job_id=job_id, owner=answer, owner_archived=owner_archived, db_now=current,
                             history=start, refused=str(exc))
        if shown == "journal":
            return AuditPage(view="journal", job_id=job_id, owner=answer, owner_archived=owner_archived,
                             db_now=current, history=start, online_part=online_part,
                             actions=operator_actions(conn, operator=f.operator, job_id=job_id, since=f.since,
                                                      until=f.upto, limit=limit))
        return AuditPage(view="events", job_id=job_id, owner=answer, owner_archived=owner_archived, db_now=current,
                         history=start, online_part=online_part,
                         events=events_page(conn, f, job_id=job_id, before_id=before_id, limit=limit))


# ----------------------------------------------------------------------------- export


class TextSink(Protocol):
    """Where an export writes: a text file, or stdout's descriptor (console.operator.files)."""

    def write(self, text: str, /) -> int: ...


def stream(conn: Conn, name: str, params: dict[str, Any], *, cursor_name: str, batch: int = BATCH,
           row_factory: RowFactory[Any] = tuple_row) -> Iterator[list[Any]]:
    """Batches of rows of queries/<name>.sql through a server-side cursor. Must run inside a
    transaction (the cursor lives as long as it)."""
    query = sql.load(name)
    values = query.bind(params)
    try:
        set_up_transaction(conn)  # behind a transaction pooler, when the cursor opens its transaction
        with conn.cursor(name=cursor_name, row_factory=row_factory) as cur:
            cur.execute(query.text, values)
            while rows := cur.fetchmany(batch):
                yield rows
    except psycopg.Error as exc:
        raise translate_error(exc, query.path) from exc


def export(conn: Conn, out: TextSink, *, fmt: str = "jsonl", since: datetime | None = None,
           until: datetime | None = None, job_id: uuid.UUID | None = None, owner: str | None = None,
           operator: str | None = None, kind: str | None = None, on_progress: Progress | None = None,
           for_terminal: bool = False, batch: int = BATCH) -> dict[str, Any]:
    """Write every job_events row in the range to `out`, oldest first (id order), as typed JSONL or
    CSV with a header -- the contract's keys, then reason, request_id and db_role (EXPORT_KEYS); return
    the count and the range's first and last instant. One read-only snapshot: the count and the rows
    agree. `on_progress(done, total)` after each batch (it may raise to stop: the caller's file is then
    not renamed into place). `for_terminal`: CSV values pass terminal_safe (a terminal must not act on
    them); JSONL is always ASCII (exact, escaped). owner / operator / kind: the Audit screen's filter
    (the CLI gives since, until and job_id)."""
    params: dict[str, Any] = {"since": since, "until": until, "job_id": job_id, "owner": owner, "operator": operator,
                              "kind": kind}
    return _export(conn, out, "audit/export", EXPORT_KEYS, params, fmt=fmt, on_progress=on_progress,
                   for_terminal=for_terminal, batch=batch)


def export_fleet(conn: Conn, out: TextSink, *, fmt: str = "jsonl", since: datetime | None = None,
                 until: datetime | None = None, on_progress: Progress | None = None, for_terminal: bool = False,
                 batch: int = BATCH) -> dict[str, Any]:
    """`audit export --fleet`: every fleet_events row in the range (drains, aborts, refusals, state
    changes, grants revoked), oldest first, with the keys FLEET_EXPORT_KEYS; as export() otherwise.
    Kept apart from the calls' history: a fleet row belongs to no call, and a reader of the job_events
    export counts its rows."""
    return _export(conn, out, "audit/export_fleet", FLEET_EXPORT_KEYS, {"since": since, "until": until}, fmt=fmt,
                   on_progress=on_progress, for_terminal=for_terminal, batch=batch)


def _export(conn: Conn, out: TextSink, name: str, columns: tuple[str, ...], params: dict[str, Any], *, fmt: str,
            on_progress: Progress | None, for_terminal: bool, batch: int) -> dict[str, Any]:
    """queries/<name>_count.sql, then the rows of <name>_jsonl.sql or <name>_csv.sql, in one snapshot.
    The calls' history (not the fleet's journal, which is never archived) is held to the rule of an
    archived range first: Archived when the range reaches before the online history."""
    if fmt not in ("jsonl", "csv"):
        raise BadInput(f"--format {sanitize(fmt, max_chars=20)}: use jsonl or csv")
    written = 0
    with conn.transaction():
        run(conn, "meta/snapshot")
        if name == "audit/export":
            range_rule(conn, params["since"], params["until"], job_id=params["job_id"])
        counted = run_one(conn, f"{name}_count", **params)
        assert counted is not None
        total = int(counted["events"])
        if on_progress:
            on_progress(0, total)
        if fmt == "jsonl":
            for rows in stream(conn, f"{name}_jsonl", params, cursor_name=EXPORT_CURSOR, batch=batch):
                out.write("".join(_ascii_line(r[0]) for r in rows))
                written += len(rows)
                if on_progress:
                    on_progress(written, total)
        else:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(columns)
            for rows in stream(conn, f"{name}_csv", params, cursor_name=EXPORT_CURSOR, batch=batch):
                writer.writerows([_csv_cells(r, for_terminal) for r in rows])
                written += len(rows)
                if on_progress:
                    on_progress(written, total)
    return {"events": written, "first_at": counted["first_at"], "last_at": counted["last_at"]}


def _csv_cells(row: Iterable[str | None], for_terminal: bool) -> list[str | None]:
    if for_terminal:
        return [terminal_safe(spreadsheet_safe(v)) if v else v for v in row]
    return [spreadsheet_safe(v) if v else v for v in row]


def export_journal(conn: Conn, out: TextSink, *, fmt: str = "jsonl", operator: str | None = None,
                   job_id: uuid.UUID | None = None, agent: str | None = None, action: str | None = None,
                   outcome: str | None = None, since: datetime | None = None, until: datetime | None = None,
                   on_progress: Progress | None = None, batch: int = BATCH) -> dict[str, Any]:
    """The operator journal the filter selects -- every row `audit actions` gives for it, with no
    limit, newest first as it lists them -- to `out` as JSONL or CSV with its keys (OperatorAction.KEYS:
    the contract's, then db_role). Streamed through the statement of `audit actions` itself, so the
    two never disagree on which rows a filter selects. `on_progress(done, None)` after each batch (the
    journal is not counted first: it is a sliver of the history). Returns {"events": rows written}."""
    if fmt not in ("jsonl", "csv"):
        raise BadInput(f"--format {sanitize(fmt, max_chars=20)}: use jsonl or csv")
    params: dict[str, Any] = dict(operator=operator, job_id=job_id, agent=agent, action=action, outcome=outcome,
                                  since=since, until=until, limit=None)
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    written = 0
    with conn.transaction():
        range_rule(conn, since, until, job_id=job_id)  # nothing written when the range is archived
        if writer is not None:
            writer.writerow(OperatorAction.KEYS)
        for rows in stream(conn, "audit/operator_actions", params, cursor_name=EXPORT_CURSOR, batch=batch,
                           row_factory=dict_row):
            records = [OperatorAction.model_validate(r).record() for r in rows]
            if writer is None:
                out.write("".join(json.dumps(r, ensure_ascii=True, separators=(", ", " : ")) + "\n"
                                  for r in records))
            else:
                writer.writerows([_csv_cells([_csv_value(r[k]) for k in OperatorAction.KEYS], False)
                                  for r in records])
            written += len(records)
            if on_progress:
                on_progress(written, None)
    return {"events": written}


def _csv_value(value: Any) -> str | None:
    """A journal value as a CSV cell: text as it is, details as JSON text, null as an empty cell."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)


# What a spreadsheet runs as a formula when a cell starts with it (OWASP, "CSV Injection"), and
# the apostrophe that neutralises one: an actor or a worker id is whatever a client claimed, and an
# auditor opening the export must not run `=HYPERLINK(...)` someone wrote there.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def spreadsheet_safe(value: str) -> str:
    """A CSV cell a spreadsheet shows as text: one apostrophe before a cell that starts like a
    formula, and before one that already starts with an apostrophe, so that dropping one leading
    apostrophe from any cell that has one gives back the value exactly (the JSONL export is verbatim)."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _escaped_as_print_json(text: str) -> bool:
    """The server's JSON as print_json would write it: PostgreSQL escapes the control characters
    below 0x20 but leaves non-ASCII (C1 controls, bidi overrides) and DEL as they are, which
    Python's ensure_ascii escapes. One scan in C, for a line or a whole batch of them."""
    return text.isascii() and "\x7f" not in text


def _ascii_line(line: str) -> str:
    """The server's JSON, with every non-ASCII character and DEL escaped (exact, and safe on a
    terminal)."""
    if _escaped_as_print_json(line):
        return line + "\n"
    return json.dumps(json.loads(line), ensure_ascii=True, separators=(", ", " : ")) + "\n"


# ----------------------------------------------------------------------------- verify


def _rows_in_id_order(batches: Iterator[list[tuple[Any, ...]]]) -> Iterator[tuple[Any, ...]]:
    for rows in batches:
        yield from rows


def _by_call(event: tuple[Any, ...]) -> tuple[uuid.UUID, int]:
    return event[1], event[0]


def verify(conn: Conn, *, since: datetime | None = None, archive: ArchiveFeed | None = None,
           on_progress: Progress | None = None, batch: int = BATCH) -> VerifyReport:
    """Replay every call's history (or every call with an event since `since`) and list what breaks
    the protocol, and hold each event's login (db_role) against its kind (wrong_login). One read-only
    snapshot, streamed: one call's events in memory at a time, and one name per role of the cluster.

    Once history was archived, a call whose history begins in the archive (console.core.history) is
    replayed with `archive`'s events merged before its online ones (they come in (job_id, id)
    order, as the online ones do); without them (no `archive`, or one whose events are None: it did
    not hold) it is counted in calls_not_replayed, and so is a call whose events are all archived --
    never reported as a violation of what it cannot see.
    `archive` must be of the months the database registered in this snapshot (its archived_before):
    retention may have archived another month since the files were read."""
    t0 = time.perf_counter()
    violations: list[Violation] = []
    calls = events = archived_events = not_replayed = 0
    worker_events = without_login = 0
    unknown: dict[str, int] = {}
    with conn.transaction():
        run(conn, "meta/snapshot")
        checked_at = now(conn)
        start = history_start(conn)
        if archive is not None and archive.archived_before != start.archived_before:
            raise LeasectlError("retention archived another month since the archive was read (the online history "
                                f"now begins at {json_time(start.archived_before)}): nothing was verified",
                                hint="run leasectl audit verify --archive DIR again")
        check_verify_since(start, since, with_archive=archive is not None)
        archived = archive.events if archive is not None else None
        # what each login is now (a worker login or not); a db_role missing here was dropped since
        worker_login = {r["login"]: bool(r["worker"]) for r in run(conn, "audit/verify_logins")}
        # the current rows in the same id order, merged in: each history is held against its row,
        # and a row with no history at all is found between two histories
        current = _rows_in_id_order(stream(conn, "audit/verify_rows", {"since": since}, cursor_name=ROWS_CURSOR,
                                           batch=batch))
        pending = next(current, None)

        def without_history(row: tuple[Any, ...]) -> None:
            """A call's row with no event in the history read: all its events are archived (and the
            archive was not given), or it was never journaled (a violation)."""
            nonlocal calls, not_replayed
            if archived is None and call_archived(start, row[4], None):
                not_replayed += 1
                return
            orphan = CallReplay(row[0])
            orphan.against_row(row[1], row[2], row[3])
            violations.extend(orphan.violations)
            calls += 1

        def row_of(job_id: uuid.UUID) -> tuple[Any, ...] | None:
            nonlocal pending
            while pending is not None and pending[0] < job_id:
                without_history(pending)
                pending = next(current, None)
            if pending is not None and pending[0] == job_id:
                found, pending = pending, next(current, None)
                return found
            return None

        def online() -> Iterator[tuple[Any, ...]]:
            nonlocal events
            for rows in stream(conn, "audit/verify_events", {"since": since}, cursor_name=VERIFY_CURSOR,
                               batch=batch):
                yield from rows
                events += len(rows)
                if on_progress:
                    on_progress(events, None)

        merged: Iterable[tuple[Any, ...]] = (online() if archived is None else
                                             heapq.merge(online(), archived, key=_by_call))
        for job_id, group in groupby(merged, key=itemgetter(1)):
            history_of = list(group)
            in_archive = sum(1 for e in history_of if isinstance(e, ArchivedEvent))
            if (since is not None and in_archive == len(history_of)
                    and not any(e[2] >= since for e in history_of)):
                continue  # all archived, none since `since`: not a call verify was asked about
            archived_events += in_archive
            row = row_of(job_id)
            for (event_id, _, _, kind, _, state_from, state_to, _, owner_to, _, _, actor, db_role,
                 infinite_lease) in history_of:
                if infinite_lease:
                    violations.append(Violation(job_id=job_id, rule="unreadable", event_ids=[event_id],
                                                why=f"{kind} #{event_id} carries an infinite lease: no lease runs "
                                                    "for ever (refused since migration 0013)", kind=kind))
                if db_role is None:
                    without_login += 1
                    continue
                worker = worker_login.get(db_role)
                if worker is None:
                    unknown[db_role] = unknown.get(db_role, 0) + 1
                elif worker:
                    worker_events += 1
                    why = login_violation(kind, actor, owner_to, state_from, state_to, db_role)
                    if why is not None:
                        violations.append(Violation(job_id=job_id, rule="wrong_login", event_ids=[event_id],
                                                    why=why, kind=kind, db_role=db_role))
            if archived is None and call_archived(start, row[4] if row is not None else None, history_of[0][3]):
                not_replayed += 1  # its first events are archived: its replay would judge half a story
                continue
            replay = CallReplay(job_id)
            for (event_id, _, at, kind, token, state_from, state_to, owner_from, owner_to, lease_until, previous,
                 actor, _, _) in history_of:
                replay.feed(Step(event_id, at, kind, token, state_from, state_to, owner_from, owner_to,
                                 lease_until, previous, actor))
            if row is not None:
                replay.against_row(row[1], row[2], row[3])
            violations.extend(replay.finish().violations)
            calls += 1
        while pending is not None:
            without_history(pending)
            pending = next(current, None)
    return VerifyReport(ok=not violations, since=since, calls=calls, events=events, violations=violations,
                        checked_at=checked_at, seconds=time.perf_counter() - t0, worker_events=worker_events,
                        without_login=without_login,
                        unknown_logins=[LoginCount(db_role=k, events=n) for k, n in sorted(unknown.items())],
                        archived_before=start.archived_before, archived_events=archived_events,
                        calls_not_replayed=not_replayed)


# ----------------------------------------------------------------------------- everything as it was at T


def past_start(conn: Conn, at: datetime) -> HistoryStart:
    """Every call at `at` held to the rule of an archived range (console.core.history.check_past):
    Archived before the online history begins, or when a call alive at `at` began before it. Else
    where the online history begins: the calls created before it had all finished by `at`, their
    histories are archived, and the list leaves them out (the caller says so)."""
    start = history_start(conn)
    if start.archived_before is not None:
        alive = None
        if at >= start.archived_before:
            row = run_one(conn, "audit/alive_across", at=at, archived_before=start.archived_before)
            alive = AliveAcross.model_validate(row) if row is not None else None
        check_past(start, at, alive)
    return start


def _jobs_at_values(at: datetime, where: JobFilter | None, limit: int,
                    before: tuple[datetime, uuid.UUID] | None, start: HistoryStart) -> dict[str, Any]:
    return dict(at=at, **(where or JobFilter()).sql_values(),
                before_created=before[0] if before else None, before_id=before[1] if before else None, limit=limit,
                created_from=start.archived_before)


def jobs_at(conn: Conn, at: datetime, where: JobFilter | None = None, limit: int = 200, *,
            before: tuple[datetime, uuid.UUID] | None = None, start: HistoryStart | None = None) -> list[JobAsOf]:
    """Every call as it was at `at`, newest first, rebuilt from the history only: rows shaped like
    views/jobs.sql's (JobSummary) plus as_of, so the calls screens can show them. `where` filters by
    what never changes (tool, agent, key, id, model, provider, class) and by the rebuilt state,
    owner and health. Pass the last row's (created_at, id) as `before` for the next page. Archived
    when the answer rests on archived history (past_start; `start`: its answer, already asked)."""
    start = start if start is not None else past_start(conn, at)
    with payload_search(conn, where):  # payload: only for a role that may read payloads; its timeout said so
        rows = run(conn, "audit/jobs_at", **_jobs_at_values(at, where, limit, before, start))
    return lines_as(JobAsOf, [r["line"] for r in rows])


def write_jobs_at(conn: Conn, out: TextSink, at: datetime, where: JobFilter | None = None, limit: int = 200, *,
                  on_progress: Callable[[int], None] | None = None, batch: int = BATCH,
                  start: HistoryStart | None = None) -> int:
    """`leasectl jobs --at TIME --json`: the calls as they were at `at`, written to `out` as the JSON
    list `jobs --json` prints for them, byte for byte in a UTC session, as the server wrote each call
    (no model per row: a rebuild of every call is 100,000 and more). Streamed: the client holds a
    batch of lines at a time (and the sink what it queues), whatever the limit. The statement
    timeout is lifted for that one statement: how long it runs is the reader's as much as the
    server's (a pipe into gzip), and a server-side cursor, which would bound each fetch instead,
    is never planned in parallel (the rebuild of every call took 1.2x as long). Returns how many
    calls were handed to `out`; `on_progress(count)` after each batch (it may raise to stop).
    Archived, before anything is written, when the answer rests on archived history (past_start)."""
    start = start if start is not None else past_start(conn, at)
    payload_access(conn, where)  # payload: only for a role that may read payloads, asked before a line is written
    query = sql.load("audit/jobs_at")
    values = query.bind(_jobs_at_values(at, where, limit, None, start))
    # rows in chunks need libpq 17 (psycopg checks); an older libpq streams one row at a time
    chunk = batch if psycopg.pq.version() >= 170000 else 1
    written = 0
    try:
        with conn.transaction():
            run(conn, "meta/statement_timeout_local", statement_timeout="0")
            with conn.cursor(row_factory=tuple_row) as cur, \
                    closing(cast(Generator[tuple[Any, ...], None, None],
                                 cur.stream(query.text, values, size=chunk))) as rows:
                # closed on the way out whatever leaves the loop: a suspended stream keeps the
                # connection's lock, and the transaction's end would wait for it forever (a
                # closed pipe or Ctrl-C mid-stream hung the command)
                lines = map(itemgetter(0), rows)
                while pending := list(islice(lines, batch)):
                    text = ",\n".join(pending)
                    if not _escaped_as_print_json(text):
                        text = ",\n".join(line if _escaped_as_print_json(line) else _ascii_call(line)
                                          for line in pending)
                    out.write(("[\n" if not written else ",\n") + text)
                    written += len(pending)
                    if on_progress:
                        on_progress(written)
    except psycopg.Error as exc:
        raise translate_error(exc, query.path) from exc
    out.write("\n]\n" if written else "[]\n")
    return written


def _ascii_call(line: str) -> str:
    """A call the server wrote with characters print_json escapes (_escaped_as_print_json), escaped
    the same way (an element of an indented list: the server's layout, exactly)."""
    return json.dumps([json.loads(line)], ensure_ascii=True, indent=2)[2:-2]
