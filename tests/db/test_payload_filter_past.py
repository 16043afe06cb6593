"""`payload:` in the past (`jobs --at`, at: on Calls): refused for a role that may not read payloads,
and a search out of time said so, as in the present (tests/db/test_payload_filter.py)."""

from __future__ import annotations

import pytest

from console.core.filters import parse_filter
from console.db import reads
from console.db.audit import jobs_at
from console.db.connect import connect
from console.shared.errors import PayloadSearchTimedOut, PermissionDenied
from tests.db.test_payload_filter import (  # noqa: F401 - the fixtures
    LOGINS,
    SHORT,
    TOOLS,
    calls,
    no_payload_login,
    table_locked,
)


def test_the_past_refuses_and_bounds_payload_alike(no_payload_login, db, table_locked):  # noqa: F811
    from console.db.audit import past_start, write_jobs_at

    dsn, _ = no_payload_login
    with connect(dsn) as theirs:
        now = reads.db_info(theirs).db_now
        with pytest.raises(PermissionDenied, match="SELECT privilege on tool_jobs.payload"):
            jobs_at(theirs, now, parse_filter("payload:$.invoice=INV-7"), start=past_start(theirs, now))
        with pytest.raises(PermissionDenied, match="SELECT privilege on tool_jobs.payload"):
            write_jobs_at(theirs, [].append, now, parse_filter("payload:refund"), start=past_start(theirs, now))
    with connect(db.dsn, limits=SHORT) as mine:
        now = reads.db_info(mine).db_now
        start = past_start(mine, now)
        with pytest.raises(PayloadSearchTimedOut):
            jobs_at(mine, now, parse_filter("payload:$.invoice=INV-7"), start=start)
