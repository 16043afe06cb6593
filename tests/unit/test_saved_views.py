"""Saved views without a database: the screens a view may name are the console's lists, each with
the grammar its `/` parses; the checks before a save; why a view no longer parses; the words."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime

import pytest

from console.core.audit import audit_grammar
from console.core.filters import field_grammar, grammar
from console.core.saved_views import SCREENS, SavedView, check_filter, check_name, check_screen, problem_of
from console.db.sql import migrations_dir
from console.operator.present.saved_views import (
    picker_row,
    restore_command,
    scope_words,
    stale_summary,
    views_table,
)
from console.operator.tui.app import LeasectlApp
from console.operator.tui.screens.approvals import ApprovalsScreen
from console.operator.tui.screens.audit import AuditScreen
from console.operator.tui.screens.base import FieldListScreen, PollingScreen
from console.operator.tui.screens.calllist import CallListScreen
from console.shared.errors import BadInput


def view(**fields: object) -> SavedView:
    base: dict[str, object] = {"name": "stuck", "screen": "calls", "filter": "state:running", "shared": False,
                               "created_by": "alice", "created_at": datetime(2026, 7, 23, 21, 13, tzinfo=UTC),
                               "db_role": "lc_alice", "mine": True}
    return SavedView(**{**base, **fields}).checked()


def test_the_screens_are_the_consoles_lists_by_their_mode_names():
    with_filter = {mode for mode, cls in LeasectlApp.MODES.items()
                   if cls.parse_filter_text is not PollingScreen.parse_filter_text}
    assert set(SCREENS) == with_filter
    assert list(SCREENS) == [m for m in LeasectlApp.MODES if m in SCREENS], "in the order of their keys"
    for mode, screen in SCREENS.items():
        assert screen.title == LeasectlApp.SCREEN_TITLES[mode]


def test_each_screen_parses_a_view_with_the_grammar_its_slash_parses_with():
    for mode, cls in LeasectlApp.MODES.items():
        if mode not in SCREENS:
            continue
        shown = SCREENS[mode].grammar()
        if issubclass(cls, FieldListScreen):
            assert shown == field_grammar(cls.FILTER_KEYS), mode
        elif issubclass(cls, (CallListScreen, ApprovalsScreen)):
            assert shown == grammar(), mode
        else:
            assert issubclass(cls, AuditScreen) and shown == audit_grammar(), mode


def test_the_table_takes_the_same_screens():
    sql = (migrations_dir() / "0022_saved_views.sql").read_text()
    listed = re.search(r"check \(screen in \(([^)]*)\)\)", sql)
    assert listed is not None
    assert [s.strip().strip("'") for s in listed.group(1).split(",")] == sorted(SCREENS, key=list(SCREENS).index)


def test_an_unknown_screen_names_the_valid_ones():
    assert check_screen(" Calls ") == "calls"
    with pytest.raises(BadInput, match="triage, calls, approvals, fleet, reconciliations, audit, chains"):
        check_screen("metrics")
    with pytest.raises(BadInput, match="empty"):
        check_screen("")


@pytest.mark.parametrize(("name", "why"), [("", "needs a name"), ("   ", "needs a name"), ("x" * 61, "at most 60"),
                                           ("a\x1b[2Jb", "control character")])
def test_a_bad_name_is_bad_input(name, why):
    with pytest.raises(BadInput, match=re.escape(why)):
        check_name(name)


def test_a_name_keeps_its_inner_spaces():
    assert check_name("  payments stuck > 10m ") == "payments stuck > 10m"


@pytest.mark.parametrize(("screen", "text", "why"), [
    ("calls", "owner_id:w-3", "unknown filter key 'owner_id:'"),
    ("triage", "sleeping", "is not a state"),
    ("approvals", "state:asleep", "unknown state"),
    ("fleet", "health:zombie", "unknown filter key 'health:'"),
    ("reconciliations", "mode:", "nothing after 'mode:'"),
    ("chains", "stage:2", "unknown filter key 'stage:'"),
    ("audit", "since:soon", "since:"),
    ("calls", "", "empty"),
    ("calls", "tool:a\x07", "control character"),
])
def test_a_filter_is_checked_with_its_screens_grammar(screen, text, why):
    with pytest.raises(BadInput, match=re.escape(why)):
        check_filter(screen, text)


def test_a_good_filter_is_kept_as_its_screen_reads_it():
    assert check_filter("calls", " state:running\ttool:pay ") == "state:running tool:pay"
    assert check_filter("fleet", "kind:worker state:draining") == "kind:worker state:draining"
    assert check_filter("audit", "operator:alice since:3d") == "operator:alice since:3d"
    assert check_filter("chains", "outcome:needs_human") == "outcome:needs_human"


def test_a_view_that_no_longer_parses_says_why():
    assert view().problem is None
    assert view(filter="owner_id:w-3").problem == "unknown filter key 'owner_id:' in 'owner_id:w-3'"
    assert view(screen="fleet", filter="role:planner").problem == "unknown filter key 'role:'"
    assert problem_of("queues", "x").startswith("no screen 'queues' in this release")


def test_the_json_keys_are_the_contracts_first():
    doc = view().document()
    assert list(doc)[:6] == ["name", "screen", "filter", "created_by", "shared", "created_at"]
    assert list(doc) == list(SavedView.KEYS) and doc["problem"] is None


def test_the_picker_marks_personal_shared_and_stale_views():
    assert str(picker_row(view())).startswith("● stuck  personal")
    theirs = view(shared=True, mine=False, created_by="bob", db_role="lc_bob")
    assert str(picker_row(theirs)).startswith("◆ stuck  shared by bob (login lc_bob)")
    assert scope_words(view(shared=True)) == "shared, yours"
    stale = str(picker_row(view(filter="owner_id:w-3")))
    assert stale.startswith("✗ stuck") and "does not parse, not applied: unknown filter key 'owner_id:'" in stale


def test_untrusted_words_are_shown_as_text():
    hostile = view(name="x\x1b]2;pwned\x07", filter="tool:\u202epay", created_by="\x1b[31mbob", mine=False)
    for rendered in (str(picker_row(hostile)), scope_words(hostile)):
        assert "\x1b" not in rendered and "\u202e" not in rendered and "\x07" not in rendered


def test_the_way_back_after_a_delete_saves_the_same_view():
    v = view(name="it's stuck", filter="state:running tool:pay", shared=True)
    args = shlex.split(restore_command(v))
    assert args == ["leasectl", "views", "save", "it's stuck", "--screen", "calls", "--where",
                    "state:running tool:pay", "--shared"]


def test_the_listing_says_which_views_no_longer_parse():
    listed = [view(), view(name="old", filter="owner_id:w-3")]
    assert views_table(listed).row_count == 2
    assert stale_summary(listed[:1]) is None
    assert "1 view(s) no longer parse" in (stale_summary(listed) or "") and "old" in (stale_summary(listed) or "")
