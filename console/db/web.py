"""The web console's sign-in journal in the database (migration 0025; queries/web/*.sql).

The serve process writes it with its own login (a member of leasectl_web, or the schema owner);
operators and auditors read it (`leasectl audit sign-ins`). Nothing here decides whether a person
may sign in: console.core.signin and the users file do; this only keeps what happened.
"""

from __future__ import annotations

from datetime import datetime

from console.core.signin import OUTCOMES, SignIn
from console.db.connect import Conn, run, run_one
from console.shared.errors import PermissionDenied

__all__ = ["OUTCOMES", "SignIn", "may_journal", "record_sign_in", "sign_ins"]
NOT_A_WEB_LOGIN = ("the serve process journals sign-ins through leasectl_record_sign_in (migration 0025): its "
                   "login must be a member of leasectl_web (GRANT leasectl_web TO <login>) or own the schema")


def record_sign_in(conn: Conn, *, person: str, outcome: str, remote: str, reason: str | None = None) -> int:
    """Journal one attempt (committed by the caller's transaction); its id."""
    try:
        row = run_one(conn, "web/record_sign_in", person=person, outcome=outcome, remote=remote, reason=reason)
    except PermissionDenied as exc:
        raise PermissionDenied(str(exc), hint=NOT_A_WEB_LOGIN) from None
    assert row is not None  # the function returns the new row's id, or raises
    return int(row["id"])


def sign_ins(conn: Conn, *, person: str | None = None, outcome: str | None = None, since: datetime | None = None,
             limit: int = 100) -> list[SignIn]:
    return [SignIn.model_validate(r) for r in run(conn, "web/sign_ins", person=person, outcome=outcome,
                                                   since=since, lim=limit)]


def may_journal(conn: Conn) -> None:
    """PermissionDenied, with what to grant, unless this login may journal sign-ins."""
    row = run_one(conn, "web/may_journal")
    if not (row and row["may"]):
        raise PermissionDenied("this login may not journal sign-ins, so nobody could sign in", hint=NOT_A_WEB_LOGIN)
