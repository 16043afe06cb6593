"""`leasectl audit verify --archive DIR`: the archive directory retention wrote
(console/operator/archive.py) held against the months the database registered (job_events_archive),
and the archived events handed to the replay (console.db.audit.verify) in the order it reads the
online ones: by call, then by id.

Every registered month must be in the manifest as the database registered it (rows, first and
last id, sha256: a manifest edited to match a tampered file is caught here), its file present and
the very file its manifest describes (sha256), holding those rows and ids, every line an event of
its month in id order (console.core.history.month_violations). A month the manifest lists but the
database did not register is still online (retention stopped before the drop): it is not used.
When any month is wrong, the archive is not replayed at all -- half an archive would make false
violations -- and the calls whose history begins in it are counted as not replayed.

The files are read and sorted here, before verify opens its snapshot: hashing and sorting a large
archive takes longer than a session may sit idle in a transaction. Events are sorted in chunks of
CHUNK, each chunk pickled to a temporary file of this process's own, then merged: memory holds one
chunk, whatever the archive's size.
"""

from __future__ import annotations

import heapq
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from console.core.audit import VerifyReport
from console.core.history import (
    ArchivedEvent,
    ArchivedMonth,
    ArchiveFeed,
    ArchiveViolation,
    archive_ends,
    archived_event,
    month_violations,
)
from console.operator.archive import MANIFEST, ArchiveDir, MonthEntry, events_in
from console.shared.errors import BadInput, LeasectlError
from console.shared.text import sanitize

CHUNK = 200_000  # archived events sorted in memory at once
_BLOCK = 5_000  # events per pickle in a chunk's file


@dataclass
class ArchiveCheck:
    """What checking the directory found, and (when every month holds) the events to replay."""

    path: str
    months_checked: list[str] = field(default_factory=list)
    violations: list[ArchiveViolation] = field(default_factory=list)
    not_registered: list[str] = field(default_factory=list)  # in the manifest, still online: not used
    feed: ArchiveFeed = field(default_factory=lambda: ArchiveFeed(archived_before=None, events=None))


def check_months(archive: ArchiveDir, registered: list[ArchivedMonth]) -> tuple[list[ArchiveViolation],
                                                                                  dict[str, MonthEntry]]:
    """Each registered month against its manifest entry and its file; the entries found."""
    try:
        manifest = archive.manifest()
    except BadInput as exc:  # a manifest that does not parse is a violation of the archive (exit 4), not bad input
        why = sanitize(str(exc), max_chars=400)
        return [ArchiveViolation(month=m.name, file=MANIFEST, rule="manifest_unreadable", why=why)
                for m in registered], {}
    violations: list[ArchiveViolation] = []
    for month in registered:
        entry = manifest.get(month.name)
        facts = None
        if entry is not None and archive.has_file(entry):
            try:
                facts = archive.read_back(entry.file, month.range_from, month.range_to)
            except OSError as exc:
                violations.append(ArchiveViolation(month=month.name, file=entry.file, rule="file_missing",
                                                   why=f"{sanitize(entry.file, max_chars=120)} cannot be read: "
                                                       f"{sanitize(exc.strerror or str(exc), max_chars=200)}"))
                continue
        violations.extend(month_violations(month, entry, facts))
    return violations, manifest


@contextmanager
def prepared(text: str, registered: list[ArchivedMonth]) -> Iterator[ArchiveCheck]:
    """The directory checked against `registered` and, when it holds, its events sorted for the
    replay (temporary files removed on the way out)."""
    archive = ArchiveDir.for_reading(text)
    violations, manifest = check_months(archive, registered)
    names = {m.name for m in registered}
    check = ArchiveCheck(path=text, months_checked=sorted(names), violations=violations,
                         not_registered=sorted(m for m in manifest if m not in names))
    with tempfile.TemporaryDirectory(prefix="leasectl-verify-") as work:
        files = [archive.path / manifest[m.name].file for m in registered] if not violations else []
        check.feed = ArchiveFeed(archived_before=archive_ends(registered),
                                 events=_sorted_events(files, Path(work)) if not violations else None)
        yield check


def _read(files: Iterable[Path]) -> Iterator[ArchivedEvent]:
    for path in files:
        try:
            for record in events_in(path):
                yield archived_event(record)
        except (OSError, EOFError, ValueError) as exc:
            raise LeasectlError(f"{sanitize(str(path), max_chars=200)} changed while verify read it: "
                                f"{sanitize(str(exc), max_chars=200)}", hint="run verify again") from None


def _sort_key(event: ArchivedEvent) -> tuple[object, int]:
    return event.job_id, event.id


def _sorted_events(files: list[Path], work: Path) -> Iterator[ArchivedEvent]:
    """Every archived event of `files`, by call then id: read and sorted now (one chunk in memory
    at a time), handed out lazily."""
    chunks: list[Path] = []
    pending: list[ArchivedEvent] = []
    for event in _read(files):
        pending.append(event)
        if len(pending) >= CHUNK:
            chunks.append(_spill(sorted(pending, key=_sort_key), work, len(chunks)))
            pending = []
    pending.sort(key=_sort_key)
    if not chunks:
        return iter(pending)
    if pending:
        chunks.append(_spill(pending, work, len(chunks)))
    return heapq.merge(*(_unspill(c) for c in chunks), key=_sort_key)


def _spill(events: list[ArchivedEvent], work: Path, n: int) -> Path:
    path = work / f"chunk-{n}.pickle"
    with open(path, "wb") as handle:
        for i in range(0, len(events), _BLOCK):
            pickle.dump(events[i:i + _BLOCK], handle, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _unspill(path: Path) -> Iterator[ArchivedEvent]:
    """A chunk this process wrote itself, block by block."""
    handle: IO[bytes]
    with open(path, "rb") as handle:
        while True:
            try:
                block = pickle.load(handle)  # a file of our own, written by _spill
            except EOFError:
                return
            yield from block


def with_archive(report: VerifyReport, check: ArchiveCheck) -> VerifyReport:
    """verify's report with what the archive check found: a month that does not hold is a
    violation (the report is not ok: exit 4)."""
    return report.model_copy(update={
        "ok": report.ok and not check.violations,
        "archive": check.path,
        "archive_months_checked": check.months_checked,
        "archive_violations": check.violations,
        "archive_months_online": check.not_registered,
    })
