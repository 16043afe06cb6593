"""One table of actions (console/core/actions.py): adding an action is one entry in ACTIONS, its
statement in queries/operator/ and its words in console/operator/present/. Each entry is held
here to its SQL file, its words, its states; the console's keys, the command palette, the bulk
plan and the CLI's commands are proven to come from the table, not from a list of their own."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from string import Formatter

import pytest
from textual.actions import parse
from typer.testing import CliRunner

from console.core import audit, ownership
from console.core.actions import ACTIONS, CHOICES, GUARD_PARAMS, action_named
from console.core.bulk import plan
from console.core.models import STATES, TERMINAL_STATES, JobSummary
from console.db.sql import load
from console.operator.cli import app
from console.operator.present.actions import ACTION_WORDS, GUARD_WORDS, ActionWords
from console.operator.present.bulk import confirmation, plan_words
from console.operator.tui.screens.approvals import ApprovalsScreen
from console.operator.tui.screens.base import CALL_ACTION_BINDINGS, CHANGES_DATA, PollingScreen
from console.operator.tui.screens.calllist import CallListScreen, call_commands
from console.operator.tui.screens.detail import DetailScreen
from console.operator.tui.screens.help import bindings_of
from console.shared.errors import BadInput

SPECS = list(ACTIONS.values())
NOW = datetime(2026, 12, 3, 2, 13, tzinfo=UTC)
# the queries that select the operator journal by kind: a new action's kind must be among them, or
# `leasectl audit actions` and the Triage's recent events would not show it
JOURNAL_READERS = ("audit/operator_actions", "views/recent_events")
# the Audit screen's `operator:` filter and the export's (audit/events_page.sql, audit/export_*.sql)
# ask leasectl_is_operator_event, defined here; tests/db/test_audit.py asks the function itself
OPERATOR_EVENT_RULE = Path(__file__).parents[2] / "migrations" / "0019_audit_rules.sql"


def call(state: str = "running", **fields: object) -> JobSummary:
    live = state in ("running", "cancel_requested")
    base = dict(id=uuid.uuid4(), tool="pay", side_effect="read_only", state=state, owner_id="w-1" if live else None,
                fencing_token=1, attempt=1, max_attempts=3, idempotency_key="k", created_at=NOW, db_now=NOW,
                lease_until=NOW if live else None, lease_left_seconds=10.0 if live else None)
    base.update(fields)
    return JobSummary.model_validate(base)


@pytest.fixture(params=SPECS, ids=[s.name for s in SPECS])
def spec(request):
    return request.param


# ----------------------------------------------------------------------------- the table against the SQL


def test_its_statement_exists_and_takes_the_parameters_the_table_says(spec):
    query = load(spec.query)  # raises when queries/<query>.sql is missing
    assert spec.query.startswith("operator/")
    assert set(query.params) == set(GUARD_PARAMS) | set(spec.params), query.params
    assert set(spec.params) <= set(CHOICES), "a choice the console and the CLI have no field or option for"
    assert query.zero_rows, "its header says what zero rows (a refusal) means"


def test_its_journal_kind_is_the_one_its_statement_writes_and_the_audit_reads(spec):
    assert spec.journal_kind in load(spec.query).source
    for reader in JOURNAL_READERS:
        assert f"'{spec.journal_kind}'" in load(reader).source, f"queries/{reader}.sql"
    assert f"'{spec.journal_kind}'" in OPERATOR_EVENT_RULE.read_text(), "leasectl_is_operator_event"
    assert spec.name in audit.ACTIONS, "`leasectl audit actions --action` accepts it (console/core/audit.py)"
    assert spec.journal_kind in ownership.OPERATOR_KINDS


def test_names_keys_and_commands_are_unique_and_spelled_alike():
    assert [s.name for s in SPECS] == list(ACTIONS)
    assert len({s.binding for s in SPECS}) == len({s.command for s in SPECS}) == len(SPECS)
    for s in SPECS:
        assert s.command == s.name.replace("_", "-") and len(s.binding) == 1
    with pytest.raises(BadInput, match="unknown action"):
        action_named("pause")


# ----------------------------------------------------------------------------- states


def test_its_states_are_real_states_and_every_other_state_has_a_reason(spec):
    assert spec.accepts and set(spec.accepts) <= set(STATES)
    assert set(spec.refusals) <= set(STATES) - set(spec.accepts)
    for state in STATES:
        why = spec.why_not(call(state))
        assert (why is None) == (state in spec.accepts), state
        if why is not None:
            assert "{" not in why and why.strip()
    if "terminal_state" in spec.params:
        assert set(spec.terminal_states) == set(spec.accepts)
        assert all(targets and set(targets) <= set(TERMINAL_STATES) for targets in spec.terminal_states.values())
    else:
        assert not spec.terminal_states


def test_the_reasons_are_the_ones_the_operators_read_before():
    assert action_named("cancel").why_not(call("cancel_requested")) == (
        "a cancel is already requested; the worker has not confirmed it yet")
    assert action_named("cancel").why_not(call("outcome_unknown")) == "a outcome unknown call cannot be cancelled"
    assert action_named("approve_retry").why_not(call("running")) == (
        "only a call whose outcome is unknown needs an approval to retry")
    mark = action_named("mark_terminal")
    assert mark.why_not(call("succeeded")) == "already succeeded"
    assert mark.why_not(call("running")) is None, "before the choice, only the state is judged"
    assert mark.why_not(call("queued"), {"terminal_state": "succeeded"}) == "a queued call cannot be marked succeeded"
    assert mark.why_not(call("running"), {"terminal_state": "failed"}) == (
        "its owner holds a live lease (force would fence it out)")
    assert mark.why_not(call("running"), {"terminal_state": "failed", "force": True}) is None


def test_a_choice_the_action_does_not_take_is_refused_never_dropped():
    with pytest.raises(BadInput, match="cancel takes no force"):
        action_named("cancel").bind({"force": True})
    assert action_named("cancel").bind({"terminal_state": None, "force": False}) == {}
    with pytest.raises(BadInput, match="use succeeded, failed or cancelled"):
        action_named("mark_terminal").bind({"terminal_state": "done"})
    assert action_named("mark_terminal").bind({"terminal_state": "failed"}) == {"terminal_state": "failed",
                                                                                  "force": False}
    with pytest.raises(BadInput):
        plan("approve_retry", [call("outcome_unknown")], terminal_state="failed")


# ----------------------------------------------------------------------------- words


def test_its_words_exist_for_every_key(spec):
    words = ACTION_WORDS[spec.words]
    assert spec.guard in GUARD_WORDS
    for name, value in vars(words).items():
        if isinstance(value, str) and name not in ("unverifiable_warning", "unverifiable_typed"):
            assert value.strip(), f"{spec.words}.{name} is empty"
    fields = {f for text in (words.verb, words.palette) for _, f, _, _ in Formatter().parse(text) if f}
    assert fields <= {"id", "terminal_state"}, fields
    if spec.confirm_unverifiable:
        assert "{n}" in words.unverifiable_typed and "{n}" in words.unverifiable_warning
    state = spec.accepts[0]
    job = call(state, external_request_id="req-1")
    choices = {"terminal_state": spec.terminal_states[state][0]} if "terminal_state" in spec.params else {}
    assert words.what_changes(job, 0.0).plain.startswith("What will change: ")
    assert words.change(state, choices)


def test_no_words_are_left_over_without_an_action():
    assert {s.words for s in SPECS} == set(ACTION_WORDS)
    assert all(isinstance(w, ActionWords) for w in ACTION_WORDS.values())


def test_a_bulk_plan_of_unverifiable_calls_asks_for_the_words_only_where_the_table_says(spec):
    state = spec.accepts[-1]
    choices = {"terminal_state": spec.terminal_states[state][0], "force": True} if spec.params else {}
    unverifiable = plan(spec.name, [call(state, side_effect="mutating_unverifiable")] * 2, **choices)
    assert unverifiable.count == 2
    typed = confirmation(unverifiable)
    assert (typed != "2") == spec.confirm_unverifiable, typed
    assert plan_words(unverifiable) is not None


# ----------------------------------------------------------------------------- the console and the CLI


def test_the_console_has_a_key_for_every_action_on_every_screen_of_calls(spec):
    for screen in (CallListScreen, ApprovalsScreen, DetailScreen):
        keyed = {b.key: b for b in bindings_of(screen)}
        binding = keyed.get(spec.binding)
        assert binding is not None, f"{screen.__name__} has no key {spec.binding}"
        assert parse(binding.action)[1:] == ("act", (spec.name,)), binding.action
        assert binding.description == ACTION_WORDS[spec.words].key
    assert len(CALL_ACTION_BINDINGS) == len(ACTIONS)
    assert "act" in CHANGES_DATA, "never offered on a read-only session"
    assert callable(PollingScreen.action_act)


def test_the_palette_offers_every_action_for_the_selected_call():
    class Screen:
        read_only = False

        def action_act(self, action: str) -> None:
            self.acted = action

        def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
            return not self.read_only  # as PollingScreen's: a read-only session offers no action

    screen = Screen()
    job = call("outcome_unknown")
    commands = list(call_commands(screen, job))  # type: ignore[arg-type]
    assert len(commands) == len(ACTIONS)
    screen.read_only = True
    assert list(call_commands(screen, job)) == []  # type: ignore[arg-type]
    screen.read_only = False
    for spec, command in zip(SPECS, commands, strict=True):
        assert job.short_id in command.title and f"({spec.binding})" in command.help
        command.callback()
        assert screen.acted == spec.name


def test_the_cli_has_a_command_for_every_action_with_its_choices(spec):
    names = [c.name for c in app.registered_commands]
    assert names.count(spec.command) == 1
    result = CliRunner().invoke(app, [spec.command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert ACTION_WORDS[spec.words].command_help.split("\n")[0] in result.output
    options = {"terminal_state": "--as", "force": "--force"}
    for choice, option in options.items():
        assert (option in result.output) == (choice in spec.params), option
    for common in ("--reason", "--where", "--token", "--operator", "--yes", "--dsn"):
        assert common in result.output
