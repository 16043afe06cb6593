"""The words the CLI and the console share (console/operator/present): one description of a call,
its history, an action's answer and the fleet."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from rich.console import Console

from console.core.models import (
    Applied,
    ChildEntry,
    Event,
    FleetAgent,
    HeldGrant,
    Job,
    JobSummary,
    ReconciliationRecord,
    Refused,
)
from console.operator import present
from console.operator.present.words import health_words, live_ages

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
ID = uuid.UUID("8f1b7c3d-0000-4000-8000-000000000001")


def call(**fields: object) -> Job:
    base = dict(id=ID, tool="web_search", side_effect="read_only", state="running", owner_id="w-3", fencing_token=2,
                attempt=1, max_attempts=3, idempotency_key="search:1", created_at=NOW - timedelta(minutes=1),
                claimed_at=NOW - timedelta(seconds=30), heartbeat_at=NOW - timedelta(seconds=2),
                lease_until=NOW + timedelta(seconds=18), health="healthy", db_now=NOW, lease_seconds=20,
                heartbeat_seconds=4, jitter_seconds=4, missed_heartbeats=2)
    base.update(fields)
    return Job.model_validate(base)


def render(renderable: object, width: int = 120) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_a_call_in_words():
    fields = dict((label, value.plain) for label, value in present.call_fields(call()))
    assert fields["state"] == "running" and fields["owner"] == "w-3" and fields["fencing token"] == "2"
    assert fields["heartbeat age"] == "2s" and fields["lease left"] == "18s"
    assert fields["lease health"].startswith("healthy")
    assert fields["created"] == "2026-12-03 02:12:00.000 UTC", "times carry their zone"


def test_a_finished_call_has_no_lease_health_or_ages():
    done = call(state="succeeded", health=None, lease_until=None, finished_at=NOW)
    fields = dict((label, value.plain) for label, value in present.call_fields(done))
    assert fields["lease health"].strip() == "—" and fields["heartbeat age"] == "—" and fields["lease left"] == "—"
    assert health_words("zombie", "succeeded")[0] == "zombie", "a zombie still shows on a finished call"
    assert live_ages(done, NOW)["lease"][0] == "—"


def test_the_answer_of_an_action_says_what_is_true_now_sanitized():
    applied = Applied(action="cancel", job_id=ID, state="cancel_requested", fencing_token=2)
    assert "NOT stopped yet" in present.action_message(applied)
    refused = Refused(action="cancel", job_id=ID, reason="the call changed since you looked",
                      now=JobSummary.model_validate(call(owner_id="w-\u202egnp\x1b]2;T\x07").model_dump()))
    words = present.action_message(refused)
    assert "now state running" in words and "token 2" in words
    assert "\u202e" not in words and "\x1b" not in words and "\\u202e" in words
    assert present.action_verb("mark_terminal", "failed") == "Mark as failed"


def test_history_folds_long_names_into_the_details():
    short = [Event(id=1, job_id=ID, at=NOW, kind="claimed", actor="w-3", fencing_token=1, state_from="queued",
                   state_to="running", owner_to="w-3")]
    assert " owner " in render(present.history_table(short)).splitlines()[1]
    long_owner = "w-" + "x" * 100
    folded = [Event(id=1, job_id=ID, at=NOW, kind="claimed", actor=long_owner, fencing_token=1, state_from="queued",
                    state_to="running", owner_to=long_owner, details={"attempt": 1})]
    text = render(present.history_table(folded), width=100)
    assert "queued → running" in text and '"attempt": 1' in text, "nothing is lost, only moved"


def test_the_id_column_survives_a_100k_character_owner():
    rows = [JobSummary.model_validate(call(owner_id="w" * 100_000).model_dump())]
    text = render(present.jobs_table(rows), width=100)
    assert ID.hex[:8] in text.replace("-", ""), "leasectl jobs prints the id whatever the owner"
    assert len(max(text.splitlines(), key=len)) <= 100


def test_the_blast_radius_of_a_shutdown():
    def agent(id_: str, parent: str | None, depth: int, running: int = 0, queued: int = 0, grants: int = 0):
        return FleetAgent(id=id_, parent_id=parent, kind="k", state="running", started_at=NOW, depth=depth,
                          running_calls=running, queued_calls=queued, live_grants=grants, db_now=NOW)

    tree = [agent("planner-1", None, 0, running=2), agent("code-1", "planner-1", 1, queued=1),
            agent("sandbox-1", "code-1", 2, grants=1)]
    grant = HeldGrant(id=uuid.uuid4(), agent_id="sandbox-1", kind="credential", resource="vault:prod-db",
                      issued_by="code-1", issued_at=NOW, expires_at=NOW + timedelta(hours=1), expires_in_seconds=3600)
    assert present.subtree_counts(tree) == "3 agents, 2 running calls, 1 queued call, 1 live grant"
    text = render(present.subtree_summary("drain", tree, [grant]))
    assert "sandbox-1" in text and "vault:prod-db" in text and "will revoke" in text


def test_a_record_says_the_unaccounted_first():
    record = ReconciliationRecord(
        id=uuid.uuid4(), shutdown_id=uuid.uuid4(), written_by="sup", written_at=NOW, root_agent_id="planner-1",
        mode="drain", requested_by="dana", reason="deploy", requested_at=NOW - timedelta(minutes=2),
        children_unaccounted=[ChildEntry(agent_id="sandbox-1", parent_id="code-1", kind="sandbox", depth=2)])
    text = render(present.reconciliation_panel(record))
    assert text.index("UNACCOUNTED") < text.index("in flight"), "the most important field first"
    assert "sandbox-1" in text and "2m00s later" in text
