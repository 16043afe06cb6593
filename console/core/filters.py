"""The one filter grammar: `/` on every list of calls, `leasectl jobs`, and bulk actions' `--where`.

    state:running tool:web_search owner:w-3 agent:planner-1 key:report:42: id:8f1b
    health:zombie model:gpt-5.1 provider:openai class:unverifiable
    chain:8f1b parent:3c2a session:s-9 trace:4bf92f35 priority:5

A bare word is a state, a lease-health label or an id prefix (hex); anything else must name its
key. An unknown key is an error that shows the grammar: a filter that silently matched nothing
would be a false all-clear at 02:00. The same filter is evaluated by SQL (queries/views/jobs.sql,
the Calls screen and the CLI) and in memory (`matches`, for Triage and Approvals): a test keeps
the two in agreement.

Empty filters. For a read, no filter means every call: the console's `/` cleared, `leasectl jobs`
with no option. For an action it never does: `--where "$FILTER"` with FILTER unset once approved a
retry of an unverifiable payment, so an action's filter goes through `parse_selection`, which
refuses an empty or blank one (bad input, exit 2, before anything is read or sent). And a named
option given an empty value (`jobs --tool "$TOOL"`) is bad input for a read as well
(`filter_from_options`): `--key ''` would list every call and `--tool ''` none, both silently.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Container, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from console.core.models import HEALTHS, STATES, JobSummary
from console.shared.errors import BadInput
from console.shared.text import sanitize
from console.shared.times import parse_time

SIDE_EFFECTS = {"read_only": "read_only", "read-only": "read_only", "verifiable": "mutating_verifiable",
                "mutating_verifiable": "mutating_verifiable", "unverifiable": "mutating_unverifiable",
                "mutating_unverifiable": "mutating_unverifiable"}

# filter key -> JobFilter field, with what it means (the grammar shown on a bad filter)
KEYS: dict[str, tuple[str, str]] = {
    "state": ("state", ", ".join(STATES)),
    "tool": ("tool", "a tool name"),
    "owner": ("owner", "the worker that owns (or last owned) the call"),
    "agent": ("agent", "the agent that asked for the call"),
    "key": ("key_prefix", "an idempotency-key prefix (key:report:42:)"),
    "id": ("id_prefix", "a call-id prefix (hex)"),
    "health": ("health", ", ".join(HEALTHS)),
    "model": ("model", "the model that asked (gpt-5.1)"),
    "provider": ("provider", "the model's provider (openai)"),
    "class": ("side_effect", "read_only, verifiable or unverifiable"),
    # a chain (docs/seeds.md §000 stages; migration 0014): ids as id: takes them, a prefix selecting a range
    "chain": ("chain_prefix", "the calls of a chain: its first call's id or a prefix (hex)"),
    "parent": ("parent_prefix", "the calls a call made: its id or a prefix (hex)"),
    "session": ("session", "the agent's session"),
    "trace": ("trace_prefix", "a W3C trace id (32 hex digits) or a prefix"),
    "priority": ("priority", "a priority, exactly: an integer (higher is claimed first)"),
    "at": ("at", "an instant of the past, to see every call as it was then (2026-12-03T02:13Z, 2h)"),
}
KEY_OF = {field: key for key, (field, _) in KEYS.items()}  # JobFilter field -> its filter key
_HEX = re.compile(r"^[0-9a-fA-F-]{4,36}$")


def key_list(keys: Iterable[str]) -> str:
    """`state:… tool:…`: the keys of a filter grammar, as its help names them."""
    return " ".join(f"{k}:…" for k in keys)


def keyed_term(token: str, keys: Container[str], grammar_words: Callable[[], str]) -> tuple[str, str] | None:
    """`key:value`, checked against a grammar's keys; None for a bare word. An unknown key, or
    nothing after its colon, is bad input whose hint is the grammar."""
    name, sep, value = token.partition(":")
    if not sep:
        return None
    if name not in keys:
        raise BadInput(f"unknown filter key '{sanitize(name, max_chars=40)}:' in "
                       f"'{sanitize(token, max_chars=60)}'", hint=grammar_words())
    if not value:
        raise BadInput(f"'{sanitize(token, max_chars=60)}': nothing after '{name}:'", hint=grammar_words())
    return name, value


def grammar() -> str:
    return (f"filter keys: {key_list(KEYS)}. A bare word is a state, a lease-health label or an id prefix; "
            "e.g. state:running tool:web_search health:zombie")


class Filter(BaseModel):
    """What every list's filter is (`/`, console/operator/tui/screens/base.py): frozen, and read back
    key by key as its grammar writes it; empty when it filters nothing."""

    model_config = ConfigDict(frozen=True)

    def keyed(self) -> Mapping[str, object]:
        """Each key that filters, with its value, in order."""
        raise NotImplementedError

    @property
    def empty(self) -> bool:
        return not self.keyed()

    def describe(self) -> str:
        """The filter in its own grammar (what the screen shows as active)."""
        return " ".join(f"{k}:{v}" for k, v in self.keyed().items())


class JobFilter(Filter):
    """A filter of calls; every field None means no filter."""

    state: str | None = None
    tool: str | None = None
    owner: str | None = None
    agent: str | None = None
    key_prefix: str | None = None
    id_prefix: str | None = None
    health: str | None = None
    model: str | None = None
    provider: str | None = None
    side_effect: str | None = None
    chain_prefix: str | None = None
    parent_prefix: str | None = None
    session: str | None = None
    trace_prefix: str | None = None
    priority: int | None = None
    at: str | None = None  # as typed; resolved against the database's clock by whoever reads the past

    @field_validator("at")
    @classmethod
    def _instant(cls, value: str | None) -> str | None:
        if value is not None:
            parse_time(value, what="at:")  # bad input now, not when the screen loads
        return value

    @field_validator("state", "health")
    @classmethod
    def _known(cls, value: str | None, info: ValidationInfo) -> str | None:
        known = STATES if info.field_name == "state" else HEALTHS
        if value is not None and value not in known:
            raise ValueError(f"unknown {info.field_name} '{sanitize(value, max_chars=60)}' (one of {', '.join(known)})")
        return value

    @field_validator("side_effect")
    @classmethod
    def _class(cls, value: str | None) -> str | None:
        if value is not None and value not in SIDE_EFFECTS:
            raise ValueError(f"unknown side-effect class '{sanitize(value, max_chars=60)}' "
                             "(read_only, verifiable or unverifiable)")
        return SIDE_EFFECTS[value] if value is not None else None

    @field_validator("id_prefix", "chain_prefix", "parent_prefix")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F-]{1,36}", value):
            raise ValueError(f"'{sanitize(value, max_chars=60)}' is not an id prefix (hex digits)")
        return value.lower().replace("-", "") if value is not None else None

    @field_validator("trace_prefix")
    @classmethod
    def _trace(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{1,32}", value):
            raise ValueError(f"'{sanitize(value, max_chars=60)}' is not a trace id or a prefix of one "
                             "(at most 32 hex digits)")
        return value.lower() if value is not None else None

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: object) -> object:
        # exact: no key of the grammar compares (priority:>0 is refused, not read as text)
        if isinstance(value, str):
            if not re.fullmatch(r"[+-]?[0-9]{1,6}", value.strip()):
                raise ValueError(f"priority '{sanitize(value, max_chars=60)}' is not an integer (the grammar "
                                 "matches exactly: priority:5)")
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and not -32768 <= value <= 32767:
            raise ValueError(f"priority {value} is out of range (-32768 to 32767)")
        return value

    def keyed(self) -> dict[str, object]:
        """The fields that filter (priority 0 does: a value, not a blank), by their keys."""
        return {KEY_OF[k]: v for k, v in self.model_dump().items() if v is not None and v != ""}

    def now(self) -> JobFilter:
        """The same filter without `at:` (what is true now)."""
        return self.model_copy(update={"at": None})

    def sql_values(self) -> dict[str, object]:
        """The parameters every statement that filters calls takes (queries/views/jobs.sql,
        queries/audit/jobs_at.sql): the grammar is parsed here, once; the SQL never parses it."""
        low, high = id_range(self.id_prefix) if self.id_prefix else (None, None)
        chain_low, chain_high = id_range(self.chain_prefix) if self.chain_prefix else (None, None)
        parent_low, parent_high = id_range(self.parent_prefix) if self.parent_prefix else (None, None)
        return {"state": self.state, "tool": self.tool, "owner": self.owner, "agent": self.agent,
                "key_prefix": self.key_prefix, "id_low": low, "id_high": high, "health": self.health,
                "model": self.model, "provider": self.provider, "side_effect": self.side_effect,
                "chain_low": chain_low, "chain_high": chain_high, "parent_low": parent_low,
                "parent_high": parent_high, "session": self.session, "trace_prefix": self.trace_prefix,
                "priority": self.priority}

    def merged(self, other: JobFilter) -> JobFilter:
        """Both filters at once (`jobs --where ... --tool ...`); a key both give differently is bad
        input, not a silent choice of one."""
        mine, theirs = self.model_dump(), other.model_dump()
        for name, value in theirs.items():
            if value is not None and mine.get(name) is not None and mine[name] != value:
                one, two = sanitize(str(mine[name]), max_chars=40), sanitize(str(value), max_chars=40)
                raise BadInput(f"{KEY_OF.get(name, name)}: is given twice, as '{one}' and '{two}'", hint=grammar())
        return JobFilter(**{name: mine[name] if mine[name] is not None else theirs[name] for name in mine})

    def matches(self, job: JobSummary) -> bool:
        """In-memory evaluation, the same as views/jobs.sql's WHERE clause (`at:` is not about a
        row: it says which moment the rows come from)."""
        return ((self.state is None or job.state == self.state)
                and (self.tool is None or job.tool == self.tool)
                and (self.owner is None or job.owner_id == self.owner)
                and (self.agent is None or job.agent_id == self.agent)
                and (self.key_prefix is None or job.idempotency_key.startswith(self.key_prefix))
                and (self.id_prefix is None or job.id.hex.startswith(self.id_prefix))
                and (self.health is None or job.health == self.health)
                and (self.model is None or job.model == self.model)
                and (self.provider is None or job.provider == self.provider)
                and (self.side_effect is None or job.side_effect == self.side_effect)
                and (self.chain_prefix is None
                     or (job.chain_id is not None and job.chain_id.hex.startswith(self.chain_prefix)))
                and (self.parent_prefix is None
                     or (job.parent_id is not None and job.parent_id.hex.startswith(self.parent_prefix)))
                and (self.session is None or job.session_id == self.session)
                and (self.trace_prefix is None
                     or (job.trace_id is not None and job.trace_id.startswith(self.trace_prefix)))
                and (self.priority is None or job.priority == self.priority))


def parse_filter(text: str) -> JobFilter:
    """Parse the grammar above; bad input (unknown key, empty value, a key given twice, an
    unknown state) is a BadInput whose hint is the grammar."""
    values: dict[str, str] = {}

    def put(field: str, value: str, token: str) -> None:
        if field in values and values[field] != value:
            raise BadInput(f"'{sanitize(token, max_chars=60)}': {field.replace('_prefix', '')} is given twice",
                           hint=grammar())
        values[field] = value

    for token in text.split():
        term = keyed_term(token, KEYS, grammar)
        if term is not None:
            put(KEYS[term[0]][0], term[1], token)
        elif token in STATES:
            put("state", token, token)
        elif token in HEALTHS:
            put("health", token, token)
        elif _HEX.match(token):
            put("id_prefix", token, token)
        else:
            raise BadInput(f"'{sanitize(token, max_chars=60)}' is not a state, a lease-health label or an id "
                           f"prefix; name its key (key:{sanitize(token, max_chars=40)} for an idempotency key)",
                           hint=grammar())
    try:
        return JobFilter(**values)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise BadInput(message, hint=grammar()) from None


def parse_selection(text: str | None, *, option: str = "--where") -> JobFilter:
    """The filter of an action (cancel, mark terminal, approve a retry of every call it selects).
    Empty or blank is bad input, never "every call": nothing is read, sent or journaled."""
    if text is None or not text.strip():
        raise BadInput(f"{option} is empty (an unset variable?): an action acts only on the calls a filter names, "
                       "never on every call. Nothing was changed", hint=grammar())
    selected = parse_filter(text)
    if selected.empty:  # every token names something: unreachable, and kept so
        raise BadInput(f"{option} '{sanitize(text, max_chars=60)}' selects every call: name what to act on",
                       hint=grammar())
    return selected


def filter_from_options(options: dict[str, str | None]) -> JobFilter:
    """A read's filter from named options (`leasectl jobs --tool X --state Y`), keyed by option:
    an option left out filters nothing; one given an empty value is bad input."""
    fields = {"--state": "state", "--tool": "tool", "--owner": "owner", "--agent": "agent", "--key": "key_prefix",
              "--health": "health"}
    for name, value in options.items():
        if value is not None and not value.strip():
            raise BadInput(f"{name} is empty (an unset variable?): give a value, or leave {name} out to list "
                           "every call")
    try:
        return JobFilter(**{fields[name]: value for name, value in options.items()})
    except ValidationError as exc:
        raise BadInput(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


# ----------------------------------------------------------------------------- the fleet's lists

AGENT_KEYS = {"agent": "an agent-id prefix", "kind": "the agent's kind (planner, sandbox)",
              "state": "running, draining, aborting, reconciling or terminated"}
RECORD_KEYS = {"agent": "the subtree's root agent (a prefix)", "mode": "drain or abort",
               "unaccounted": "yes: only records with unaccounted agents"}


class FieldFilter(Filter):
    """`agent:planner state:draining` over a list of the fleet screens: exact values, except
    `agent:`, a prefix. A bare word is an agent-id prefix."""

    terms: dict[str, str] = {}

    def keyed(self) -> dict[str, str]:
        return self.terms

    def matches(self, values: dict[str, str | None]) -> bool:
        for key, wanted in self.terms.items():
            value = values.get(key) or ""
            if key == "agent" and not value.startswith(wanted):
                return False
            if key != "agent" and value != wanted:
                return False
        return True


def field_grammar(keys: dict[str, str]) -> str:
    return "filter keys: " + "; ".join(f"{k}: {meaning}" for k, meaning in keys.items()) + \
        ". A bare word is an agent-id prefix."


def parse_fields(text: str, keys: dict[str, str]) -> FieldFilter:
    terms: dict[str, str] = {}
    for token in text.split():
        name, sep, value = token.partition(":")
        if not sep:
            name, value = "agent", token
        elif name not in keys:
            raise BadInput(f"unknown filter key '{sanitize(name, max_chars=40)}:'", hint=field_grammar(keys))
        elif not value:
            raise BadInput(f"'{sanitize(token, max_chars=60)}': nothing after '{name}:'", hint=field_grammar(keys))
        if name in terms and terms[name] != value:
            raise BadInput(f"{name}: is given twice", hint=field_grammar(keys))
        terms[name] = value
    return FieldFilter(terms=terms)


# ----------------------------------------------------------------------- id prefixes

_HEX_DIGITS = re.compile(r"^[0-9a-f]+$")


def id_range(prefix: str, what: str = "call") -> tuple[uuid.UUID, uuid.UUID]:
    """The smallest and largest uuid starting with `prefix` (hex digits, hyphens optional); `what`
    names the id in the message (a call's, a grant's, a shutdown's)."""
    cleaned = prefix.strip().lower().replace("-", "")
    if cleaned and len(cleaned) > 32 and _HEX_DIGITS.match(cleaned):
        raise BadInput(f"'{sanitize(prefix, max_chars=48)}' is too long for a {what} id: {len(cleaned)} hex digits, "
                       "an id has 32")
    if not cleaned or len(cleaned) > 32 or not _HEX_DIGITS.match(cleaned):
        raise BadInput(f"'{sanitize(prefix, max_chars=48)}' is not a {what} id or an id prefix (hex digits)")
    low = cleaned.ljust(32, "0")
    high = cleaned.ljust(32, "f")
    return uuid.UUID(low), uuid.UUID(high)
