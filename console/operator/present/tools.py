"""Tools in words: their fair-share settings (migration 0016) and their pauses, for `leasectl tools`,
`pause`, `resume`, Triage and Metrics."""

from __future__ import annotations

from datetime import datetime

from rich import box
from rich.table import Table
from rich.text import Text

from console.core.models import ToolPause, ToolSettings
from console.shared.text import format_seconds, sanitize

NAME_CHARS = 60


def pause_line(p: ToolPause | ToolSettings, now: datetime | None = None) -> str:
    """'paused by alice 3m ago: vendor 5xx storm' (plain text; the caller escapes it)."""
    since = ""
    if p.paused_at is not None and now is not None:
        since = f" {format_seconds(max(0.0, (now - p.paused_at).total_seconds()))} ago"
    return (f"{sanitize(p.name, max_chars=NAME_CHARS)} paused by {sanitize(p.paused_by or '?', max_chars=80)}"
            f"{since}: {sanitize(p.pause_reason or '', max_chars=200)}")


def paused_summary(tools: list[ToolSettings], now: datetime | None = None) -> str | None:
    """One line for Triage and Metrics: which tools are paused and how many calls wait behind them."""
    paused = [t for t in tools if t.paused_at is not None]
    if not paused:
        return None
    parts = [f"{pause_line(t, now)} ({t.queued} queued)" for t in paused[:3]]
    more = f"; and {len(paused) - 3} more" if len(paused) > 3 else ""
    return "PAUSED: " + "; ".join(parts) + more + " (leasectl resume TOOL)"


def pause_message(verb: str, result: ToolPause | ToolSettings) -> tuple[bool, str, str]:
    """(applied, message, detail) for the CLI's answer()."""
    name = sanitize(result.name, max_chars=NAME_CHARS)
    if isinstance(result, ToolPause):
        if verb == "pause":
            return True, f"tool {name} is paused: none of its calls starts until it is resumed", \
                "running calls go on; `leasectl resume " + name + "` starts its calls again"
        return True, f"tool {name} is resumed: its queued calls are claimed again", \
            f"it was paused by {sanitize(result.paused_by, max_chars=80)}: " \
            f"{sanitize(result.pause_reason, max_chars=200)}"
    if verb == "pause":
        return False, f"tool {name} is already paused", pause_line(result)
    return False, f"tool {name} is not paused", "nothing to resume"


def tools_table(tools: list[ToolSettings]) -> Table:
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("tool", "class", "running", "cap", "queued", "max hold", "attempts", "paused"):
        table.add_column(column, no_wrap=column != "paused", overflow="fold",
                         justify="right" if column in ("running", "cap", "queued", "attempts") else "left")
    for t in tools:
        paused = Text("")
        if t.paused_at:
            paused = Text(f"by {sanitize(t.paused_by or '?', max_chars=40)}: "
                          f"{sanitize(t.pause_reason or '', max_chars=120)}", "bold yellow")
        full = t.max_running is not None and t.running >= t.max_running
        table.add_row(Text(sanitize(t.name, max_chars=NAME_CHARS), "bold yellow" if t.paused_at else ""),
                      Text(t.side_effect), Text(str(t.running), "bold" if full else ""),
                      Text("-" if t.max_running is None else str(t.max_running)), Text(str(t.queued)),
                      Text("-" if t.max_hold_seconds is None else format_seconds(t.max_hold_seconds)),
                      Text(str(t.max_attempts)), paused)
    return table
