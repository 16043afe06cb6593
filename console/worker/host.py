"""What the worker's helpers need of the worker that runs them, and nothing more (River's executor
and its narrow interfaces): a handler's CallContext (console.worker.context) takes its call's steps
through a CallHost; the heartbeat thread (console.worker.heartbeat) renews leases through a
LeaseHost. Worker (console.worker.runner) is both.

Why protocols and not Worker itself: the helpers then depend on these few promises, not on the
runner's internals, and the runner imports them without either importing it back (no cycle among
runner, context, heartbeat and calls; tests/unit/test_worker_interfaces.py keeps it so).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from console.db.lane import Lane
from console.shared.errors import LeasectlError
from console.worker.calls import ClaimedCall


class Journal(Protocol):
    """Who the helper works for, and where it tells what happened to a call."""

    @property
    def worker_id(self) -> str:
        """The owner the database knows this worker as: what every fenced statement names."""
        ...

    @property
    def partitioned(self) -> threading.Event:
        """Set while the worker is cut off from the database (the demo's simulated partition)."""
        ...

    def log_event(self, event: str, call: ClaimedCall, level: int = logging.INFO, **fields: Any) -> None:
        """One line about `call` in the worker's log, at once; nothing is sent to the database."""
        ...

    def record_event(self, call: ClaimedCall, kind: str, details: dict[str, Any]) -> None:
        """Journal `kind` for `call`: logged now, sent to the database as soon as it answers."""
        ...

    def report_database_error(self, call: ClaimedCall, statement: str, error: LeasectlError) -> None:
        """Log an error `statement` met for `call`; a lock wait or a statement timeout is journaled too."""
        ...


class CallHost(Journal, Protocol):
    """What a handler's CallContext needs: the call's steps written on the worker's shared connection."""

    def write(self, name: str, *, only_if: Callable[[], bool] | None = None,
              **params: Any) -> dict[str, Any] | None:
        """Run queries/<name>.sql and return its first row; with `only_if`, nothing is sent unless it
        still holds once the connection is free (else PreconditionLapsed)."""
        ...


class LeaseHost(Journal, Protocol):
    """What the heartbeat thread needs: a connection of its own, and an observer to tell."""

    @property
    def heartbeat_lane(self) -> Lane:
        """The renewals' own connection (events share it): no claim or call's write holds it up."""
        ...

    def observe(self, kind: str, call: ClaimedCall, db_time: datetime | None) -> None:
        """Tell the worker's observer that a guarded write of `kind` succeeded for `call`."""
        ...


__all__ = ["CallHost", "Journal", "LeaseHost"]
