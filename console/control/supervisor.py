"""The control plane: carries out fleet shutdowns, sweeps expired leases and works bulk operations in
the background (`leasectl supervise`).

A shutdown moves requested -> draining | aborting -> reconciling -> terminated (docs/seeds.md §003). Each
step of one shutdown is one transaction holding that shutdown's row lock, so two supervisors never
do the same step at once (the second skips it), and a supervisor killed mid-step leaves nothing
half done: the next one re-reads the state and carries on. Everything a step decides comes from
the database and its clock; nothing is kept in memory between ticks.

Bulk operations (migration 0023): each tick works the running ones started with --background, or
left without progress by their CLI, for up to BULK_SECONDS_PER_TICK, a batch per transaction
(console/db/bulk.py: the database hands each worker calls no other holds, and each call's outcome
commits with its action, so the supervisor and a CLI may work one operation at once), and closes the
stopping ones once their batches in flight have committed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic import BaseModel

from console.db import bulk
from console.db.connect import Conn, run, run_one
from console.db.lane import Lane
from console.db.migrate import PARTITIONS_AHEAD
from console.db.pooler import Pooler, can_listen
from console.shared.config import SessionLimits
from console.shared.errors import DatabaseUnavailable, LeasectlError, PermissionDenied, RowLocked
from console.shared.text import counted

log = logging.getLogger("leasectl.supervisor")

# Steps lock agents' rows and walk a subtree: give them longer than a console read, but never
# wait long for a lock (a busy row is retried at the next tick).
SUPERVISOR_LIMITS = SessionLimits(statement_timeout_ms=30_000, lock_timeout_ms=2_000, idle_in_transaction_ms=60_000)

# requested -> phase -> aborting -> reconciling -> terminated: at most four moves in one tick
_MAX_MOVES = 5


def default_supervisor_id() -> str:
    return f"supervisor@{socket.gethostname()}:{os.getpid()}"


class TickReport(BaseModel):
    swept: int = 0
    notes: list[str] = []
    records: list[uuid.UUID] = []
    failures: list[str] = []
    waiting: list[str] = []  # what each shutdown waits for (shown by --once, not every tick)


def tick(conn: Conn, *, supervisor_id: str, sweep: bool = True,
         lock_hold_limit: float | None = None) -> TickReport:
    """One pass of the control plane: the expired-lease sweep, then one step of every shutdown."""
    report = TickReport()
    _end_lock_holders(conn, report, LOCK_HOLD_LIMIT_SECONDS if lock_hold_limit is None else lock_hold_limit)
    if sweep:
        swept = run(conn, "supervisor/sweep")
        report.swept = len(swept)
        for row in swept:
            report.notes.append(f"sweep: {str(row['id'])[:8]} {row['state_from']} -> {row['state_to']} "
                                f"({row['reason']})")
        _raise_lease_watch(conn, report)
    _ensure_event_partitions(conn, report)
    for active in run(conn, "supervisor/shutdowns_active"):
        try:
            advance(conn, active["id"], supervisor_id=supervisor_id, report=report)
        except DatabaseUnavailable:
            raise
        except LeasectlError as exc:  # this shutdown waits for the next tick; the others go on
            report.failures.append(f"shutdown {str(active['id'])[:8]}: {exc}")
            log.warning("shutdown %s: %s", active["id"], exc)
    _propose_for_orphans(conn, report, supervisor_id)
    _work_bulk_operations(conn, report, supervisor_id)
    return report


# the time one tick gives the bulk operations (a batch of 50 takes tens of milliseconds): the sweep
# and the shutdowns wait at most this long for their next tick
BULK_SECONDS_PER_TICK = 2.0


def _work_bulk_operations(conn: Conn, report: TickReport, supervisor_id: str,
                          budget: float = BULK_SECONDS_PER_TICK) -> None:
    """The bulk operations that are the supervisor's (bulk/workable.sql), worked batch by batch
    until the tick's budget is spent; a stopping one closed once its batches in flight committed.
    A failure stops that operation's work for this tick (nothing of the failed batch was applied);
    it is kept on the operation for the console and the CLI to show, and tried again next tick."""
    try:
        rows = run(conn, "bulk/workable", idle_seconds=bulk.WORKER_IDLE_SECONDS, limit=10)
    except PermissionDenied as exc:  # a control plane without the grant: the fleet still runs
        report.failures.append(f"bulk operations not worked: {exc}")
        return
    deadline = time.monotonic() + budget
    for row in rows:
        label = f"bulk operation {str(row['id'])[:8]} ({row['action']})"
        if time.monotonic() >= deadline and row["state"] == "running":
            report.waiting.append(f"{label}: {row['done']:,} of {row['total']:,} done, more next tick")
            continue
        try:
            op = bulk.work(conn, row["id"], worker=supervisor_id, deadline=deadline, wait=False)
        except DatabaseUnavailable:
            raise
        except RowLocked:  # closing waits for a batch in flight elsewhere: next tick
            report.waiting.append(f"{label}: stopping, a batch in flight elsewhere finishes first")
            continue
        except LeasectlError as exc:
            report.failures.append(f"{label}: {exc}")
            log.warning("%s: %s", label, exc)
            try:
                bulk.note_error(conn, row["id"], str(exc), worker=supervisor_id)
            except LeasectlError:
                pass
            continue
        if op.done > row["done"]:
            report.notes.append(f"{label}: {counted(op.done - row['done'], 'call')} settled, {op.done:,} of "
                                f"{op.total:,} done ({op.applied:,} applied, {op.refused:,} refused, "
                                f"{op.failed:,} failed)")
        if op.state != row["state"]:
            report.notes.append(f"{label}: {row['state']} -> {op.state}")
        elif not op.over:
            report.waiting.append(f"{label}: {op.state}, {op.done:,} of {op.total:,} done")


def _raise_lease_watch(conn: Conn, report: TickReport) -> None:
    """After the sweep has resolved every expired lease it could, claims may skip their own search
    for one until the earliest running lease can run out (migration 0020). A login without the
    right only leaves claims searching, as they did before 0020."""
    try:
        run(conn, "supervisor/raise_lease_watch")
    except PermissionDenied as exc:
        report.failures.append(f"lease watch not raised: {exc}")


def _ensure_event_partitions(conn: Conn, report: TickReport) -> None:
    """The history's partitions for this month and the next two (migration 0021), so that no
    month starts without one: a row whose month has none lands in job_events_default, which doctor
    flags. Created under a one-second lock timeout: a tick that cannot have the lock tries again at
    the next one, two months ahead of need."""
    try:
        created = run_one(conn, "meta/ensure_event_partitions", ahead=PARTITIONS_AHEAD)
    except (PermissionDenied, RowLocked) as exc:
        report.failures.append(f"history partitions not created: {exc}")
        return
    if created and created["created"]:
        report.notes.append(f"history: {created['created']} monthly partition(s) created ahead")


def _propose_for_orphans(conn: Conn, report: TickReport, supervisor_id: str) -> None:
    """Seed 003's core failure, noticed: children still running under a terminated or silent
    ancestor. The control plane proposes an abort of each orphaned subtree and a human decides
    (`leasectl shutdowns accept`); it never starts one by itself (migration 0018)."""
    for row in run(conn, "supervisor/propose_orphan_shutdowns", supervisor_id=supervisor_id):
        report.notes.append(f"proposed shutdown {str(row['id'])[:8]} (abort of {row['root_agent_id']}): "
                            f"{row['reason']}; `leasectl shutdowns accept {str(row['id'])[:8]}` starts it")


# A worker login's transaction that holds leasectl's tables longer than this is ended (migration
# 0015): well under any lease a tool may be given (docs/seeds.md §000.8 sizes them in tens of
# seconds), far over one statement of the reference worker (its statement timeout).
LOCK_HOLD_LIMIT_SECONDS = 10.0


def _end_lock_holders(conn: Conn, report: TickReport, limit: float) -> None:
    try:
        ended = run(conn, "supervisor/end_lock_holders", older_than_seconds=limit)
    except PermissionDenied as exc:  # a control plane without the grant: the fleet still runs
        log.warning("supervisor: may not end sessions that hold the fleet's rows: %s", exc)
        return
    for row in ended:
        report.notes.append(f"ended session {row['pid']} of {row['login']}: it held leasectl's tables in one "
                            f"transaction for {row['held_for_seconds']:.0f} s")


def advance(conn: Conn, shutdown_id: uuid.UUID, *, supervisor_id: str, report: TickReport | None = None) -> TickReport:
    """Carry one shutdown as far as it can go now, in one transaction."""
    report = report if report is not None else TickReport()
    with conn.transaction():
        for _ in range(_MAX_MOVES):
            shutdown = run_one(conn, "supervisor/shutdown_lock", shutdown_id=shutdown_id)
            if shutdown is None:  # another supervisor holds it, or it is over
                break
            if not _step(conn, shutdown, supervisor_id, report):
                break
    return report


def _step(conn: Conn, s: dict[str, Any], supervisor_id: str, report: TickReport) -> bool:
    """Do this phase's work; True when the shutdown moved to its next phase. The protocol of
    docs/seeds.md §003.2-§003.5, one phase per method: drain, abort, reconcile, terminate."""
    shutdown = _Shutdown(conn, s, supervisor_id, report)
    if shutdown.state == "requested":
        return shutdown.begin()
    shutdown.close_the_subtree()
    if shutdown.state == "draining":
        return shutdown.drain()
    if shutdown.state == "aborting":
        return shutdown.abort()
    return shutdown.reconcile()


class _Shutdown:
    """One step of one shutdown, in the transaction that holds its row lock."""

    def __init__(self, conn: Conn, row: dict[str, Any], supervisor_id: str, report: TickReport) -> None:
        self.conn = conn
        self.row = row
        self.supervisor_id = supervisor_id
        self.report = report
        self.id, self.root, self.state = row["id"], row["root_agent_id"], row["state"]
        self.window_over: bool = row["window_over"]
        self.label = f"shutdown {str(self.id)[:8]} ({row['mode']} of {self.root})"

    def note(self, text: str) -> None:
        self.report.notes.append(f"{self.label}: {text}")

    def waits(self, text: str) -> bool:
        """Nothing more to do this tick: say what the shutdown waits for."""
        self.report.waiting.append(f"{self.label}: {text}")
        return False

    def move(self, state_to: str) -> bool:
        return _move(self.conn, self.row, state_to, self.note)

    # ------------------------------------------------------------------ the phases
    def begin(self) -> bool:
        """Out of `requested`: made by the control plane, never by the subtree (§003.3)."""
        return self.move("draining" if self.row["mode"] == "drain" else "aborting")

    def close_the_subtree(self) -> None:
        """Every phase first: agents still running (a child registered at the last moment) join
        the phase, and queued calls are cancelled before they start (§003.2)."""
        moved = run(self.conn, "supervisor/subtree_agents_to", root_agent_id=self.root,
                    state_to="aborting" if self.state == "aborting" else "draining")
        if moved:
            self.note(f"{counted(len(moved), 'agent')} now {moved[0]['state']}")
        if self.state == "reconciling":
            run(self.conn, "supervisor/subtree_agents_to", root_agent_id=self.root, state_to="reconciling")
        self.move_to_replacement()
        never = run(self.conn, "supervisor/subtree_cancel_queued", root_agent_id=self.root, shutdown_id=self.id)
        if never:
            self.note(f"{counted(len(never), 'queued call')} cancelled before starting")

    def drain(self) -> bool:
        """Draining: running calls may finish within the window; what still runs after it is aborted."""
        live = self.live_calls()
        if live == 0:
            return self.move("reconciling")
        if self.window_over:
            self.note(f"window over with {counted(live, 'call')} still running: aborting them")
            return self.move("aborting")
        return self.waits(f"draining, {counted(live, 'call')} may still finish within the window")

    def abort(self) -> bool:
        """Aborting: cancel requested of every running call, each to be confirmed by its worker;
        once the window is over the unconfirmed ones are fenced out (§003.3)."""
        asked = run(self.conn, "supervisor/subtree_request_cancel", root_agent_id=self.root, shutdown_id=self.id)
        if asked:
            self.note(f"cancel requested of {counted(len(asked), 'running call')}; each must be confirmed by its "
                      "worker")
        if self.window_over:
            self.fence_unconfirmed()
        live = self.live_calls()
        if live == 0:
            return self.move("reconciling")
        return self.waits(f"aborting, {counted(live, 'cancel')} not yet confirmed by their workers")

    def reconcile(self) -> bool:
        """Reconciling: the record is written only when nothing of the subtree can still change
        (§003.5), then the subtree is terminated."""
        self.fence_unconfirmed()
        status = self.status()
        live = _live(status)
        if live:  # rows locked by someone else: the next tick finishes them
            return self.waits(f"reconciling, {counted(live, 'call')} locked by another session")
        if status["unconfirmed"] and not self.window_over:  # agents may still confirm within the window
            return self.waits(f"reconciling, {status['unconfirmed']} of {counted(status['agents'], 'agent')} "
                              "have not confirmed they stopped")
        self.write_record()
        return self.terminate()

    def terminate(self) -> bool:
        run(self.conn, "supervisor/subtree_agents_to", root_agent_id=self.root, state_to="terminated")
        return self.move("terminated")

    # ------------------------------------------------------------------ their parts
    def move_to_replacement(self) -> None:
        """The upgrade path: queued calls go to the new generation the shutdown names (each to the
        agent of its kind at its depth) instead of being cancelled; those that cannot, say why."""
        if self.row.get("replacement_agent_id") is None:
            return
        rows = run(self.conn, "supervisor/move_queued_calls", shutdown_id=self.id)
        moved = [r for r in rows if r["why_not"] is None]
        if moved:
            self.note(f"{counted(len(moved), 'queued call')} moved to {self.row['replacement_agent_id']}'s generation")
        for r in rows:
            if r["why_not"] is not None:
                self.note(f"call {str(r['job_id'])[:8]} ({r['tool']}) not moved: {r['why_not']}; cancelled instead")

    def fence_unconfirmed(self) -> None:
        fenced = run(self.conn, "supervisor/subtree_fence_unconfirmed", root_agent_id=self.root, shutdown_id=self.id)
        unknown = sum(1 for f in fenced if f["state_to"] == "outcome_unknown")
        if fenced:
            self.note(f"window over: {counted(len(fenced) - unknown, 'unconfirmed call')} fenced and cancelled"
                      + (f", {unknown} outcome unknown (approvals)" if unknown else ""))

    def write_record(self) -> None:
        """Grants revoked, then the reconciliation record, written by the control plane (§003.5)."""
        revoked = run(self.conn, "supervisor/subtree_revoke_grants", root_agent_id=self.root)
        record = run_one(self.conn, "supervisor/write_reconciliation", shutdown_id=self.id,
                         written_by=self.supervisor_id)
        if record is None:
            return
        self.report.records.append(record["id"])
        unaccounted = len(record["children_unaccounted"])
        children = (f"{counted(unaccounted, 'agent')} UNACCOUNTED" if unaccounted
                    else f"all {counted(len(record['children_confirmed']), 'agent')} confirmed")
        moved = (f" ({len(record['calls_moved'])} moved to {self.row['replacement_agent_id']}'s generation)"
                 if record["calls_moved"] else "")
        self.note(f"reconciled: {counted(len(record['in_flight']), 'call')}{moved}, {counted(len(revoked), 'grant')} "
                  f"revoked, {len(record['grants_expired'])} expired; {children}")

    def status(self) -> dict[str, Any]:
        status = run_one(self.conn, "supervisor/subtree_status", root_agent_id=self.root)
        assert status is not None
        return status

    def live_calls(self) -> int:
        return _live(self.status())


def _live(status: dict[str, Any]) -> int:
    """Calls of the subtree that can still change: queued, running, or waiting for a cancel."""
    return int(status["queued"] + status["running"] + status["cancel_requested"])


def _move(conn: Conn, s: dict[str, Any], state_to: str, note: Callable[[str], None]) -> bool:
    moved = run_one(conn, "supervisor/shutdown_advance", shutdown_id=s["id"], state_from=s["state"],
                    state_to=state_to)
    if moved is not None:
        note(f"{s['state']} -> {state_to}")
    return moved is not None


class Supervisor:
    """`leasectl supervise`: tick every `interval` seconds (sooner when a shutdown is requested),
    sweep every `sweep_interval`; survives the database going away and coming back.

    Behind a connection pooler in transaction mode nothing wakes it early (LISTEN would hear
    nothing there): it ticks on its interval, and says so once through `on_note` (else the log)."""

    def __init__(self, dsn: str, *, supervisor_id: str | None = None, interval: float = 1.0,
                 sweep_interval: float = 5.0, on_report: Callable[[TickReport], None] | None = None,
                 on_note: Callable[[str], None] | None = None) -> None:
        self.dsn = dsn
        self.supervisor_id = supervisor_id or default_supervisor_id()
        self.interval = interval
        self.sweep_interval = sweep_interval
        self.on_report = on_report
        self.on_note = on_note
        # one connection for the steps, one that LISTENs for fleet changes, each a lane
        # (console.db.lane: made again after a loss, with the one backoff)
        self._steps = self._lane("leasectl-supervisor")
        self._wakeups = self._lane("leasectl-supervisor-listen", setup=_listen_fleet)
        self._last_sweep = 0.0
        self.polling_reason: str | None = None  # why it ticks without LISTEN, once known

    def _lane(self, application_name: str, setup: Callable[[Conn], object] | None = None) -> Lane:
        return Lane(self.dsn, limits=SUPERVISOR_LIMITS, application_name=application_name, setup=setup)

    def once(self) -> TickReport:
        lane = self._lane("leasectl-supervisor")
        try:
            return lane.run(partial(tick, supervisor_id=self.supervisor_id))
        finally:
            lane.close()

    def run(self, stop: threading.Event) -> None:
        """Tick until `stop`. A connection lost (or any other failure of a tick) is made again after
        the lanes' backoff; a connection string that cannot work is the caller's to hear."""
        try:
            while not stop.is_set():
                try:  # a malformed connection string (BadInput) is not retried: the caller hears it
                    self._steps.connect()
                    if not self._polling():
                        self._wakeups.connect()
                except DatabaseUnavailable as exc:
                    self._wait(stop, exc)
                    continue
                try:
                    self._tick_until(stop)
                except Exception as exc:  # noqa: BLE001 - leasectl's errors or a dropped connection's
                    if not isinstance(exc, DatabaseUnavailable):  # a loss is counted by its lane
                        self._steps.drop(failure=exc)
                    self._wait(stop, exc)
        finally:
            self._steps.close()
            self._wakeups.close()

    def _polling(self) -> bool:
        """Whether the steps' connection goes through a transaction pooler: then nothing LISTENs
        (said once, with why)."""
        pooler = self._steps.pooler
        if pooler is None or pooler.keeps_sessions:
            return False
        if self.polling_reason is None:
            self.polling_reason = polling_note(pooler, self.interval)
            (self.on_note or log.warning)(self.polling_reason)
        return True

    def _wait(self, stop: threading.Event, exc: Exception) -> None:
        retry_in = max(self._steps.retry_in() or 0.0, self._wakeups.retry_in() or 0.0)
        log.warning("supervisor: %s; reconnecting in %.1f s", exc, retry_in)
        stop.wait(retry_in)

    def _tick_until(self, stop: threading.Event) -> None:
        if self._polling():
            while not stop.is_set():
                self._tick()
                stop.wait(self.interval)
            return
        with self._wakeups.use() as listener:
            while not stop.is_set():
                self._tick()
                # a requested shutdown (or any fleet change) wakes us before the interval
                for _ in listener.notifies(timeout=self.interval, stop_after=1):
                    pass

    def _tick(self) -> None:
        sweep = time.monotonic() - self._last_sweep >= self.sweep_interval
        report = self._steps.run(partial(tick, supervisor_id=self.supervisor_id, sweep=sweep))
        if sweep:
            self._last_sweep = time.monotonic()
        if self.on_report and (report.notes or report.failures):
            self.on_report(report)


def polling_note(pooler: Pooler, interval: float) -> str:
    return (f"the database is reached through a connection pooler in transaction mode ({pooler.how}), which cannot "
            f"carry LISTEN/NOTIFY: the supervisor ticks every {interval:g} s instead of waking on a fleet change")


def _listen_fleet(conn: Conn) -> None:
    if can_listen(conn):  # behind a transaction pooler the subscription would hear nothing
        run(conn, "meta/listen_fleet")
