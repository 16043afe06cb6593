"""Saved views (issue 30): a screen's filter kept under a name, personal or shared (migration 0022).

A view is a name, a screen and a filter in that screen's grammar, exactly what typing the filter
after `/` on that screen takes. The screens are the console's own (its modes, by the names
`leasectl views --screen` takes); each has its grammar here, the one its `/` parses with:

    triage, calls, approvals    the calls' grammar (console.core.filters.parse_filter; Triage's and
                                Approvals' refuse payload:, as their `/` does: memory_filter)
    fleet                       agents (AGENT_KEYS)
    reconciliations             reconciliation records (RECORD_KEYS)
    chains                      chains of calls (console.core.chains.CHAIN_KEYS)
    audit                       the history and the journal (console.core.audit.parse_audit_filter)

Saving checks the filter with its screen's grammar first: a bad one is bad input, nothing is
written. A view saved before its grammar changed (a key renamed in a later release) is kept as it
was typed, and `problem` says why it no longer parses wherever it is shown (`leasectl views list`,
the console's picker), instead of it quietly matching nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from console.core.audit import audit_grammar, parse_audit_filter
from console.core.chains import CHAIN_KEYS
from console.core.filters import (
    AGENT_KEYS,
    RECORD_KEYS,
    Filter,
    field_grammar,
    grammar,
    memory_filter,
    parse_fields,
    parse_filter,
    split_terms,
)
from console.core.models import Row
from console.shared.errors import BadInput
from console.shared.text import sanitize

NAME_CHARS = 60  # the table's check (migration 0022)
FILTER_CHARS = 1000


@dataclass(frozen=True)
class ScreenGrammar:
    """What a screen's `/` takes: how it parses a filter, and the grammar it shows on a bad one."""

    title: str
    parse: Callable[[str], Filter]
    grammar: Callable[[], str]


def _field_screen(title: str, keys: dict[str, str]) -> ScreenGrammar:
    return ScreenGrammar(title, lambda text: parse_fields(text, keys), lambda: field_grammar(keys))


# the console's screens that have a `/` filter, by their mode names (console/operator/tui/app.py's
# MODES; tests/unit/test_saved_views.py holds the two to each other), in the order of their keys
SCREENS: dict[str, ScreenGrammar] = {
    # Triage and Approvals filter in memory the calls they read, which carry no payload:
    # their grammar refuses payload: (memory_filter), so no view of theirs can hold one
    "triage": ScreenGrammar("1 Triage", lambda text: memory_filter(text, "Triage"), grammar),
    "calls": ScreenGrammar("2 Calls", parse_filter, grammar),
    "approvals": ScreenGrammar("3 Approvals", lambda text: memory_filter(text, "Approvals"), grammar),
    "fleet": _field_screen("4 Fleet", AGENT_KEYS),
    "reconciliations": _field_screen("5 Reconciliations", RECORD_KEYS),
    "audit": ScreenGrammar("6 Audit", parse_audit_filter, audit_grammar),
    "chains": _field_screen("8 Chains", CHAIN_KEYS),
}

Outcome = Literal["saved", "replaced", "exists", "not_yours"]


def screen_names() -> str:
    return ", ".join(SCREENS)


def check_screen(screen: str | None, *, option: str = "--screen") -> str:
    """A screen's name as `--screen` gives it; an unknown one is bad input naming the valid ones."""
    cleaned = (screen or "").strip().lower()
    if not cleaned:
        raise BadInput(f"{option} is empty (an unset variable?): give a screen: {screen_names()}")
    if cleaned not in SCREENS:
        raise BadInput(f"{option} {sanitize(screen, max_chars=40)!r} is not a screen with a filter; the screens "
                       f"with a filter are: {screen_names()}",
                       hint="a view is what / takes on a list; Metrics and All contexts have no filter")
    return cleaned


def check_name(name: str | None) -> str:
    """A view's name: 1 to 60 visible characters (spaces inside are fine), no leading or trailing blank."""
    cleaned = (name or "").strip()
    if not cleaned:
        raise BadInput("a view needs a name (an unset variable?)")
    if len(cleaned) > NAME_CHARS:
        raise BadInput(f"the view's name is {len(cleaned)} characters long; at most {NAME_CHARS}")
    if not cleaned.isprintable():
        raise BadInput(f"the view's name {sanitize(cleaned, max_chars=NAME_CHARS)!r} holds a control character")
    return cleaned


def check_filter(screen: str, text: str | None) -> str:
    """The filter of a view about to be saved, checked with its screen's grammar: bad input (the
    grammar as its hint) when it does not parse or is empty; else the filter, its words joined by
    single spaces (how the screen's `/` reads it: the same filter)."""
    # split as the grammar splits (a payload:"two  words" keeps its quoted spaces)
    cleaned = " ".join(split_terms(text or ""))
    if not cleaned:
        raise BadInput("the view's filter is empty (an unset variable?): a view with no filter shows what the "
                       "screen shows anyway", hint=SCREENS[screen].grammar())
    if len(cleaned) > FILTER_CHARS:
        raise BadInput(f"the view's filter is {len(cleaned)} characters long; at most {FILTER_CHARS}")
    if not cleaned.isprintable():
        raise BadInput("the view's filter holds a control character")
    parsed = SCREENS[screen].parse(cleaned)
    if parsed.empty:  # every word of a grammar filters something: kept so, as parse_selection's
        raise BadInput(f"the filter {sanitize(cleaned, max_chars=80)!r} selects everything on {screen}",
                       hint=SCREENS[screen].grammar())
    return cleaned


def problem_of(screen: str, text: str) -> str | None:
    """Why a saved view no longer applies (None: it parses on its screen today): a screen this
    release does not have, or the filter's first error in its screen's grammar."""
    grammar_of = SCREENS.get(screen)
    if grammar_of is None:
        return f"no screen {sanitize(screen, max_chars=40)!r} in this release (screens: {screen_names()})"
    try:
        grammar_of.parse(text)
    except BadInput as exc:
        return str(exc)
    return None


class SavedView(Row):
    """A saved view as queries/saved_views/list.sql reads it, and `problem`: why its filter no
    longer parses (None: it applies). `mine`: this login saved it (and alone may change it);
    `db_role` is that login, `created_by` the operator's name."""

    name: str
    screen: str
    filter: str
    shared: bool
    created_by: str
    created_at: datetime
    db_role: str
    updated_by: str | None = None
    updated_at: datetime | None = None
    mine: bool = False
    problem: str | None = None

    # `views list --json`: the contract's names first (DESIGN.md, "The team's tools")
    KEYS: ClassVar[tuple[str, ...]] = ("name", "screen", "filter", "created_by", "shared", "created_at", "db_role",
                                       "updated_by", "updated_at", "mine", "problem")

    @property
    def scope(self) -> str:
        return "shared" if self.shared else "personal"

    def checked(self) -> SavedView:
        """The view with its `problem` found."""
        return self.model_copy(update={"problem": problem_of(self.screen, self.filter)})

    def document(self) -> dict[str, object]:
        """The view as `views list --json` prints it (KEYS, in order)."""
        data = self.model_dump(mode="json")
        return {key: data[key] for key in self.KEYS}


class SaveOutcome(Row):
    """What queries/saved_views/save.sql did (its header says each outcome), and the view it names."""

    outcome: Outcome
    view: SavedView


class DeleteOutcome(Row):
    """What queries/saved_views/delete.sql did: the view as it was, and whether it is gone."""

    deleted: bool
    view: SavedView
