"""The all-contexts Triage without a database: how answers combine (console/core/everywhere.py), how
the contexts are asked (console/db/everywhere.py, with a stand-in for one context's poll: each at
once, each within its time, a hung or broken one named down), and the words
(console/operator/present/everywhere.py): PARTIAL first, never an all-clear while a context is
unknown."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

from rich.console import Console

from console.core.everywhere import AllTriage, ContextTriage, unanswered
from console.core.models import Counts, JobSummary
from console.db.everywhere import triage_everywhere
from console.operator.present.everywhere import all_contexts_text, partial_words, verdict
from console.shared.contexts import Context

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)


def call(n: int, health: str, *, state: str = "running") -> JobSummary:
    return JobSummary.model_validate(dict(
        id=uuid.UUID(f"{n:08x}-0000-4000-8000-000000000000"), tool="pay", side_effect="mutating_unverifiable",
        state=state, owner_id="w-1", fencing_token=1, attempt=1, max_attempts=3, idempotency_key=f"k{n}",
        created_at=NOW - timedelta(minutes=n), heartbeat_at=NOW, lease_until=NOW + timedelta(seconds=20),
        health=health, db_now=NOW))


def up(name: str, *calls: JobSummary, needs_human: int | None = None, read_from: str = "primary") -> ContextTriage:
    human = sum(1 for c in calls if c.health == "outcome_unknown") if needs_human is None else needs_human
    return ContextTriage(name=name, up=True, read_from=read_from, rows=list(calls),
                         counts=Counts(needs_human=human, running=len(calls), db_now=NOW))


def render(renderable: object, width: int = 200) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


# ----------------------------------------------------------------------------- combining


def test_a_context_that_did_not_answer_makes_the_answer_partial_and_never_an_all_clear():
    answer = AllTriage(contexts=[up("a"), up("b"), unanswered("c", "connection refused")], timeout_seconds=5)
    assert answer.partial and [c.name for c in answer.down] == ["c"]
    assert not answer.all_clear, "nothing shown in a and b says nothing of c"
    whole = AllTriage(contexts=[up("a"), up("b")], timeout_seconds=5)
    assert not whole.partial and whole.all_clear
    assert not AllTriage(contexts=[], timeout_seconds=5).all_clear, "no context asked is no all-clear either"
    assert not AllTriage(contexts=[unanswered("c", "x")], timeout_seconds=5).all_clear


def test_no_all_clear_while_a_call_needs_attention_or_a_human_anywhere():
    assert not AllTriage(contexts=[up("a"), up("b", call(1, "heartbeat_late"))], timeout_seconds=5).all_clear
    # more calls wait than the rows carry (the triage's limit): the count still counts
    assert not AllTriage(contexts=[up("a", needs_human=3)], timeout_seconds=5).all_clear


def test_rows_carry_their_context_and_come_worst_first_across_contexts():
    answer = AllTriage(contexts=[
        up("a", call(1, "heartbeat_late"), call(2, "over_stage_timeout")),
        unanswered("down", "no answer within 5s"),
        up("b", call(3, "outcome_unknown", state="outcome_unknown"), call(4, "heartbeat_late")),
    ], timeout_seconds=5)
    assert [(r.context, r.call.idempotency_key) for r in answer.rows] == [
        ("b", "k3"),  # outcome unknown first, wherever it is
        ("a", "k1"), ("b", "k4"),  # then heartbeat late, context by context in the file's order
        ("a", "k2"),
    ]
    assert answer.needs_human == 1
    assert len({r.key for r in answer.rows}) == 4


def test_the_same_call_id_in_two_contexts_is_two_rows():
    same = call(1, "zombie")
    rows = AllTriage(contexts=[up("a", same), up("b", same)], timeout_seconds=5).rows
    assert [r.key for r in rows] == [f"a/{same.id}", f"b/{same.id}"]


def test_the_json_document_has_its_contract_keys():
    answer = AllTriage(contexts=[up("a", call(1, "outcome_unknown", state="outcome_unknown"), read_from="replica"),
                                 unanswered("c", "connection refused")], timeout_seconds=2.5)
    doc = answer.document()
    assert list(doc) == ["partial", "all_clear", "down", "timeout_seconds", "contexts", "rows"]
    assert doc["partial"] is True and doc["all_clear"] is False and doc["down"] == ["c"]
    a, c = doc["contexts"]
    assert list(a) == ["name", "up", "error", "read_from", "production", "counts", "attention"]
    assert a["up"] is True and a["read_from"] == "replica" and a["counts"]["needs_human"] == 1 and a["attention"] == 1
    assert c == {"name": "c", "up": False, "error": "connection refused", "read_from": "primary",
                 "production": False, "counts": None, "attention": None}, "a down context's counts are unknown, not 0"
    row = doc["rows"][0]
    assert list(row)[:2] == ["context", "id"] and row["context"] == "a" and row["health"] == "outcome_unknown"


# ----------------------------------------------------------------------------- asking every context


def ctx(name: str, **fields: object) -> Context:
    return Context(name=name, dsn=f"postgresql://{name}.invalid/x", **fields)  # type: ignore[arg-type]


def test_every_context_is_asked_at_once():
    # no context answers until all four are being asked: asked one after another, the first waits
    # in vain and every context is down (a bound on the time taken could fail on a loaded machine)
    together = threading.Barrier(4, timeout=20)

    def slow(context: Context, timeout: float) -> ContextTriage:
        together.wait()
        return up(context.name)

    answer = triage_everywhere([ctx("a"), ctx("b"), ctx("c"), ctx("d")], timeout=30, poll=slow)
    assert [c.name for c in answer.contexts] == ["a", "b", "c", "d"], "in the file's order, whoever answered first"
    assert not answer.partial, f"asked one after another: {answer.down}"


def test_a_context_that_hangs_is_down_once_its_time_is_up_and_holds_up_nobody():
    release = threading.Event()

    def poll(context: Context, timeout: float) -> ContextTriage:
        if context.name == "hangs":
            release.wait(30)  # never answers within the test
            return up(context.name)
        return up(context.name, call(1, "heartbeat_late"))

    begun = time.monotonic()
    try:
        answer = triage_everywhere([ctx("ok"), ctx("hangs")], timeout=1.0, poll=poll)
    finally:
        release.set()
    took = time.monotonic() - begun
    # not before its time, and not held up by the one that hangs (30 s); the slack above the 1 s is
    # a loaded machine's, which a tighter bound did not leave
    assert 0.9 < took < 6.0, took
    assert answer.partial and answer.down[0].name == "hangs"
    assert answer.down[0].error == "no answer within 1s"
    assert [r.context for r in answer.rows] == ["ok"]


def test_a_late_answer_is_dropped():
    # the answer comes once the time is up and the answer given, whenever a loaded machine gets
    # there (a poll of a fixed 0.5 s is in time if the asking thread is stalled 0.3 s)
    given = threading.Event()

    def poll(context: Context, timeout: float) -> ContextTriage:
        given.wait(30)
        return up(context.name)

    answer = triage_everywhere([ctx("slow")], timeout=0.2, poll=poll)
    given.set()
    asking = [t for t in threading.enumerate() if t.name == "ask:slow"]
    for thread in asking:
        thread.join(30)
    assert asking and not any(t.is_alive() for t in asking), "the late answer came"
    assert answer.partial and not answer.contexts[0].up, "the answer given stays what it was"


def test_a_poll_that_raises_leaves_its_context_down_with_why():
    def poll(context: Context, timeout: float) -> ContextTriage:
        if context.name == "broken":
            raise RuntimeError("a bug of ours")
        return up(context.name)

    answer = triage_everywhere([ctx("broken", read_dsn="postgresql://r.invalid/x", production=True), ctx("fine")],
                               timeout=2, poll=poll)
    broken = answer.contexts[0]
    assert not broken.up and broken.error == "RuntimeError: a bug of ours"
    assert broken.read_from == "replica" and broken.production
    assert answer.contexts[1].up and answer.partial


# ----------------------------------------------------------------------------- the words


def test_partial_is_said_first_with_every_down_context_and_why():
    answer = AllTriage(contexts=[up("prod-eu", call(1, "heartbeat_late")), unanswered("prod-us", "connection refused"),
                                 unanswered("staging", "no answer within 5s")], timeout_seconds=5)
    assert partial_words(answer) == ("PARTIAL: 2 of 3 contexts did not answer (prod-us, staging): this is not the "
                                     "whole answer, and not an all-clear")
    text = render(all_contexts_text(answer))
    lines = text.splitlines()
    assert lines[0].startswith("PARTIAL: 2 of 3 contexts did not answer")
    assert "prod-us is DOWN: connection refused" in text and "staging is DOWN: no answer within 5s" in text
    assert "1 call needs attention in 1 context; 2 of 3 contexts did not answer: there may be more." in text
    assert "Nothing needs" not in text


def test_nothing_to_show_in_a_partial_answer_is_not_an_all_clear():
    answer = AllTriage(contexts=[up("a"), unanswered("b", "connection refused")], timeout_seconds=5)
    text, style = verdict(answer)
    assert text == "Nothing needs attention in the 1 of 2 contexts that answered, but 1 did not: this is NOT an all-clear."
    assert "green" not in style
    assert "Nothing needs a human" not in render(all_contexts_text(answer))
    nobody = AllTriage(contexts=[unanswered("a", "x"), unanswered("b", "y")], timeout_seconds=5)
    assert verdict(nobody)[0] == "No context answered (2 asked): nothing is known."


def test_the_all_clear_when_every_context_answered_with_nothing():
    answer = AllTriage(contexts=[up("a"), up("b", read_from="replica")], timeout_seconds=5)
    text = render(all_contexts_text(answer))
    assert "PARTIAL" not in text
    assert "Nothing needs a human in any of the 2 contexts: every lease is healthy." in text
    assert "read from the replica (read_dsn) of b; from the dsn of the others" in text


def test_at_80_columns_the_context_whether_it_answered_and_the_call_stay_whole():
    answer = AllTriage(contexts=[up("staging-long-name", call(3, "zombie")), unanswered("prod-us", "no answer")],
                       timeout_seconds=5)
    text = render(all_contexts_text(answer, 80), 80)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    table_lines = [line for line in text.splitlines() if line.lstrip().startswith(("staging-long-name", "prod-us "))]
    assert len(table_lines) == 4, text  # the down line, two in the contexts' table, one call
    assert any("DOWN" in line for line in table_lines) and "00000003" in text and "zombie" in text
    assert "…" not in text, "nothing that must stay is cut"
