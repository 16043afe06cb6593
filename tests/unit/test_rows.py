"""Rows as models: lists of calls are validated strictly in one call (console.db.connect.rows_as),
so every type psycopg hands over for them must be one strict mode takes as it is."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pydantic import ValidationError

from console.core.audit import JobAsOf
from console.core.models import JobSummary
from console.db.connect import rows_as

NOW = datetime(2026, 12, 4, 2, 13, tzinfo=UTC)


def _row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = dict(
        id=uuid.uuid4(), tool="search", side_effect="read_only", state="running", owner_id="w-1", fencing_token=3,
        attempt=1, max_attempts=5, idempotency_key="k-1", created_at=NOW, lease_until=NOW,
        lease_seconds=Decimal("60"), heartbeat_seconds=Decimal("0.25"), jitter_seconds=Decimal("0"),
        completed_despite_cancel=False, health="healthy", db_now=NOW, as_of=NOW, payload_size=12,
        lease_left_seconds=1.5, clock_now=NOW)
    row.update(changes)
    return row


def test_the_types_psycopg_delivers_pass_strict_validation():
    """numeric arrives as Decimal (the tools' sizing), bigint and integer as int, uuid as UUID."""
    got = rows_as(JobAsOf, [_row()])
    assert got[0].lease_seconds == 60.0 and isinstance(got[0].lease_seconds, float)
    assert got[0].heartbeat_seconds == 0.25 and got[0].fencing_token == 3
    summary = rows_as(JobSummary, [_row()])[0]
    assert summary.lease_seconds == 60.0 and not hasattr(summary, "as_of"), "columns it has no field for are dropped"


@pytest.mark.parametrize("bad", [dict(state="sleeping"), dict(fencing_token="3"), dict(id=str(uuid.uuid4())),
                                 dict(created_at="2026-12-04T02:13:00Z")])
def test_strict_validation_still_refuses_what_the_database_never_sends(bad):
    with pytest.raises(ValidationError):
        rows_as(JobSummary, [_row(**bad)])
