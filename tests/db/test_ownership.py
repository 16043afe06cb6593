"""One ownership answer: `leasectl show --json` carries `ownership`, the stretches of the
one replay (console/core/ownership.py), and at every instant of a history with claims, an expiry, a
reclaim, a forced fence and a cancel it agrees with `leasectl audit owner`. The call detail draws
the same stretches: a lease that ran out ends its stretch at its expiry, not at the later reclaim
(the detail's own replay once said the reclaim)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from rich.console import Console
from typer.testing import CliRunner

from console.core.models import Event
from console.db import reads
from console.operator.cli import app
from console.operator.present import ownership_table
from tests.helpers import FAST, cancel, claim, enqueue, expire_lease, fail, mark_terminal, register_tool

CONTRACT = ["owner_id", "fencing_token", "held_from", "held_until", "ended_by"]


@pytest.fixture
def invoke(db):
    runner = CliRunner()

    def run(*args: str) -> dict | list:
        result = runner.invoke(app, [*args, "--json", "--dsn", db.dsn], env={"USER": "ownership-test"})
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    return run


@pytest.fixture
def story(db):
    """claimed by w1, its lease runs out, reclaimed by w2 (token 2), w2 fails it back to the queue,
    w3 claims it (token 3), a cancel is requested and never confirmed, an operator forces it failed
    (the owner fenced out, token 4)."""
    with db.connect() as conn:
        register_tool(conn, "flaky", "read_only", **FAST)
        e = enqueue(conn, "flaky")
        claim(conn, "w1", ["flaky"])
        expire_lease(conn, e["id"])
        time.sleep(1.1)  # the reclaim comes a second after the expiry: the detail's clock tells them apart
        second = claim(conn, "w2", ["flaky"])
        assert second is not None and second["fencing_token"] == 2
        assert fail(conn, second, "w2", retryable=True)["state"] == "queued"
        third = claim(conn, "w3", ["flaky"])
        assert third["fencing_token"] == 3
        assert cancel(conn, e["id"], "running", 3).get("state") == "cancel_requested"
        forced = mark_terminal(conn, e["id"], "cancel_requested", 3, "failed", force=True)
        assert forced is not None and forced["fencing_token"] == 4
        events = conn.execute("select at from job_events where job_id = %s order by id", (e["id"],)).fetchall()
    return e["id"], [r["at"] for r in events]


def instants(times: list[datetime], stretches: list[dict]) -> list[datetime]:
    """Every event's instant, a microsecond either side of it, every stretch's ends, and between."""
    edges = set(times)
    for s in stretches:
        for key in ("held_from", "held_until"):
            if s[key]:
                edges.add(datetime.fromisoformat(s[key]))
    found = set()
    ordered = sorted(edges)
    for t in ordered:
        found.update({t - timedelta(microseconds=1), t, t + timedelta(microseconds=1)})
    for a, b in pairwise(ordered):
        found.add(a + (b - a) / 2)
    return sorted(found)


def holder_at(stretches: list[dict], t: datetime) -> dict | None:
    for s in stretches:
        start = datetime.fromisoformat(s["held_from"])
        end = datetime.fromisoformat(s["held_until"]) if s["held_until"] else None
        if start <= t and (end is None or t < end):
            return s
    return None


def test_show_json_ownership_is_audit_owner_at_every_instant(invoke, story):
    job_id, times = story
    shown = invoke("show", str(job_id))
    ownership = shown["ownership"]
    assert [list(s) for s in ownership] == [CONTRACT] * len(ownership), "the contract's keys, in order"
    assert [(s["owner_id"], s["fencing_token"], s["ended_by"]) for s in ownership] == [
        ("w1", 1, "expired"), ("w2", 2, "requeued"), ("w3", 3, "fenced")]
    checked = 0
    for t in instants(times, ownership):
        if t < times[0]:
            continue  # before the call existed: audit owner says so, and show has nothing to say
        answer = invoke("audit", "owner", str(job_id), "--at", t.isoformat())
        expected = holder_at(ownership, t)
        if expected is None:
            assert answer["owner_id"] is None, (t, answer)
        else:
            assert {k: answer[k] for k in CONTRACT} == expected, (t, answer, expected)
        checked += 1
    assert checked > 20


def test_an_expired_lease_ends_at_its_expiry_on_the_detail_screen_too(db, story):
    job_id, _ = story
    with db.connect() as conn:
        detail = reads.call_detail(conn, job_id)
        document = reads.job_document(conn, job_id)
    assert document is not None and detail.job is not None
    expiry = document.ownership[0].held_until
    reclaim = next(e.at for e in detail.events if e.kind == "reclaimed")
    assert expiry is not None and expiry < reclaim, "the lease ran out before the reclaim"
    console = Console(width=160, record=True, color_system=None)
    console.print(ownership_table(job_id, detail.events))
    text = console.export_text()
    first = next(line for line in text.splitlines() if line.strip().startswith("w1"))
    assert first.split()[3] == expiry.strftime("%H:%M:%S"), text  # "to": the expiry
    assert f"lease expired; reclaimed by w2 at {reclaim.strftime('%H:%M:%S')}" in first, text


def test_events_and_rows_replay_alike(db, story):
    """The replay takes the console's Events and the auditor's rows the same way."""
    from console.core.ownership import ownership

    job_id, _ = story
    with db.connect() as conn:
        rows = conn.execute("select * from job_events where job_id = %s order by id", (job_id,)).fetchall()
    from_rows = ownership(job_id, rows)
    from_events = ownership(job_id, [Event.model_validate(r) for r in rows])
    assert from_rows == from_events and len(from_rows) == 3
