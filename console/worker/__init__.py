"""The worker side: the lease protocol for any Python program, and the fenced receiver it talks to.

What a worker fleet imports::

    from console.worker import CallContext, ToolNoAnswer, Worker
    from console.worker import AsyncCallContext, AsyncWorker    # async handlers, one event loop
    from console.worker import enqueue                          # a call, its trace from a traceparent

Nothing here imports the operator's tools or Textual (import-linter keeps it so), nor needs
OpenTelemetry: with it installed, each attempt is a span (console.worker.tracing).
"""

from console.worker.aio import AsyncCallContext, AsyncWorker
from console.worker.calls import CallOutcome, serialise_result
from console.worker.enqueuing import Enqueued, enqueue
from console.worker.runner import (
    CallContext,
    CancelRequested,
    CheckRequired,
    ClaimedCall,
    DeadlinePassed,
    Handler,
    Heartbeat,
    LeaseLost,
    NextStage,
    OutcomeUnknown,
    OwnershipUnknown,
    RenewalStats,
    ToolFailed,
    ToolNoAnswer,
    Worker,
)

__all__ = [
    "AsyncCallContext", "AsyncWorker", "CallContext", "CallOutcome", "CancelRequested", "CheckRequired",
    "ClaimedCall", "DeadlinePassed", "Enqueued", "Handler",
    "Heartbeat", "LeaseLost", "NextStage", "OutcomeUnknown", "OwnershipUnknown", "RenewalStats", "ToolFailed",
    "ToolNoAnswer", "Worker", "enqueue", "serialise_result",
]
