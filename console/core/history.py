"""What an archived range means: the one rule every answer of the audit asks -- `audit owner`,
`audit actions`, `audit export`, `audit verify`, `jobs --at` and the Audit screen.

Retention (`leasectl admin retention`, migration 0021) removes whole months of job_events, the
oldest first, into archive files, and registers each in job_events_archive. `archived_before`
(leasectl_archived_before(): the end of the latest archived month; None when nothing was archived)
is where the online history begins: every event dated before it is in the archive files, none is
in the table. So:

* **A call's history is whole online only when its `enqueued` event is online** (its first online
  event is `enqueued`). A call created before archived_before whose first online event is not
  `enqueued` is *archived*: who held it at an instant, or what it was then, rests on events the
  table no longer holds, and is never answered from the part that is left (that part could say
  "nobody" of a call that was held). A call created after archived_before whose history does not
  start with `enqueued` is not archived: its history breaks the rules (verify's missing_event),
  and the answer says that instead.
* **A range of time that reaches before archived_before is archived**: a start (--since) before
  it, or an end (--until) before it with no start, or an instant (`jobs --at`) before it. It is
  refused (exit 1) with archived_before and the archive named; with --json the refusal is a JSON
  object: {"archived": true, "archived_before": ..., "error": ...}. A range over one call whose
  history is whole online is that call's whole story whatever its bounds: never refused.
* **A range with no start** (`audit actions`, `audit export`, the Audit screen's pages) answers
  from archived_before on, and says so (on stderr for the CLI, whose JSON keeps its shape).
* **`jobs --at T`** with T at or after archived_before: refused when a call alive at T (created
  before T, not finished by T) was created before archived_before -- its state at T may rest on
  archived events. Otherwise every call created before archived_before had finished by T; their
  histories are archived, so they are left out of the list, and that is said.
* **`audit verify`** replays a call whose history begins in the archive only with the archive's
  events merged before the online ones (`--archive DIR`); without them such a call, and a call
  whose events are all archived, is counted as not replayed, never reported as a violation. The
  archive itself is checked month by month against job_events_archive (ARCHIVE_RULES).

Here the rule, without I/O: the database's answers come in (console.db.audit), the archive
files' facts come in (console.operator.archive_history); the words are console.operator.present's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import PurePosixPath
from typing import Any, NamedTuple, Protocol

from pydantic import TypeAdapter

from console.core.models import Row
from console.shared.errors import EXIT_OTHER, LeasectlError
from console.shared.text import counted, sanitize

_TIME = TypeAdapter(datetime)


def json_time(value: datetime | None) -> str | None:
    """An instant as every JSON answer of leasectl writes it (pydantic's: UTC with `Z`)."""
    if value is None:
        return None
    return str(_TIME.dump_python(value.astimezone(UTC), mode="json"))


def iso(value: datetime) -> str:
    return json_time(value) or ""


class HistoryStart(Row):
    """Where the online history begins, and what the archive holds before it (job_events_archive)."""

    archived_before: datetime | None = None
    months: int = 0
    first_month: date | None = None
    last_month: date | None = None
    first_file: str | None = None
    last_file: str | None = None

    @property
    def archived(self) -> bool:
        return self.archived_before is not None

    def span_words(self) -> str:
        """`2026-07 to 2026-08, 2 months`."""
        first = f"{self.first_month:%Y-%m}" if self.first_month else "?"
        last = f"{self.last_month:%Y-%m}" if self.last_month else "?"
        return f"{first if first == last else f'{first} to {last}'}, {counted(self.months, 'month')}"

    def archive_words(self) -> str:
        """`the archive: 2 months, 2026-07 to 2026-08 (job_events-2026-07.jsonl.gz to
        job_events-2026-08.jsonl.gz, registered in job_events_archive)`."""
        if not self.archived:
            return "nothing is archived"
        first = f"{self.first_month:%Y-%m}" if self.first_month else "?"
        last = f"{self.last_month:%Y-%m}" if self.last_month else "?"
        span = first if first == last else f"{first} to {last}"
        files = sanitize(self.first_file or "?", max_chars=120)
        if self.last_file and self.last_file != self.first_file:
            files += f" to {sanitize(self.last_file, max_chars=120)}"
        return f"the archive: {counted(self.months, 'month')}, {span} ({files}, registered in job_events_archive)"


class Archived(LeasectlError):
    """The answer asked for rests on archived history: refused, never answered from a part of it.
    Exit 1, as any answer that could not be given."""

    exit_code = EXIT_OTHER

    def __init__(self, message: str, *, archived_before: datetime, hint: str | None = None,
                 subject: dict[str, Any] | None = None) -> None:
        super().__init__(message, hint=hint)
        self.archived_before = archived_before
        self.subject = subject or {}

    def record(self) -> dict[str, Any]:
        """What --json writes instead of the answer: what was asked (job_id and at for `audit
        owner`), then archived, archived_before and the error."""
        return {**self.subject, "archived": True, "archived_before": json_time(self.archived_before),
                "error": str(self)}


_READ_THE_ARCHIVE = "the archive files hold it (`leasectl audit verify --archive DIR` checks and replays them)"


# ----------------------------------------------------------------------------- one call


def call_archived(start: HistoryStart, created_at: datetime | None, first_kind: str | None) -> bool:
    """Whether part of the call's history is archived: something is archived, the call's first
    online event is not its `enqueued`, and the call was created before the online history begins
    (a call with no row left is taken as archived: nothing tells when it was created)."""
    if start.archived_before is None or first_kind == "enqueued":
        return False
    return created_at is None or created_at < start.archived_before


def check_call(start: HistoryStart, job_id: uuid.UUID, created_at: datetime | None, first_kind: str | None,
               at: datetime) -> None:
    """`audit owner JOB --at T` (and the Audit screen's job: with at:): refused when the call's
    history is archived in part, whatever T: a partial history never answers."""
    if not call_archived(start, created_at, first_kind):
        return
    assert start.archived_before is not None
    created = f" (created {iso(created_at)})" if created_at is not None else ""
    raise Archived(f"archived: the history of call {str(job_id)[:8]}{created} begins before "
                   f"{iso(start.archived_before)}, where the online history begins; its first events are in "
                   f"{start.archive_words()}. Who held it at {iso(at)} is not answered from the rest",
                   archived_before=start.archived_before, hint=_READ_THE_ARCHIVE,
                   subject={"job_id": str(job_id), "at": json_time(at)})


# ----------------------------------------------------------------------------- a range of time


def range_online_part(start: HistoryStart, since: datetime | None, until: datetime | None, *,
                      whole_call: bool = False, since_name: str = "--since", until_name: str = "--until") -> bool:
    """A range of the history: refused (Archived) when it reaches before archived_before; True when
    it has no start and something is archived (the answer covers archived_before on: say so);
    False when the range is whole online. `whole_call`: the range is one call's, and that call's
    history is whole online: nothing of it is archived."""
    before = start.archived_before
    if before is None or whole_call:
        return False
    if since is not None and since < before:
        raise Archived(f"archived: {since_name} {iso(since)} reaches before {iso(before)}, where the online history "
                       f"begins; the events before it are in {start.archive_words()}",
                       archived_before=before, hint=f"ask from {iso(before)} on; before it, {_READ_THE_ARCHIVE}")
    if since is None and until is not None and until < before:
        raise Archived(f"archived: {until_name} {iso(until)} is before {iso(before)}, where the online history "
                       f"begins; the events up to it are in {start.archive_words()}",
                       archived_before=before, hint=_READ_THE_ARCHIVE)
    return since is None


def check_verify_since(start: HistoryStart, since: datetime | None, *, with_archive: bool) -> None:
    """`audit verify --since T` with T before archived_before selects calls by events the table no
    longer holds: refused unless the archive is given."""
    before = start.archived_before
    if before is None or since is None or with_archive or since >= before:
        return
    raise Archived(f"archived: --since {iso(since)} reaches before {iso(before)}, where the online history begins: "
                   f"the calls whose events since then are all in {start.archive_words()} would be left out",
                   archived_before=before, hint="pass --archive DIR (the directory retention wrote) to verify them")


# ----------------------------------------------------------------------------- every call at an instant


class AliveAcross(Row):
    """A call created before archived_before and alive at the instant asked (audit/alive_across.sql)."""

    id: uuid.UUID
    created_at: datetime
    finished_at: datetime | None = None


def check_past(start: HistoryStart, at: datetime, alive: AliveAcross | None, *, what: str = "--at") -> None:
    """`jobs --at T`: refused before archived_before, and when a call alive at T began before it."""
    before = start.archived_before
    if before is None:
        return
    if at < before:
        raise Archived(f"archived: {what} {iso(at)} is before {iso(before)}, where the online history begins: "
                       f"the calls as they were then rest on {start.archive_words()}",
                       archived_before=before, hint=f"ask at {iso(before)} or later; before it, {_READ_THE_ARCHIVE}")
    if alive is not None:
        ended = (f"finished {iso(alive.finished_at)}" if alive.finished_at is not None else "has not finished")
        raise Archived(f"archived: call {str(alive.id)[:8]} was alive at {iso(at)} and began before {iso(before)} "
                       f"(created {iso(alive.created_at)}; it {ended}): its state then rests on events in "
                       f"{start.archive_words()}",
                       archived_before=before, hint=f"ask at an instant when every call created before "
                                                    f"{iso(before)} had finished; before it, {_READ_THE_ARCHIVE}")


# ----------------------------------------------------------------------------- the archive, for verify


class ArchivedMonth(Row):
    """One month retention removed, as the database registered it (job_events_archive)."""

    month: date
    range_from: datetime
    range_to: datetime
    rows: int
    first_id: int | None = None
    last_id: int | None = None
    sha256: str
    file: str
    archived_at: datetime | None = None
    archived_by: str | None = None

    @property
    def name(self) -> str:
        return f"{self.month:%Y-%m}"


class ArchiveViolation(Row):
    """What `audit verify --archive DIR` found wrong with one archived month (exit 4)."""

    month: str
    file: str | None = None
    rule: str
    why: str


ARCHIVE_RULES: dict[str, str] = {
    "manifest_unreadable": "the archive's manifest.json cannot be read as a leasectl archive manifest",
    "not_in_manifest": "the database registered the month, the archive's manifest does not list it",
    "file_missing": "the month's file is not in the archive",
    "manifest_disagrees": "the manifest's entry is not what the database registered when the month was dropped",
    "sha256_mismatch": "the file is not the one its manifest describes (its sha256 differs)",
    "content_mismatch": "the file's rows or ids are not what its manifest says",
    "unreadable": "a line of the file is not an event of the month in id order",
}


class _Counted(Protocol):
    """What a manifest entry and a file read back both say of a month: its rows, ids and digest."""

    @property
    def rows(self) -> int: ...
    @property
    def first_id(self) -> int | None: ...
    @property
    def last_id(self) -> int | None: ...
    @property
    def sha256(self) -> str: ...


class ManifestFacts(_Counted, Protocol):
    """A manifest entry (console.operator.archive.MonthEntry) as the rule reads it."""

    @property
    def file(self) -> str: ...


class ReadBack(_Counted, Protocol):
    """A month's file read through (console.operator.archive.FileFacts) as the rule reads it."""

    @property
    def problem(self) -> str | None: ...


def _facts(rows: int, first: int | None, last: int | None) -> str:
    return f"{rows} rows, ids {first if first is not None else '—'} to {last if last is not None else '—'}"


def month_violations(registered: ArchivedMonth, entry: ManifestFacts | None, read: ReadBack | None,
                     ) -> list[ArchiveViolation]:
    """One registered month held against the archive: its manifest entry must be what the database
    registered (rows, first and last id, sha256: an entry edited to match a tampered file is caught
    here), and the file what its entry says (sha256, rows, ids, every line an event of the month in
    id order). `entry` None: the manifest lacks the month; `read` None: the file is missing."""
    month = registered.name

    def violation(rule: str, why: str, file: str | None = None) -> ArchiveViolation:
        return ArchiveViolation(month=month, file=file, rule=rule, why=why)

    if entry is None:
        return [violation("not_in_manifest", f"{month} was archived as {sanitize(registered.file, max_chars=120)} "
                                             f"({_facts(registered.rows, registered.first_id, registered.last_id)}) "
                                             "but the manifest does not list it", registered.file)]
    found: list[ArchiveViolation] = []
    said = (entry.rows, entry.first_id, entry.last_id, entry.sha256, entry.file)
    held = (registered.rows, registered.first_id, registered.last_id, registered.sha256,
            PurePosixPath(registered.file).name)
    if said != held:
        found.append(violation("manifest_disagrees",
                               f"the manifest says {sanitize(entry.file, max_chars=120)}: "
                               f"{_facts(entry.rows, entry.first_id, entry.last_id)}, sha256 "
                               f"{sanitize(entry.sha256, max_chars=64)}; the database registered "
                               f"{sanitize(held[4], max_chars=120)}: "
                               f"{_facts(registered.rows, registered.first_id, registered.last_id)}, sha256 "
                               f"{registered.sha256}", entry.file))
    if read is None:
        found.append(violation("file_missing", f"{sanitize(entry.file, max_chars=120)} is not in the archive",
                               entry.file))
        return found
    if read.sha256 != entry.sha256:
        found.append(violation("sha256_mismatch", f"{sanitize(entry.file, max_chars=120)} has sha256 {read.sha256}, "
                                                  f"its manifest says {sanitize(entry.sha256, max_chars=64)}",
                               entry.file))
    if read.problem is not None:
        found.append(violation("unreadable", f"{sanitize(entry.file, max_chars=120)}: "
                                             f"{sanitize(read.problem, max_chars=300)}", entry.file))
    elif (read.rows, read.first_id, read.last_id) != (entry.rows, entry.first_id, entry.last_id):
        found.append(violation("content_mismatch",
                               f"{sanitize(entry.file, max_chars=120)} holds "
                               f"{_facts(read.rows, read.first_id, read.last_id)}, its manifest says "
                               f"{_facts(entry.rows, entry.first_id, entry.last_id)}", entry.file))
    return found


def archive_ends(months: Iterable[ArchivedMonth]) -> datetime | None:
    """Where the online history begins once these months are archived (leasectl_archived_before())."""
    return max((m.range_to for m in months), default=None)


class ArchivedEvent(NamedTuple):
    """An archived event as verify replays it: the shape of audit/verify_events.sql's rows."""

    id: int
    job_id: uuid.UUID
    at: datetime
    kind: str
    fencing_token: int | None
    state_from: str | None
    state_to: str | None
    owner_from: str | None
    owner_to: str | None
    lease_until: datetime | None
    previous_lease_until: str | None
    actor: str | None
    db_role: str | None
    infinite_lease: bool


def _instant(value: object, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{what} {value!r} is not a time")
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def archived_event(record: dict[str, Any]) -> ArchivedEvent:
    """A line of an archive file (the keys of `audit export --format jsonl`) as verify replays it;
    ValueError when it is not an event."""
    event_id, job_id, kind = record.get("id"), record.get("job_id"), record.get("kind")
    at = _instant(record.get("at"), "at")
    if not isinstance(event_id, int) or not isinstance(job_id, str) or not isinstance(kind, str) or at is None:
        raise ValueError(f"not an event: id {event_id!r}, job_id {job_id!r}, kind {kind!r}")
    token = record.get("fencing_token")
    if token is not None and not isinstance(token, int):
        raise ValueError(f"event {event_id}: fencing_token {token!r} is not a number")
    lease_text = record.get("lease_until")
    try:
        lease, infinite = _instant(lease_text, "lease_until"), False
    except ValueError:
        lease, infinite = None, True  # as verify_events.sql reads an infinite lease: null, and flagged
    details = record.get("details")
    previous = details.get("previous_lease_until") if isinstance(details, dict) else None

    def text(key: str) -> str | None:
        value = record.get(key)
        return None if value is None else str(value)

    return ArchivedEvent(event_id, uuid.UUID(job_id), at, kind, token, text("state_from"), text("state_to"),
                         text("owner_from"), text("owner_to"), lease,
                         None if previous is None else str(previous), text("actor"), text("db_role"), infinite)


@dataclass(frozen=True)
class ArchiveFeed:
    """What `audit verify --archive DIR` hands the replay: the archived events of the months that
    end at `archived_before`, in (job_id, id) order -- the order of audit/verify_events.sql -- so
    that each call's archived events are merged before its online ones. `events` None: the archive
    did not hold (a month missing or tampered with); nothing of it is replayed, and the calls whose
    history begins in it are counted as not replayed."""

    archived_before: datetime | None
    events: Iterable[ArchivedEvent] | None
