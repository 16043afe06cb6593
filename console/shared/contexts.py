"""Contexts: the databases one person works with, by name (k9s's contexts, kubectl's kubeconfig).

    $XDG_CONFIG_HOME/leasectl/contexts.toml   (default ~/.config/leasectl/contexts.toml)

    [contexts.prod-eu]
    dsn = "postgresql://oncall@db-eu.internal/leasectl"
    read_dsn = "postgresql://oncall@db-eu-replica.internal/leasectl"   # optional: reads go there
    operator = "dana"            # optional: the name journaled with actions here
    read_only = false            # optional: true refuses every action here (--read-only)
    production = true            # optional: the console's header stands out (colour below)
    colour = "red"               # optional: the header's colour for this context
    trace_url = "https://tempo.example/trace/{trace_id}"   # optional: a call's trace as a link

    [contexts.staging]
    dsn = "postgresql://localhost/leasectl"

`--context NAME` (before the command) or LEASECTL_CONTEXT picks one; an explicit --dsn still wins
over the context's dsn, and --operator over its operator. One module reads the file, so every
command, the console and the all-contexts Triage agree about what a name means.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit

from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.color import Color, ColorParseError

from console.shared.config import default_operator, resolve_dsn
from console.shared.dsn import masked_dsn
from console.shared.errors import BadInput

CONTEXT_ENV = "LEASECTL_CONTEXT"
# a colour Rich and Textual both understand by name, or #rrggbb: checked when the file is read,
# so that a typo is an error on the command line, not a console that fails to draw its header
_COLOUR = re.compile(r"^(#[0-9a-fA-F]{6}|[a-z_]+[0-9]{0,3})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
# what a trace_url template holds: the one place the call's trace id goes
TRACE_ID_FIELD = "{trace_id}"


class Context(BaseModel):
    """One named database, as the file says it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dsn: str = Field(min_length=1)
    read_dsn: str | None = None
    operator: str | None = None
    read_only: bool = False
    production: bool = False
    colour: str | None = None
    trace_url: str | None = None

    @field_validator("colour")
    @classmethod
    def _known_colour(cls, value: str | None) -> str | None:
        if value is not None and not _COLOUR.match(value):
            raise ValueError(f"not a colour name or #rrggbb: {value!r}")
        if value is not None:
            try:
                Color.parse(value)  # the header is drawn with Rich's names (red, magenta, dark_orange, grey50)
            except ColorParseError:
                raise ValueError(f"not a colour name Rich knows (red, magenta, dark_orange, …) nor #rrggbb: "
                                 f"{value!r}") from None
        return value

    @field_validator("trace_url")
    @classmethod
    def _trace_template(cls, value: str | None) -> str | None:
        if value is not None:
            check_trace_url(value)
        return value

    def trace_link(self, trace_id: str | None) -> str | None:
        """The link to a call's trace here (`trace_url` with the id put in), or None."""
        return trace_link(self.trace_url, trace_id)

    @property
    def header_colour(self) -> str | None:
        """The colour the console's header takes here: the context's own, or red for production."""
        return self.colour or ("red" if self.production else None)

    @property
    def header_text_colour(self) -> str:
        """Black or white, whichever reads on `header_colour` (white when there is none)."""
        if self.header_colour is None:
            return "white"
        red, green, blue = Color.parse(self.header_colour).get_truecolor()
        return "black" if 0.2126 * red + 0.7152 * green + 0.0722 * blue > 100 else "white"

    def masked(self) -> dict[str, object]:
        """What `leasectl contexts` shows: every field, passwords masked."""
        shown = self.model_dump()
        shown["dsn"] = masked_dsn(self.dsn)
        if self.read_dsn:
            shown["read_dsn"] = masked_dsn(self.read_dsn)
        return shown


def check_trace_url(template: str) -> str:
    """A `trace_url` template as the file must give it: an http or https URL with a host, holding
    `{trace_id}` (the only field: no other braces), no spaces nor control characters (it is written
    into terminal links). Raises ValueError saying what is wrong."""
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in template):
        raise ValueError(f"{template!r} holds spaces or control characters: a URL has none")
    if TRACE_ID_FIELD not in template:
        raise ValueError(f"{template!r} has no {TRACE_ID_FIELD}: where does the trace id go? "
                         "(e.g. https://tempo.example/trace/{trace_id})")
    rest = template.replace(TRACE_ID_FIELD, "")
    if "{" in rest or "}" in rest:
        raise ValueError(f"{template!r}: only {TRACE_ID_FIELD} is filled in; another brace is a typo")
    parts = urlsplit(template.replace(TRACE_ID_FIELD, "0" * 32))
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{template!r} is not an http or https URL")
    if not parts.hostname:
        raise ValueError(f"{template!r} names no host")
    return template


def trace_link(template: str | None, trace_id: str | None) -> str | None:
    """`template` (a checked trace_url) with the trace id put in wherever it says {trace_id},
    percent-encoded (a W3C trace id is 32 hex digits, which encode as themselves: the encoding is
    for whatever else a row may hold); None without a template or a trace."""
    if not template or not trace_id:
        return None
    return template.replace(TRACE_ID_FIELD, quote(trace_id, safe=""))


def contexts_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "leasectl" / "contexts.toml"


def read_toml(where: Path) -> dict[str, object] | None:
    """A settings file of ours as a document; None when there is none. Unreadable or not TOML: bad
    input naming the file (exit 2). (contexts.toml here, the web console's users file too.)"""
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadInput(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{where} is not valid TOML: {exc}") from None


def load_contexts(path: Path | None = None) -> dict[str, Context]:
    """Every context in the file, in the file's order; no file: none. A file that does not parse,
    or a context with an unknown key or a missing dsn, is an error naming the place (exit 2)."""
    where = path or contexts_path()
    document = read_toml(where)
    if document is None:
        return {}
    unknown = sorted(set(document) - {"contexts"})
    if unknown:
        raise BadInput(f"{where}: unknown top-level key(s) {', '.join(unknown)}; contexts go under "
                       "[contexts.NAME]")
    tables = document.get("contexts", {})
    if not isinstance(tables, dict):
        raise BadInput(f"{where}: `contexts` must be tables, [contexts.NAME]")
    found: dict[str, Context] = {}
    for name, table in tables.items():
        if not _NAME.match(name):
            raise BadInput(f"{where}: context name {name!r}: letters, digits, '.', '_' and '-' only")
        if not isinstance(table, dict):
            raise BadInput(f"{where}: [contexts.{name}] must be a table with at least dsn = \"...\"")
        try:
            found[name] = Context(name=name, **table)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or name}: {_plain(e)}"
                                 for e in exc.errors())
            raise BadInput(f"{where}: [contexts.{name}]: {problems}") from None
        except TypeError:  # a key given twice as name=: the table says name = ..., refused as unknown
            raise BadInput(f"{where}: [contexts.{name}]: `name` is the table's own name, not a key") from None
    return found


def _plain(error: object) -> str:
    detail = error if isinstance(error, dict) else {}
    if detail.get("type") == "extra_forbidden":
        return "unknown key (known: dsn, read_dsn, operator, read_only, production, colour, trace_url)"
    if detail.get("type") == "missing":
        return "missing"
    return str(detail.get("msg", error))


def chosen_name(explicit: str | None) -> str | None:
    """--context, else LEASECTL_CONTEXT, else none (the DSN comes from --dsn or the environment)."""
    if explicit is not None:
        return explicit
    return os.environ.get(CONTEXT_ENV) or None


def resolve_context(name: str, path: Path | None = None) -> Context:
    """The context called `name`; an unknown name is an error listing the known ones (exit 2)."""
    contexts = load_contexts(path)
    if name in contexts:
        return contexts[name]
    where = path or contexts_path()
    known = ", ".join(contexts) if contexts else f"none: {where} has no [contexts.NAME]"
    raise BadInput(f"no context named {name!r} (known: {known})",
                   hint=f"contexts are read from {where}; `leasectl contexts` lists them")


# ----------------------------------------------------------------------------- a context under the command line


class Answer(BaseModel):
    """Whether a context's database answers (console.db.probe): up, and how long the connection
    and one round trip took, or down and why in a few words (never a password)."""

    answers: bool
    answered_in_ms: int | None = None
    error: str | None = None


class Overrides(BaseModel):
    """What the command line said (--dsn, --operator, --read-only). It beats a context's own
    settings; the console keeps --operator and --read-only across a switch (ctrl+o), and --dsn
    only for the context it opened with."""

    model_config = ConfigDict(frozen=True)

    dsn: str | None = None
    operator: str | None = None
    read_only: bool = False


class Settled(BaseModel):
    """Where a command or the console connects, as whom, and whether it may act."""

    model_config = ConfigDict(frozen=True)

    context: Context | None
    dsn: str
    dsn_from: Literal["--dsn", "context", "environment"]
    # the context's replica, for reads (lists, audit, metrics); none when --dsn chose another
    # database, whose replica the context does not know
    read_dsn: str | None = None
    operator: str
    read_only_reason: str | None  # None: actions are possible (as far as the command line knows)

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None


def read_only_reason(context: Context | None, overrides: Overrides) -> str | None:
    """Why a session is read-only before it has asked the database: --read-only, or the context's
    `read_only = true` (which no option undoes)."""
    if overrides.read_only:
        return "started with --read-only"
    if context is not None and context.read_only:
        return f"context {context.name} is read_only"
    return None


def settle(context: Context | None, overrides: Overrides | None = None) -> Settled:
    """The one precedence rule, for every command and the console:

    * DSN: --dsn, else the context's dsn, else LEASECTL_DSN, DATABASE_URL, libpq's PG* variables;
    * operator: --operator, else the context's operator, else LEASECTL_OPERATOR, $USER;
    * read-only: --read-only or the context's read_only (either one; neither undoes the other)."""
    overrides = overrides or Overrides()
    if overrides.dsn is not None:
        dsn, came = overrides.dsn, "--dsn"
    elif context is not None:
        dsn, came = context.dsn, "context"
    else:
        dsn, came = resolve_dsn(None), "environment"
    operator = overrides.operator or (context.operator if context else None) or default_operator()
    read_dsn = context.read_dsn if context is not None and came == "context" else None
    return Settled(context=context, dsn=dsn, dsn_from=came, read_dsn=read_dsn, operator=operator,
                   read_only_reason=read_only_reason(context, overrides))


def dsn_place(dsn: str) -> str:
    """Where a DSN points, in a few characters and never with its password: `host:port/dbname`
    (`local` for a Unix socket, the port only when not 5432); a DSN that does not parse is shown
    masked."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - libpq's parser: any failure means "show it masked"
        return masked_dsn(dsn)
    host = str(parts.get("host") or parts.get("hostaddr") or os.environ.get("PGHOST") or "local")
    if host.startswith(("/", "@")):
        host = "local"
    port = str(parts.get("port") or os.environ.get("PGPORT") or "")
    if port and port != "5432" and host != "local":
        host = f"{host}:{port}"
    database = (parts.get("dbname") or os.environ.get("PGDATABASE") or parts.get("user")
                or os.environ.get("PGUSER") or "(default)")
    return f"{host}/{database}"
