"""Pictures of every screen and dialog, on the fixed scenario at its pinned instant.

`leasectl screenshots` writes them to screenshots/ for the README; the snapshot tests compare
the same pictures, so what the README shows is what the tests check.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from textual.pilot import Pilot

from console.core.filters import parse_filter
from console.db import bulk
from console.db.connect import Conn, connect, run
from console.db.session import ConsoleSession
from console.demo.scenario import ANCHOR
from console.operator.tui.app import LeasectlApp
from console.operator.tui.clock import FrozenClock
from console.operator.tui.screens.base import PollingScreen
from console.shared.contexts import Context

SIZE = (140, 45)
SMALL = (80, 24)  # what every screen must still make sense at: health and freshness first


def filter_to(short_id: str) -> list[str]:
    return ["2", "slash", *list(f"id:{short_id}"), "enter"]


@dataclass(frozen=True)
class Shot:
    name: str
    keys: list[str] = field(default_factory=list)
    until: str | None = None  # shown once this text is on screen
    read_only: bool = False
    title: str = ""
    size: tuple[int, int] = SIZE
    contexts: bool = False  # taken with PICTURE_CONTEXTS as the contexts file (picture_contexts)
    context: str | None = None  # the console opened in this context of PICTURE_CONTEXTS (make_app)
    # run on the scenario's database before the console opens (what the scenario itself has no
    # room for); a shot so prepared is written by `leasectl screenshots` after every other one
    prepare: Callable[[Conn], None] | None = None
    # compared by the snapshot tests; False for a picture whose ids and times are the moment's own
    # (its screen's behaviour has its own test, named with the shot)
    compared: bool = True


SHOTS = [
    Shot("triage", until="outcome unknown", title="1 Triage: what needs attention now, worst first"),
    Shot("calls", ["2"], until="page 1", title="2 Calls: every call, filterable, keyset pages"),
    Shot("calls_filtered", ["2", "slash", *list("state:running"), "enter"], until="filter state:running",
         title="2 Calls filtered with / (state:running)"),
    Shot("approvals", ["3"], until="may already have happened",
         title="3 Approvals: outcome unknown, grouped by side-effect class"),
    Shot("detail_zombie", [*filter_to("b5c7e033"), "enter"], until="receiver_rejected",
         title="Call detail: a zombie worker's stale writes, refused"),
    Shot("detail_payload", [*filter_to("71d2e8c0"), "enter", "p"], until="inv-7",
         title="Call detail with the payload revealed (p)"),
    Shot("dialog_cancel", [*filter_to("8f1b7c3d"), "c"], until="What will change",
         title="Cancel: requested is not stopped"),
    Shot("dialog_mark_terminal", [*filter_to("8f1b7c3d"), "t"], until="force: fence",
         title="Mark terminal on a live lease: force fences the owner out"),
    Shot("dialog_approve", ["3", "a"], until="first 8 characters",
         title="Approve a retry of an unverifiable side effect"),
    Shot("fleet", ["4"], until="ingest-1", title="4 Fleet: the agent tree, a drain under way, an abort reconciled"),
    Shot("dialog_drain", ["4", "d"], until="What will change", title="Drain a subtree: reason, window, the guard"),
    Shot("fleet_proposal", ["4", "tab"], until="Proposed: nothing happens",
         title="4 Fleet: an ORPHANED scraper, the supervisor's proposal first, ingest rolling to generation 2"),
    Shot("dialog_accept", ["4", "tab", "a"], until="What will change",
         title="Accept a proposed shutdown: who proposed it and why, what it will stop, the guard"),
    Shot("reconciliations", ["5"], until="UNACCOUNTED",
         title="5 Reconciliations: what each shutdown left, newest first"),
    Shot("record", ["5", "enter"], until="Agents that confirmed",
         title="A reconciliation record: the unaccounted agent first and loud, then every call and grant"),
    Shot("help", ["question_mark"], until="Lease health", title="? every binding, and what lease health means"),
    Shot("read_only", [], until="READ-ONLY", read_only=True, title="--read-only"),
    Shot("dialog_bulk", ["2", "slash", *list("state:running"), "enter", "asterisk", "c"], until="what will change",
         title="Bulk cancel of every call a filter matches: the blast radius, the count typed to confirm"),
    Shot("small_triage", until="outcome unknown", size=SMALL, title="Triage at 80x24: health, lease, freshness"),
    Shot("small_detail", [*filter_to("b5c7e033"), "enter"], until="zombie", size=SMALL,
         title="Call detail at 80x24"),
    Shot("small_dialog", [*filter_to("8f1b7c3d"), "t"], until="force: fence", size=SMALL,
         title="Mark terminal at 80x24: the answer and the buttons stay on screen"),
    Shot("small_approvals", ["3"], until="may already have happened", size=SMALL, title="Approvals at 80x24"),
    Shot("small_fleet", ["4"], until="ingest-1", size=SMALL, title="Fleet at 80x24"),
]
# 7 Metrics
SHOTS += [
    Shot("metrics", ["7"], until="stale writes/min",
         title="7 Metrics: the seeds' metrics by tool, and the last hour per minute"),
    Shot("metrics_by_model", ["7", "b"], until="by model: live now", title="7 Metrics by model (b switches)"),
    Shot("small_metrics", ["7"], until="stale writes/min", size=SMALL, title="Metrics at 80x24"),
]

# 6 Audit
AUDIT_ZOMBIE_THEN = [*list("job:b5c7e033"), "space", *list("at:2026-07-23T21:13:35Z")]
SHOTS += [
    Shot("audit", ["6"], until="Events across every call",
         title="6 Audit: the history across every call, newest first, keyset pages"),
    Shot("audit_owner", ["6", "slash", *AUDIT_ZOMBIE_THEN, "enter"], until="held by w-search-5",
         title="6 Audit: who held the zombie's call at 21:13:35 (job: and at:), from the history alone"),
    Shot("audit_journal", ["6", "j"], until="Operator journal",
         title="6 Audit: the operator journal across calls and shutdowns (j)"),
    Shot("small_audit", ["6", "slash", *AUDIT_ZOMBIE_THEN, "enter"], until="held by w-search-5", size=SMALL,
         title="Audit at 80x24: the answer on top, then the events"),
    Shot("calls_past", ["2", "slash", *list("at:2026-07-23T21:13:35Z"), "enter"], until="THE PAST",
         title="2 Calls as they were at 21:13:35 (at:): rebuilt from the history, the past said first"),
]

# 8 Chains, and a call's chain told as one story in its detail (report:42: stage 3 runs, its heartbeat late)
REPORT_STAGE_3 = "e91f2b64"
SHOTS += [
    Shot("chains", ["8"], until="where the time went",
         title="8 Chains: each chain's deadline, the stage it is at and its slowest stage; below, where its time went"),
    Shot("detail_chain", [*filter_to(REPORT_STAGE_3), "enter"], until="where the time went",
         title="Call detail: its chain as one story, every stage with the deadline left when it started and ended"),
    Shot("small_chains", ["8"], until="where the time went", size=SMALL, title="Chains at 80x24"),
]


# 9 All contexts: the scenario as a production context read from its replica, and a context that does
# not answer (nothing listens on port 1: refused at once, the same words on every machine)
PICTURE_CONTEXTS: dict[str, dict[str, object]] = {
    "prod-eu": {"dsn": "{dsn}", "read_dsn": "{dsn}", "production": True},
    "prod-us": {"dsn": "postgresql://oncall@127.0.0.1:1/leasectl"}}
SHOTS += [
    Shot("all_contexts", ["9"], until="PARTIAL", contexts=True,
         title="9 All contexts: Triage in every context at once; one does not answer: PARTIAL, never an all-clear"),
    Shot("small_all_contexts", ["9"], until="PARTIAL", contexts=True, size=SMALL, title="All contexts at 80x24"),
]


@contextmanager
def picture_contexts(dsn: str) -> Iterator[Path]:
    """PICTURE_CONTEXTS, the scenario's DSN in place of {dsn}, as the contexts file while a picture is
    taken (XDG_CONFIG_HOME points at a temporary directory, and back afterwards)."""
    before = os.environ.get("XDG_CONFIG_HOME")
    with tempfile.TemporaryDirectory(prefix="leasectl-pictures-") as home:
        path = Path(home) / "leasectl" / "contexts.toml"
        path.parent.mkdir(parents=True)
        lines = []
        for name, fields in PICTURE_CONTEXTS.items():
            lines.append(f"[contexts.{name}]")
            lines += [f"{key} = {json.dumps(value.replace('{dsn}', dsn) if isinstance(value, str) else value)}"
                      for key, value in fields.items()]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.environ["XDG_CONFIG_HOME"] = home
        try:
            yield path
        finally:
            if before is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = before


# the console in a production context, and ctrl+o over it: PICTURE_CONTEXTS, given to the console itself
SHOTS += [
    Shot("context_production", [], until="outcome unknown", context="prod-eu",
         title="The header names the context, always; a production one stands out in its colour"),
    Shot("contexts_picker", ["ctrl+o"], until="Connection refused", context="prod-eu",
         title="ctrl+o: the contexts, each asked at once whether it answers; enter switches the whole console"),
]


# v: the saved views of a list; s in the picker saves the filter on screen as one (a shared one: tab, space)
SHOTS += [
    Shot("views_picker", ["2", "slash", *list("state:running"), "enter", "v", "s", *list("running"), "space",
                          *list("now"), "tab", "space", "shift+tab", "enter", "s", *list("mine"), "enter"],
         until="SAVED — personal view 'mine'",
         title="v: the saved views of a list, personal or shared; enter applies one as / would, s saves the filter"),
]


def _runaway_cancel_half_done(conn: Conn) -> None:
    """A runaway agent's 1,200 queued searches, cancelled as a bulk operation (over 1,000 calls),
    600 of them sent and one refused (it changed after the plan): what the progress view shows."""
    run(conn, "demo/runaway_calls", calls=1200)
    plan = bulk.plan("cancel", bulk.selection(conn, where=parse_filter("agent:runaway-7")))
    op = bulk.start(conn, plan, operator="dana", reason="runaway agent: INC-4711",
                    filter_text="agent:runaway-7")
    bulk.work(conn, op.id, worker="cli:dana", max_batches=8)  # batches of 50, in the plan's order
    changed = plan.send[420]
    run(conn, "operator/request_cancel", job_id=changed.id, seen_state=changed.state,
        seen_token=changed.fencing_token, operator="lee", reason="by hand, before the bulk reached it")
    bulk.work(conn, op.id, worker="cli:dana", max_batches=4)


# 0: the bulk operations (over 1,000 calls), enter: one's progress -- its ids and times are today's
# (tests/tui/test_bulk_operations.py checks that screen's behaviour)
SHOTS += [
    Shot("bulk_operation", ["0", "enter"], until="of 1,200 done", prepare=_runaway_cancel_half_done,
         compared=False, title="0: a bulk operation over 1,200 calls, worked in batches: its progress, the calls "
                               "not applied and why; s stops it"),
]


def picture_context_set(dsn: str) -> dict[str, Context]:
    """PICTURE_CONTEXTS as contexts, the scenario's DSN in place of {dsn}."""
    return {name: Context(name=name, **{key: value.replace("{dsn}", dsn) if isinstance(value, str) else value
                                        for key, value in fields.items()})
            for name, fields in PICTURE_CONTEXTS.items()}


def make_app(dsn: str, *, read_only: bool = False, operator: str = "dana", context: str | None = None) -> LeasectlApp:
    """`context`: opened in that context of PICTURE_CONTEXTS, which ctrl+o lists (no file is read)."""
    if context is not None:
        known = picture_context_set(dsn)
        session = ConsoleSession(dsn, operator=operator, read_only=read_only, clock=ANCHOR.isoformat(),
                                 label="leasectl", context=known[context], known_contexts=lambda: known)
        return LeasectlApp(session, clock=FrozenClock(), listen=False)
    session = ConsoleSession(dsn, operator=operator, read_only=read_only, label="demo", clock=ANCHOR.isoformat(),
                             shown_dsn="user=postgres dbname=leasectl_demo host=/home/you/.local/share/leasectl/demo")
    return LeasectlApp(session, clock=FrozenClock(), listen=False)


def screen_text(app: LeasectlApp) -> str:
    """Everything on screen as plain text, dialogs over their screens, as a person reads it."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      color_system="truecolor", legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


async def settle(pilot: Pilot, until: Callable[[], bool] | None = None, timeout: float = 10.0) -> None:
    """Wait for the screen's data (and an optional condition), the way a person would."""
    app = pilot.app
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        await pilot.pause(0.05)
        base = next((s for s in reversed(app.screen_stack) if isinstance(s, PollingScreen)), None)
        loaded = base is None or base.loaded_once
        if loaded and (until is None or until()) and not getattr(app.screen, "busy", False):
            await pilot.pause(0.1)
            return
    raise AssertionError("the console did not settle in time; on screen:\n" + screen_text(app))  # type: ignore[arg-type]


async def play(pilot: Pilot, shot: Shot) -> None:
    await settle(pilot)
    for key in shot.keys:
        await pilot.press(key)
        await settle(pilot)
    if shot.until:
        until = shot.until
        await settle(pilot, lambda: until in screen_text(pilot.app))  # type: ignore[arg-type]


async def capture(dsn: str, shot: Shot, directory: Path) -> Path:
    if shot.prepare is not None:
        with connect(dsn) as conn:
            shot.prepare(conn)
    app = make_app(dsn, read_only=shot.read_only, context=shot.context)
    path = directory / f"{shot.name}.svg"
    with picture_contexts(dsn) if shot.contexts else nullcontext():
        async with app.run_test(size=shot.size) as pilot:
            await play(pilot, shot)
            app.save_screenshot(filename=path.name, path=str(directory))
    return path
