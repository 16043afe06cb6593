"""`leasectl revoke` (migration 0017): an operator takes one grant back, as the control plane, with
its name and reason journaled; a worker login keeps 0012's narrower rule and may not use it."""

from __future__ import annotations

from typing import Any

from console.db.connect import run_one
from tests import helpers as h

LOGINS = {"lc_revoke_worker": "leasectl_worker", "lc_revoke_operator": "leasectl_operator"}


def test_an_operator_revokes_one_grant_with_its_name_and_reason_journaled(db: Any, conn: Any, logins: Any) -> None:
    h.register_tree(conn, {"planner-1": None, "code-1": "planner-1"})
    grant = h.give_grant(conn, "code-1", resource="vault:prod-db")
    other = h.give_grant(conn, "code-1", resource="s3:reports")
    with h.as_login(db, "lc_revoke_operator") as operator:
        row = run_one(operator, "operator/revoke_grant", grant_id=grant["id"], operator="alice", reason="leaked in a log")
        assert row is not None and row["revoked_by"] == "control-plane"
        again = run_one(operator, "operator/revoke_grant", grant_id=grant["id"], operator="alice", reason="again")
        assert again is None, "revoked already: nothing changed"
        assert h.refusal(operator, "update grants set revoked_at = now(), revoked_by = 'control-plane' "
                                   "where id = %s", (other["id"],))[0] == "42501", "not by hand"
    with h.as_login(db, "lc_revoke_worker") as worker:
        assert h.refusal(worker, "select * from leasectl_operator_revoke_grant(%s, 'w', 'mine')",
                         (other["id"],))[0] == "42501", "a worker keeps its own, narrower rule"
    journal = conn.execute("select kind, actor, reason, grant_id from fleet_events where grant_id = %s order by id",
                           (grant["id"],)).fetchall()
    assert [(e["kind"], e["actor"]) for e in journal] == [("grant_issued", journal[0]["actor"]),
                                                          ("grant_revoked", "control-plane"),
                                                          ("operator_revoke", "alice")]
    assert journal[-1]["reason"] == "leaked in a log"
    still = conn.execute("select revoked_at from grants where id = %s", (other["id"],)).fetchone()
    assert still["revoked_at"] is None, "only the one grant"


def test_revoke_from_the_command_line(db: Any, conn: Any) -> None:
    invoke = h.cli_invoker(db.dsn, "alice")
    h.register_tree(conn, {"planner-1": None, "code-1": "planner-1"})
    grant = h.give_grant(conn, "code-1", resource="vault:prod-db")
    prefix = str(grant["id"])[:8]
    asked = invoke("revoke", prefix, "--reason", "leaked", input="n\n")
    assert asked.exit_code == 2 and "vault:prod-db" in asked.output and "held by code-1" in asked.output
    done = invoke("revoke", prefix, "--reason", "leaked in a log", "--yes")
    assert done.exit_code == 0 and "revoked by control-plane" in done.output, done.output
    again = invoke("revoke", prefix, "--reason", "again", "--yes")
    assert again.exit_code == 3 and "revoked by control-plane" in again.output
    assert invoke("revoke", "ffffffff", "--reason", "x", "--yes").exit_code == 2, "no such grant"
    assert invoke("revoke", "not-hex", "--reason", "x", "--yes").exit_code == 2
    actions = h.js(invoke("audit", "actions", "--action", "revoke", "--json"))
    assert [(a["action"], a["operator"], a["agent_id"], a["reason"]) for a in actions] == [
        ("revoke", "alice", "code-1", "leaked in a log")]
    assert actions[0]["details"]["grant_id"] == str(grant["id"])
    lines = invoke("audit", "actions", "--action", "revoke")
    assert f"grant {prefix} of code-1" in lines.output
