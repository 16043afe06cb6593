"""Load the shared SQL files by name and turn their `:name` parameters into psycopg ones.

The files under `queries/` are the contract that workers in any language run. Python never
carries SQL of its own: it loads a file, checks the parameters it was given against the ones
the file declares, and lets psycopg bind them.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from console.shared.errors import LeasectlError
from console.shared.text import listed

_IDENT_START = re.compile(r"[A-Za-z_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


class QueryError(LeasectlError):
    """A query file is missing, or was called with the wrong parameters."""


def _contract_dir(name: str) -> Path:
    """`queries/` or `migrations/`, found through the package's resources: inside the installed
    package (the wheel maps the top-level folders to console/queries and console/migrations), or,
    run from a checkout, beside the package, where they live once for psql and every language."""
    package = resources.files("console")
    for candidate in (package / name, package / ".." / name):
        if candidate.is_dir():
            return Path(str(candidate)).resolve()
    raise QueryError(f"leasectl's {name}/ folder is missing from {package}",
                     hint="reinstall leasectl: the wheel carries queries/ and migrations/")


def queries_dir() -> Path:
    return Path(os.environ.get("LEASECTL_QUERIES_DIR") or _contract_dir("queries"))


def migrations_dir() -> Path:
    return Path(os.environ.get("LEASECTL_MIGRATIONS_DIR") or _contract_dir("migrations"))


@dataclass(frozen=True)
class Query:
    """One SQL file: its name (`worker/claim`), psycopg text, declared parameters and header."""

    name: str
    source: str
    text: str
    params: tuple[str, ...]
    purpose: str
    zero_rows: str
    # parameters a caller may leave out (the `-- Optional:` header): bound as null, which the
    # file reads as "the default"; a file gains parameters this way without breaking its callers
    optional: tuple[str, ...] = ()
    # a SET TRANSACTION (meta/snapshot.sql), which PostgreSQL takes only before any query of its
    # transaction: console.db.pooler.send puts it ahead of the transaction's settings
    sets_transaction: bool = False

    @property
    def path(self) -> str:
        return f"queries/{self.name}.sql"

    def bind(self, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Check `values` against the file's parameters; unknown or missing names fail loudly."""
        given = dict(values or {})
        for name in self.optional:
            given.setdefault(name, None)
        unknown = sorted(set(given) - set(self.params))
        missing = sorted(set(self.params) - set(given))
        if unknown or missing:
            wrong = listed(("unknown parameter(s)", unknown), ("missing parameter(s)", missing))
            raise QueryError(f"{self.path}: {wrong} (it takes: {', '.join(self.params) or 'nothing'})")
        return given


def translate(source: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite `:name` placeholders as `%(name)s` and escape `%` for psycopg.

    Left alone: `::casts`, string literals ('...', E'...'), quoted identifiers, dollar-quoted
    bodies, and comments. Returns the text and the parameter names in order of first use.
    """
    out: list[str] = []
    names: list[str] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        nxt = source[i + 1] if i + 1 < n else ""
        if (end := _comment_end(source, i)) or (end := _literal_end(source, i)):
            # comments and literals as they are: a `:name` inside them is not a parameter
            out.append(source[i:end].replace("%", "%%"))
            i = end
        elif ch == ":" and nxt == ":":
            out.append("::")
            i += 2
        elif ch == ":" and _IDENT_START.match(nxt):
            m = _IDENT.match(source, i + 1)
            assert m is not None
            name = m.group(0)
            if name not in names:
                names.append(name)
            out.append(f"%({name})s")
            i = m.end()
        elif ch == "%":
            out.append("%%")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out), tuple(names)


def compact(text: str) -> str:
    """The statement as sent: comments dropped and each run of whitespace one character (a line
    break if it held one, else a space), outside string literals, quoted identifiers and
    dollar-quoted bodies (left exactly as they are).

    The files keep their comments for people; the server and psycopg do not need them. psycopg
    parses a query's text for its placeholders again at every execution when the text is longer
    than 4,096 characters (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH), and the worker's claims
    ran to 6,700-7,700 characters, most of them comments: with them, every claim paid that parse
    on the worker's CPU (README, "Benchmarks")."""
    out: list[str] = []
    i, n = 0, len(text)
    # the separator owed before the next token: a run that held a line break stays one, since
    # two string literals are one string only across a line break ('a'\n'b' is 'ab'; 'a' 'b' is
    # a syntax error)
    gap = ""
    while i < n:
        ch = text[i]
        if end := _comment_end(text, i):
            i = end
            gap = gap or " "
            continue
        if ch.isspace():
            gap = "\n" if ch == "\n" else (gap or " ")
            i += 1
            continue
        if gap and out:
            out.append(gap)
        gap = ""
        end = _literal_end(text, i) or i + 1
        out.append(text[i:end])
        i = end
    return "".join(out)


def _comment_end(source: str, i: int) -> int:
    """Where the comment that starts at `i` ends (past its `*/`, or at its line's end), or 0: none
    starts there."""
    if source.startswith("--", i):
        end = source.find("\n", i)
        return len(source) if end == -1 else end
    if source.startswith("/*", i):
        end = source.find("*/", i + 2)
        if end == -1:
            raise QueryError("unterminated /* comment")
        return end + 2
    return 0


def _literal_end(source: str, i: int) -> int:
    """Where the string literal, quoted identifier or dollar-quoted body that starts at `i` ends,
    or 0: none starts there."""
    ch = source[i]
    if ch in ("'", '"'):
        return _end_of_quoted(source, i, ch)
    if ch == "$" and (m := _DOLLAR_TAG.match(source, i)) and not _is_positional(source, i):
        tag = m.group(0)
        end = source.find(tag, m.end())
        if end == -1:
            raise QueryError(f"unterminated dollar quote {tag}")
        return end + len(tag)
    return 0


def _is_positional(source: str, i: int) -> bool:
    return i + 1 < len(source) and source[i + 1].isdigit()


def _end_of_quoted(source: str, start: int, quote: str) -> int:
    i = start + 1
    backslash_escapes = quote == "'" and start > 0 and source[start - 1] in "eE"
    while i < len(source):
        c = source[i]
        if backslash_escapes and c == "\\":
            i += 2
            continue
        if c == quote:
            if i + 1 < len(source) and source[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    raise QueryError(f"unterminated quoted text starting at offset {start}")


def _header(source: str, label: str) -> str:
    """The text after `-- Label:` in the leading comment, joined with its continuation lines."""
    lines = []
    capturing = False
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        if body.lower().startswith(label.lower() + ":"):
            capturing = True
            lines.append(body[len(label) + 1 :].strip())
        elif capturing and line.startswith("--   "):
            lines.append(body)
        else:
            capturing = False
    return " ".join(lines)


@functools.cache
def load(name: str) -> Query:
    """Load `queries/<name>.sql`, e.g. `load("worker/claim")`."""
    path = queries_dir() / f"{name}.sql"
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QueryError(f"no query file {path}") from None
    text, params = translate(source)
    return Query(
        name=name,
        source=source,
        # named for whoever reads pg_stat_activity: which file this statement is
        text=f"/* queries/{name}.sql */ {compact(text)}",
        params=params,
        purpose=_header(source, "Purpose"),
        zero_rows=_header(source, "Zero rows"),
        optional=tuple(n for n in re.split(r"[,\s]+", _header(source, "Optional")) if n in params),
        sets_transaction=_statement(source).lower().startswith("set transaction"),
    )


def _statement(source: str) -> str:
    """The statement of a file, without the comment lines that head it."""
    lines = source.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines).strip()


def all_query_names() -> list[str]:
    root = queries_dir()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.sql"))
