"""`leasectl jobs`' table: a 150-character tool name or owner once collapsed the id
column for every operator. Whatever the other values' lengths, each call's id prefix is shown
whole -- as many characters as tell the listed calls apart -- and long tool and owner cells are
cut with an ellipsis."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from console.core.models import JobSummary
from console.operator.present.calls import id_prefix_chars, jobs_table

NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)


def call(job_id: uuid.UUID, tool: str = "web_search", owner: str | None = "w-1") -> JobSummary:
    return JobSummary(id=job_id, tool=tool, side_effect="read_only", state="running", owner_id=owner,
                      fencing_token=3, attempt=1, max_attempts=3, idempotency_key="k", created_at=NOW,
                      db_now=NOW, heartbeat_at=NOW, lease_until=NOW + timedelta(seconds=30),
                      heartbeat_age_seconds=1, lease_left_seconds=29, health="healthy")


def rendered(rows: list[JobSummary], width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(jobs_table(rows))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize("long", ["tool", "owner", "both"])
def test_a_long_tool_or_owner_never_takes_the_id_column(width, long):
    tool = "t" * 150 if long in ("tool", "both") else "web_search"
    owner = "w-" + "o" * 150 if long in ("owner", "both") else "w-1"
    ids = [uuid.uuid4() for _ in range(3)]
    rows = [call(ids[0], tool, owner), call(ids[1]), call(ids[2], tool="pay")]
    lines = rendered(rows, width)
    assert all(len(line) <= width for line in lines)
    assert any(line.split()[:1] == ["call"] for line in lines), lines
    for job_id in ids:
        row = next((line for line in lines if line.lstrip().startswith(str(job_id)[:8])), None)
        assert row is not None, f"{str(job_id)[:8]} missing at width {width}:\n" + "\n".join(lines)
    long_row = next(line for line in lines if line.lstrip().startswith(str(ids[0])[:8]))
    assert "…" in long_row and ("t" * 150) not in long_row and ("o" * 150) not in long_row
    assert "running" in long_row or width < 100, long_row  # the state keeps its room


def test_ids_sharing_their_first_eight_characters_are_shown_long_enough_to_tell_apart():
    a = uuid.UUID("0123abcd-1111-4000-8000-000000000001")
    b = uuid.UUID("0123abcd-1122-4000-8000-000000000002")
    assert id_prefix_chars([a, b]) == 12  # "0123abcd-111" vs "0123abcd-112"
    lines = rendered([call(a, "t" * 150), call(b)], 120)
    assert any(line.lstrip().startswith("0123abcd-111 ") for line in lines), "\n".join(lines)
    assert any(line.lstrip().startswith("0123abcd-112 ") for line in lines), "\n".join(lines)


def test_the_shortest_prefix_is_eight_characters():
    assert id_prefix_chars([uuid.uuid4() for _ in range(5)]) >= 8
    assert id_prefix_chars([]) == 8
    one = uuid.uuid4()
    assert id_prefix_chars([one, one]) == 8, "the same call twice needs no longer prefix"
