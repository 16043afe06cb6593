"""Table cells, never markup: untrusted strings cannot style or escape the screen.

A `Cell` is one line of sanitized text in one style, drawn by the LiveTable as one segment: five
times cheaper to render than rich Text (measured: 10 us against 54 us). The words and colours
are console.operator.present's, the same as the CLI's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style

from console.core.models import JobSummary
from console.operator.present.words import health_words, live_ages, side_effect_words, state_label, state_style
from console.shared.text import sanitize

# a cell never holds more than this (a 100k-character owner id costs nothing to show)
CELL_CHARS = 200


class Cell:
    """One line of sanitized text in one style, cut with an ellipsis to the column's width."""

    __slots__ = ("style", "text")

    def __init__(self, value: object, style: str = "") -> None:
        self.text = sanitize(value, max_chars=CELL_CHARS)
        self.style = style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        width = options.max_width
        text = self.text if len(self.text) <= width else self.text[: max(width - 1, 0)] + "…"
        yield Segment(text, cell_style(self.style))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(len(self.text), len(self.text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cell) and other.text == self.text and other.style == self.style

    def __hash__(self) -> int:
        return hash((self.text, self.style))

    def __repr__(self) -> str:
        return f"Cell({self.text!r}, {self.style!r})"


_STYLES: dict[str, Style] = {}


def cell_style(name: str) -> Style:
    style = _STYLES.get(name)
    if style is None:
        style = _STYLES[name] = Style.parse(name) if name else Style()
    return style


def state_cell(state: str) -> Cell:
    return Cell(state_label(state), state_style(state))


def health_cell(health: str | None, state: str | None = None) -> Cell:
    return Cell(*health_words(health, state))


def side_effect_cell(side_effect: str) -> Cell:
    return Cell(*side_effect_words(side_effect))


def age_cells(job: JobSummary, now: datetime) -> dict[str, Cell]:
    """The ticking cells, recomputed from the database's clock every second."""
    return {name: Cell(text, style) for name, (text, style) in live_ages(job, now).items()}
