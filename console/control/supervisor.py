"""The control plane: carries out fleet shutdowns and sweeps expired leases (`leasectl supervise`).

A shutdown moves requested -> draining | aborting -> reconciling -> terminated (seed 003). Each
step of one shutdown is one transaction holding that shutdown's row lock, so two supervisors never
do the same step at once (the second skips it), and a supervisor killed mid-step leaves nothing
half done: the next one re-reads the state and carries on. Everything a step decides comes from
the database and its clock; nothing is kept in memory between ticks.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from console.db.connect import Conn, connect, run, run_one
from console.shared.config import SessionLimits
from console.shared.errors import DatabaseUnavailable, LeasectlError
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


def tick(conn: Conn, *, supervisor_id: str, sweep: bool = True) -> TickReport:
    """One pass of the control plane: the expired-lease sweep, then one step of every shutdown."""
    report = TickReport()
    if sweep:
        swept = run(conn, "supervisor/sweep")
        report.swept = len(swept)
        for row in swept:
            report.notes.append(f"sweep: {str(row['id'])[:8]} {row['state_from']} -> {row['state_to']} "
                                f"({row['reason']})")
    for active in run(conn, "supervisor/shutdowns_active"):
        try:
            advance(conn, active["id"], supervisor_id=supervisor_id, report=report)
        except DatabaseUnavailable:
            raise
        except LeasectlError as exc:  # this shutdown waits for the next tick; the others go on
            report.failures.append(f"shutdown {str(active['id'])[:8]}: {exc}")
            log.warning("shutdown %s: %s", active["id"], exc)
    return report


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
    """Do this phase's work; True when the shutdown moved to its next phase."""
    sid, root, state = s["id"], s["root_agent_id"], s["state"]
    label = f"shutdown {str(sid)[:8]} ({s['mode']} of {root})"

    def note(text: str) -> None:
        report.notes.append(f"{label}: {text}")

    if state == "requested":
        return _move(conn, s, "draining" if s["mode"] == "drain" else "aborting", note)

    # every phase first catches agents still running (a child registered at the last moment)
    moved = run(conn, "supervisor/subtree_agents_to", root_agent_id=root,
                state_to="aborting" if state == "aborting" else "draining")
    if moved:
        note(f"{counted(len(moved), 'agent')} now {moved[0]['state']}")
    if state == "reconciling":
        run(conn, "supervisor/subtree_agents_to", root_agent_id=root, state_to="reconciling")

    never = run(conn, "supervisor/subtree_cancel_queued", root_agent_id=root, shutdown_id=sid)
    if never:
        note(f"{counted(len(never), 'queued call')} cancelled before starting")
    if state == "aborting":
        asked = run(conn, "supervisor/subtree_request_cancel", root_agent_id=root, shutdown_id=sid)
        if asked:
            note(f"cancel requested of {counted(len(asked), 'running call')}; each must be confirmed by its worker")
    if state == "reconciling" or (state == "aborting" and s["window_over"]):
        fenced = run(conn, "supervisor/subtree_fence_unconfirmed", root_agent_id=root, shutdown_id=sid)
        unknown = sum(1 for f in fenced if f["state_to"] == "outcome_unknown")
        if fenced:
            note(f"window over: {counted(len(fenced) - unknown, 'unconfirmed call')} fenced and cancelled"
                 + (f", {unknown} outcome unknown (approvals)" if unknown else ""))

    status = run_one(conn, "supervisor/subtree_status", root_agent_id=root)
    assert status is not None
    live = status["queued"] + status["running"] + status["cancel_requested"]
    if state == "draining":
        if live == 0:
            return _move(conn, s, "reconciling", note)
        if s["window_over"]:
            note(f"window over with {counted(live, 'call')} still running: aborting them")
            return _move(conn, s, "aborting", note)
        report.waiting.append(f"{label}: draining, {counted(live, 'call')} may still finish within the window")
        return False
    if state == "aborting":
        if live == 0:
            return _move(conn, s, "reconciling", note)
        report.waiting.append(f"{label}: aborting, {counted(live, 'cancel')} not yet confirmed by their workers")
        return False

    # reconciling: the record is written only when nothing of the subtree can still change
    if live:  # rows locked by someone else: the next tick finishes them
        report.waiting.append(f"{label}: reconciling, {counted(live, 'call')} locked by another session")
        return False
    if status["unconfirmed"] and not s["window_over"]:  # agents may still confirm within the window
        report.waiting.append(f"{label}: reconciling, {status['unconfirmed']} of {counted(status['agents'], 'agent')} "
                              "have not confirmed they stopped")
        return False
    revoked = run(conn, "supervisor/subtree_revoke_grants", root_agent_id=root)
    record = run_one(conn, "supervisor/write_reconciliation", shutdown_id=sid, written_by=supervisor_id)
    if record is not None:
        report.records.append(record["id"])
        unaccounted = len(record["children_unaccounted"])
        children = (f"{counted(unaccounted, 'agent')} UNACCOUNTED" if unaccounted
                    else f"all {counted(len(record['children_confirmed']), 'agent')} confirmed")
        note(f"reconciled: {counted(len(record['in_flight']), 'call')}, {counted(len(revoked), 'grant')} revoked, "
             f"{len(record['grants_expired'])} expired; {children}")
    run(conn, "supervisor/subtree_agents_to", root_agent_id=root, state_to="terminated")
    return _move(conn, s, "terminated", note)


def _move(conn: Conn, s: dict[str, Any], state_to: str, note: Callable[[str], None]) -> bool:
    moved = run_one(conn, "supervisor/shutdown_advance", shutdown_id=s["id"], state_from=s["state"],
                    state_to=state_to)
    if moved is not None:
        note(f"{s['state']} -> {state_to}")
    return moved is not None


class Supervisor:
    """`leasectl supervise`: tick every `interval` seconds (sooner when a shutdown is requested),
    sweep every `sweep_interval`; survives the database going away and coming back."""

    def __init__(self, dsn: str, *, supervisor_id: str | None = None, interval: float = 1.0,
                 sweep_interval: float = 5.0, on_report: Callable[[TickReport], None] | None = None) -> None:
        self.dsn = dsn
        self.supervisor_id = supervisor_id or default_supervisor_id()
        self.interval = interval
        self.sweep_interval = sweep_interval
        self.on_report = on_report

    def once(self) -> TickReport:
        with connect(self.dsn, limits=SUPERVISOR_LIMITS, application_name="leasectl-supervisor") as conn:
            return tick(conn, supervisor_id=self.supervisor_id)

    def _connect_pair(self) -> tuple[Conn, Conn]:
        conn = connect(self.dsn, limits=SUPERVISOR_LIMITS, application_name="leasectl-supervisor")
        try:
            listener = connect(self.dsn, limits=SUPERVISOR_LIMITS, application_name="leasectl-supervisor-listen")
        except BaseException:
            conn.close()
            raise
        return conn, listener

    def run(self, stop: threading.Event) -> None:
        backoff = 0.5
        last_sweep = 0.0
        while not stop.is_set():
            try:
                conn, listener = self._connect_pair()
            except DatabaseUnavailable as exc:
                log.warning("supervisor: %s; retrying in %.1fs", exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            try:
                run(listener, "meta/listen_fleet")
                backoff = 0.5
                while not stop.is_set():
                    sweep = time.monotonic() - last_sweep >= self.sweep_interval
                    report = tick(conn, supervisor_id=self.supervisor_id, sweep=sweep)
                    if sweep:
                        last_sweep = time.monotonic()
                    if self.on_report and (report.notes or report.failures):
                        self.on_report(report)
                    # a requested shutdown (or any fleet change) wakes us before the interval
                    for _ in listener.notifies(timeout=self.interval, stop_after=1):
                        pass
            except Exception as exc:  # noqa: BLE001 - leasectl's errors or a dropped connection's
                log.warning("supervisor lost its connection: %s; reconnecting", exc)
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            finally:
                for c in (conn, listener):
                    try:
                        c.close()
                    except Exception:  # noqa: BLE001
                        pass
