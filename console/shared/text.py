"""Untrusted text on its way to a person: the one sanitizer, and the terminal's last line of defence.

Everything a worker, an agent or an operator typed can reach a screen: owner ids, tool names,
reasons, payloads, errors. Any of it may carry terminal escapes (OSC 52 writes the clipboard,
OSC 2 the window title, SGR breaks borders), bidi overrides (`w-<U+202E>gnp.exe` reads as
`w-exe.png`), zero-width characters or line separators. Two layers keep them off the terminal:

* `sanitize()` turns each such character into a visible escape (`\\x1b`, `\\u202e`) before the
  text is laid out, so widths are right and the operator sees that something hostile is there;
* `terminal_safe()` runs on every segment the console and the CLI draw (a Textual line filter and
  the CLI's rich console): it drops whatever still slipped through. Every character it drops has
  no width, so a layout computed before it stays right. A new message that forgets `sanitize()`
  shows raw text at worst, never a working escape.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

# Categories that never belong on a terminal line as they are: controls, format characters
# (bidi overrides and isolates, zero-width space/joiners, word joiner, BOM, soft hyphen, tags),
# surrogates (undecodable bytes of a non-UTF-8 argument) and line/paragraph separators.
_HOSTILE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
MARKER = "…"


@lru_cache(maxsize=4096)
def _visible(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _hostile(char: str) -> bool:
    return unicodedata.category(char) in _HOSTILE_CATEGORIES


def sanitize(value: object, *, single_line: bool = True, max_chars: int | None = None) -> str:
    """Untrusted text as plain, visible, one-line (unless asked) characters, at most `max_chars` long.

    Escapes, controls, bidi and zero-width characters become visible (`\\x1b]2;…`, `\\u202e`);
    newlines become `\\n` on a single line, tabs a space. The result must still be shown as plain
    text, never as Rich markup. A cut says how much was left out.
    """
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if not text.isprintable():  # the fast path: almost every id and name is printable already
        out = []
        for char in text:
            if char == " " or char.isprintable() or (char == "\n" and not single_line):
                out.append(char)
            elif char == "\t":
                out.append(" ")
            elif char == "\n":
                out.append("\\n")
            elif char == "\r":
                out.append("\\r")
            elif _hostile(char):
                out.append(_visible(char))
            else:  # other white space (no-break space, ideographic space): harmless, shown as a space
                out.append(" ")
        text = "".join(out)
    if max_chars is not None and len(text) > max_chars:
        left_out = len(text) - max_chars
        text = f"{text[:max_chars]}{MARKER}(+{left_out:,} chars)"
    return text


def terminal_safe(text: str) -> str:
    """Drop every character that could act on a terminal instead of showing (the last line of
    defence, applied to drawn segments; a line break is kept). All of them have zero width, so a
    layout computed before is kept."""
    if text.isprintable():
        return text
    return "".join(char for char in text if char == "\n" or not _hostile(char))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 agent', '3 agents', '1,000 calls': at 02:00 nobody should have to parse 'agent(s)'. The
    one way every count in words is said, in the console and the CLI alike."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def listed(*groups: tuple[str, Sequence[str]]) -> str:
    """'unknown parameter(s) a, b; missing parameter(s) c': each group that names anything, after
    its label; the groups apart by '; '. The one way a complaint lists several kinds of names."""
    return "; ".join(f"{label} {', '.join(names)}" for label, names in groups if names)


def format_seconds(seconds: float | None, *, signed: bool = False) -> str:
    """Compact ages for tables: 4s, 2m05s, 3h12m, 2d4h; negative as '-4s' (or 'expired 4s ago')."""
    if seconds is None:
        return "—"
    negative = seconds < 0
    s = int(abs(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m{s % 60:02d}s"
    elif s < 86400:
        text = f"{s // 3600}h{(s % 3600) // 60:02d}m"
    else:
        text = f"{s // 86400}d{(s % 86400) // 3600}h"
    if negative:
        return f"-{text}" if signed else f"{text} ago"
    return text
