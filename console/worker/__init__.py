"""The worker side: the lease protocol for any Python program, and the fenced receiver it talks to.

What a worker fleet imports::

    from console.worker import CallContext, ToolNoAnswer, Worker
    from console.worker import AsyncCallContext, AsyncWorker    # async handlers, one event loop

Nothing here imports the operator's tools or Textual (import-linter keeps it so).
"""

from console.worker.aio import AsyncCallContext, AsyncWorker
from console.worker.calls import CallOutcome, serialise_result
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
    "ClaimedCall", "DeadlinePassed", "Handler",
    "Heartbeat", "LeaseLost", "NextStage", "OutcomeUnknown", "OwnershipUnknown", "RenewalStats", "ToolFailed",
    "ToolNoAnswer", "Worker", "serialise_result",
]
