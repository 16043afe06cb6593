"""Triage in words: one database's (`leasectl triage`) and every context's (`leasectl triage
--all-contexts`, the console's `9 All contexts`).

What the words never do: say "nothing needs attention" of a partial answer. A context that did
not answer is named, with why, before anything else, and the answer says how many of the contexts
it lacks; the all-clear is said only when every context answered and none has anything to show.
"""

from __future__ import annotations

from typing import NamedTuple

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from console.core.everywhere import AllTriage, ContextCall, ContextTriage
from console.core.models import Counts, JobSummary
from console.operator.present.calls import OWNER_WIDTH, TOOL_WIDTH, id_prefix_chars, jobs_table
from console.operator.present.words import health_words, live_ages, state_label, state_style, t
from console.shared.text import counted, format_seconds, sanitize

CONTEXT_WIDTH = 24  # a context's name in a table: cut with an ellipsis beyond this


class CountWord(NamedTuple):
    """One of Triage's counts: its field of `Counts`, its label, a short label, its colour when not zero."""

    field: str
    label: str
    short: str
    style: str


# the counts of Triage, the ones that need a human first (the console's strip says the same)
COUNT_WORDS = (
    CountWord("needs_human", "need a human", "human", "bold white on red"),
    CountWord("expired_unswept", "expired", "expired", "bold red"),
    CountWord("stale_heartbeats", "stale beats", "stale", "yellow"),
    CountWord("cancel_unheard", "unheard cancel", "unheard", "yellow"),
    CountWord("zombies", "zombies 5m", "zombies", "yellow"),
    CountWord("over_stage_timeout", "over stage", "stage", "cyan"),
    CountWord("running", "running", "running", "bold"),
    CountWord("queued", "queued", "queued", "bold"),
    CountWord("failed_last_hour", "failed 1h", "failed", "red"),
)

READ_FROM_WORDS = {"primary": "primary", "replica": "replica"}


def need(n: int) -> str:
    return "needs" if n == 1 else "need"


def context_name(name: str) -> str:
    return sanitize(name, max_chars=80)


# ----------------------------------------------------------------------------- one database


def counts_line(counts: Counts) -> Text:
    """`need a human 2 · expired 1 · stale beats 0 · …`: the non-zero ones in their colour."""
    line = Text()
    for n, word in enumerate(COUNT_WORDS):
        value = getattr(counts, word.field)
        if n:
            line.append("  ·  ", style="dim")
        line.append(f"{word.label} ", style="" if value else "dim")
        line.append(f"{value:,}", style=word.style if value else "dim")
    return line


def nothing_needs_attention(counts: Counts) -> str:
    """One database's all-clear (it answered, and nothing needs attention there)."""
    return (f"Nothing needs attention: every lease is healthy ({counted(counts.running, 'running call')}, "
            f"{counts.queued:,} queued).")


def triage_text(counts: Counts, rows: list[JobSummary]) -> RenderableType:
    """`leasectl triage`: the counts, then the calls that need attention, worst first."""
    head = counts_line(counts)
    if not rows:
        return Group(head, Text(""), Text(nothing_needs_attention(counts), style="bold green"))
    said = f"{counted(len(rows), 'call')} {need(len(rows))} attention, worst first:"
    return Group(head, Text(""), Text(said, style="bold"), jobs_table(rows))


# ----------------------------------------------------------------------------- every context


def partial_words(answer: AllTriage) -> str | None:
    """`PARTIAL: 1 of 3 contexts did not answer (prod-us): this is not the whole answer`, or None
    when every context answered."""
    down = answer.down
    if not down:
        return None
    names = ", ".join(context_name(c.name) for c in down)
    return (f"PARTIAL: {len(down)} of {counted(len(answer.contexts), 'context')} did not answer ({names}): "
            "this is not the whole answer, and not an all-clear")


def down_lines(answer: AllTriage) -> list[str]:
    """`prod-us is DOWN: cannot connect …`, one per context that did not answer."""
    return [f"{context_name(c.name)} is DOWN: {sanitize(c.error or 'no answer', max_chars=400)}" for c in answer.down]


def verdict(answer: AllTriage) -> tuple[str, str]:
    """The last word, and its colour: how many calls need attention where; or, with none shown,
    the all-clear -- only when every context answered -- or why it is not one."""
    if not answer.contexts:
        return "No contexts to ask.", "bold yellow"
    rows = answer.rows
    up = answer.answered
    if rows:
        where = len({r.context for r in rows})
        text = f"{counted(len(rows), 'call')} {need(len(rows))} attention in {counted(where, 'context')}"
        if answer.partial:
            text += (f"; {len(answer.down)} of {counted(len(answer.contexts), 'context')} did not answer: "
                     "there may be more")
        return text + ".", "bold red" if answer.needs_human else "bold yellow"
    if answer.partial:
        if not up:
            return f"No context answered ({len(answer.contexts)} asked): nothing is known.", "bold red"
        return (f"Nothing needs attention in the {len(up)} of {counted(len(answer.contexts), 'context')} that "
                f"answered, but {len(answer.down)} did not: this is NOT an all-clear."), "bold yellow"
    return f"Nothing needs a human in any of the {counted(len(answer.contexts), 'context')}: every lease is healthy.", \
        "bold green"


def state_words(context: ContextTriage) -> tuple[str, str]:
    return ("up", "green") if context.up else ("DOWN", "bold white on red")


def context_cells(context: ContextTriage) -> dict[str, tuple[str, str]]:
    """Each column of the contexts' table as (text, style): the CLI's table and the console's."""
    state, state_style_ = state_words(context)
    cells = {"context": (context_name(context.name), "bold red" if context.production else "bold"),
             "state": (state, state_style_), "reads": (READ_FROM_WORDS[context.read_from], "dim"),
             "attention": (f"{len(context.rows):,}" if context.up else "?", "bold" if context.rows else "dim"),
             "note": (sanitize(context.error or "", max_chars=400), "red") if not context.up else ("", "")}
    for word in COUNT_WORDS:
        value = getattr(context.counts, word.field) if context.counts is not None else None
        cells[word.field] = ("?", "dim") if value is None else (f"{value:,}", word.style if value else "dim")
    return cells


class ContextColumn(NamedTuple):
    """A column of the contexts' table: its key in `context_cells`, its label, its width on the
    console, and its priority (0: always shown; higher numbers give way first on a narrow terminal)."""

    key: str
    label: str
    width: int
    priority: int


# the context, whether it answered, what needs attention there and why it is down stay at 80 columns
CONTEXT_COLUMNS = [
    ContextColumn("context", "context", 14, 0), ContextColumn("state", "state", 5, 0),
    ContextColumn("attention", "attention", 9, 0), ContextColumn("needs_human", "human", 5, 0),
    ContextColumn("expired_unswept", "expired", 7, 1), ContextColumn("reads", "reads", 7, 2),
    ContextColumn("stale_heartbeats", "stale", 5, 3), ContextColumn("cancel_unheard", "unheard", 7, 3),
    ContextColumn("running", "running", 7, 4), ContextColumn("queued", "queued", 6, 4),
    ContextColumn("zombies", "zombies", 7, 5), ContextColumn("over_stage_timeout", "stage", 5, 5),
    ContextColumn("failed_last_hour", "failed", 6, 5), ContextColumn("note", "why down", 20, 0),
]
COLUMN_GAP = 3  # what a column of the CLI's table costs beside its text (padding and the gap)


def fitted(columns: list[ContextColumn], rows: list[dict[str, tuple[str, str]]], width: int) -> list[ContextColumn]:
    """`columns` without the least important ones, until the rest fit in `width` (never one of priority 0)."""
    def wide(column: ContextColumn) -> int:
        return max([len(column.label), *(len(row[column.key][0]) for row in rows)]) + COLUMN_GAP

    shown = list(columns)
    while sum(wide(c) for c in shown) > width:
        droppable = [c for c in shown if c.priority > 0]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda c: (c.priority, shown.index(c))))
    return shown


def contexts_table(answer: AllTriage, width: int = 200) -> Table:
    """`triage --all-contexts`: each context, up or DOWN, where it was read, its counts, as many of
    them as `width` holds (the least important give way first, as in the console); a down
    context's counts are `?` (unknown, never 0), and why it is down is said above the table
    (`down_lines`), whole."""
    rows = [context_cells(context) for context in answer.contexts]
    columns = fitted([c for c in CONTEXT_COLUMNS if c.key != "note"], rows, width)
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in columns:
        left = column.key in ("context", "state", "reads")
        table.add_column(column.label, no_wrap=True, justify="left" if left else "right",
                         min_width=min(max(len(r[column.key][0]) for r in rows), CONTEXT_WIDTH) if rows else None,
                         max_width=CONTEXT_WIDTH if column.key == "context" else None, overflow="ellipsis")
    for row in rows:
        table.add_row(*(Text(*row[column.key]) for column in columns))
    return table


# the calls: their context, id and health stay at 80 columns; then their lease, state and tool
ATTENTION_COLUMNS = [
    ContextColumn("context", "context", CONTEXT_WIDTH, 0), ContextColumn("call", "call", 8, 0),
    ContextColumn("health", "health", 18, 0), ContextColumn("lease", "lease left", 14, 1),
    ContextColumn("state", "state", 16, 2), ContextColumn("tool", "tool", TOOL_WIDTH, 2),
    ContextColumn("beat", "beat", 6, 3), ContextColumn("owner", "owner", OWNER_WIDTH, 4),
    ContextColumn("token", "token", 5, 5), ContextColumn("try", "try", 5, 5), ContextColumn("created", "created", 9, 5),
]


def attention_table(rows: list[ContextCall], width: int = 200) -> Table:
    """The calls that need attention in every context, worst first, each with its context first; as
    many columns as `width` holds (the least important give way first)."""
    chars = id_prefix_chars(r.call.id for r in rows)
    cells = []
    for row in rows:
        r = row.call
        ages = live_ages(r, r.db_now)
        cells.append({"context": (context_name(row.context), "bold"), "call": (str(r.id)[:chars], "bold"),
                      "health": health_words(r.health, r.state), "lease": ages["lease"],
                      "state": (state_label(r.state), state_style(r.state)),
                      "tool": (sanitize(r.tool, max_chars=TOOL_WIDTH), ""), "beat": ages["heartbeat"],
                      "owner": (sanitize(r.owner_id or "—", max_chars=OWNER_WIDTH), ""),
                      "token": (str(r.fencing_token), ""), "try": (f"{r.attempt}/{r.max_attempts}", ""),
                      "created": (format_seconds((r.db_now - r.created_at).total_seconds()) + " ago", "")})
    columns = fitted(ATTENTION_COLUMNS, cells, width)
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in columns:
        longest = max((len(c[column.key][0]) for c in cells), default=0)
        table.add_column(column.label, no_wrap=True, overflow="ellipsis", max_width=column.width,
                         min_width=min(longest, column.width) if column.priority == 0 else None)
    for c in cells:
        table.add_row(*(Text(*c[column.key]) for column in columns))
    return table


def all_contexts_text(answer: AllTriage, width: int = 200) -> RenderableType:
    """`leasectl triage --all-contexts`: PARTIAL and the contexts that are down first, then every
    context, the calls that need attention with their context, and the verdict last."""
    parts: list[RenderableType] = []
    partial = partial_words(answer)
    if partial:
        parts.append(Text(partial, style="bold white on red"))
        parts.extend(Text(f"  {line}", style="red") for line in down_lines(answer))
        parts.append(Text(""))
    parts.append(contexts_table(answer, width))
    rows = answer.rows
    if rows:
        parts.append(Text(f"calls that need attention, worst first ({len(rows):,}):", style="bold"))
        parts.append(attention_table(rows, width))
    text, style = verdict(answer)
    parts.append(Text(text, style=style))
    parts.append(t(read_from_line(answer), "dim"))
    return Group(*parts)


def read_from_line(answer: AllTriage) -> str:
    """Where each context was read: its replica (`read_dsn`) or its primary (`dsn`)."""
    replicas = [context_name(c.name) for c in answer.contexts if c.read_from == "replica"]
    if not replicas:
        return "read from each context's dsn (none has a read_dsn)"
    if len(replicas) == len(answer.contexts):
        return "read from each context's replica (read_dsn)"
    return f"read from the replica (read_dsn) of {', '.join(replicas)}; from the dsn of the others"


NO_CONTEXTS_HINT = ('add a [contexts.NAME] table with dsn = "postgresql://..." (and read_dsn for a replica) for '
                    "each database; `leasectl contexts` lists them")


def no_contexts(where: object, exists: bool) -> str:
    """Why there is nothing to ask: the contexts file is missing, or names no context."""
    return f"no contexts to ask: {where} {'names no context' if exists else 'does not exist'}"


def open_elsewhere(row: ContextCall) -> str:
    """What the console says of a call in another context than its own: where it is, and how to open it."""
    name = context_name(row.context)
    return (f"Call {row.call.id} is in context {name}, not the one this console is connected to. "
            f"Open it there: ctrl+o switches context, or `leasectl --context {name} show {row.call.short_id}`.")
