"""`v`: the saved views of the list the console is on (issue 30; migration 0022), over it.

Each view is marked personal (●) or shared (◆, with who saved it); `enter` applies the one
highlighted exactly as typing its filter after `/` would (the screen's own parse: a filter it
refuses changes nothing and says why). A view that no longer parses (a key renamed since it was
saved) is shown in red with its parse error, and `enter` on it says why it is not applied instead
of applying it. `s` saves the screen's current filter as a view: a name, and `shared` for every
console login; a name already taken asks (enter again replaces a view of yours; another login's
shared view is refused by the database, and said so). A read-only console opens views but never
saves one: `s` says why. The database is read and written in thread workers, never on the UI thread.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Label, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from console.core.saved_views import SavedView, SaveOutcome, check_filter, check_name
from console.db.saved_views import list_views, save_view
from console.db.session import ConsoleSession
from console.operator.present.saved_views import (
    NOTHING_TO_SAVE,
    READ_ONLY_SAVE,
    exists_words,
    no_views_in_picker,
    not_yours_words,
    picker_hint,
    picker_row,
    picker_title,
    save_banner,
    stale_refusal,
)
from console.operator.tui.failures import describe_failure
from console.shared.errors import BadInput
from console.shared.text import sanitize


class ViewsPicker(ModalScreen[SavedView | None]):
    """The saved views of one screen; the answer is the view to apply, or None to leave the filter be."""

    CSS_PATH = "views.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Close", tooltip="Close the views (the filter stays as it is); in the form: back"),
        Binding("s", "save", "Save filter",
                tooltip="Save the screen's current filter as a view: a name, shared or not"),
        Binding("v", "leave", "Close", show=False),
    ]

    def __init__(self, session: ConsoleSession, screen: str, *, current: str) -> None:
        super().__init__()
        self.session = session
        self.view_screen = screen
        self.current = current
        self.views: list[SavedView] = []
        self.loaded = False
        self.saving = False
        # a name that was taken, and the scope it was saved in: enter again (the same) replaces it
        self.replace_armed: tuple[str, bool] | None = None
        self.select_after_load: tuple[str, bool] | None = None
        # the view just saved, shown even when the list is read before it arrived (a context's
        # read_dsn: the reads come from a replica, the save went to the primary)
        self.just_saved: SavedView | None = None

    @property
    def busy(self) -> bool:
        """Still reading the views (the pictures and tests wait for them, as for a screen's data)."""
        return not self.loaded

    def compose(self) -> ComposeResult:
        with Vertical(id="views"):
            yield Static(Text(picker_title(self.view_screen), style="bold"), id="views-title")
            yield OptionList(id="views-list")
            yield Static(Text("reading the saved views…", style="dim"), id="views-none")
            with Vertical(id="views-save"):
                yield Label(f"Save the current filter ({sanitize(self.current, max_chars=80)}) as:",
                            id="views-save-what", markup=False)
                yield Input(placeholder="a name (payments stuck, my pay calls…)", id="views-name", max_length=60)
                yield Checkbox("shared: every console login sees it (else only you)", id="views-shared")
                yield Static(Text("enter saves · tab to shared, space toggles it · esc back to the views",
                                  style="dim"), id="views-save-hint")
            yield Static(id="views-outcome")
            yield Static(picker_hint(self.current, self.session.read_only_reason), id="views-hint")

    def on_mount(self) -> None:
        self.query_one("#views-list", OptionList).display = False
        self.query_one("#views-save").display = False
        self.load()

    # ------------------------------------------------------------------ reading
    @work(thread=True, exclusive=True, group="views-load", exit_on_error=False)
    def load(self) -> list[SavedView]:
        return self.session.read(lambda conn: list_views(conn, self.view_screen))

    def _show(self, views: list[SavedView]) -> None:
        saved = self.just_saved
        if saved is not None:
            views = [v for v in views if (v.name, v.shared) != (saved.name, saved.shared)] + [saved]
            views.sort(key=lambda v: (v.shared, v.name))  # as list.sql orders them
        self.views = views
        self.loaded = True
        options = self.query_one("#views-list", OptionList)
        options.clear_options()
        options.add_options([Option(picker_row(v), id=str(i)) for i, v in enumerate(views)])
        options.display = bool(views)
        none = self.query_one("#views-none", Static)
        none.display = not views
        none.update(no_views_in_picker(self.view_screen))
        if views:
            wanted = self.select_after_load
            at = next((i for i, v in enumerate(views) if wanted == (v.name, v.shared)), 0)
            options.highlighted = at
            if not self.query_one("#views-save").display:
                options.focus()
        self.select_after_load = None

    # ------------------------------------------------------------------ applying
    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        view = self.views[int(event.option.id or 0)]
        if view.problem:
            self._say(Text(stale_refusal(view), style="bold red"))
            return
        self.dismiss(view)

    # ------------------------------------------------------------------ saving
    def action_save(self) -> None:
        why = self.session.read_only_reason
        if why:
            self._say(Text(READ_ONLY_SAVE.format(why=why), style="bold yellow"))
            return
        if not self.current:
            self._say(Text(NOTHING_TO_SAVE, style="bold yellow"))
            return
        self.query_one("#views-save").display = True
        self.query_one("#views-list", OptionList).can_focus = False
        self.query_one("#views-name", Input).focus()
        self._say(Text(""))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._go_save()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.replace_armed = None  # another name: asked anew

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        self.replace_armed = None

    def _go_save(self) -> None:
        if self.saving:
            return
        shared = self.query_one("#views-shared", Checkbox).value
        try:
            name = check_name(self.query_one("#views-name", Input).value)
            where = check_filter(self.view_screen, self.current)
        except BadInput as exc:
            self._say(Text(f"{exc}" + (f" ({exc.hint})" if exc.hint else ""), style="bold red"))
            return
        replace = self.replace_armed == (name, shared)
        self.saving = True
        self._say(Text("saving…", style="dim"))
        self.save(name, where, shared, replace)

    @work(thread=True, exclusive=True, group="views-save", exit_on_error=False)
    def save(self, name: str, where: str, shared: bool, replace: bool) -> SaveOutcome:
        return self.session.act(lambda conn: save_view(conn, name=name, screen=self.view_screen, filter_text=where,
                                                        shared=shared, operator=self.session.operator,
                                                        replace=replace))

    def _saved(self, result: SaveOutcome) -> None:
        view = result.view
        if result.outcome in ("saved", "replaced"):
            self._say(Text(save_banner(result), style="bold green"))
            self._close_form()
            self.select_after_load = (view.name, view.shared)
            self.just_saved = view
            self.loaded = False
            self.load()
        elif result.outcome == "exists" and (view.mine or not view.shared):
            self.replace_armed = (view.name, view.shared)
            self._say(Text(exists_words(view) + ": enter again replaces it, esc keeps it", style="bold yellow"))
        else:  # another login's shared view (exists, or not_yours): the database will not let it change
            self._say(Text(not_yours_words(view, "replace") + "; choose another name", style="bold red"))

    def _close_form(self) -> None:
        self.query_one("#views-save").display = False
        self.query_one("#views-name", Input).value = ""
        self.query_one("#views-shared", Checkbox).value = False
        self.replace_armed = None
        options = self.query_one("#views-list", OptionList)
        options.can_focus = True
        options.focus()

    # ------------------------------------------------------------------ answers of the workers
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        group = event.worker.group
        if group not in ("views-load", "views-save"):
            return
        if event.state == WorkerState.SUCCESS:
            if group == "views-load":
                self._show(event.worker.result)  # type: ignore[arg-type]
            else:
                self.saving = False
                self._saved(event.worker.result)  # type: ignore[arg-type]
        elif event.state == WorkerState.ERROR:
            if group == "views-load":
                self.loaded = True
                why = describe_failure(event.worker.error, "the saved views")
                self.query_one("#views-none", Static).update(
                    Text(f"The saved views could not be read: {why}", style="bold red"))
            else:
                self.saving = False
                self._say(Text("NOT SAVED — " + describe_failure(event.worker.error, "saving a view"),
                               style="bold red"))
        elif event.state == WorkerState.CANCELLED:
            self.saving = False
            self.loaded = True

    def _say(self, text: Text) -> None:
        self.query_one("#views-outcome", Static).update(text)

    def action_leave(self) -> None:
        if self.query_one("#views-save").display:
            self._close_form()
            self._say(Text(""))
            return
        self.dismiss(None)
