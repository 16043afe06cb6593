"""The one filter grammar: `/` on every list of calls, `leasectl jobs`, and bulk actions' `--where`.

    state:running tool:web_search owner:w-3 agent:planner-1 key:report:42: id:8f1b
    health:zombie model:gpt-5.1 provider:openai class:unverifiable
    chain:8f1b parent:3c2a session:s-9 trace:4bf92f35 priority:5
    payload:$.invoice=INV-7 payload:$.lines[0].sku=A-1 payload:$.invoice payload:refund
    payload:"late fee" payload:$.customer.name="Ada Lovelace"

A bare word is a state, a lease-health label or an id prefix (hex); anything else must name its
key. An unknown key is an error that shows the grammar: a filter that silently matched nothing
would be a false all-clear at 02:00. The same filter is evaluated by SQL (queries/views/jobs.sql,
the Calls screen and the CLI) and in memory (`matches`, for Triage and Approvals): a test keeps
the two in agreement -- except `payload:`, which only the database evaluates (a list of calls
carries no payload): the screens that filter in memory refuse it (`memory_filter`).

`payload:` (PayloadTerm) searches the calls' payloads: a JSON path compared with a value, the path
alone (it is there), or text. It is the one key whose value may be quoted ("two words": the grammar
otherwise splits on white space); it needs the SELECT privilege on tool_jobs.payload, and it is
tested only on the calls the rest of the filter selects (queries/views/jobs.sql).

Empty filters. For a read, no filter means every call: the console's `/` cleared, `leasectl jobs`
with no option. For an action it never does: `--where "$FILTER"` with FILTER unset once approved a
retry of an unverifiable payment, so an action's filter goes through `parse_selection`, which
refuses an empty or blank one (bad input, exit 2, before anything is read or sent). And a named
option given an empty value (`jobs --tool "$TOOL"`) is bad input for a read as well
(`filter_from_options`): `--key ''` would list every call and `--tool ''` none, both silently.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass

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
    "payload": ("payload", "a JSON path and a value ($.invoice=INV-7, $.lines[0].sku=A-1), a path alone "
                           "($.invoice: it is there), or text in the payload, any case (refund, \"two words\")"),
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
            "e.g. state:running tool:web_search health:zombie, tool:pay payload:$.invoice=INV-7")


# ----------------------------------------------------------------------------- payload:

PAYLOAD_MAX_CHARS = 500
PAYLOAD_MAX_STEPS = 32
PAYLOAD_GRAMMAR = ("payload:$.invoice=INV-7 (a JSON path -- $ then .key or [index], keys of letters, digits, _ "
                   "and - -- and a value: a string exactly, or a number, true, false or null as typed or as that "
                   "JSON value; \"quoted\": the string only), payload:$.invoice (the path is there), "
                   "payload:refund or payload:\"two words\" (text anywhere in the payload's JSON, any case)")
_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[([0-9]{1,6})\]")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?")  # within numeric's range
_JSON_WORDS = ("true", "false", "null")


@dataclass(frozen=True)
class PayloadTerm:
    """What a `payload:` term asks of a call's payload.

    * a path and a value (`$.invoice=INV-7`): some value the path reaches equals it. A string
      equals it exactly (case and all); a value written unquoted that reads as a JSON number,
      true, false or null also matches that JSON value (`$.amount=120`: 120, 120.0 or "120";
      `$.vip=true`: true or "true"); a quoted one (`$.amount="120"`) only the string. An array
      on the way is searched element by element (JSON path's lax mode: `$.lines.sku=A-1` is any
      line's sku; `$.lines[0].sku` the first line's).
    * a path alone (`$.invoice`): the path reaches something (null included);
    * text (`refund`, `"two words"`): the payload's JSON text contains it, in any case (keys and
      values alike, as PostgreSQL writes jsonb as text: `"a": 1`, a quote inside a string as \\"),
      folded to lower case as the database's lower() folds it.
    """

    steps: tuple[str | int, ...] = ()
    value: str | None = None
    quoted: bool = False  # the value was quoted: it matches the string only
    text: str | None = None

    @property
    def literal(self) -> str | None:
        """The JSON value an unquoted value stands for besides the string (120, true), or None."""
        if self.value is None or self.quoted:
            return None
        if self.value in _JSON_WORDS or _JSON_NUMBER.fullmatch(self.value):
            return self.value
        return None

    def jsonpath(self) -> str | None:
        """The SQL/JSON path for jsonb_path_exists (None for text). Built from the parsed steps
        only -- every key written as a JSON string -- and compared with variables ($v, $n), so no
        typed character reaches the path's syntax; the whole is a bound parameter of the query."""
        if self.text is not None:
            return None
        path = "$" + "".join(f"[{step}]" if isinstance(step, int) else "." + json.dumps(step) for step in self.steps)
        if self.value is None:
            return path
        return path + (" ? (@ == $v || @ == $n)" if self.literal is not None else " ? (@ == $v)")

    def variables(self) -> str | None:
        """The path's variables as JSON text (jsonb_path_exists' `vars`), or None for text."""
        if self.text is not None:
            return None
        if self.value is None:
            return "{}"
        return '{"v": ' + json.dumps(self.value) + (f', "n": {self.literal}' if self.literal is not None else "") + "}"


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The string quoted at text[start] ('"'), with \\" and \\\\ as a quote and a backslash (any other
    backslash is itself), and the index after its closing quote; ValueError when it is not closed."""
    out: list[str] = []
    i = start + 1
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in '"\\':
            out.append(text[i + 1])
            i += 2
        elif char == '"':
            return "".join(out), i + 1
        else:
            out.append(char)
            i += 1
    raise ValueError(f"payload:{sanitize(text, max_chars=60)}: a quote is not closed")


def parse_payload(text: str) -> PayloadTerm:
    """A `payload:` term's value (what follows `payload:`, quotes and all) as a PayloadTerm;
    ValueError with what is wrong."""
    shown = f"payload:{sanitize(text, max_chars=60)}"
    if not text:
        raise ValueError(f"'{shown}': nothing after 'payload:'")
    if len(text) > PAYLOAD_MAX_CHARS:
        raise ValueError(f"'{shown}' is too long: at most {PAYLOAD_MAX_CHARS} characters after 'payload:'")
    if not text.startswith("$"):  # text
        if text.startswith('"'):
            found, end = _quoted(text, 0)
            if end != len(text):
                raise ValueError(f"'{shown}': quote the whole text (payload:\"two words\")")
        elif '"' in text:
            raise ValueError(f"'{shown}': quote the whole text (payload:\"two words\")")
        else:
            found = text
        if not found:
            raise ValueError(f"'{shown}': the text is empty (it would match every call)")
        return PayloadTerm(text=found)
    steps: list[str | int] = []
    at = 1
    while at < len(text) and text[at] != "=":
        step = _STEP.match(text, at)
        if step is None:
            raise ValueError(f"'{shown}': not a JSON path this filter takes at "
                             f"'{sanitize(text[at:at + 20], max_chars=20)}' ($ then .key or [index]: "
                             "$.invoice, $.lines[0].sku; keys of letters, digits, _ and -)")
        steps.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        at = step.end()
    if not steps:
        raise ValueError(f"'{shown}': name a key after $ ($.invoice=INV-7)")
    if len(steps) > PAYLOAD_MAX_STEPS:
        raise ValueError(f"'{shown}': a path of at most {PAYLOAD_MAX_STEPS} steps")
    if at == len(text):
        return PayloadTerm(steps=tuple(steps))
    value = text[at + 1:]
    if not value:
        raise ValueError(f"'{shown}': nothing after '=' (give a value, or \"\" for the empty string)")
    if value.startswith('"'):
        found, end = _quoted(value, 0)
        if end != len(value):
            raise ValueError(f"'{shown}': quote the whole value ($.name=\"Ada Lovelace\")")
        return PayloadTerm(steps=tuple(steps), value=found, quoted=True)
    if '"' in value:
        raise ValueError(f"'{shown}': quote the whole value ($.name=\"Ada Lovelace\")")
    return PayloadTerm(steps=tuple(steps), value=value)


def split_terms(text: str) -> list[str]:
    """The filter's terms: split on white space, except inside the quotes of a `payload:` term
    (payload:"two words", payload:$.name="Ada Lovelace"), which stay in its term as typed."""
    terms: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        start = i
        payload = text.startswith("payload:", i)
        while i < n and not text[i].isspace():
            if payload and text[i] == '"':
                try:
                    i = _quoted(text, i)[1]
                except ValueError:
                    raise BadInput(f"'{sanitize(text[start:], max_chars=60)}': a quote is not closed",
                                   hint=PAYLOAD_GRAMMAR) from None
            else:
                i += 1
        terms.append(text[start:i])
    return terms


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
    payload: str | None = None  # as typed after `payload:` (quotes and all); PayloadTerm says what it asks
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

    @field_validator("payload")
    @classmethod
    def _payload(cls, value: str | None) -> str | None:
        if value is not None:
            parse_payload(value)  # bad input now, not when the database is asked
        return value

    @property
    def payload_term(self) -> PayloadTerm | None:
        return parse_payload(self.payload) if self.payload is not None else None

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
        term = self.payload_term
        return {"state": self.state, "tool": self.tool, "owner": self.owner, "agent": self.agent,
                "key_prefix": self.key_prefix, "id_low": low, "id_high": high, "health": self.health,
                "model": self.model, "provider": self.provider, "side_effect": self.side_effect,
                "chain_low": chain_low, "chain_high": chain_high, "parent_low": parent_low,
                "parent_high": parent_high, "session": self.session, "trace_prefix": self.trace_prefix,
                "priority": self.priority, "payload_path": term.jsonpath() if term else None,
                "payload_vars": term.variables() if term else None, "payload_text": term.text if term else None}

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
        row: it says which moment the rows come from). `payload:` is not: a JobSummary carries no
        payload, and a guess either way would be a false answer, so it is bad input here (the
        screens that filter in memory refuse it as it is typed: `memory_filter`)."""
        if self.payload is not None:
            raise BadInput(PAYLOAD_IN_MEMORY.format(where="a list that filters in memory"), hint=grammar())
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

    for token in split_terms(text):
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
        error = exc.errors()[0]
        message = error["msg"].removeprefix("Value error, ")
        raise BadInput(message, hint=PAYLOAD_GRAMMAR if error["loc"] == ("payload",) else grammar()) from None


PAYLOAD_IN_MEMORY = ("payload: is searched in the database, and {where} filters the calls it has already read, "
                     "which carry no payload: search payloads on the Calls screen (2), or with `leasectl jobs --where`")


def memory_filter(text: str, screen: str) -> JobFilter:
    """The filter of a screen that filters in memory the calls it has read (Triage, Approvals:
    `matches`): the grammar, with `payload:` refused as it is typed (bad input that says where
    payloads are searched), never matched against calls that do not carry one."""
    parsed = parse_filter(text)
    if parsed.payload is not None:
        raise BadInput(PAYLOAD_IN_MEMORY.format(where=f"the {screen} screen"), hint=grammar())
    return parsed


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
