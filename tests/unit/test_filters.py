"""The one filter grammar: parsing, bad input that shows the grammar, in-memory matching."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from console.core.filters import JobFilter, grammar, parse_filter
from console.core.models import JobSummary
from console.shared.errors import BadInput

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)


def call(**fields: object) -> JobSummary:
    base = dict(id=uuid.UUID("8f1b7c3d-0000-4000-8000-000000000001"), tool="payment_capture",
                side_effect="mutating_unverifiable", state="outcome_unknown", owner_id="w-3", fencing_token=2,
                attempt=1, idempotency_key="payment:inv-7:capture", agent_id="billing-agent", model="gpt-5.1",
                provider="openai", created_at=NOW, health="outcome_unknown", db_now=NOW)
    base.update(fields)
    return JobSummary.model_validate(base)


def test_every_key_and_bare_words():
    f = parse_filter("state:running tool:web_search owner:w-3 agent:a-1 key:report:42: id:8F1B-7c health:zombie "
                     "model:gpt-5.1 provider:openai class:unverifiable")
    assert (f.state, f.tool, f.owner, f.agent, f.key_prefix, f.id_prefix, f.health, f.model, f.provider,
            f.side_effect) == ("running", "web_search", "w-3", "a-1", "report:42:", "8f1b7c", "zombie", "gpt-5.1",
                               "openai", "mutating_unverifiable")
    assert parse_filter("queued").state == "queued"
    assert parse_filter("zombie").health == "zombie"
    assert parse_filter("8f1b").id_prefix == "8f1b"
    assert parse_filter("").empty and not parse_filter("queued").empty
    assert parse_filter(f.describe()) == f, "what the screen shows as active parses back to the same filter"


@pytest.mark.parametrize("text, says", [
    ("tool:", "nothing after"),
    ("flavour:vanilla", "unknown filter key"),
    ("report:42:", "unknown filter key"),        # an idempotency key must say key:
    ("payment", "name its key"),
    ("state:sleeping", "unknown state"),
    ("health:dead", "unknown health"),
    ("class:risky", "unknown side-effect class"),
    ("id:xyz", "not an id prefix"),
    ("state:queued state:running", "given twice"),
])
def test_bad_filters_are_bad_input_with_the_grammar(text, says):
    with pytest.raises(BadInput, match=says) as raised:
        parse_filter(text)
    assert raised.value.hint == grammar() and "state:" in grammar() and "class:" in grammar()


def test_the_false_all_clear_of_issue_12():
    """`tool:payment_capture` on Triage answered "nothing matches" while payments waited."""
    assert parse_filter("tool:payment_capture").matches(call())


def test_matching_in_memory():
    job = call()
    assert parse_filter("state:outcome_unknown class:unverifiable key:payment: id:8f1b7c3d").matches(job)
    assert parse_filter("owner:w-3 agent:billing-agent model:gpt-5.1 provider:openai").matches(job)
    for miss in ("state:running", "tool:web_search", "owner:w-4", "key:report:", "id:9", "health:zombie",
                 "class:read_only", "provider:google"):
        assert not parse_filter(miss).matches(job), miss
    assert JobFilter().matches(job)


def test_hostile_filter_text_is_sanitized_in_the_message():
    with pytest.raises(BadInput) as raised:
        parse_filter("\x1b]2;PWNED\x07:x")
    assert "\x1b" not in str(raised.value)
