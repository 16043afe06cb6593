"""W3C trace context (https://www.w3.org/TR/trace-context/): a call's `trace_id`, read from a
caller's `traceparent`, and the `traceparent` a worker sends on (the call's trace, the worker's own
span). No I/O: the rules, as the enqueue API, the worker and the console read them.

    traceparent = version "-" trace-id "-" parent-id "-" trace-flags
                  00      - 4bf92f3577b34da6a3ce929d0e0e4736 - 00f067aa0ba902b7 - 01

Lowercase hex only (the specification's own rule, and the database's check on tool_jobs.trace_id:
migration 0014); a trace id or parent id of all zeros is invalid; version ff is invalid; a version
above 00 is read as far as 00 goes (its first four fields), as the specification asks.
A bad value is an error saying what is wrong (BadTraceContext: bad input, and a ValueError), never
a trace silently dropped.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from console.shared.errors import BadInput

TRACE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
SPAN_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_HEX2 = re.compile(r"^[0-9a-f]{2}$")
SAMPLED = 0x01
# what `00-` plus its fields take: 2 + 1 + 32 + 1 + 16 + 1 + 2
TRACEPARENT_CHARS = 55
EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class BadTraceContext(BadInput, ValueError):
    """A traceparent or trace id that is not W3C trace context: the message says which part."""


def _shown(value: str, limit: int = 80) -> str:
    """A value quoted in an error, bounded and on one line (it came from outside)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def check_trace_id(value: str, *, what: str = "trace id") -> str:
    """`value` when it is a W3C trace id (32 lowercase hex digits, not all zero), else BadTraceContext."""
    if not isinstance(value, str) or not TRACE_ID_RE.match(value):
        hint = " (lowercase: W3C trace context allows no capitals)" if (
            isinstance(value, str) and TRACE_ID_RE.match(value.lower())) else ""
        raise BadTraceContext(f"{what} {_shown(value)} is not a W3C trace id: 32 lowercase hex digits{hint}")
    if value == "0" * 32:
        raise BadTraceContext(f"{what} {value} is all zeros: not a valid W3C trace id")
    return value


def check_span_id(value: str, *, what: str = "parent id") -> str:
    """`value` when it is a W3C span (parent) id (16 lowercase hex digits, not all zero)."""
    if not isinstance(value, str) or not SPAN_ID_RE.match(value):
        raise BadTraceContext(f"{what} {_shown(value)} is not a W3C span id: 16 lowercase hex digits")
    if value == "0" * 16:
        raise BadTraceContext(f"{what} {value} is all zeros: not a valid W3C span id")
    return value


@dataclass(frozen=True)
class TraceParent:
    """One `traceparent`: the caller's trace, the caller's span (parent id), its flags."""

    trace_id: str
    parent_id: str
    flags: int = SAMPLED
    version: str = "00"

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)

    def __str__(self) -> str:
        return f"{self.version}-{self.trace_id}-{self.parent_id}-{self.flags:02x}"


def parse_traceparent(value: str) -> TraceParent:
    """A `traceparent` header's value, read by the W3C rules; BadTraceContext says what is wrong.
    Surrounding spaces are ignored (an HTTP header's optional whitespace)."""
    if not isinstance(value, str):
        raise BadTraceContext(f"traceparent must be text, not {type(value).__name__}")
    text = value.strip(" \t")
    where = f"traceparent {_shown(text)}"
    fields = text.split("-")
    if len(fields) < 4:
        raise BadTraceContext(f"{where} is not version-traceid-parentid-flags (e.g. {EXAMPLE})")
    version = fields[0]
    if not _HEX2.match(version):
        raise BadTraceContext(f"{where}: version {_shown(version)} is not 2 lowercase hex digits")
    if version == "ff":
        raise BadTraceContext(f"{where}: version ff is invalid (W3C trace context)")
    if version == "00" and (len(text) != TRACEPARENT_CHARS or len(fields) != 4):
        raise BadTraceContext(f"{where}: a version 00 traceparent is exactly {TRACEPARENT_CHARS} characters, "
                              f"four fields (e.g. {EXAMPLE})")
    if version != "00" and len(text) < TRACEPARENT_CHARS:
        raise BadTraceContext(f"{where}: shorter than the {TRACEPARENT_CHARS} characters of version 00")
    trace_id = check_trace_id(fields[1], what=f"{where}: trace id")
    parent_id = check_span_id(fields[2], what=f"{where}: parent id")
    flags = fields[3]
    if not _HEX2.match(flags):
        raise BadTraceContext(f"{where}: flags {_shown(flags)} are not 2 lowercase hex digits")
    # a later version may carry more fields after these, never different ones
    return TraceParent(trace_id=trace_id, parent_id=parent_id, flags=int(flags, 16), version=version)


def trace_id_from(*, trace_id: str | None = None, traceparent: str | None = None) -> str | None:
    """The trace id a call is enqueued with: the one given, or the one of a `traceparent` (both
    given: they must name the same trace), or None. Any bad value is BadTraceContext."""
    from_parent = parse_traceparent(traceparent).trace_id if traceparent is not None else None
    given = check_trace_id(trace_id) if trace_id is not None else None
    if given is not None and from_parent is not None and given != from_parent:
        raise BadTraceContext(f"trace id {given} and traceparent's trace {from_parent} differ: give one, or the same")
    return given or from_parent


def new_span_id() -> str:
    """A fresh random span id (16 hex digits, never all zero)."""
    while True:
        span = secrets.token_hex(8)
        if span != "0" * 16:
            return span


def traceparent(trace_id: str, span_id: str, *, sampled: bool = True) -> str:
    """The version 00 `traceparent` for a span `span_id` of trace `trace_id`."""
    return str(TraceParent(check_trace_id(trace_id), check_span_id(span_id, what="span id"),
                           SAMPLED if sampled else 0))


__all__ = ["EXAMPLE", "SAMPLED", "BadTraceContext", "TraceParent", "check_span_id", "check_trace_id",
           "new_span_id", "parse_traceparent", "trace_id_from", "traceparent"]
