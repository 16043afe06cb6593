"""Contexts in words: `leasectl contexts`, the console's header and its picker (ctrl+o).

A context is named wherever the console is (the header, always); a production one stands out in
its colour (`colour`, else red), as k9s does. A DSN is shown masked (console.shared.dsn), in the
header only as where it points (`host/dbname`). A context that does not answer says so loudly,
with why in a few words.
"""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from console.shared.contexts import Answer, Context, dsn_place
from console.shared.dsn import masked_dsn
from console.shared.text import counted, sanitize

HEADER_NAME_CHARS = 24  # a context's name in the header: cut beyond this (the line's freshness must stay)
HEADER_PLACE_CHARS = 28  # "no context: <host/db>": the place cut beyond this
CURRENT_MARK = "▶"
ASKING = "asking…"
NO_CONTEXTS_HINT = ("contexts.toml holds [contexts.NAME] tables with dsn = \"...\" (optional read_dsn, "
                    "operator, read_only, production, colour); the README's Contexts section has a sample")


def short(value: str, chars: int) -> str:
    """`value` sanitized and, beyond `chars`, cut with a single `…` (the header has no room for
    how much was cut)."""
    text = sanitize(value)
    return text if len(text) <= chars else text[:chars - 1] + "…"


ONE_DATABASE_IN_A_BROWSER = ("this console in a browser is for this database only: `leasectl serve` offers no "
                             "other (each database has its own serve, or a console in a terminal switches with "
                             "ctrl+o)")


def no_contexts(path: str) -> str:
    return f"no contexts: {path} has no [contexts.NAME]"


def context_badge(context: Context | None, dsn: str, *, overridden: bool = False) -> Text:
    """The header's first words: the context's name (in its colour, for a production one or one
    given a colour), `(--dsn)` when --dsn beat its dsn; with no context, `no context: host/db`."""
    if context is None:
        text = Text("no context: ", style="bold yellow")
        text.append(short(dsn_place(dsn), HEADER_PLACE_CHARS), style="bold")
        return text
    name = short(context.name, HEADER_NAME_CHARS)
    colour = context.header_colour
    text = Text()
    if colour is None:
        text.append(name, style="bold")
    else:
        text.append(f" {name} ", style=f"bold {context.header_text_colour} on {colour}")
    if overridden:
        text.append(" (--dsn)", style="dim")
    return text


def answer_text(answer: Answer | None, *, with_time: bool = True) -> Text:
    """`● answers (12 ms)`, `✕ DOWN: Connection refused`, or `asking…` while it is asked."""
    if answer is None:
        return Text(ASKING, style="dim")
    if answer.answers:
        took = f" ({answer.answered_in_ms} ms)" if with_time and answer.answered_in_ms is not None else ""
        return Text(f"● answers{took}", style="green")
    return Text(f"✕ DOWN: {sanitize(answer.error or 'no answer', max_chars=80)}", style="bold red")


def flags_text(context: Context) -> Text:
    """`production`, `read-only`: what sets a context apart, in the header's colours."""
    text = Text()
    if context.production:
        text.append("production", style=f"bold {context.header_colour or 'red'}")
    if context.read_only:
        if text:
            text.append(" ")
        text.append("read-only", style="bold yellow")
    return text


def contexts_table(contexts: list[Context], answers: dict[str, Answer], current: str | None) -> Table:
    """`leasectl contexts`: one row a context, in the file's order; the current one marked."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("context", style="bold", no_wrap=True)
    table.add_column("answers", no_wrap=True)
    table.add_column("dsn (masked)", overflow="fold", min_width=24)
    table.add_column("read_dsn", overflow="fold", min_width=8)
    table.add_column("operator", no_wrap=True)
    table.add_column("", no_wrap=True)
    for context in contexts:
        table.add_row(
            Text(CURRENT_MARK, style="bold cyan") if context.name == current else Text(""),
            Text(sanitize(context.name, max_chars=64)),
            answer_text(answers.get(context.name)),
            Text(sanitize(masked_dsn(context.dsn), max_chars=200)),
            Text(sanitize(masked_dsn(context.read_dsn), max_chars=200)) if context.read_dsn else Text("—", style="dim"),
            Text(sanitize(context.operator, max_chars=60)) if context.operator else Text("—", style="dim"),
            flags_text(context),
        )
    return table


def contexts_summary(contexts: list[Context], answers: dict[str, Answer], current: str | None, path: str) -> Text:
    """The line under the table: how many, how many are down (loud), which is current, from where."""
    down = [c.name for c in contexts if not (answers.get(c.name) or Answer(answers=False)).answers]
    text = Text(f"{counted(len(contexts), 'context')} in {sanitize(path, max_chars=200)}")
    if down:
        text.append(f"; {len(down)} DOWN: {sanitize(', '.join(down), max_chars=200)}", style="bold red")
    else:
        text.append("; every one answers", style="green")
    if current and any(c.name == current for c in contexts):
        text.append(f"; current: {sanitize(current, max_chars=64)} ({CURRENT_MARK})", style="bold")
    elif current:
        text.append(f"; current: {sanitize(current, max_chars=64)}, NOT IN THE FILE", style="bold red")
    else:
        text.append("; no current context (--context NAME or LEASECTL_CONTEXT picks one)", style="dim")
    return text


def picker_name_width(contexts: list[Context | None]) -> int:
    """The width of the picker's name column: the longest name as the header draws it."""
    return max((len(context_badge(c, c.dsn if c else "")) if c else len("no context") for c in contexts), default=0)


def picker_row(context: Context | None, answer: Answer | None, *, current: bool, place: str,
               name_width: int = 0) -> Text:
    """One row of the console's picker: the current mark, the name as the header draws it (in its
    colour for production), whether it answers, what sets it apart, its operator. `context` None:
    where the console opened without one (`place`: its host/db)."""
    text = Text()
    text.append(f"{CURRENT_MARK} " if current else "  ", style="bold cyan")
    name = Text("no context", style="bold yellow") if context is None else context_badge(context, context.dsn)
    text.append_text(name)
    text.append(" " * max(name_width - len(name), 0) + "  ")
    text.append_text(answer_text(answer, with_time=False))
    if context is None:
        text.append(f"  {short(place, HEADER_PLACE_CHARS)}", style="dim")
    else:
        flags = flags_text(context)
        if flags:
            text.append("  ")
            text.append_text(flags)
        if context.operator:
            text.append(f"  as {sanitize(context.operator, max_chars=40)}", style="dim")
    return text


# ----------------------------------------------------------------------------- the console's words (ctrl+o)

SWITCH_FROM_A_SCREEN = "ctrl+o switches from a screen: close this one first (esc)."


def where_words(context: Context | None, dsn: str) -> str:
    """`context prod-eu`, or `no context (local/leasectl)`: the console's place in a sentence."""
    if context is None:
        return f"no context ({short(dsn_place(dsn), 60)})"
    return f"context {sanitize(context.name, max_chars=64)}"


def switching_words(context: Context | None, dsn: str) -> str:
    return f"Connecting to {where_words(context, dsn)}…"


def switched_words(context: Context | None, dsn: str, operator: str, read_only_reason: str | None) -> str:
    """The toast after a switch: where the console is now, as whom, and whether it may act."""
    may = f"read-only ({read_only_reason})" if read_only_reason else "read-write as far as the database allows"
    return (f"Now on {where_words(context, dsn)}, as {sanitize(operator, max_chars=60)}: {may}. "
            "Every screen was made anew on it.")


# a replica this far behind is worth a second look before acting on what it shows
REPLICA_LAG_WARN_SECONDS = 5.0


def replica_note(replica: bool, caught_up: bool, lag_seconds: float | None) -> tuple[str, str]:
    """The header's word on reads from a replica (read_dsn), and its style."""
    if not replica:
        return "reads: read_dsn is not a replica", "bold yellow"
    if caught_up or lag_seconds is None:
        return "replica caught up", "green"
    style = "bold red" if lag_seconds >= REPLICA_LAG_WARN_SECONDS else "yellow"
    return f"replica {lag_seconds:.1f}s behind", style
