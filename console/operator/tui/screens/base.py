"""What every live screen shares.

* Polling: a one-shot timer, re-armed only after a fetch has come back, so a slow database
  never gets overlapping polls from us; LISTEN/NOTIFY only makes the next poll come sooner.
* Database work runs in a thread worker; its result or its failure comes back as the worker's
  StateChanged message, handled here (failures through console.operator.tui.failures, the one
  place). Widgets are touched on the UI thread only.
* Time: the screen's own one-second timer re-renders ages from the database's clock at its last
  fetch plus the monotonic time since. Freshness goes up to the app as a message; nothing here
  calls into the app.
* `/` exists on every screen: a list filters, a screen with nothing to filter says so. It is a
  priority binding, handled as the key arrives: the filter bar has the focus before the next key
  of a burst (`/state:running⏎` pasted, or typed by tmux) is delivered, so none of it is lost.
* Actions go through one place that refuses them on a read-only session or stale data; on a
  read-only session the keys that change data are not even offered in the footer.
* `v` opens the saved views of a list (console/operator/tui/screens/views.py): the one chosen is
  applied exactly as typing its filter after `/` would be (`apply_filter_text`, the one way in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeGuard, TypeVar, cast

from rich.console import RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input, Label, Static
from textual.worker import Worker, WorkerState

from console.core.actions import ACTIONS, action_named
from console.core.filters import FieldFilter, field_grammar, parse_fields
from console.core.models import JobSummary
from console.core.saved_views import SCREENS, SavedView
from console.db.connect import Conn
from console.db.lane import reconnect_delay
from console.operator.present import words_of
from console.operator.present.saved_views import applied_words
from console.operator.tui.cells import Cell
from console.operator.tui.failures import as_expected, describe_failure
from console.operator.tui.messages import DataArrived, DataFailed
from console.operator.tui.screens.aside import Aside
from console.operator.tui.state import ConsoleApp, why_no_actions
from console.operator.tui.widgets.filterbar import FilterBar, FilterLine
from console.operator.tui.widgets.livetable import Column, LiveTable, keyed_rows
from console.operator.tui.widgets.status import TopChrome
from console.shared.errors import BadInput, LeasectlError
from console.shared.text import sanitize

# a key for every action of console.core.actions.ACTIONS, on the selected call or the marked ones: `act('cancel')`
CALL_ACTION_BINDINGS: list[BindingType] = [
    Binding(spec.binding, f"act({spec.name!r})", words_of(spec.name).key, tooltip=words_of(spec.name).key_help)
    for spec in ACTIONS.values()
]
T = TypeVar("T")
RowT = TypeVar("RowT")  # the rows of a FieldListScreen

# esc on a list: `action_clear_filter` below (hidden from the footer: the filter line says it)
CLEAR_FILTER_BINDING = Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="Clear the active filter")
# esc on a screen opened from a list (a call's detail, a reconciliation record): `action_back` below
BACK_BINDING = Binding("escape", "back", "Back", tooltip="Back to the list")


def page_bindings(noun: str) -> list[BindingType]:
    """The keys of a screen that pages through `noun`, newest first (`cursors` and the actions below;
    `action_next_page` is the screen's own)."""
    return [Binding("right_square_bracket", "next_page", "Older", tooltip=f"Next page (older {noun})"),
            Binding("left_square_bracket", "previous_page", "Newer", tooltip=f"Previous page (newer {noun})"),
            Binding("home", "first_page", "Newest", show=False, tooltip=f"Back to the newest {noun}")]

# the actions that change data: never offered on a read-only session
CHANGES_DATA = frozenset({"act", "drain", "abort", "revoke", "accept_proposal", "decline_proposal"})


class PollingScreen(Screen[None]):
    """Subclasses implement `load(conn)` (worker thread), `show(data)` and `db_now_of(data)` (UI thread)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # priority: a key is handed to the focused widget's queue when it arrives, so without it the
        # rest of a burst typed after `/` was already queued for the list (and lost, or taken as
        # its keys) by the time the filter bar took the focus
        Binding("slash", "filter", "Filter", priority=True, tooltip="Show only what matches (/ on every list)"),
        # not in the footer (every screen's footer is full at 80 columns): `?` lists it, and so does ctrl+p
        Binding("v", "views", "Views", show=False,
                tooltip="Saved views: apply one as / would, or save the filter (s)"),
    ]
    poll_seconds: float | None = None  # None: the app's interval
    # Where a pushed screen sits under its mode ("call 1a2b3c4d"): the header shows "1 Triage > call
    # 1a2b3c4d", so nobody mistakes a call's detail for the list it was opened from.
    crumb: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: Timer | None = None
        self._in_flight = False
        self._again = False
        self._fetch_started: float | None = None  # the console's clock when the fetch in flight was sent
        self.loaded_once = False
        self.failures = 0
        self.db_now: datetime | None = None
        self.fetched_at: float | None = None
        # What the screen asks for (its filter): a fetch started under an older one is thrown away
        # when it lands, never shown under the new filter's name (nor taken as its first answer).
        self._generation = 0
        self.aside = Aside(self)  # reads beside the polls (a payload, every call a filter matches)

    @property
    def leasectl(self) -> ConsoleApp:
        """The leasectl app (its session, clock and settings): not Textual's `App.console`, a rich Console."""
        return cast(ConsoleApp, self.app)

    # ------------------------------------------------------------------ polling
    def on_mount(self) -> None:
        self.schedule(0)
        self.set_interval(1.0, self._tick)

    def on_screen_resume(self) -> None:
        self.schedule(0)

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.stop()
        # a zero interval divides by zero inside textual.timer: "now" is one millisecond
        self._timer = self.set_timer(max(delay, 0.001), self.fetch)

    def fetch(self) -> None:
        if self._in_flight:
            self._again = True
            return
        self._in_flight = True
        self._fetch_started = self.leasectl.clock.monotonic()
        self._fetch_in_thread(self._generation, self.request())

    def wake(self) -> None:
        """Data changed in the database (NOTIFY): fetch now, or right after the one in flight."""
        if self._in_flight:
            self._again = True
        else:
            self.schedule(0.05)

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _fetch_in_thread(self, generation: int, request: Any) -> tuple[int, Any]:
        # the thread gets what to read as a value taken on the UI thread, and hands back what it read:
        # it never writes the screen's state (Textual's workers: widgets are the UI thread's alone)
        return generation, self.read_data(request)

    def read_data(self, request: Any) -> Any:
        """What one fetch reads, on the worker's thread: `load` (or `load_request`) on the session's
        read connection. A screen that reads elsewhere (every context, not this console's database)
        overrides this, and still polls, refreshes and reports its freshness as every screen does."""
        if request is None:
            return self.leasectl.session.read(self.load)
        return self.leasectl.session.read(lambda conn: self.load_request(conn, request))

    def invalidate(self) -> None:
        """What this screen loads (its filter, its page) has changed: a fetch in flight is stale and
        is dropped when it lands. The caller fetches anew."""
        self._generation += 1

    # ------------------------------------------------------------------ pages
    # A screen that pages keeps `cursors`: each page's start, the newest page's None (Calls, Audit).
    cursors: list[Any]

    def action_previous_page(self) -> None:
        if len(self.cursors) == 1:
            self.app.notify("This is the newest page.")
            return
        self.cursors.pop()
        self.refetch()

    def action_first_page(self) -> None:
        self.cursors = [None]
        self.refetch()

    def action_back(self) -> None:
        """BACK_BINDING: back to the list this screen was opened from."""
        self.app.pop_screen()

    def refetch(self) -> None:
        """Fetch what the screen now asks for; an answer to the old question is dropped."""
        self.invalidate()
        self.fetch()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "poll":
            self.aside.handle(event)
            return
        if event.state == WorkerState.SUCCESS:
            self._loaded(cast(tuple[int, Any], event.worker.result))
        elif event.state == WorkerState.ERROR:
            self._failed(event.worker.error)
        elif event.state == WorkerState.CANCELLED:
            self._in_flight = False

    def _loaded(self, answer: tuple[int, Any]) -> None:
        generation, data = answer
        if generation != self._generation:
            self._in_flight = False
            self._again = False
            self.schedule(0)
            return
        self._in_flight = False
        self.loaded_once = True
        self.failures = 0
        self.db_now = self.db_now_of(data)
        self.fetched_at = self.leasectl.clock.monotonic()
        self.post_message(DataArrived(self.db_now))
        self.show(data)
        self.schedule(0 if self._again else (self.poll_seconds or self.leasectl.poll_seconds))
        self._again = False

    def _failed(self, error: BaseException | None) -> None:
        self._in_flight = False
        self._again = False
        self.failures += 1
        error = as_expected(error)
        if not isinstance(error, LeasectlError):
            error = LeasectlError(describe_failure(error, f"the {type(self).__name__.removesuffix('Screen')} refresh"))
        self.post_message(DataFailed(error, since=self._fetch_started))
        self.schedule(reconnect_delay(self.failures))  # the one jittered backoff of every reconnection

    def now(self) -> datetime | None:
        """The database's clock now, for this screen: its last fetch's now() plus the time since."""
        if self.db_now is None or self.fetched_at is None:
            return None
        return self.db_now + timedelta(seconds=self.leasectl.clock.monotonic() - self.fetched_at)

    def _tick(self) -> None:
        now = self.now()
        if now is None or not self.loaded_once:
            return
        try:
            self.tick(now)
        except NoMatches:
            # a screen being torn down (quit, or popped) loses its widgets before its timers stop
            return

    # ------------------------------------------------------------------ to implement
    def request(self) -> Any:
        """What the next fetch asks for, taken on the UI thread (None: `load` needs nothing)."""
        return None

    def load(self, conn: Conn) -> Any:
        raise NotImplementedError

    def load_request(self, conn: Conn, request: Any) -> Any:
        """`load` for a screen whose `request` is not None (runs on the fetch's thread)."""
        raise NotImplementedError

    def show(self, data: Any) -> None:
        raise NotImplementedError

    def db_now_of(self, data: Any) -> datetime:
        raise NotImplementedError

    def tick(self, now: datetime) -> None:
        """Every second, with the database's clock: re-render ages."""

    def describe_selected(self, pane: str, selected: T | None, placeholder: str,
                          words: Callable[[T], RenderableType]) -> None:
        """A side pane that tells of the row selected (`words`), or says dimly what to select."""
        self.query_one(pane, Static).update(Text(placeholder, style="dim") if selected is None else words(selected))

    # ------------------------------------------------------------------ the filter (/ on every screen)
    # A list sets `filter_value` (a console.core.filters.Filter: .describe() and .empty) and implements
    # parse_filter_text and filter_changed; a screen without a list says there is nothing to filter.
    filter_value: Any = None

    def parse_filter_text(self, text: str) -> Any:
        raise NotImplementedError

    def filter_changed(self) -> None:
        """The filter is new: show it, and refresh what it selects."""

    def action_filter(self) -> None:
        if self.filter_value is None:
            self.app.notify("There is nothing to filter on this screen (esc goes back).", title="Filter")
            return
        self.query_one(FilterBar).open(self.filter_value.describe())

    def action_clear_filter(self) -> None:
        if self.filter_value is not None and not self.filter_value.empty:
            self.filter_value = self.parse_filter_text("")
            self.invalidate()
            self.filter_changed()

    def on_filter_bar_applied(self, message: FilterBar.Applied) -> None:
        self.apply_filter_text(message.value)

    def apply_filter_text(self, text: str) -> bool:
        """The filter `text` as this screen's `/` takes it (typed in the bar, or a saved view's):
        parsed by the screen's grammar, then shown and fetched. A filter that does not parse is
        said, and changes nothing (an open bar stays open with what was typed: fix it, or esc)."""
        try:
            parsed = self.parse_filter_text(text)
        except BadInput as exc:
            self.app.notify(f"{exc}" + (f"\n{exc.hint}" if exc.hint else ""), title="Bad filter", severity="error",
                            timeout=12)
            return False
        bar = self.query_one(FilterBar)
        if bar.is_open:
            bar.close()
        self.filter_value = parsed
        self.invalidate()
        self.filter_changed()
        self.filter_applied()
        return True

    def filter_applied(self) -> None:
        """(for a list) where the focus goes once a filter is applied"""

    # ------------------------------------------------------------------ saved views (v)
    def saved_view_screen(self) -> str | None:
        """The name saved views give this screen (its mode: `calls`, `fleet`...), or None for a
        screen with nothing to filter. A screen opened from another (Calls of one metrics group)
        takes the name of the list it is."""
        if self.filter_value is None:
            return None
        modes: dict[str, type] = getattr(type(self.app), "MODES", {})
        return next((mode for mode, cls in modes.items() if mode in SCREENS and isinstance(self, cls)), None)

    def action_views(self) -> None:
        screen = self.saved_view_screen()
        if screen is None:
            self.app.notify("There are no saved views on this screen: a view is a list's filter "
                            f"({', '.join(g.title for g in SCREENS.values())}).", title="Saved views")
            return
        from console.operator.tui.screens.views import ViewsPicker

        self.app.push_screen(ViewsPicker(self.leasectl.session, screen, current=self.filter_value.describe()),
                             self._view_chosen)

    def _view_chosen(self, view: SavedView | None) -> None:
        if view is not None and self.apply_filter_text(view.filter):
            self.app.notify(applied_words(view), title="Saved view")

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "filter" and isinstance(self.focused, Input):
            return False  # `/` typed into a field (the filter itself: key:report/42) is text, not a key
        # on a read-only session the actions that change data are not offered at all
        return not (action in CHANGES_DATA and self.leasectl.session.read_only_reason)

    def selected_job(self) -> JobSummary | None:
        return None

    def commands(self) -> Iterable[SystemCommand]:
        """This screen's entries in the command palette (its actions, by name)."""
        return ()

    def action_act(self, action: str) -> None:
        """The key (or palette entry) of an action of console.core.actions.ACTIONS."""
        self._open_action(action)

    def actions_allowed(self) -> bool:
        """False (and says why) on a read-only session, an unreachable database or stale data."""
        refusal = why_no_actions(self.leasectl)
        if refusal:
            self.app.notify(refusal, title="Not allowed", severity="error")
        return refusal is None

    def chosen(self, selected: T | None, what: str) -> TypeGuard[T]:
        """Whether something is selected to open or act on; if not, says so: "Select `what` first."."""
        if selected is None:
            self.app.notify(f"Select {what} first.", severity="warning")
            return False
        return True

    def ready_to_act(self, selected: T | None, what: str) -> TypeGuard[T]:
        """Whether an action may go ahead on what is selected; if not, says why (`chosen`, `actions_allowed`)."""
        return self.chosen(selected, what) and self.actions_allowed()

    def _open_action(self, action: str) -> None:
        job = self.selected_job()
        if not self.ready_to_act(job, "a call"):
            return
        problem = action_named(action).why_not(job)
        if problem:
            self.app.notify(problem[0].upper() + problem[1:] + ".", title="Nothing to do", severity="warning")
            return
        from console.operator.tui.screens.action import ActionDialog

        self.app.push_screen(ActionDialog(action, job, seen_at=self.fetched_at), lambda _result: self.wake())


class FieldListScreen(PollingScreen, Generic[RowT]):
    """A list of the fleet's screens (chains, agents, reconciliation records) filtered in memory by
    the keys of FILTER_KEYS (console.core.filters.FieldFilter: `agent:planner state:draining`).
    `every` is what the last fetch read, `shown` what the filter lets through: the list's rows,
    in a LiveTable whose place a Static `#no-<its id>` takes when it has none."""

    FILTER_KEYS: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.filter_value = FieldFilter()
        self.every: list[RowT] = []
        self.shown: list[RowT] = []
        self.empty_words: dict[str, str] = {}  # each list's line when it has no row (list_beside_pane)

    def filter_chrome(self, hint: str) -> ComposeResult:
        """The top of the screen: the status lines, the filter bar (`/`) with its keys, the filter's line."""
        yield TopChrome()
        yield FilterBar(placeholder=field_grammar(self.FILTER_KEYS))
        yield FilterLine(hint)

    def list_beside_pane(self, table_id: str, title: str, columns: list[Column], empty: str) -> ComposeResult:
        """The list under its title, the line that takes its place when it is empty, and beside it the
        pane that tells of the selected row (`#<id>-detail`); the screen's .tcss lays out
        `#<id>-body`, `#<id>-left` and `#<id>-pane`."""
        # until the first answer the list is unknown, not empty: "no operation yet" under a dead
        # database would be a false all-clear (the header says whether the database answers)
        self.empty_words[table_id] = empty
        with Horizontal(id=f"{table_id}-body"):
            with Vertical(id=f"{table_id}-left"):
                yield Label(title, classes="section-title")
                yield LiveTable(columns, id=table_id)
                yield Static(Text("Not read yet: waiting for the database (the header says whether it answers).",
                                  style="bold yellow"), id=f"no-{table_id}")
            with VerticalScroll(id=f"{table_id}-pane"):
                yield Static(id=f"{table_id}-detail")

    def parse_filter_text(self, text: str) -> FieldFilter:
        return parse_fields(text, self.FILTER_KEYS)

    def matches(self, row: RowT) -> bool:
        """Whether the filter lets `row` through."""
        raise NotImplementedError

    def show_list(self, every: list[RowT], table_id: str, key: Callable[[RowT], str],
                  cells: Callable[[RowT], dict[str, Cell]], noun: str,
                  tail: Callable[[int], Text] | None = None) -> Static:
        """`every` row the filter lets through in the list (`key` names each row, `cells` fills it),
        and the filter's line: how many of them are shown, then `tail(that many)`. Returns the line
        that stands in the list's place when it is empty: it says so when the filter hid every row."""
        self.every = every
        self.shown = [row for row in every if self.matches(row)]
        table = self.query_one(f"#{table_id}", LiveTable)
        keyed_rows(table, [(key(row), cells(row)) for row in self.shown])
        table.display = bool(self.shown)
        none = self.query_one(f"#no-{table_id}", Static)
        none.display = not self.shown
        if every and not self.shown:
            none.update(Text(f"No {noun} matches the filter {sanitize(self.filter_value.describe(), max_chars=80)} "
                             "(esc clears it).", style="bold yellow"))
        elif not every and self.loaded_once:
            none.update(self.empty_words.get(table_id, ""))
        self.query_one(FilterLine).show_filter(self.filter_value.describe(), matched=len(self.shown), total=len(every),
                                               extra=tail(len(self.shown)) if tail else None)
        return none
