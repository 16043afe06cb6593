"""`leasectl admin retention --keep DURATION --archive DIR`: every whole month of the history that
ended more than DURATION ago leaves the database, oldest first, and only as a verified archive:

  1. the month's rows are written to DIR/job_events-YYYY-MM.jsonl.gz (console/operator/archive.py:
     under a temporary name, flushed, renamed);
  2. the file is read back: its rows, first and last id must be what the database holds for the
     month, every line an event of that month in id order; then its manifest entry (with the
     file's sha256) is written;
  3. the metric rollup is brought past the month (0008: the counters keep what is dropped);
  4. the database checks once more, under a lock, that the month holds what was archived, then
     detaches and drops its partition, registers the month (job_events_archive) and journals the
     action (fleet_events history_archived), in one transaction (migration 0021).

Killed at any instant, it leaves the month in the database, or a verified archive of it, never
neither: a file under its final name is whole, the manifest names only a file read back, and the
drop commits with the register. Run again, it picks up where it stopped (a month already written
and still matching is not written again). Without a retention run nothing is ever dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from console.core.retention import Facts, Month, MonthResult, RetentionReport
from console.db import audit as audit_db
from console.db import retention as db
from console.db.connect import Conn, connect, run_one
from console.operator.archive import ArchiveDir, FileFacts, MonthEntry, file_name, month_text
from console.shared.config import SessionLimits
from console.shared.errors import LeasectlError, PermissionDenied
from console.shared.faults import crash_at

# retention counts and streams whole months: one statement may read a month's partition through
RETENTION_LIMITS = SessionLimits(statement_timeout_ms=600_000, lock_timeout_ms=2_000, idle_in_transaction_ms=60_000)


def cutoff_for(now: datetime, keep: timedelta) -> datetime:
    """Months that ended at or before this instant go (the database's clock, `keep` back)."""
    return now - keep


def plan(conn: Conn, keep: timedelta) -> tuple[datetime, list[Month]]:
    now = audit_db.now(conn)
    cutoff = cutoff_for(now, keep)
    return cutoff, db.months_before(conn, cutoff)


def check_may_archive(conn: Conn) -> None:
    row = run_one(conn, "admin/may_archive")
    if not row or not row["may_archive"]:
        raise PermissionDenied("retention drops partitions of the history: only the schema owner may "
                               "(leasectl_archive_month, migration 0021)",
                               hint="run it with the login `leasectl migrate` uses")


def archive_months(conn: Conn, months: list[Month], archive: ArchiveDir, *, operator: str, reason: str | None,
                   report: RetentionReport, on_month: Callable[[MonthResult], None] | None = None) -> None:
    """Each month in turn, oldest first; the first that fails stops the run (a later month must not
    leave while an earlier one stays: the online history would have a hole)."""
    written = archive.manifest()
    for month in months:
        result = _archive_one(conn, month, archive, written.get(month_text(month.month)), operator=operator,
                              reason=reason, report=report)
        report.months.append(result)
        if on_month:
            on_month(result)


def _archive_one(conn: Conn, month: Month, archive: ArchiveDir, entry: MonthEntry | None, *, operator: str,
                 reason: str | None, report: RetentionReport) -> MonthResult:
    name = file_name(month.month)
    held = db.facts(conn, month)
    back = _already_archived(archive, entry, month, held)
    if back is None:
        crash_at("retention:before_write")
        with archive.month_writer(month.month) as out:
            audit_db.export(conn, out, fmt="jsonl", since=month.range_from,
                            until=month.range_to - timedelta(microseconds=1))
        crash_at("retention:written")
        back = archive.read_back(name, month.range_from, month.range_to)
        _check_same(month, held, back, archive)
        archive.record(MonthEntry(month=month_text(month.month), file=name, rows=back.rows, first_id=back.first_id,
                                  last_id=back.last_id, sha256=back.sha256, range_from=month.range_from.isoformat(),
                                  range_to=month.range_to.isoformat(),
                                  written_at=datetime.now(UTC).isoformat(timespec="seconds")))
        crash_at("retention:verified")
    folded = db.fold_through(conn, held.last_id)
    if held.last_id is not None and folded < held.last_id:
        raise LeasectlError(f"{month_text(month.month)} is archived and verified, but the metric rollup has counted "
                            f"events up to id {folded}, not yet the month's last ({held.last_id}): not dropped",
                            hint="a transaction that began long ago still runs; run the same command again later")
    report.archived_before = db.drop_month(conn, month, held, sha256=back.sha256, file=name, actor=operator,
                                           reason=reason)
    return MonthResult(month=month_text(month.month), file=name, rows=held.rows, first_id=held.first_id,
                       last_id=held.last_id, sha256=back.sha256, outcome="archived")


def _already_archived(archive: ArchiveDir, entry: MonthEntry | None, month: Month,
                      held: Facts) -> FileFacts | None:
    """An earlier run that stopped after writing and verifying this month: its file still reads
    back as its manifest entry says and as the database holds. Anything else is written again."""
    if entry is None or not archive.has_file(entry):
        return None
    back = archive.read_back(entry.file, month.range_from, month.range_to)
    same = (back.problem is None and back.sha256 == entry.sha256 and back.rows == entry.rows == held.rows
            and back.first_id == entry.first_id == held.first_id and back.last_id == entry.last_id == held.last_id)
    return back if same else None


def _check_same(month: Month, held: Facts, back: FileFacts, archive: ArchiveDir) -> None:
    if back.problem is None and (back.rows, back.first_id, back.last_id) == (held.rows, held.first_id, held.last_id):
        return
    (archive.path / file_name(month.month)).unlink(missing_ok=True)
    what = back.problem or (f"the file holds {back.rows} rows (ids {back.first_id} to {back.last_id}), the database "
                            f"{held.rows} (ids {held.first_id} to {held.last_id})")
    raise LeasectlError(f"the archive of {month_text(month.month)} did not read back as written: {what}; the file "
                        "was removed and nothing was dropped")


def run_retention(dsn: str, *, keep: timedelta, archive: str, operator: str, reason: str | None = None,
                  on_month: Callable[[MonthResult], None] | None = None) -> RetentionReport:
    """The whole run without a question (`--yes`): what the CLI does once it is confirmed."""
    target = ArchiveDir.for_writing(archive)
    with connect(dsn, limits=RETENTION_LIMITS) as conn:
        check_may_archive(conn)
        return archive_in(conn, keep, target, operator=operator, reason=reason, on_month=on_month)


def archive_in(conn: Conn, keep: timedelta, target: ArchiveDir, *, operator: str, reason: str | None,
               on_month: Callable[[MonthResult], None] | None = None) -> RetentionReport:
    """Rows old enough waiting in the default partition get their months first, then every month
    old enough is archived, oldest first."""
    cutoff, _ = plan(conn, keep)
    db.adopt_default_rows(conn, cutoff)
    cutoff, months = plan(conn, keep)
    report = RetentionReport(cutoff=cutoff, archive=str(target.path))
    archive_months(conn, months, target, operator=operator, reason=reason, report=report, on_month=on_month)
    return report
