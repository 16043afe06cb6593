"""Enqueue a call from Python: worker/enqueue.sql with its trace read from a W3C `traceparent`.

    from console.worker import enqueue

    made = enqueue(conn, "web_search", f"search:{request_id}", {"q": "vendor status"},
                   agent_id="planner-1", traceparent=request.headers.get("traceparent"))

The call's `trace_id` is the one given, or the trace of the caller's `traceparent` (W3C trace
context: console.core.traces parses it; a bad one is BadTraceContext, bad input, never dropped in
silence). A call made with a `parent_id` and no trace of its own carries its parent's, as a chain's
next stage does (worker/complete_and_enqueue.sql): what a call made inside another call does stays
in the same trace.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from console.core.traces import trace_id_from
from console.db.connect import Conn
from console.worker import statements


@dataclass(frozen=True)
class Enqueued:
    """What enqueue.sql answered: the call (a new one, or the first of its key: created False)."""

    id: uuid.UUID
    state: str
    fencing_token: int
    created: bool


def enqueue(conn: Conn, tool: str, idempotency_key: str, payload: Any = None, *,
            agent_id: str | None = None, session_id: str | None = None, deadline_at: datetime | None = None,
            model: str | None = None, provider: str | None = None, parent_id: uuid.UUID | str | None = None,
            priority: int | None = None, accepted_at: datetime | None = None, trace_id: str | None = None,
            traceparent: str | None = None) -> Enqueued | None:
    """Enqueue a call (worker/enqueue.sql). `traceparent` (the caller's W3C trace context) or
    `trace_id` (32 lowercase hex digits) names its trace; both given, they must agree. With
    `parent_id` and neither, the call carries its parent's trace. The same idempotency key twice is
    the first call (created False). None: refused (the agent is not running, or the parent is not
    running or succeeded, or its chain has a cancel request). Raises BadTraceContext (bad input)
    for a trace that is not W3C trace context, before anything is sent."""
    # with a parent and no trace, the database gives the call its parent's (migration 0024)
    trace = trace_id_from(trace_id=trace_id, traceparent=traceparent)
    row = statements.first(conn, "worker/enqueue", tool=tool, idempotency_key=idempotency_key,
                           payload=Jsonb(payload), agent_id=agent_id, session_id=session_id,
                           deadline_at=deadline_at, model=model, provider=provider, parent_id=parent_id,
                           priority=priority, accepted_at=accepted_at, trace_id=trace)
    if row is None:
        return None
    return Enqueued(id=row["id"], state=row["state"], fencing_token=row["fencing_token"], created=row["created"])


__all__ = ["Enqueued", "enqueue"]
