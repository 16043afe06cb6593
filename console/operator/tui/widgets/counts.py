"""The triage strip: the counts that matter at 02:00, each coloured by whether it needs someone."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from console.core.models import Counts

# (field, label, short label for a narrow terminal, colour when non-zero); the first ones need a human
CELLS = (
    ("needs_human", "need a human", "human", "bold white on red"),
    ("stale_heartbeats", "stale beats", "stale", "bold black on yellow"),
    ("expired_unswept", "expired", "expired", "bold white on red"),
    ("cancel_unheard", "unheard cancel", "unheard", "bold black on yellow"),
    ("zombies", "zombies 5m", "zombies", "bold black on yellow"),
    ("over_stage_timeout", "over stage", "stage", "bold black on cyan"),
    ("running", "running", "running", "bold"),
    ("queued", "queued", "queued", "bold"),
    ("failed_last_hour", "failed 1h", "failed", "bold red"),
)


class CountsStrip(Horizontal):
    DEFAULT_CSS = """
    CountsStrip {
        height: 4;
    }
    CountsStrip > Static {
        width: 1fr;
        height: 4;
        content-align: center middle;
        border: round $panel-lighten-2;
        padding: 0 0;
    }
    """

    counts: Counts | None = None

    def on_resize(self) -> None:
        self.update_counts(self.counts)

    def compose(self) -> ComposeResult:
        for field, _label, _short, _style in CELLS:
            yield Static(id=f"count-{field}")

    def update_counts(self, counts: Counts | None) -> None:
        self.counts = counts
        narrow = self.size.width and self.size.width / len(CELLS) < 13
        for field, long_label, short_label, style in CELLS:
            label = short_label if narrow else long_label
            value = None if counts is None else getattr(counts, field)
            text = Text(justify="center", no_wrap=True, overflow="ellipsis")
            text.append("…" if value is None else f" {value} ", style=style if value else "dim")
            text.append(f"\n{label}", style="" if value else "dim")
            self.query_one(f"#count-{field}", Static).update(text)
