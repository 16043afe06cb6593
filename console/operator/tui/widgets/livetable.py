"""A table for live rows, on Textual's Line API: every list of the console is one.

Textual's DataTable renders every visible cell through rich again whenever any cell changes
(its cache key holds a table-wide update counter); with ages ticking every second that is a
full repaint per second, and a poll rebuilt it from scratch. Here each row is drawn once into a
Strip, cached under the row's own content, so a refresh costs only the rows that changed: a
1,000-row table with a tenth of its rows changed refreshes in a few milliseconds
(tests/bench/console.py measures it), and the cursor stays on its row across refreshes.

Rows are keyed (call ids, agent ids), cells are `Cell`s (sanitized, never markup), columns have
fixed widths and a priority: on a narrow terminal the least important columns give way first,
so at 80 columns a call's id, its health and its lease stay on screen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, NamedTuple, TypeVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.operator.tui.cells import Cell, cell_style


class Column(NamedTuple):
    key: str
    label: str
    width: int
    # 0: always shown; higher numbers give way first when the table is too narrow for all
    priority: int = 1


T = TypeVar("T")
GAP = 2
MARK = "●"


class LiveTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LiveTable {
        height: 1fr;
        background: $surface;
    }
    LiveTable > .live-table--header {
        text-style: bold;
        background: $panel;
    }
    LiveTable > .live-table--even {
        background: $surface-lighten-1 20%;
    }
    LiveTable > .live-table--cursor {
        background: $block-cursor-blurred-background;
    }
    LiveTable:focus > .live-table--cursor {
        background: $block-cursor-background;
        color: $block-cursor-foreground;
        text-style: bold;
    }
    LiveTable > .live-table--marked {
        color: $warning;
        text-style: bold;
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "live-table--header", "live-table--even", "live-table--cursor", "live-table--marked",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("enter", "select", "Open", show=False),
    ]

    cursor_row: reactive[int] = reactive(0)

    class RowHighlighted(Message):
        """The cursor is on a row (key None: the table is empty)."""

        def __init__(self, table: LiveTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> LiveTable:
            return self.table

    class RowSelected(RowHighlighted):
        """A row was opened: enter, or a second click on it."""

        key: str

    def __init__(self, columns: Sequence[Column | tuple[str, str, int]], *, id: str | None = None,
                 markable: bool = False) -> None:
        super().__init__(id=id)
        self.table_columns = [c if isinstance(c, Column) else Column(*c) for c in columns]
        self.shown_columns = list(self.table_columns)
        self.markable = markable
        self.marked: set[str] = set()
        self.row_keys: list[str] = []
        self._cells: dict[str, dict[str, Cell]] = {}
        self._index: dict[str, int] = {}
        self._strips: dict[tuple[str, bool, bool, int], Strip] = {}
        self._width = self._width_of(self.shown_columns)

    def _width_of(self, columns: Sequence[Column]) -> int:
        return sum(c.width for c in columns) + GAP * len(columns) + (2 if self.markable else 1)

    # ------------------------------------------------------------------ data
    @property
    def row_count(self) -> int:
        return len(self.row_keys)

    @property
    def cursor_key(self) -> str | None:
        if 0 <= self.cursor_row < len(self.row_keys):
            return self.row_keys[self.cursor_row]
        return None

    def cursor_item(self, items: Iterable[T], key: Callable[[T], str]) -> T | None:
        """The one of `items` whose row the cursor is on (`key` gives each its row's key), or None."""
        at = self.cursor_key
        return next((item for item in items if key(item) == at), None)

    def set_rows(self, keys: list[str], cells: dict[str, dict[str, Cell]]) -> None:
        """Show these rows in this order; `cells` has the new or changed rows (others are kept)."""
        previous = self.cursor_key
        for key in set(self._cells) - set(keys):
            del self._cells[key]
            self._forget(key)
        for key, row in cells.items():
            if self._cells.get(key) != row:
                self._cells[key] = row
                self._forget(key)
        self.row_keys = keys
        self._index = {key: i for i, key in enumerate(keys)}
        # marks outlive the rows on screen (a marked call on another page stays marked)
        self.virtual_size = Size(self._width, len(keys) + 1)
        if previous is not None and previous in self._index:
            self.cursor_row = self._index[previous]  # the cursor follows its row
        else:
            self.cursor_row = min(self.cursor_row, max(len(keys) - 1, 0))
        self.refresh()

    def update_cells(self, key: str, changes: dict[str, Cell]) -> None:
        row = self._cells.get(key)
        if row is None:
            return
        updated = {**row, **changes}
        if updated != row:
            self._cells[key] = updated
            self._forget(key)
            self._refresh_row(key)

    def get_cell(self, key: str, column: str) -> Cell | None:
        return self._cells.get(key, {}).get(column)

    def _forget(self, key: str) -> None:
        for cached in [k for k in self._strips if k[0] == key]:
            del self._strips[cached]

    def _refresh_row(self, key: str) -> None:
        index = self._index.get(key)
        if index is not None:
            y = index + 1 - int(self.scroll_offset.y)
            if 1 <= y < self.size.height:
                self.refresh_line(y)

    # ------------------------------------------------------------------ marks (bulk actions)
    def toggle_mark(self, key: str | None = None) -> None:
        key = key if key is not None else self.cursor_key
        if key is None:
            return
        self.marked.symmetric_difference_update({key})
        self._forget(key)
        self._refresh_row(key)

    def set_marks(self, keys: set[str]) -> None:
        changed = self.marked.symmetric_difference(keys)
        self.marked = set(keys)
        for key in changed:
            self._forget(key)
        self.refresh()

    # ------------------------------------------------------------------ width
    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        """Drop the least important columns until the rest fit (never a priority-0 column)."""
        shown = list(self.table_columns)
        while self._width_of(shown) > width:
            droppable = [c for c in shown if c.priority > 0]
            if not droppable:
                break
            shown.remove(max(droppable, key=lambda c: (c.priority, shown.index(c))))
        if shown != self.shown_columns:
            self.shown_columns = shown
            self._width = self._width_of(shown)
            self._strips.clear()
            self.virtual_size = Size(self._width, len(self.row_keys) + 1)
            self.refresh()

    # ------------------------------------------------------------------ drawing
    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            return self._header(width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.row_keys):
            return Strip.blank(width, self.rich_style)
        key = self.row_keys[index]
        cursor = index == self.cursor_row
        even = index % 2 == 1
        cache_key = (key, cursor, even, width)
        strip = self._strips.get(cache_key)
        if strip is None:
            if cursor:
                base = self.get_component_rich_style("live-table--cursor")
            elif even:
                base = self.get_component_rich_style("live-table--even")
            else:
                base = self.rich_style
            strip = self._row_strip(self._cells[key], base, width, marked=key in self.marked)
            self._strips[cache_key] = strip
        return strip

    def _header(self, width: int) -> Strip:
        style = self.get_component_rich_style("live-table--header")
        cells = {c.key: Cell(c.label) for c in self.table_columns}
        return self._row_strip(cells, style, width, marked=False)

    def _row_strip(self, cells: dict[str, Cell], base: Style, width: int, *, marked: bool) -> Strip:
        segments = [Segment(" ", base)]
        if self.markable:
            mark_style = base + self.get_component_rich_style("live-table--marked") if marked else base
            segments.append(Segment(MARK if marked else " ", mark_style))
        for column in self.shown_columns:
            cell = cells.get(column.key)
            text = cell.text if cell else ""
            if len(text) > column.width:
                text = text[: column.width - 1] + "…"
            style = base + cell_style(cell.style) if cell and cell.style else base
            segments.append(Segment(text.ljust(column.width), style))
            segments.append(Segment(" " * GAP, base))
        return Strip(segments).crop_extend(0, width, base)

    # ------------------------------------------------------------------ cursor
    def watch_cursor_row(self, old: int, new: int) -> None:
        for index in (old, new):
            if 0 <= index < len(self.row_keys):
                self._refresh_row(self.row_keys[index])
        self._scroll_cursor_into_view()
        self.post_message(self.RowHighlighted(self, self.cursor_key))

    def _scroll_cursor_into_view(self) -> None:
        visible = max(self.size.height - 1, 1)
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def move_cursor(self, row: int) -> None:
        if self.row_keys:
            self.cursor_row = max(0, min(row, len(self.row_keys) - 1))

    def move_to_key(self, key: str) -> None:
        if key in self._index:
            self.cursor_row = self._index[key]

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - max(self.size.height - 2, 1))

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + max(self.size.height - 2, 1))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self.row_keys) - 1)

    def action_select(self) -> None:
        if self.cursor_key is not None:
            self.post_message(self.RowSelected(self, self.cursor_key))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            return
        index = int(self.scroll_offset.y) + event.y - 1
        if 0 <= index < len(self.row_keys):
            if index == self.cursor_row and event.chain >= 1 and self.has_focus:
                self.action_select()  # a click on the selected row opens it
            self.move_cursor(index)
            self.focus()

    def visible_keys(self) -> list[str]:
        """The keys of the rows on screen (the others are redrawn when scrolled to)."""
        top = int(self.scroll_offset.y)
        return self.row_keys[top: top + self.size.height]


def keyed_rows(table: LiveTable, rows: Sequence[tuple[str, dict[str, Cell]]]) -> None:
    """Show (key, cells) rows in this order, reconciled in place (the one way every list refreshes)."""
    table.set_rows([key for key, _ in rows], dict(rows))
