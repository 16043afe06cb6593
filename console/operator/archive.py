"""The archive of job_events months that retention wrote (console/operator/retention.py) and that
`leasectl audit verify --archive DIR` checks: one file per month and one manifest per directory.

    DIR/job_events-YYYY-MM.jsonl.gz   the month's rows, oldest first (id order), one line each, the
                                      same typed JSON as `leasectl audit export --format jsonl`
                                      (keys console.core.audit.EXPORT_KEYS), gzip with no name and
                                      no time in its header: the same rows always make the same file
    DIR/manifest.json                 {"format": ..., "months": [{"month": "YYYY-MM", "file", "rows",
                                      "first_id", "last_id", "sha256", "range_from", "range_to",
                                      "written_at"}]}, ordered by month

Every file is written under a temporary name, flushed to disk and renamed, and the directory is
flushed after the rename: a file under its final name is always whole. The manifest entry is
written only after the file was read back and found to hold what the database holds.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from console.shared.errors import BadInput
from console.shared.text import sanitize

FORMAT = "leasectl-job-events-archive/1"
MANIFEST = "manifest.json"
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_CHUNK = 1 << 20


def file_name(month: date) -> str:
    return f"job_events-{month:%Y-%m}.jsonl.gz"


def month_text(month: date) -> str:
    return f"{month:%Y-%m}"


@dataclass(frozen=True)
class MonthEntry:
    """One archived month, as the manifest (and the database's job_events_archive) records it."""

    month: str
    file: str
    rows: int
    first_id: int | None
    last_id: int | None
    sha256: str
    range_from: str
    range_to: str
    written_at: str

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FileFacts:
    """What reading a month's file back found."""

    rows: int
    first_id: int | None
    last_id: int | None
    sha256: str
    problem: str | None = None  # a line that is not an event, ids out of order, a row outside the month


class ArchiveDir:
    """A directory of archived months. Reading it never writes; writing keeps each file whole."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_writing(cls, text: str) -> ArchiveDir:
        path = Path(text).expanduser()
        if path.exists() and not path.is_dir():
            raise BadInput(f"--archive {sanitize(text, max_chars=200)} is not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"--archive {sanitize(text, max_chars=200)}: {exc.strerror or exc}") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise BadInput(f"--archive {sanitize(text, max_chars=200)} is not writable")
        return cls(path)

    @classmethod
    def for_reading(cls, text: str) -> ArchiveDir:
        path = Path(text).expanduser()
        if not path.is_dir():
            raise BadInput(f"--archive {sanitize(text, max_chars=200)} is not a directory")
        return cls(path)

    # ------------------------------------------------------------------ the manifest

    def manifest(self) -> dict[str, MonthEntry]:
        """The months the manifest lists, by month text; none when there is no manifest yet. A
        manifest that cannot be read is refused, never taken as empty (that would archive again
        over it)."""
        path = self.path / MANIFEST
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            entries = [MonthEntry(**m) for m in data["months"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadInput(f"{sanitize(str(path), max_chars=200)} is not a leasectl archive manifest: "
                           f"{sanitize(str(exc), max_chars=200)}") from None
        return {e.month: e for e in entries}

    def record(self, entry: MonthEntry) -> None:
        """Add (or replace) one month's entry: the whole manifest is written again, atomically."""
        months = self.manifest()
        months[entry.month] = entry
        body = json.dumps({"format": FORMAT, "months": [months[m].record() for m in sorted(months)]}, indent=2)
        with self._atomic(MANIFEST) as handle:
            handle.write((body + "\n").encode("utf-8"))

    # ------------------------------------------------------------------ a month's file

    @contextmanager
    def month_writer(self, month: date) -> Iterator[IO[str]]:
        """A text sink for the month's lines; the file appears under its name only when the block
        ends without an exception, flushed to disk."""
        with self._atomic(file_name(month)) as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped:
            text = io.TextIOWrapper(zipped, encoding="utf-8", newline="")
            yield text
            text.flush()
            text.detach()

    def has_file(self, entry: MonthEntry) -> bool:
        return (self.path / entry.file).is_file()

    def read_back(self, name: str, month_from: datetime | None = None,
                  month_to: datetime | None = None) -> FileFacts:
        """Read a month's file through: its sha256, its rows, first and last id, and whether every
        line is an event in id order (and, when the month's bounds are given, inside them)."""
        digest = hashlib.sha256()
        path = self.path / name
        with open(path, "rb") as raw:
            while chunk := raw.read(_CHUNK):
                digest.update(chunk)
        rows, first, last, problem = 0, None, None, None
        try:
            for event in events_in(path):
                event_id = event.get("id")
                if not isinstance(event_id, int):
                    problem = f"line {rows + 1} has no id"
                    break
                if last is not None and event_id <= last:
                    problem = f"line {rows + 1}: id {event_id} after {last} (ids go up)"
                    break
                if month_from is not None and month_to is not None:
                    at = _instant(event.get("at"))
                    if at is None or not month_from <= at < month_to:
                        problem = f"line {rows + 1}: event {event_id} at {event.get('at')} is outside the month"
                        break
                first = event_id if first is None else first
                last = event_id
                rows += 1
        except (OSError, EOFError, ValueError) as exc:
            problem = f"unreadable: {exc}"
        return FileFacts(rows=rows, first_id=first, last_id=last, sha256=digest.hexdigest(), problem=problem)

    # ------------------------------------------------------------------ internals

    @contextmanager
    def _atomic(self, name: str) -> Iterator[IO[bytes]]:
        """A binary file written under a temporary name beside `name`, flushed to disk, renamed onto
        it and the directory flushed; on any exception removed, and `name` left as it was."""
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.path / name)
            self._sync_directory()
        except BaseException:
            _remove(temporary)
            raise

    def _sync_directory(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def events_in(path: Path) -> Iterator[dict[str, Any]]:
    """The events of an archived month's file, oldest first, as the export wrote them."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number} is not JSON ({exc.msg})") from None
            if not isinstance(event, dict):
                raise ValueError(f"line {number} is not an event")
            yield event


def _instant(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def parse_month(text: str) -> str:
    if not _MONTH.match(text):
        raise BadInput(f"{sanitize(text, max_chars=20)} is not a month (YYYY-MM)")
    return text
