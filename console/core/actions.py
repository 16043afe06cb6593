"""The operator's actions on a call, in one table: what each runs, what it may apply to, what it
takes, and where the console, the CLI and the words find it.

Every consumer reads ACTIONS and nothing else: console/db/actions.py runs an entry's statement with
its parameters, console/db/bulk.py plans and sends it for many calls, console/operator/present/
looks its words up by its keys, the console's dialogs, keys and command palette and the CLI's
commands are generated from it. Adding an action is one entry here, its statement in
queries/operator/ and its words in console/operator/present/actions.py (README.md, "Adding an
action"); tests/unit/test_actions.py holds every entry to its file, its words and its states.

The database decides (the SECURITY DEFINER functions of migrations/0005_trust.sql, guarded by
the state and fencing token the operator saw): what is here only avoids sending what could only
be refused. That is why the reasons below are sentences, said before anything is sent and kept
in a bulk plan beside the calls they skip, in the words the database's own refusals use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from console.core.models import TERMINAL_STATES
from console.shared.errors import BadInput

# What every operator statement takes, whatever the action: the call and the guard (the state and
# token the operator saw), who acts and why (journaled with the action).
GUARD_PARAMS: tuple[str, ...] = ("job_id", "seen_state", "seen_token", "operator", "reason")
# The parameters an action may take beyond those, and their value when not chosen (None: it must
# be chosen). Each has its field in the console's dialogs and its option in the CLI.
CHOICES: Mapping[str, object] = MappingProxyType({"terminal_state": None, "force": False})


class ActedOn(Protocol):
    """What the rules read of a call (console.core.models.JobSummary has it)."""

    @property
    def state(self) -> str: ...

    @property
    def lease_live(self) -> bool: ...


def spoken(state: str) -> str:
    return state.replace("_", " ")


@dataclass(frozen=True)
class ActionSpec:
    """One action an operator may take on a call."""

    # its name: the key of ACTIONS, the `action` of the journal (`leasectl audit actions --action`)
    name: str
    # the statement it runs (queries/<query>.sql): GUARD_PARAMS, then `params`
    query: str
    # the states it may apply to; a call in any other one is not sent (`why_not`)
    accepts: tuple[str, ...]
    # why not, for a call in another state ({state}: that state, in words) ...
    refusal: str
    # ... unless that state has a reason of its own
    refusals: Mapping[str, str] = field(default_factory=dict)
    # the parameters it takes beyond GUARD_PARAMS (keys of CHOICES), in the statement's order
    params: tuple[str, ...] = ()
    # with `terminal_state`: what a call in each accepted state may be marked (the statement's rule)
    terminal_states: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # an unverifiable side effect (a retry may repeat it, and nobody can check): the operator types
    # the call's id (one call) or the count with the words (a bulk action) to confirm
    confirm_unverifiable: bool = False
    # the guard it relies on, and its words' keys (console/operator/present/actions.py)
    guard: str = "seen_state_and_token"
    words: str = ""
    # the console's key for it (on a call, or on the marked calls) and the CLI's command
    binding: str = ""
    command: str = ""
    # it may be asked of a whole chain (`--chain`): every unfinished call of the call's chain, as a
    # bulk action over the filter `chain:<first call>` (docs/seeds.md §004: a cancel reaches the
    # chain's later stages and retries)
    reaches_chain: bool = False

    @property
    def journal_kind(self) -> str:
        """The kind of its job_events row: the audit's queries read the action back from it
        (queries/audit/operator_actions.sql: the kind after `operator_`)."""
        return f"operator_{self.name}"

    def why_not(self, call: ActedOn, choices: Mapping[str, object] | None = None) -> str | None:
        """Why this action cannot apply to the call as it was read, or None. Before its choices
        are made (a dialog about to open, a mark-terminal whose state is not chosen yet) only the
        call's state is judged; once they are, what they ask of the call too."""
        if call.state not in self.accepts:
            return self.refusals.get(call.state, self.refusal).format(state=spoken(call.state))
        chosen = choices or {}
        if "terminal_state" in self.params:
            terminal_state = chosen.get("terminal_state")
            if terminal_state is None:
                return None
            if terminal_state not in self.terminal_states[call.state]:
                return f"a {spoken(call.state)} call cannot be marked {terminal_state}"
        if "force" in self.params and call.lease_live and not chosen.get("force"):
            return "its owner holds a live lease (force would fence it out)"
        return None

    def chosen(self, choices: Mapping[str, object]) -> dict[str, object]:
        """The choices this action takes, each as made or its default (CHOICES); a choice it does
        not take is refused, never dropped (a --force that did nothing would be a lie)."""
        stray = sorted(name for name, value in choices.items()
                       if name not in self.params and value not in (None, False))
        if stray:
            raise BadInput(f"{self.command} takes no {', '.join(stray)}")
        return {name: choices.get(name, CHOICES[name]) for name in self.params}

    def bind(self, choices: Mapping[str, object]) -> dict[str, object]:
        """Its own parameters for its statement: the choices, each checked before anything is sent."""
        bound = self.chosen(choices)
        if "terminal_state" in bound and bound["terminal_state"] not in TERMINAL_STATES:
            raise BadInput(f"cannot mark a call '{bound['terminal_state'] or ''}': use succeeded, failed or cancelled")
        if "force" in bound:
            bound["force"] = bool(bound["force"])
        return bound


def _table(*specs: ActionSpec) -> Mapping[str, ActionSpec]:
    return MappingProxyType({spec.name: spec for spec in specs})


ACTIONS: Mapping[str, ActionSpec] = _table(
    # docs/seeds.md §004.2, §004.11: a cancel is a request; a running call is NOT stopped until
    # its worker confirms
    ActionSpec(
        name="cancel",
        query="operator/request_cancel",
        accepts=("queued", "running"),
        refusal="a {state} call cannot be cancelled",
        refusals={"cancel_requested": "a cancel is already requested; the worker has not confirmed it yet"},
        words="cancel",
        binding="c",
        command="cancel",
        reaches_chain=True,
    ),
    # docs/seeds.md §000.14, §004.11: closed by a human after checking outside; force fences a
    # live owner out (§000.11)
    ActionSpec(
        name="mark_terminal",
        query="operator/mark_terminal",
        accepts=("queued", "running", "cancel_requested", "outcome_unknown"),
        refusal="already {state}",
        params=("terminal_state", "force"),
        terminal_states={"queued": ("failed", "cancelled"), "running": TERMINAL_STATES,
                         "cancel_requested": TERMINAL_STATES, "outcome_unknown": ("succeeded", "failed")},
        words="mark_terminal",
        binding="t",
        command="mark-terminal",
    ),
    # docs/seeds.md §004.8: an unknown outcome waits for a human, never the executor
    ActionSpec(
        name="approve_retry",
        query="operator/approve_retry",
        accepts=("outcome_unknown",),
        refusal="only a call whose outcome is unknown needs an approval to retry",
        confirm_unverifiable=True,
        words="approve_retry",
        binding="a",
        command="approve-retry",
    ),
)


def action_named(name: str) -> ActionSpec:
    try:
        return ACTIONS[name]
    except KeyError:
        raise BadInput(f"unknown action '{name}': {', '.join(ACTIONS)}") from None
