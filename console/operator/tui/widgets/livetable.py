"""A table for live rows, on Textual's Line API.

Textual's DataTable renders every visible cell through rich again whenever any cell changes
(its cache key holds a table-wide update counter); with ages ticking every second that is a
full repaint per second. Here each row is drawn once into a Strip, cached under the row's own
content, so a refresh costs only the rows that changed: a 1,000-row table with a tenth of its
rows changed refreshes in a few milliseconds (tests/bench/console.py measures it).

Rows are keyed (call ids), cells are `Cell`s (sanitized, never markup), columns have fixed widths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.operator.tui.cells import Cell, _style

Column = tuple[str, str, int]  # key, label, width

GAP = 2


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
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "live-table--header", "live-table--even", "live-table--cursor",
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
        def __init__(self, table: LiveTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

    class RowSelected(Message):
        def __init__(self, table: LiveTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

    def __init__(self, columns: Sequence[Column], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.table_columns = list(columns)
        self.row_keys: list[str] = []
        self._cells: dict[str, dict[str, Cell]] = {}
        self._index: dict[str, int] = {}
        self._strips: dict[tuple[str, bool, bool, int], Strip] = {}
        self._width = sum(w for _, _, w in self.table_columns) + GAP * len(self.table_columns)

    # ------------------------------------------------------------------ data
    @property
    def row_count(self) -> int:
        return len(self.row_keys)

    @property
    def cursor_key(self) -> str | None:
        if 0 <= self.cursor_row < len(self.row_keys):
            return self.row_keys[self.cursor_row]
        return None

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
            strip = self._row_strip(self._cells[key], base, width)
            self._strips[cache_key] = strip
        return strip

    def _header(self, width: int) -> Strip:
        style = self.get_component_rich_style("live-table--header")
        cells = {key: Cell(label) for key, label, _ in self.table_columns}
        return self._row_strip(cells, style, width)

    def _row_strip(self, cells: dict[str, Cell], base: Style, width: int) -> Strip:
        segments = [Segment(" ", base)]
        for key, _label, column_width in self.table_columns:
            cell = cells.get(key)
            text = cell.text if cell else ""
            if len(text) > column_width:
                text = text[: column_width - 1] + "…"
            style = base + _style(cell.style) if cell and cell.style else base
            segments.append(Segment(text.ljust(column_width), style))
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

    def region_of_row(self, index: int) -> Region:
        return Region(0, index + 1, self.size.width, 1)
