"""The web console in words (`leasectl serve`, `serve users`, `audit sign-ins`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from console.core.signin import SignIn
from console.shared.text import sanitize
from console.shared.web_users import WebUser

OUTCOME_STYLES = {"signed_in": "green", "refused": "bold red", "rate_limited": "bold red",
                  "signed_out": "dim", "expired": "yellow"}
NO_USERS = ("nobody can sign in: {path} names no one. Add a person: "
            "leasectl serve users add NAME --role operator|viewer [--db-user LOGIN]")
LOUD_INSECURE = ("WARNING: serving on {host}, a non-loopback address, WITHOUT TLS (--insecure-listen): "
                 "passwords and session cookies cross the network in clear text. Use --tls-cert/--tls-key, "
                 "or a TLS reverse proxy on this machine with --listen 127.0.0.1:PORT.")
NOT_LOOPBACK = ("--listen {host}: not a loopback address. Serving the console on the network needs TLS "
                "(--tls-cert FILE --tls-key FILE), or a reverse proxy terminating TLS on this machine "
                "(keep --listen 127.0.0.1:PORT), or --insecure-listen to accept clear text knowingly")


def users_table(users: Sequence[WebUser]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "role", "journaled as", "database login", "signs in with"):
        table.add_column(column)
    for user in users:
        table.add_row(sanitize(user.name), Text(user.role, style="bold" if user.role == "operator" else "cyan"),
                      sanitize(user.operator_name), sanitize(user.db_user) if user.db_user else "(serve's own)",
                      "a password" if user.password else "the reverse proxy's header only")
    return table


def user_json(user: WebUser) -> dict[str, object]:
    # never the hash: `--json` output lands in tickets and CI logs
    return {"name": user.name, "role": user.role, "operator": user.operator_name, "db_user": user.db_user,
            "password": user.password is not None}


def sign_ins_table(rows: Sequence[SignIn]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("at", "person", "outcome", "from", "why", "written by"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.at.isoformat(timespec="seconds"), sanitize(row.person or "(no name)", max_chars=40),
                      Text(row.outcome, style=OUTCOME_STYLES.get(row.outcome, "")),
                      sanitize(row.remote, max_chars=40), sanitize(row.reason or "", max_chars=80),
                      sanitize(row.db_role))
    return table
