"""Saved views (issue 30, migration 0022): the database's rule, and `leasectl views`.

The rule is row level security keyed on the login (session_user), with the login recorded by the
database beside the operator's name: a personal view is its login's alone, a shared one every
console login's to open and its own login's to change; a worker login has none; a read-only session
lists and opens, never saves. Each is checked with real login roles (lc_views_*, members of the
leasectl groups as a deployment makes them), through the shared SQL *and* with plain SQL, which
the rule must hold against as well. Then the command line: exit codes and --json keys.
"""

from __future__ import annotations

import json

import pytest
from psycopg.conninfo import make_conninfo

from console.core.saved_views import SavedView
from console.db import saved_views as views
from console.db.lane import open_session
from console.operator.cli import common
from console.shared.errors import BadInput, PermissionDenied, ReadOnlySession
from tests import helpers as h

ALICE, BOB, AUDITOR, WORKER = "lc_views_alice", "lc_views_bob", "lc_views_auditor", "lc_views_worker"
CAROL = "lc_views_carol"  # an operator who may also take the auditor role: what a read-only console does
LOGINS = {ALICE: "leasectl_operator", BOB: "leasectl_operator", AUDITOR: "leasectl_auditor",
          WORKER: "leasectl_worker", CAROL: ("leasectl_operator", "leasectl_auditor")}


def save(conn, name: str, where: str = "state:running", *, screen: str = "calls", shared: bool = False,
         operator: str = "alice", replace: bool = False):
    return views.save_view(conn, name=name, screen=screen, filter_text=where, shared=shared, operator=operator,
                           replace=replace)


def names(conn, screen: str | None = None) -> set[tuple[str, bool]]:
    return {(v.name, v.shared) for v in views.list_views(conn, screen)}


def table_rows(conn) -> list[dict]:
    """What plain SQL reads of the table: row level security, not the statement's WHERE, decides."""
    return conn.execute("select name, shared, db_role from saved_views order by name, shared").fetchall()


def read_only_session(db, login: str):
    """What `--read-only` (and the console's read-only session) opens: read-only, and the auditor's
    role where the login may take it."""
    return open_session(make_conninfo(db.dsn, user=login), read_only=True)


# ----------------------------------------------------------------------------- who sees what


def test_a_personal_view_is_its_logins_alone(db, logins):
    with h.as_login(db, ALICE) as alice, h.as_login(db, BOB) as bob:
        saved = save(alice, "stuck payments", "tool:pay health:zombie")
        assert (saved.outcome, saved.view.mine, saved.view.db_role) == ("saved", True, ALICE)
        assert names(alice) == {("stuck payments", False)}
        assert names(bob) == set(), "another login does not see it"
        assert table_rows(bob) == [], "not even with plain SQL: row level security, not the query, hides it"
        assert bob.execute("update saved_views set filter = 'state:queued'").rowcount == 0
        assert bob.execute("delete from saved_views").rowcount == 0
        with pytest.raises(BadInput, match="no personal view of yours"):
            views.delete_view(bob, "stuck payments", shared=False)
        # the same name is free for another login's personal view
        assert save(bob, "stuck payments", "state:queued", operator="bob").outcome == "saved"
        assert [v.filter for v in views.list_views(alice)] == ["tool:pay health:zombie"], "alice's own, untouched"


def test_a_shared_view_is_seen_by_every_console_login_and_changed_only_by_its_own(db, logins):
    with h.as_login(db, ALICE) as alice, h.as_login(db, BOB) as bob, h.as_login(db, AUDITOR) as auditor:
        save(alice, "team stuck", "state:running health:heartbeat_late", shared=True)
        for conn in (bob, auditor):
            seen = views.list_views(conn)
            assert [(v.name, v.shared, v.mine, v.db_role, v.created_by) for v in seen] == [
                ("team stuck", True, False, ALICE, "alice")]
        # bob may neither replace nor delete it: the database refuses, whatever SQL he sends
        refused = save(bob, "team stuck", "state:queued", shared=True, operator="bob", replace=True)
        assert refused.outcome == "not_yours" and refused.view.filter == "state:running health:heartbeat_late"
        kept = views.delete_view(bob, "team stuck", shared=True)
        assert not kept.deleted and kept.view.db_role == ALICE
        assert bob.execute("update saved_views set filter = 'state:queued'").rowcount == 0
        assert bob.execute("delete from saved_views").rowcount == 0
        assert [v.filter for v in views.list_views(alice)] == ["state:running health:heartbeat_late"]
        # its own login replaces it; the maker and the moment it was made stay, the replacement is said
        replaced = save(alice, "team stuck", "state:running", shared=True, operator="alice2", replace=True)
        assert replaced.outcome == "replaced"
        assert (replaced.view.created_by, replaced.view.updated_by) == ("alice", "alice2")
        assert replaced.view.updated_at is not None and replaced.view.updated_at >= replaced.view.created_at
        assert views.delete_view(alice, "team stuck", shared=True).deleted
        assert names(bob) == set()


def test_the_schema_owner_may_delete_a_shared_view_of_a_login_that_left(db, conn, logins):
    with h.as_login(db, ALICE) as alice:
        save(alice, "left behind", "tool:pay", shared=True)
        save(alice, "private", "tool:pay")
    # the owner lists what a login would list (no one's personal views but its own)
    assert names(conn) == {("left behind", True)}
    assert views.delete_view(conn, "left behind", shared=True).deleted
    with pytest.raises(BadInput):
        views.delete_view(conn, "private", shared=False)  # not the owner's personal view: not named so


def test_a_worker_login_can_neither_read_nor_write_a_view(db, logins):
    with h.as_login(db, ALICE) as alice:
        save(alice, "team", "state:running", shared=True)
    with h.as_login(db, WORKER) as worker:
        with pytest.raises(PermissionDenied) as refused:
            views.list_views(worker)
        assert "worker login" in (refused.value.hint or "")
        with pytest.raises(PermissionDenied):
            save(worker, "mine", "state:running", operator="w-1")
        for statement in ("select * from saved_views",
                          "insert into saved_views (name, screen, filter, created_by) values ('x', 'calls', "
                          "'state:running', 'w')",
                          "delete from saved_views"):
            assert h.refusal(worker, statement)[0] == "42501", statement


def test_a_read_only_session_lists_and_opens_but_never_saves(db, logins):
    with h.as_login(db, CAROL) as carol:
        save(carol, "mine", "state:running", operator="carol")
        save(carol, "ours", "tool:pay", shared=True, operator="carol")
    with read_only_session(db, CAROL) as ro:
        assert ro.execute("select current_user as r").fetchone()["r"] == "leasectl_auditor"
        # the login is the session's (session_user), not the role it took: its personal views are there
        assert names(ro) == {("mine", False), ("ours", True)}
        with pytest.raises((ReadOnlySession, PermissionDenied)):
            save(ro, "more", "state:queued", operator="carol")
        with pytest.raises((ReadOnlySession, PermissionDenied)):
            views.delete_view(ro, "mine", shared=False)
        # read-only by privilege, not by a setting the session may turn off
        ro.execute("set default_transaction_read_only = off")
        assert h.refusal(ro, "insert into saved_views (name, screen, filter, created_by) "
                             "values ('more', 'calls', 'state:queued', 'carol')")[0] == "42501"
        assert h.refusal(ro, "delete from saved_views")[0] == "42501"
    with h.as_login(db, AUDITOR) as auditor:
        assert names(auditor) == {("ours", True)}
        with pytest.raises(PermissionDenied):
            save(auditor, "mine", "state:running", operator="audrey")
    with h.as_login(db, CAROL) as carol:
        assert names(carol) == {("mine", False), ("ours", True)}, "nothing was written or deleted"


# ----------------------------------------------------------------------------- names and the login


def test_names_are_unique_per_login_among_personal_views_and_once_among_shared_ones(db, logins):
    with h.as_login(db, ALICE) as alice, h.as_login(db, BOB) as bob:
        save(alice, "stuck", "state:running")
        again = save(alice, "stuck", "state:queued")
        assert (again.outcome, again.view.filter) == ("exists", "state:running"), "asked, not replaced"
        # a name names one view whatever its screen: the same name on another screen is the same view
        moved = save(alice, "stuck", "state:draining", screen="fleet")
        assert (moved.outcome, moved.view.screen) == ("exists", "calls")
        assert save(alice, "stuck", "state:draining", screen="fleet", replace=True).view.screen == "fleet"
        # a shared name is the team's: one view, whoever saved it
        save(alice, "team", "tool:pay", shared=True)
        taken = save(bob, "team", "tool:search", shared=True, operator="bob")
        assert (taken.outcome, taken.view.mine, taken.view.filter) == ("exists", False, "tool:pay")
        # a personal view may carry a shared view's name; the scope says which is which
        assert save(alice, "team", "tool:search").outcome == "saved"
        assert names(alice) == {("stuck", False), ("team", False), ("team", True)}
        assert names(alice, "fleet") == {("stuck", False)}
        # the database holds the rule whatever SQL is sent
        assert h.refusal(alice, "insert into saved_views (name, screen, filter, shared, created_by) "
                                "values ('team', 'calls', 'tool:x', true, 'a')") == ("23505", "saved_views_shared_name")
        assert h.refusal(alice, "insert into saved_views (name, screen, filter, created_by) "
                                "values ('stuck', 'calls', 'tool:x', 'a')") == ("23505", "saved_views_personal_name")


def test_the_login_is_recorded_by_the_database_never_by_the_client(db, conn, logins):
    with h.as_login(db, ALICE) as alice:
        # no login may name db_role (nor created_at): by privilege
        assert h.refusal(alice, "insert into saved_views (name, screen, filter, created_by, db_role) "
                                f"values ('x', 'calls', 'tool:a', 'bob', '{BOB}')")[0] == "42501"
        assert h.refusal(alice, "insert into saved_views (name, screen, filter, created_by, created_at) "
                                "values ('x', 'calls', 'tool:a', 'bob', now() - interval '1 year')")[0] == "42501"
        alice.execute("insert into saved_views (name, screen, filter, created_by) values ('x', 'calls', 'tool:a', "
                      "'someone else')")
        assert h.refusal(alice, f"update saved_views set db_role = '{BOB}'")[0] == "42501"
        assert h.refusal(alice, "update saved_views set name = 'y', shared = true")[0] == "42501"
    row = conn.execute("select db_role, created_by from saved_views where name = 'x'").fetchone()
    assert row == {"db_role": ALICE, "created_by": "someone else"}, "the login, beside the name the client gave"


def test_the_table_refuses_what_no_screen_could_show(db, conn):
    for values in ("('', 'calls', 'tool:a', 'a')", "(' x', 'calls', 'tool:a', 'a')",
                   "('x', 'metrics', 'tool:a', 'a')", "('x', 'calls', '  ', 'a')",
                   "(E'x\\n', 'calls', 'tool:a', 'a')", "('x', 'calls', E'tool:a\\x1b', 'a')"):
        assert h.refusal(conn, f"insert into saved_views (name, screen, filter, created_by) values {values}"
                         )[0] == "23514", values


# ----------------------------------------------------------------------------- the filter


def test_saving_checks_the_filter_with_its_screens_grammar_first(db, conn):
    for screen, where, why in (("calls", "owner_id:w-3", "unknown filter key 'owner_id:'"),
                               ("fleet", "health:zombie", "unknown filter key 'health:'"),
                               ("audit", "since:tomorrowish", "since:"),
                               ("calls", "   ", "filter is empty")):
        with pytest.raises(BadInput, match=why):
            save(conn, "bad", where, screen=screen)
    with pytest.raises(BadInput, match="the screens with a filter are: triage, calls, approvals, fleet, "
                                       "reconciliations, audit, chains"):
        save(conn, "bad", "tool:a", screen="metrics")
    assert conn.execute("select count(*) as n from saved_views").fetchone()["n"] == 0, "nothing was written"
    # the words are kept as the screen's `/` reads them: one space between
    assert save(conn, "good", "  tool:pay \t state:running ").view.filter == "tool:pay state:running"


def test_a_view_that_no_longer_parses_says_why(db, logins):
    """A key renamed in a later release: the view stays, and says why it is not applied."""
    with h.as_login(db, ALICE) as alice:
        save(alice, "fine", "state:running")
        alice.execute("insert into saved_views (name, screen, filter, created_by) "
                      "values ('renamed', 'calls', 'owner_id:w-3 state:running', 'alice')")
        alice.execute("insert into saved_views (name, screen, filter, created_by, shared) "
                      "values ('old fleet', 'fleet', 'state:draining role:planner', 'alice', true)")
        found = {v.name: v for v in views.list_views(alice)}
    assert found["fine"].problem is None
    assert found["renamed"].problem == "unknown filter key 'owner_id:' in 'owner_id:w-3'"
    assert found["old fleet"].problem == "unknown filter key 'role:'"
    with h.as_login(db, BOB) as bob:
        assert [v.problem for v in views.list_views(bob, "fleet")] == ["unknown filter key 'role:'"]


# ----------------------------------------------------------------------------- the command line


@pytest.fixture
def cli(db, logins, monkeypatch):
    """`leasectl ... --dsn <as login>`: the command line as each login, its tables as on a pipe
    (common._pipe_width: 200 columns, whatever COLUMNS the test process has)."""
    monkeypatch.setattr(common.out, "_width", 200)

    def as_(login: str | None):
        return h.cli_invoker(make_conninfo(db.dsn, user=login) if login else db.dsn, "cli-tester")
    return as_


def test_views_save_list_delete_and_their_exit_codes(cli):
    alice, bob = cli(ALICE), cli(BOB)
    saved = alice("views", "save", "stuck", "--screen", "calls", "--where", "state:running tool:pay")
    assert saved.exit_code == 0 and "saved: personal view 'stuck' of the 2 Calls screen" in saved.stdout, saved.output
    shared = alice("views", "save", "team", "--screen", "fleet", "--where", "state:draining", "--shared")
    assert shared.exit_code == 0, shared.output
    listed = h.js(alice("views", "list", "--json"))
    assert [list(v) for v in listed] == [list(SavedView.KEYS)] * 2
    assert [(v["name"], v["screen"], v["shared"], v["mine"], v["db_role"], v["created_by"], v["problem"])
            for v in listed] == [("stuck", "calls", False, True, ALICE, "cli-tester", None),
                                 ("team", "fleet", True, True, ALICE, "cli-tester", None)]
    assert [v["name"] for v in h.js(alice("views", "list", "--screen", "fleet", "--json"))] == ["team"]
    assert [v["name"] for v in h.js(bob("views", "list", "--json"))] == ["team"]
    text = alice("views", "list")
    assert text.exit_code == 0 and "stuck" in text.stdout and "shared" in text.stdout

    # a taken name asks; no answer (or no) changes nothing: exit 2
    asked = alice("views", "save", "stuck", "--screen", "calls", "--where", "state:queued", input="n\n")
    assert asked.exit_code == 2 and "exists" in asked.stderr and "nothing changed" in asked.stderr
    assert alice("views", "save", "stuck", "--screen", "calls", "--where", "state:queued").exit_code == 2
    yes = alice("views", "save", "stuck", "--screen", "calls", "--where", "state:queued", input="y\n")
    assert yes.exit_code == 0 and "replaced:" in yes.stdout, yes.output
    forced = alice("views", "save", "stuck", "--screen", "calls", "--where", "tool:pay", "--replace")
    assert forced.exit_code == 0 and "replaced:" in forced.stdout

    # another login's shared view: not allowed (exit 1), kept
    theirs = bob("views", "save", "team", "--screen", "fleet", "--where", "state:running", "--shared", "--replace")
    assert theirs.exit_code == 1 and "only that login" in theirs.stderr, theirs.output
    asked_theirs = bob("views", "save", "team", "--screen", "fleet", "--where", "state:running", "--shared")
    assert asked_theirs.exit_code == 1 and "only that login" in asked_theirs.stderr
    kept = bob("views", "delete", "team", "--shared")
    assert kept.exit_code == 1 and "only that login" in kept.stderr
    assert h.js(bob("views", "list", "--json"))[0]["filter"] == "state:draining"

    nothing = bob("views", "delete", "stuck")
    assert nothing.exit_code == 2 and "no personal view of yours" in nothing.stderr
    gone = alice("views", "delete", "team", "--shared")
    assert gone.exit_code == 0 and "deleted: shared view 'team' of 4 Fleet" in gone.stdout
    assert "views save team --screen fleet --where state:draining --shared" in gone.stdout, "the way back"
    assert h.js(bob("views", "list", "--json")) == []
    empty = bob("views", "list")
    assert empty.exit_code == 0 and "no saved views" in empty.stderr and empty.stdout == ""


def test_views_bad_input_exits_2_and_writes_nothing(cli, conn):
    alice = cli(ALICE)
    bad = alice("views", "save", "x", "--screen", "calls", "--where", "owner_id:w-3")
    assert bad.exit_code == 2 and "unknown filter key 'owner_id:'" in bad.stderr and "filter keys:" in bad.stderr
    screen = alice("views", "save", "x", "--screen", "metrics", "--where", "tool:a")
    assert screen.exit_code == 2
    assert "triage, calls, approvals, fleet, reconciliations, audit, chains" in screen.stderr
    assert alice("views", "list", "--screen", "nope").exit_code == 2
    assert alice("views", "save", "x", "--screen", "calls", "--where", "").exit_code == 2
    assert alice("views", "save", "  ", "--screen", "calls", "--where", "tool:a").exit_code == 2
    assert alice("views", "save", "x" * 61, "--screen", "calls", "--where", "tool:a").exit_code == 2
    assert conn.execute("select count(*) as n from saved_views").fetchone()["n"] == 0


def test_views_on_a_read_only_session_list_but_never_save_or_delete(cli, conn):
    alice = cli(ALICE)
    assert alice("views", "save", "mine", "--screen", "calls", "--where", "tool:a").exit_code == 0
    for args in (("views", "save", "other", "--screen", "calls", "--where", "tool:b"),
                 ("views", "delete", "mine")):
        refused = alice("--read-only", *args)
        assert refused.exit_code == 1 and "read-only" in refused.stderr, refused.output
    assert [v["name"] for v in h.js(alice("--read-only", "views", "list", "--json"))] == ["mine"]
    assert conn.execute("select name from saved_views").fetchall() == [{"name": "mine"}]
    worker = cli(WORKER)("views", "list")
    assert worker.exit_code == 1 and "worker login" in worker.stderr


def test_views_list_says_which_views_no_longer_parse(cli, db):
    alice = cli(ALICE)
    with h.as_login(db, ALICE) as conn:
        conn.execute("insert into saved_views (name, screen, filter, created_by) "
                     "values ('renamed', 'calls', 'owner_id:w-3', 'alice')")
    listed = h.js(alice("views", "list", "--json"))
    assert listed[0]["problem"] == "unknown filter key 'owner_id:' in 'owner_id:w-3'"
    text = alice("views", "list")
    assert text.exit_code == 0, "a listing is a read: it exits 0 and says what is wrong"
    assert "unknown filter key" in text.stdout and "no longer parse" in text.stderr
    assert json.loads(alice("views", "list", "--json", "--screen", "fleet").stdout) == []


@pytest.mark.parametrize("statement", ["select 1 from saved_views", "delete from saved_views"])
def test_the_supervisor_has_no_views_either(db, pg_server, statement):
    with pg_server.admin() as admin:
        h.ensure_login(admin, "lc_views_sup", "leasectl_supervisor")
    with h.as_login(db, "lc_views_sup") as sup:
        assert h.refusal(sup, statement)[0] == "42501"
