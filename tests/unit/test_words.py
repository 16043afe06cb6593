"""Counts in words, in the console and the CLI alike: "1 call", "1 event", "1 agent", never
"1 calls" -- one helper says them all (console.shared.text.counted) -- and a bulk action that
would send nothing says so instead of asking for a count of zero."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from console.core.bulk import plan
from console.core.models import Event, FleetAgent, FleetSnapshot, JobSummary, Shutdown, ShutdownRequested
from console.operator import present
from console.operator.present.bulk import plan_words
from console.shared.text import counted

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
ID = uuid.UUID("8f1b7c3d-0000-4000-8000-000000000001")
CONSOLE = Path(__file__).resolve().parents[2] / "console"
# the words people read: the console, the CLI and the rules they share
WORDS = [CONSOLE / "operator", CONSOLE / "shared", CONSOLE / "core"]


def render(renderable: object, width: int = 120) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_the_one_helper():
    assert counted(1, "call") == "1 call"
    assert counted(0, "call") == "0 calls"
    assert counted(2, "agent") == "2 agents"
    assert counted(1_000, "call") == "1,000 calls", "thousands are grouped, as the CLI's other counts"
    assert counted(2, "child", "children") == "2 children"


def test_one_event_one_agent_in_the_clis_words():
    one = [Event(id=1, job_id=ID, at=NOW, kind="claimed", actor="w-3", fencing_token=1, state_from="queued",
                 state_to="running", owner_to="w-3")]
    title = render(present.history_table(one)).splitlines()[0]
    assert "(1 event," in title, title  # `leasectl history`, and the call's detail screen
    shutdown = Shutdown(id=uuid.uuid4(), root_agent_id="planner-1", mode="drain", state="draining",
                        requested_by="dana", reason="deploy", requested_at=NOW, window_seconds=60, agents=1,
                        db_now=NOW)
    said = present.shutdown_message(ShutdownRequested(shutdown=shutdown, request_id=uuid.uuid4()))
    assert "(1 agent, window 60s)" in said, said
    agent = FleetAgent(id="planner-1", parent_id=None, kind="k", state="draining", started_at=NOW, depth=0,
                       db_now=NOW)
    tables = present.fleet_tables(FleetSnapshot(agents=[agent], shutdowns=[shutdown]))
    assert "planner-1 (1 agent)" in "".join(render(t, width=200) for t in tables), "`leasectl fleet`"


def test_a_bulk_plan_that_sends_nothing_says_so_instead_of_zero():
    done = JobSummary.model_validate(dict(
        id=ID, tool="search", side_effect="read_only", state="succeeded", owner_id=None, fencing_token=1,
        attempt=1, idempotency_key="k", created_at=NOW - timedelta(minutes=1), db_now=NOW))
    nothing = render(plan_words(plan("cancel", [done])))
    assert nothing.startswith("Nothing to cancel: 1 call will be skipped: 1 — a succeeded call cannot be"), nothing
    assert "0 calls" not in nothing and "Cancel 0" not in nothing
    assert render(plan_words(plan("approve_retry", []))).startswith("No retry to approve: no call is selected")


# a count written before a plural noun by hand: `f"{n} calls"` says "1 calls" one day
HAND_PLURAL = re.compile(r"\{[^{}]*\}\s+(calls|events|agents|grants|records|actions|checks|violations|keys)\b")


def test_no_count_is_pluralised_by_hand():
    found = []
    for path in sorted(p for where in WORDS for p in where.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for match in HAND_PLURAL.finditer(line):
                if "more than" in line[max(match.start() - 12, 0):match.start()]:
                    continue  # "more than {limit:,} calls": a limit is never one
                found.append(f"{path.relative_to(CONSOLE.parent)}:{number}: {match.group(0)}")
    assert not found, "say counts with console.shared.text.counted:\n" + "\n".join(found)
