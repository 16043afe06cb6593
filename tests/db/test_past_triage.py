"""Triage as it was (the past, rebuilt from the history) counts a call past its deadline as the
live Triage does: an expired lease, and past its deadline."""

from __future__ import annotations

import time
from datetime import timedelta

from console.db import audit
from console.operator.tui.screens.triage import past_triage
from tests.helpers import FAST, claim, enqueue, register_tool


def test_the_past_triage_counts_a_call_past_its_deadline(db):
    with db.connect() as conn:
        register_tool(conn, "search", "read_only", **FAST)
        now = conn.execute("select now() as t").fetchone()["t"]
        call = enqueue(conn, "search", deadline_at=now + timedelta(seconds=1))
        assert claim(conn, "w1", ["search"])["id"] == call["id"]
        time.sleep(1.3)
        at = conn.execute("select now() as t").fetchone()["t"]
        snapshot = past_triage(audit.jobs_at(conn, at, limit=100), at)
    assert snapshot.counts.past_deadline == 1
    assert snapshot.counts.expired_unswept == 1
