"""The auditor sees who wrote each row : the database login (`db_role`)
beside the name a client gave, in `history`, `audit actions` and the exports; drains and aborts
exported (`audit export --fleet`); and `audit verify` holding each event's login against its kind.

Honest traffic is made by real login roles (lc_audit_*, members of the leasectl groups, as a
deployment creates them) through the shared SQL; forged rows are written by the superuser with the
triggers disabled -- the only way to write them today, and the stand-in for a hole a future change
might open (the kind guard stamps db_role := session_user on every row a client sends).

Every test here failed before the fix: history said "db_role": null, actions and exports had no
db_role, reason or request_id, fleet_events could not be exported, and verify ignored db_role."""

from __future__ import annotations

import csv
import io
import json
import uuid

import pytest

from console.core.audit import EXPORT_KEYS, FLEET_EXPORT_KEYS, OperatorAction
from console.operator.cli import common
from tests import helpers as h

W1, W2 = "lc_audit_w1", "lc_audit_w2"
OP, SUP, BOTH = "lc_audit_op", "lc_audit_sup", "lc_audit_both"
ACTION_KEYS = [*OperatorAction.KEYS]
LOGINS = {W1: "leasectl_worker", W2: "leasectl_worker", OP: "leasectl_operator", SUP: "leasectl_supervisor",
          BOTH: ("leasectl_worker", "leasectl_operator")}  # a worker *and* an operator: not a worker login
TOOLS = {"search": ("read_only", h.SLOW), "pay": ("mutating_unverifiable", h.SLOW), "quick": ("read_only", h.FAST),
         "swept": ("read_only", h.FAST)}


@pytest.fixture
def cli(db, conn, logins, monkeypatch):
    # as on a pipe (common._pipe_width), whatever COLUMNS the test process was started with: a
    # history's cells then hold a name and its login on one line
    monkeypatch.setattr(common.out, "_width", 200)
    return h.cli_invoker(db.dsn, "auditor-tester"), conn


def honest_traffic(db) -> dict[str, uuid.UUID]:
    """What real logins do through the shared SQL: claims, a report, a request, an unknown outcome
    approved by an operator, a retryable failure, a forced mark-terminal (a fence), a cancel, a
    reclaim of an expired lease, and the supervisor's sweep."""
    made: dict[str, uuid.UUID] = {}
    with h.as_login(db, W1) as w1, h.as_login(db, W2) as w2, h.as_login(db, OP) as op, h.as_login(db, SUP) as sup:
        e = h.enqueue(w1, "search")
        c = h.claim(w1, f"{W1}:a", ["search"])
        h.record_event(w1, c, "heartbeat_lost", f"{W1}:a")
        assert h.complete(w1, c, f"{W1}:a") is not None
        made["done"] = e["id"]

        p = h.enqueue(w1, "pay")
        c = h.claim(w1, W1, ["pay"])
        assert h.start_side_effect(w1, c, W1) is not None
        assert h.report_unknown(w1, c, W1)["state"] == "outcome_unknown"
        assert h.approve(op, p["id"], "outcome_unknown", c["fencing_token"], operator="alice") is not None
        made["approved"] = p["id"]

        r = h.enqueue(w2, "search")
        c = h.claim(w2, f"{W2}:b", ["search"])
        assert h.fail(w2, c, f"{W2}:b", retryable=True) is not None
        c = h.claim(w2, f"{W2}:b", ["search"])
        assert h.mark_terminal(op, r["id"], "running", c["fencing_token"], "failed", force=True,
                             operator="alice", reason="hung") is not None
        made["fenced"] = r["id"]

        q = h.enqueue(w1, "search")
        assert h.cancel(op, q["id"], "queued", 0, operator="bob", reason="user left") is not None
        made["cancelled"] = q["id"]

        x = h.enqueue(w1, "quick")
        assert h.claim(w1, f"{W1}:slow", ["quick"])["id"] == x["id"]
        made["reclaimed"] = x["id"]
        h.expire_lease(w1, x["id"])
        assert h.claim(w2, f"{W2}:late", ["quick"])["id"] == x["id"], "an expired lease, reclaimed"
        s = h.enqueue(w2, "swept")  # a tool of its own: the reclaimed lease above may run out meanwhile
        assert h.claim(w2, W2, ["swept"])["id"] == s["id"]
        h.expire_lease(w2, s["id"])
        assert h.sweep(sup), "the supervisor resolved the expired lease"
    made["swept"] = s["id"]
    return made


# ----------------------------------------------------------------------------- item 1: shown


def test_history_shows_the_login_and_marks_a_name_that_is_not_its_own(cli, db):
    invoke, admin = cli
    made = honest_traffic(db)
    rows = h.js(invoke("history", str(made["approved"]), "--json"))
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["claimed"]["db_role"] == W1 and by_kind["claimed"]["actor"] == W1
    assert by_kind["operator_approve_retry"]["db_role"] == OP and by_kind["operator_approve_retry"]["actor"] == "alice"
    assert all(r["db_role"] is not None for r in rows), "every row written since 0005 names its login"

    text = invoke("history", str(made["approved"])).output
    # the usual login is said once, in the title; a row whose login is another says it under its actor:
    # marked for the operator's decision, plain for the change that decision made
    lines = text.splitlines()
    assert f"written by login {W1}" in text, text
    marked = [i for i, line in enumerate(lines) if f"≠ {OP}" in line]
    assert len(marked) == 1 and "operator_approve_retry" in lines[marked[0] - 1] and "alice" in lines[marked[0] - 1], text
    plain = [i for i, line in enumerate(lines) if f"login {OP}" in line and "≠" not in line]
    assert len(plain) == 1 and "state_changed" in lines[plain[0] - 1], text
    assert "≠" not in "".join(line for line in lines if W1 in line and "alice" not in line), \
        "a worker's own name is not marked"
    assert "names and logins:" in text, "the caption says what the mark means"
    own = invoke("history", str(made["done"])).output
    assert "≠" not in own and "names and logins" not in own, "nothing to explain when every name is its own"


def test_audit_actions_carry_the_login_in_json_and_text(cli, db, logins):
    invoke, admin = cli
    honest_traffic(db)
    h.register_tree(admin, {"ingest-1": None})
    with h.as_login(db, OP) as op:
        assert h.request_shutdown(op, "ingest-1", "drain", operator="dana", reason="move it") is not None
    rows = h.js(invoke("audit", "actions", "--json"))
    assert all(list(r) == ACTION_KEYS for r in rows), "the contract's keys, then db_role"
    assert {(r["operator"], r["action"], r["db_role"]) for r in rows} == {
        ("dana", "drain", OP), ("bob", "cancel", OP), ("alice", "mark_terminal", OP),
        ("alice", "approve_retry", OP)}
    text = " ".join(invoke("audit", "actions").output.split())
    assert f"dana (login {OP})" in text and f"alice (login {OP})" in text
    assert "names and logins:" in text


# ----------------------------------------------------------------------------- item 2: export


def test_export_appends_reason_request_id_and_db_role_to_the_contracts_keys(cli, db):
    invoke, admin = cli
    made = honest_traffic(db)
    total = admin.execute("select count(*) as n from job_events").fetchone()["n"]
    rows = [json.loads(line) for line in invoke("audit", "export").stdout.splitlines()]
    assert len(rows) == total, "one line per job_events row, no more"
    assert all(list(r) == list(EXPORT_KEYS) for r in rows)
    assert list(EXPORT_KEYS[-3:]) == ["reason", "request_id", "db_role"]
    approval = next(r for r in rows if r["kind"] == "operator_approve_retry")
    stored = next(e for e in h.events(admin, made["approved"]) if e["kind"] == "operator_approve_retry")
    assert approval["reason"] == "checked with the bank" and approval["request_id"] == str(stored["request_id"])
    assert approval["db_role"] == OP
    assert {r["db_role"] for r in rows} >= {W1, W2, OP, SUP}

    table = list(csv.reader(io.StringIO(invoke("audit", "export", "--format", "csv").stdout)))
    assert table[0] == list(EXPORT_KEYS) and len(table) == total + 1
    line = next(r for r in table[1:] if r[EXPORT_KEYS.index("kind")] == "operator_approve_retry")
    assert (line[EXPORT_KEYS.index("reason")], line[EXPORT_KEYS.index("request_id")],
            line[EXPORT_KEYS.index("db_role")]) == ("checked with the bank", str(stored["request_id"]), OP)
    # the flag of the old opt-in still runs (scripts pass it); db_role is there in any case
    assert [json.loads(x) for x in invoke("audit", "export", "--with-db-role").stdout.splitlines()] == rows


# ----------------------------------------------------------------------------- item 3: fleet


def test_export_fleet_writes_drains_and_aborts_with_their_own_keys(cli, db, tmp_path):
    invoke, admin = cli
    h.register_tree(admin, {"planner-1": None, "code-1": "planner-1"})
    with h.as_login(db, OP) as op:
        assert h.request_shutdown(op, "planner-1", "drain", operator="dana", reason="move it") is not None
        assert h.request_shutdown(op, "code-1", "abort", operator="erin", reason="again") is None, "refused"
    job_events = admin.execute("select count(*) as n from job_events").fetchone()["n"]
    fleet = list(admin.execute("select * from fleet_events order by id"))

    rows = [json.loads(line) for line in invoke("audit", "export", "--fleet").stdout.splitlines()]
    assert len(rows) == len(fleet) and all(list(r) == list(FLEET_EXPORT_KEYS) for r in rows)
    assert [r["id"] for r in rows] == [f["id"] for f in fleet], "oldest first"
    drain = next(r for r in rows if r["kind"] == "shutdown_requested")
    refused = next(r for r in rows if r["kind"] == "shutdown_refused")
    assert (drain["actor"], drain["agent_id"], drain["reason"], drain["db_role"]) == ("dana", "planner-1", "move it", OP)
    assert drain["shutdown_id"] and drain["details"]["mode"] == "drain" and drain["at"].endswith("Z")
    assert (refused["actor"], refused["reason"], refused["db_role"]) == ("erin", "again", OP)

    target = tmp_path / "fleet.csv"
    written = invoke("audit", "export", "--fleet", "--format", "csv", "--output", str(target))
    assert written.exit_code == 0 and f"wrote {len(fleet)} fleet events" in written.output
    with target.open(newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == list(FLEET_EXPORT_KEYS) and len(table) == len(fleet) + 1
    assert json.loads(table[1][FLEET_EXPORT_KEYS.index("details")]) == rows[0]["details"]

    # the calls' export is untouched by the fleet: its rows are job_events rows only
    assert len(invoke("audit", "export").stdout.splitlines()) == job_events
    window = [json.loads(x) for x in invoke("audit", "export", "--fleet", "--since", drain["at"]).stdout.splitlines()]
    assert [r["id"] for r in window] == [r["id"] for r in rows if r["at"] >= drain["at"]]
    bad = invoke("audit", "export", "--fleet", "--job", "ffffffff")
    assert bad.exit_code == 2 and "--fleet" in bad.output


# ----------------------------------------------------------------------------- item 5: verify


def _forge(admin, job_id, kind: str, db_role: str | None, *, actor: str | None = None, token: int = 1,
           state_from: str | None = None, state_to: str | None = None, owner_from: str | None = None,
           owner_to: str | None = None) -> int:
    """A row no client can write, as the superuser with the triggers disabled: the stand-in for a
    hole some future change might open. Returns its id."""
    admin.execute("alter table job_events disable trigger user")
    try:
        row = admin.execute(
            "insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from, "
            "owner_to, details, db_role) values (%s, %s, %s, %s, %s, %s, %s, %s, '{}', %s) returning id",
            (job_id, kind, actor, token, state_from, state_to, owner_from, owner_to, db_role)).fetchone()
    finally:
        admin.execute("alter table job_events enable trigger user")
    return int(row["id"])


def test_verify_holds_honest_traffic_of_real_logins(cli, db):
    invoke, admin = cli
    honest_traffic(db)
    report = h.js(invoke("audit", "verify", "--json"))
    assert report["ok"] is True and report["violations"] == [], report["violations"]
    assert report["worker_events"] > 10, "the worker logins' events were checked"
    assert report["without_login"] == 0 and report["unknown_logins"] == []


def test_verify_flags_what_a_worker_login_may_not_have_written(cli, db):
    invoke, admin = cli
    made = honest_traffic(db)
    victim = made["done"]  # a finished call of W1: the forged rows land in its history
    other = made["cancelled"]
    forged = {
        "operator kind": _forge(admin, victim, "operator_approve_retry", W1, actor="alice"),
        "grant to another": _forge(admin, other, "claimed", W1, state_from="queued", state_to="running",
                                   owner_to=f"{W2}:x"),
        "report as another": _forge(admin, victim, "heartbeat_lost", W1, actor=f"{W2}:b"),
        "report as a look-alike": _forge(admin, victim, "result_rejected", W1, actor=f"{W1}x"),
        "leaves outcome_unknown": _forge(admin, made["approved"], "state_changed", W1, token=1,
                                         state_from="outcome_unknown", state_to="succeeded"),
        "fence": _forge(admin, made["fenced"], "fenced", W1, token=9, state_from="running", state_to="running"),
    }
    # rows that look alike but break no login rule: a worker's own report; an operator kind by a
    # login that is an operator as well as a worker (not a worker login); one from before 0005
    # (no login: not checkable); one from a login that is no role any more (unknown, not a violation)
    gone = f"lc_audit_gone_{uuid.uuid4().hex[:8]}"
    fine = [_forge(admin, victim, "heartbeat_lost", W1, actor=f"{W1}:a"),
            _forge(admin, victim, "operator_cancel", BOTH, actor="carol"),
            _forge(admin, victim, "operator_cancel", None, actor="carol"),
            _forge(admin, victim, "operator_cancel", gone, actor="carol"),
            _forge(admin, victim, "heartbeat_lost", gone, actor="someone-else")]

    result = invoke("audit", "verify", "--json")
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)
    wrong = [v for v in report["violations"] if v["rule"] == "wrong_login"]
    assert sorted(i for v in wrong for i in v["event_ids"]) == sorted(forged.values())
    assert all(len(v["event_ids"]) == 1 and v["db_role"] == W1 for v in wrong)
    by_id = {v["event_ids"][0]: v for v in wrong}
    assert by_id[forged["operator kind"]]["kind"] == "operator_approve_retry"
    assert "operator" in by_id[forged["operator kind"]]["why"]
    assert f"{W2}:x" in by_id[forged["grant to another"]]["why"]
    assert by_id[forged["grant to another"]]["job_id"] == str(other)
    assert f"{W2}:b" in by_id[forged["report as another"]]["why"]
    assert "outcome_unknown" in by_id[forged["leaves outcome_unknown"]]["why"]
    assert by_id[forged["fence"]]["kind"] == "fenced"
    assert not set(fine) & {i for v in report["violations"] for i in v["event_ids"] if v["rule"] == "wrong_login"}
    flagged_calls = {v["job_id"] for v in report["violations"]}
    assert flagged_calls <= {str(victim), str(other), str(made["approved"]), str(made["fenced"])}, \
        "honest calls stay clean"
    assert report["without_login"] == 1
    assert report["unknown_logins"] == [{"db_role": gone, "events": 2}]

    human = invoke("audit", "verify")
    assert human.exit_code == 4
    words = " ".join(human.output.split())
    assert "wrong_login" in words and f"#{forged['fence']}" in words and f"login {W1}" in words
    assert "no login recorded on 1 event" in words and f"{gone} (2 events)" in words


def test_verify_judges_a_login_by_what_it_is_now_and_names_one_dropped_since(cli, db, pg_server):
    invoke, admin = cli
    login = f"lc_audit_tmp_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as root:
        h.ensure_login(root, login, "leasectl_worker")
    try:
        with h.as_login(db, login) as w:
            e = h.enqueue(w, "search")
            c = h.claim(w, login, ["search"])
            assert h.complete(w, c, login) is not None
        forged = _forge(admin, e["id"], "operator_cancel", login, actor="alice")
        report = json.loads(invoke("audit", "verify", "--json").stdout)
        assert [v["event_ids"] for v in report["violations"]] == [[forged]], "a worker login now: checked"
    finally:
        with pg_server.admin() as root:
            root.execute(f"drop role if exists {login}")
    report = h.js(invoke("audit", "verify", "--json"))
    assert report["ok"] is True, "a dropped login is no forgery: its events cannot be checked any more"
    assert report["unknown_logins"] == [{"db_role": login, "events": len(h.events(admin, e["id"]))}]


def test_verify_reads_past_an_infinite_lease_written_before_0013(db):
    """One row with an infinite lease (a claim 0012 still accepted) once made verify stop with
    "timestamp too large": it is now a violation like any other, and the rest is still checked."""
    from console.db.audit import verify
    with db.connect() as conn:
        h.register_tool(conn, "inf", "read_only", lease_seconds=30, heartbeat_seconds=5)
        e = h.enqueue(conn, "inf")
        h.claim(conn, "w-inf", ["inf"])
        conn.execute("alter table job_events disable trigger user")
        conn.execute("insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from, "
                     "owner_to, lease_until, details) values (%s, 'fenced', 'w-inf', 1, 'running', 'running', "
                     "'w-inf', 'w-inf', 'infinity', '{}')", (e["id"],))
        conn.execute("alter table job_events enable trigger user")
        report = verify(conn)
    assert not report.ok
    assert any(v.rule == "unreadable" and "infinite lease" in v.why for v in report.violations)
