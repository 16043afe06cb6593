"""Who wrote a history row: the name a client gave (an event's actor, an operator's name) beside the
database login that wrote it (`db_role`, stamped by the database since migration 0005, whatever the
client sends). The name is a claim; the login is a fact.

The login is shown beside every row. What is *marked* is an operator's name that is not its
login's own (`alice (login lc_ops)` in a sentence, `≠ lc_ops` in a table, the name in yellow): a
person's name that any login with the operator's rights could have typed. A worker's name needs no
mark: the database binds it to its login (row level security, LCH03), and `leasectl audit verify`
reports a worker login that wrote another's name or an operator's kind. A name is its login's own
when it is the login itself or `<login>:<name>` (the database's rule for a worker id).
"""

from __future__ import annotations

from collections import Counter

from rich.text import Text

from console.core.audit import bound_to
from console.shared.text import sanitize

LOGIN_MARK = "≠"
LOGIN_STYLE = "bold yellow"
LOGIN_LEGEND = (f"'name (login L)' or '{LOGIN_MARK} L': an operator's name that is not its database login's "
                "own (the login is the fact, the name what it typed); '—': written before logins were recorded "
                "(migration 0005)")


def is_operator_kind(kind: str) -> bool:
    """A row that carries a person's name: an operator's action on a call or on the fleet."""
    return kind.startswith("operator_") or kind in ("shutdown_requested", "shutdown_refused")


def claimed(name: str | None, db_role: str | None, *, operator: bool) -> bool:
    """An operator's name given by a login it does not belong to (a row from before 0005 has no
    login to hold it against; a row with no name claims nothing)."""
    return operator and db_role is not None and name is not None and not bound_to(name, db_role)


def usual_login(logins: list[str | None]) -> str | None:
    """The login that wrote most of a list's rows: said once above it (a call's history is mostly
    one worker login's, or the demo's one superuser), so that each row names only another."""
    counts = Counter(login for login in logins if login is not None)
    return counts.most_common(1)[0][0] if counts else None


def who_text(name: str | None, db_role: str | None, *, operator: bool, style: str = "", max_chars: int = 80,
             stacked: bool = False, usual: str | None = None) -> Text:
    """`w-1`, `lc_w:w-1`, or an operator's `alice (login lc_ops)` with the login marked; `stacked` (a
    table's narrow column) puts the login under the name: `≠ lc_ops` marked for an operator's name,
    `login lc_x` dim for another name whose login is not the table's `usual` one (said in its title)."""
    text = Text(sanitize(name, max_chars=max_chars) if name is not None else "—", style=style)
    if db_role is None:
        return text
    login = sanitize(db_role, max_chars=max_chars)
    if claimed(name, db_role, operator=operator):
        text.append(f"\n{LOGIN_MARK} {login}" if stacked else f" (login {login})", style=LOGIN_STYLE)
    elif stacked and db_role != usual and not bound_to(name, db_role):
        text.append(f"\nlogin {login}", style="dim")
    return text


def login_cell(name: str | None, db_role: str | None, *, operator: bool) -> tuple[str, str]:
    """A table's login column: the login (dim), `≠ login` when an operator's name is not its own, `—`
    when none was recorded. Text and style: the caller makes its own kind of cell."""
    if db_role is None:
        return "—", "dim"
    if claimed(name, db_role, operator=operator):
        return f"{LOGIN_MARK} {db_role}", LOGIN_STYLE
    return db_role, "dim"


def legend_if_claimed(rows: list[tuple[str | None, str | None, bool]]) -> Text | None:
    """The words for the marks, under a list that shows one (nothing to explain otherwise); rows
    are (name, login, operator)."""
    if not any(claimed(name, role, operator=operator) for name, role, operator in rows):
        return None
    return Text(f"names and logins: {LOGIN_LEGEND}", style="dim")
