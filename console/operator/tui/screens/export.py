"""The export dialog: where to write, in which format, off the UI thread, with progress.

The file is written under a temporary name beside the target and renamed once complete, so an
interrupted export never leaves a partial file that looks complete. Exporting reads; it changes
nothing in the database (no type-ahead guard needed: nothing here can do harm).
"""

from __future__ import annotations

import atexit
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, ProgressBar, Select, Static
from textual.worker import Worker, WorkerState, get_current_worker

from console.operator.files import private_export_directory, writable_target
from console.operator.tui.failures import describe_failure
from console.operator.tui.screens.dialog import Dialog
from console.shared.errors import BadInput
from console.shared.text import counted, sanitize

# write(path, format, progress(done, total|None), cancelled()) -> how many records it wrote
Writer = Callable[[Path, str, Callable[[int, int | None], None], Callable[[], bool]], int]


def check_target(text: str) -> Path:
    return writable_target(text, what="the file")


_WEB_EXPORTS: list[Path] = []


def web_target(text: str) -> Path:
    """In a browser (`leasectl serve`) the file goes to the person's browser, never where they say on
    the server's disk: only the name is kept, the file is written in this console process's own
    private directory (0700, removed when the process ends) and handed to the tab as a download."""
    name = Path(text.strip().replace("\\", "/")).name
    if not name or name in (".", ".."):
        raise BadInput("give the file a name (it is saved by your browser)")
    if not _WEB_EXPORTS:
        directory = private_export_directory()
        _WEB_EXPORTS.append(directory)
        atexit.register(shutil.rmtree, directory, True)
    return _WEB_EXPORTS[0] / name


class ExportDialog(Dialog[Path | None]):
    DEFAULT_CSS = """
    ExportDialog {
        align: center middle;
        background: $background 60%;
    }
    ExportDialog > #export {
        width: 80;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    ExportDialog Label, ExportDialog #export-outcome {
        width: 100%;
    }
    ExportDialog #export-buttons {
        height: auto;
        align-horizontal: right;
    }
    ExportDialog #export-buttons Button {
        margin-left: 2;
    }
    ExportDialog ProgressBar {
        display: none;
    }
    ExportDialog ProgressBar.running {
        display: block;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Leave (stops a running export)"),
    ]
    GO_BUTTON = "export-go"
    OUTCOME = "export-outcome"

    def __init__(self, title: str, what: str, default_path: str, write: Writer, *,
                 formats: list[str] | None = None) -> None:
        super().__init__()
        self.title_words = title
        self.what = what
        self.default_path = default_path
        self.write = write
        self.formats = formats
        self.running = False
        self.target: Path | None = None
        self.written: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export"):
            yield Static(Text(self.title_words, style="bold"), id="export-title")
            yield Static(Text(self.what), id="export-what")
            if self.app.is_web:
                yield Label("Save as (your browser downloads it):")
                yield Input(value=Path(self.default_path).name, id="export-path")
            else:
                yield Label("Write to (a new file; written under a temporary name, renamed when complete):")
                yield Input(value=self.default_path, id="export-path")
            if self.formats:
                yield Label("Format:")
                yield Select([(f, f) for f in self.formats], value=self.formats[0], allow_blank=False,
                             id="export-format")
            yield ProgressBar(id="export-progress", show_eta=False)
            yield Static(id="export-outcome")
            with Horizontal(id="export-buttons"):
                yield Button("Leave (esc)", id="export-leave")
                yield Button("Export", id="export-go", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.go()

    def go(self) -> None:
        if self.running:
            return
        try:
            typed = self.query_one("#export-path", Input).value
            path = web_target(typed) if self.app.is_web else check_target(typed)
        except BadInput as exc:
            self._say(Text(str(exc), style="bold red"))
            return
        fmt = str(self.query_one("#export-format", Select).value) if self.formats else ""
        self.running = True
        self.target = path
        self.query_one(ProgressBar).add_class("running")
        self._say(Text("exporting…", style="dim"))
        self._export(path, fmt)

    @work(thread=True, exclusive=True, group="export", exit_on_error=False)
    def _export(self, path: Path, fmt: str) -> tuple[Path, int]:
        worker = get_current_worker()

        def progress(done: int, total: int | None) -> None:
            self.app.call_from_thread(self._progress, done, total)

        count = self.write(path, fmt, progress, lambda: worker.is_cancelled)
        return path, count

    def _progress(self, done: int, total: int | None) -> None:
        self.query_one(ProgressBar).update(total=total, progress=done)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "export":
            return
        if event.state == WorkerState.SUCCESS:
            path, count = event.worker.result  # type: ignore[misc]
            self.running = False
            self.written = path
            if self.app.is_web:
                self.app.deliver_binary(path, save_filename=path.name)
                self._say(Text(f"EXPORTED — {counted(count, 'record')}, handed to your browser as "
                               f"{sanitize(path.name)}. esc closes.", style="bold green"))
                return
            self._say(Text(f"WRITTEN — {counted(count, 'record')} to {sanitize(str(path))}. esc closes.",
                           style="bold green"))
        elif event.state == WorkerState.ERROR:
            self.running = False
            self._say(Text("NOT WRITTEN — " + describe_failure(event.worker.error, "the export")
                           + " No partial file is left.", style="bold red"))
        elif event.state == WorkerState.CANCELLED:
            self.running = False

    def action_leave(self) -> None:
        if self.running:
            # the writer sees the cancel at its next batch and removes its temporary file
            self.workers.cancel_group(self, "export")
            self.app.notify(f"Stopped before it finished: {sanitize(str(self.target))} was not written "
                            "(no partial file is left).", title="Export stopped", severity="warning")
        self.dismiss(self.written)
