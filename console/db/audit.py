"""What the auditor reads: ownership at an instant, the operator journal, the whole history exported
or verified, every call as it was at an instant. Read-only, from the history alone (the rules are
console.core.audit's); the SQL is queries/audit/.

Exports and verify stream through a server-side (named) cursor inside one read-only snapshot: the
client holds one batch of rows at a time, whatever the range, and each FETCH is a short statement.
"""

from __future__ import annotations

import csv
import json
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import closing
from datetime import datetime
from itertools import islice
from operator import itemgetter
from typing import Any, Protocol, cast

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
from console.core.models import Event
from console.core.ownership import CallReplay, OwnerAt, Step, Violation, owner_at
from console.db import sql
from console.db.connect import Conn, lines_as, run, run_one, translate_error
from console.db.pooler import set_up_transaction
from console.db.reads import db_info, history, resolve
from console.shared.errors import BadInput
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


# ----------------------------------------------------------------------------- owner


def owner(conn: Conn, job_id: uuid.UUID, at: Instant) -> OwnerAt:
    """Who held the call's lease at `at`, from its history alone (one snapshot of it)."""
    return owner_at(job_id, history(conn, job_id), at)


# ----------------------------------------------------------------------------- the operator journal


def operator_actions(conn: Conn, *, operator: str | None = None, job_id: uuid.UUID | None = None,
                     agent: str | None = None, action: str | None = None, outcome: str | None = None,
                     since: datetime | None = None, until: datetime | None = None,
                     limit: int = 100) -> list[OperatorAction]:
    """Every operator action across calls and shutdowns, newest first; filters combine."""
    rows = run(conn, "audit/operator_actions", operator=operator, job_id=job_id, agent=agent, action=action,
               outcome=outcome, since=since, until=until, limit=limit)
    return [OperatorAction.model_validate(r) for r in rows]


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
    with conn.transaction():
        run(conn, "meta/snapshot")
        current = now(conn)
        try:
            job_id = resolve(conn, f.job) if f.job else None
        except BadInput as exc:
            return AuditPage(view="journal" if view == "journal" else "events", problem=str(exc), db_now=current)
        instant = f.instant()
        answer = owner(conn, job_id, instant) if job_id is not None and instant is not None else None
        if view == "journal":
            return AuditPage(view="journal", job_id=job_id, owner=answer, db_now=current,
                             actions=operator_actions(conn, operator=f.operator, job_id=job_id, since=f.since,
                                                      until=f.upto, limit=limit))
        return AuditPage(view="events", job_id=job_id, owner=answer, db_now=current,
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
    """queries/<name>_count.sql, then the rows of <name>_jsonl.sql or <name>_csv.sql, in one snapshot."""
    if fmt not in ("jsonl", "csv"):
        raise BadInput(f"--format {sanitize(fmt, max_chars=20)}: use jsonl or csv")
    written = 0
    with conn.transaction():
        run(conn, "meta/snapshot")
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
    if writer is not None:
        writer.writerow(OperatorAction.KEYS)
    written = 0
    with conn.transaction():
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


def verify(conn: Conn, *, since: datetime | None = None, on_progress: Progress | None = None,
           batch: int = BATCH) -> VerifyReport:
    """Replay every call's history (or every call with an event since `since`) and list what breaks
    the protocol, and hold each event's login (db_role) against its kind (wrong_login). One read-only
    snapshot, streamed: one call's events in memory at a time, and one name per role of the cluster."""
    t0 = time.perf_counter()
    violations: list[Violation] = []
    calls = events = 0
    worker_events = without_login = 0
    unknown: dict[str, int] = {}
    replay: CallReplay | None = None
    with conn.transaction():
        run(conn, "meta/snapshot")
        checked_at = now(conn)
        # what each login is now (a worker login or not); a db_role missing here was dropped since
        worker_login = {r["login"]: bool(r["worker"]) for r in run(conn, "audit/verify_logins")}
        # the current rows in the same id order, merged in: each history is held against its row,
        # and a row with no history at all is found between two histories
        current = _rows_in_id_order(stream(conn, "audit/verify_rows", {"since": since}, cursor_name=ROWS_CURSOR,
                                           batch=batch))
        pending = next(current, None)

        def close(done: CallReplay) -> None:
            nonlocal pending, calls
            while pending is not None and pending[0] < done.job_id:
                orphan = CallReplay(pending[0])
                orphan.against_row(*pending[1:])
                violations.extend(orphan.violations)
                calls += 1
                pending = next(current, None)
            if pending is not None and pending[0] == done.job_id:
                done.against_row(*pending[1:])
                pending = next(current, None)
            violations.extend(done.finish().violations)

        for rows in stream(conn, "audit/verify_events", {"since": since}, cursor_name=VERIFY_CURSOR, batch=batch):
            for (event_id, job_id, at, kind, token, state_from, state_to, owner_from, owner_to, lease_until,
                 previous, actor, db_role, infinite_lease) in rows:
                if replay is None or replay.job_id != job_id:
                    if replay is not None:
                        close(replay)
                    replay = CallReplay(job_id)
                    calls += 1
                replay.feed(Step(event_id, at, kind, token, state_from, state_to, owner_from, owner_to,
                                 lease_until, previous, actor))
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
            events += len(rows)
            if on_progress:
                on_progress(events, None)
        if replay is not None:
            close(replay)
        while pending is not None:
            orphan = CallReplay(pending[0])
            orphan.against_row(*pending[1:])
            violations.extend(orphan.violations)
            calls += 1
            pending = next(current, None)
    return VerifyReport(ok=not violations, since=since, calls=calls, events=events, violations=violations,
                        checked_at=checked_at, seconds=time.perf_counter() - t0, worker_events=worker_events,
                        without_login=without_login,
                        unknown_logins=[LoginCount(db_role=k, events=n) for k, n in sorted(unknown.items())])


# ----------------------------------------------------------------------------- everything as it was at T


def _jobs_at_values(at: datetime, where: JobFilter | None, limit: int,
                    before: tuple[datetime, uuid.UUID] | None) -> dict[str, Any]:
    return dict(at=at, **(where or JobFilter()).sql_values(),
                before_created=before[0] if before else None, before_id=before[1] if before else None, limit=limit)


def jobs_at(conn: Conn, at: datetime, where: JobFilter | None = None, limit: int = 200, *,
            before: tuple[datetime, uuid.UUID] | None = None) -> list[JobAsOf]:
    """Every call as it was at `at`, newest first, rebuilt from the history only: rows shaped like
    views/jobs.sql's (JobSummary) plus as_of, so the calls screens can show them. `where` filters by
    what never changes (tool, agent, key, id, model, provider, class) and by the rebuilt state,
    owner and health. Pass the last row's (created_at, id) as `before` for the next page."""
    rows = run(conn, "audit/jobs_at", **_jobs_at_values(at, where, limit, before))
    return lines_as(JobAsOf, [r["line"] for r in rows])


def write_jobs_at(conn: Conn, out: TextSink, at: datetime, where: JobFilter | None = None, limit: int = 200, *,
                  on_progress: Callable[[int], None] | None = None, batch: int = BATCH) -> int:
    """`leasectl jobs --at TIME --json`: the calls as they were at `at`, written to `out` as the JSON
    list `jobs --json` prints for them, byte for byte in a UTC session, as the server wrote each call
    (no model per row: a rebuild of every call is 100,000 and more). Streamed: the client holds a
    batch of lines at a time (and the sink what it queues), whatever the limit. The statement
    timeout is lifted for that one statement: how long it runs is the reader's as much as the
    server's (a pipe into gzip), and a server-side cursor, which would bound each fetch instead,
    is never planned in parallel (the rebuild of every call took 1.2x as long). Returns how many
    calls were handed to `out`; `on_progress(count)` after each batch (it may raise to stop)."""
    query = sql.load("audit/jobs_at")
    values = query.bind(_jobs_at_values(at, where, limit, None))
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
