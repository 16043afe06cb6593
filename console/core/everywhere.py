"""The all-contexts Triage as data: what each context answered -- its counts and the calls that
need attention -- or that it did not answer, and the whole answer, which knows whether it is
partial. No I/O here: console.db.everywhere polls the contexts; the CLI and the console put the
answer into words (console.operator.present.everywhere).

The one rule: a context that did not answer is unknown, and an answer with an unknown context is
partial. A partial answer is never an all-clear, whatever the contexts that did answer say.
"""

from __future__ import annotations

from typing import Any, Literal

from console.core.health import HEALTH_RANK
from console.core.models import Counts, JobSummary, Row

# where a context's triage was read: its `read_dsn` (a replica) when it has one, else its `dsn`
ReadFrom = Literal["primary", "replica"]


class ContextTriage(Row):
    """One context's answer: up, with its counts and the calls that need attention (worst first, as
    its database sorts them), or down, with why in a person's words (passwords masked)."""

    name: str
    up: bool
    error: str | None = None
    read_from: ReadFrom = "primary"
    production: bool = False
    counts: Counts | None = None
    rows: list[JobSummary] = []

    @property
    def needs_human(self) -> int:
        return self.counts.needs_human if self.counts is not None else 0

    def document(self) -> dict[str, Any]:
        """`triage --all-contexts --json`: one element of `contexts` (docs/contract.md §7)."""
        return {"name": self.name, "up": self.up, "error": self.error, "read_from": self.read_from,
                "production": self.production,
                "counts": self.counts.model_dump(mode="json") if self.counts is not None else None,
                "attention": len(self.rows) if self.up else None}


class ContextCall(Row):
    """A call that needs attention, with the context it is in."""

    context: str
    call: JobSummary

    @property
    def key(self) -> str:
        """Names the row across contexts: two databases may hold calls with the same id (a copy)."""
        return f"{self.context}/{self.call.id}"

    def document(self) -> dict[str, Any]:
        """`triage --all-contexts --json`: one element of `rows`, `context` first, then the keys of
        `jobs --json`."""
        return {"context": self.context, **self.call.model_dump(mode="json")}


def unanswered(name: str, reason: str, *, read_from: ReadFrom = "primary", production: bool = False) -> ContextTriage:
    return ContextTriage(name=name, up=False, error=reason, read_from=read_from, production=production)


class AllTriage(Row):
    """Every context's answer, in the order of contexts.toml."""

    contexts: list[ContextTriage]
    timeout_seconds: float

    @property
    def answered(self) -> list[ContextTriage]:
        return [c for c in self.contexts if c.up]

    @property
    def down(self) -> list[ContextTriage]:
        return [c for c in self.contexts if not c.up]

    @property
    def partial(self) -> bool:
        """Some context did not answer: what it would have said is unknown."""
        return any(not c.up for c in self.contexts)

    @property
    def rows(self) -> list[ContextCall]:
        """The calls that need attention in every context that answered, worst first: by lease health
        (console.core.health.HEALTH_RANK, as every triage sorts), then context by context in the
        file's order, each in its own database's order."""
        found = [(HEALTH_RANK.get(call.health or "healthy", 9), place, position, ContextCall(context=c.name, call=call))
                 for place, c in enumerate(self.contexts) if c.up
                 for position, call in enumerate(c.rows)]
        return [row for *_, row in sorted(found, key=lambda f: f[:3])]

    @property
    def needs_human(self) -> int:
        """Calls waiting for a human in the contexts that answered (a lower bound when partial)."""
        return sum(c.needs_human for c in self.answered)

    @property
    def all_clear(self) -> bool:
        """Nothing needs attention anywhere: every context answered (at least one), none has a call
        that needs attention or a human. Never true of a partial answer."""
        return (bool(self.contexts) and not self.partial and self.needs_human == 0
                and not any(c.rows for c in self.contexts))

    def document(self) -> dict[str, Any]:
        """`leasectl triage --all-contexts --json` (docs/contract.md §7: the keys are a contract)."""
        return {"partial": self.partial, "all_clear": self.all_clear,
                "down": [c.name for c in self.down], "timeout_seconds": self.timeout_seconds,
                "contexts": [c.document() for c in self.contexts],
                "rows": [r.document() for r in self.rows]}
