"""Who wrote a row, in words and in verify's rules: pure, no database. The database tests
(tests/db/test_audit_db_role.py) hold them against real logins."""

from __future__ import annotations

import pytest
from rich.console import Console

from console.core.audit import bound_to, login_violation
from console.operator.present.logins import LOGIN_MARK, LOGIN_STYLE, claimed, legend_if_claimed, login_cell, who_text


def plain(text) -> str:
    console = Console(width=200, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(text)
    return captured.get().rstrip("\n")


def test_a_name_is_a_logins_own_by_the_databases_rule_for_a_worker_id():
    assert bound_to("lc_w", "lc_w") and bound_to("lc_w:w-1", "lc_w") and bound_to("lc_w:", "lc_w")
    assert not bound_to("lc_wx", "lc_w"), "a look-alike prefix is someone else"
    assert not bound_to("alice", "lc_ops") and not bound_to(None, "lc_w") and not bound_to("lc_w", None)


def test_the_words_mark_only_an_operators_name_its_login_does_not_own():
    assert plain(who_text("lc_w:w-1", "lc_w", operator=True)) == "lc_w:w-1"
    assert plain(who_text("w-1", None, operator=True)) == "w-1", "before 0005: no login to tell"
    assert plain(who_text("alice", "lc_ops", operator=True)) == "alice (login lc_ops)"
    marked = who_text("alice", "lc_ops", operator=True)
    assert any(span.style == LOGIN_STYLE for span in marked.spans)
    assert plain(who_text("w-search-1", "postgres", operator=False)) == "w-search-1", \
        "a worker's name is bound by the database; verify reports a worker login that broke it"
    assert plain(who_text("alice", "lc_ops", operator=True, stacked=True)) == f"alice\n{LOGIN_MARK} lc_ops", \
        "under it, in a table"
    assert plain(who_text("lc_w:1", "lc_w", operator=True, stacked=True)) == "lc_w:1"
    assert plain(who_text("op\x1b]2;X\x07", "lc\x1b[31m", operator=True)) == "op\\x1b]2;X\\x07 (login lc\\x1b[31m)", \
        "never raw"
    assert login_cell("lc_w:w-1", "lc_w", operator=True) == ("lc_w", "dim")
    assert login_cell("alice", "lc_ops", operator=True) == (f"{LOGIN_MARK} lc_ops", LOGIN_STYLE)
    assert login_cell("w-1", "postgres", operator=False) == ("postgres", "dim"), "shown, not marked"
    assert login_cell("alice", None, operator=True) == ("—", "dim")
    assert claimed("alice", "lc_ops", operator=True) and not claimed("alice", "lc_ops", operator=False)
    assert not claimed(None, "lc_ops", operator=True) and not claimed("alice", None, operator=True)
    assert legend_if_claimed([("lc_w:1", "lc_w", True), ("x", None, True), ("w-1", "postgres", False)]) is None
    assert "names and logins" in plain(legend_if_claimed([("alice", "lc_ops", True)]))


@pytest.mark.parametrize(("kind", "actor", "owner_to", "state_from", "state_to", "why"), [
    ("operator_approve_retry", "alice", None, None, None, "operator event"),
    ("operator_action_failed", "lc_w", None, None, None, "operator event"),
    ("claimed", "lc_w2:x", "lc_w2:x", "queued", "running", "owner lc_w2:x"),
    ("reclaimed", "lc_w", "lc_wx", "running", "running", "owner lc_wx"),
    ("heartbeat_lost", "lc_w2:b", None, None, None, "in the name of lc_w2:b"),
    ("tool_request_started", "other", None, None, None, "in the name of other"),
    ("custom_note", None, None, None, None, "in the name of nobody"),
    ("state_changed", "lc_w", "lc_w", "outcome_unknown", "queued", "outcome_unknown"),
    ("fenced", "lc_w", "lc_w", "running", "running", "fenced"),
])
def test_what_a_worker_login_may_not_have_written(kind, actor, owner_to, state_from, state_to, why):
    found = login_violation(kind, actor, owner_to, state_from, state_to, "lc_w")
    assert found is not None and why in found


@pytest.mark.parametrize(("kind", "actor", "owner_to", "state_from", "state_to"), [
    ("enqueued", "planner-1", None, None, "queued"),  # the agent's name: the database's own row
    ("claimed", "lc_w:a", "lc_w:a", "queued", "running"),
    ("reclaimed", "lc_w", "lc_w", "running", "running"),
    ("state_changed", "lc_w:a", None, "running", "queued"),
    ("state_changed", "lc_w:a", "lc_w:a", "running", "succeeded"),
    ("tool_request_started", "lc_w:a", "lc_w:a", "running", "running"),  # the trigger's row
    ("tool_request_started", "lc_w:a", None, None, None),  # a worker's own report
    ("side_effect_started", "someone", "someone", "running", "running"),  # before 0005, the trigger's
    ("heartbeat_lost", "lc_w", None, None, None),
    ("result_rejected", "lc_w:a", None, None, None),
])
def test_what_a_worker_login_writes_honestly(kind, actor, owner_to, state_from, state_to):
    assert login_violation(kind, actor, owner_to, state_from, state_to, "lc_w") is None
