"""Saved views in the database (migration 0022; queries/saved_views/*.sql): list, save, delete.

Who may see and change which view is the database's rule (row level security keyed on the login):
nothing here decides it. What is checked here, before anything is sent, is the input: the screen,
the name, and the filter in its screen's grammar (console.core.saved_views), so a bad filter is
bad input and nothing is written. Every view read comes back with its `problem`: why its filter
no longer parses, if it does not.
"""

from __future__ import annotations

from console.core.saved_views import (
    DeleteOutcome,
    SavedView,
    SaveOutcome,
    check_filter,
    check_name,
    check_screen,
)
from console.db.connect import Conn, run, run_one
from console.shared.errors import BadInput, LeasectlError, PermissionDenied
from console.shared.text import sanitize

MAX_OPERATOR_CHARS = 200  # the table's check on created_by
NOT_A_CONSOLE_LOGIN = ("saved views belong to console logins: leasectl_operator saves, replaces and deletes them, "
                       "leasectl_auditor (and a read-only session) lists and opens them; a worker login has none")


class SaveRaced(LeasectlError):
    """Another session saved a view of the same name at the same moment: nothing was written."""


def _allowed(exc: PermissionDenied) -> PermissionDenied:
    return PermissionDenied(str(exc), hint=NOT_A_CONSOLE_LOGIN)


def list_views(conn: Conn, screen: str | None = None) -> list[SavedView]:
    """The views this login may open (its personal ones and every shared one), of `screen` or of
    every screen, each with its `problem`; an unknown screen is bad input naming the valid ones."""
    wanted = check_screen(screen) if screen is not None else None
    try:
        rows = run(conn, "saved_views/list", screen=wanted)
    except PermissionDenied as exc:
        raise _allowed(exc) from None
    return [SavedView.model_validate(row).checked() for row in rows]


def save_view(conn: Conn, *, name: str, screen: str, filter_text: str, shared: bool, operator: str,
              replace: bool = False) -> SaveOutcome:
    """Save `filter_text` as the view `name` of `screen` (queries/saved_views/save.sql says each
    outcome). The input is checked first: an unknown screen, a bad name, or a filter its screen's
    grammar refuses is BadInput, and nothing is sent."""
    screen = check_screen(screen)
    name = check_name(name)
    filter_text = check_filter(screen, filter_text)
    operator = operator.strip()
    if not operator or len(operator) > MAX_OPERATOR_CHARS:
        raise BadInput(f"an operator name (1 to {MAX_OPERATOR_CHARS} characters) is required: it is kept with "
                       "the view")
    try:
        row = run_one(conn, "saved_views/save", name=name, screen=screen, filter=filter_text, shared=shared,
                      created_by=operator, replace=replace)
    except PermissionDenied as exc:
        raise _allowed(exc) from None
    if row is None:
        raise SaveRaced(f"another session saved a view named {sanitize(name, max_chars=60)!r} at the same moment: "
                        "nothing was written", hint="save again to see it (--replace overwrites it, if it is yours)")
    return SaveOutcome(outcome=row["outcome"], view=SavedView.model_validate(row).checked())


def delete_view(conn: Conn, name: str, *, shared: bool) -> DeleteOutcome:
    """Delete this login's personal view `name` (or, `shared`, the shared view `name`): the view as
    it was and whether it is gone (a shared view of another login's stays: the database refused).
    No such view is bad input."""
    name = check_name(name)
    try:
        row = run_one(conn, "saved_views/delete", name=name, shared=shared)
    except PermissionDenied as exc:
        raise _allowed(exc) from None
    if row is None:
        scope = "shared view" if shared else "personal view of yours"
        other = "without --shared: your personal one" if shared else "with --shared: the shared one"
        raise BadInput(f"no {scope} is named {sanitize(name, max_chars=60)!r}: nothing was deleted",
                       hint=f"`leasectl views list` shows the views you may open; {other}")
    return DeleteOutcome(deleted=row["deleted"], view=SavedView.model_validate(row).checked())
