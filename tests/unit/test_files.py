"""Where an export may write (console.operator.files.writable_target) and how it writes there."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from console.operator import files as files_module
from console.operator.files import BackgroundWriter, atomic_write, writable_target
from console.shared.errors import BadInput


def test_a_new_file_a_relative_name_and_a_home_path_are_fine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert writable_target("out.jsonl") == tmp_path / "out.jsonl"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert writable_target("~/x.csv") == tmp_path / "x.csv"


@pytest.mark.parametrize("make, words", [
    (lambda d: "", "give a file"),
    (str, "names a directory"),
    (lambda d: str(d / "gone") + "/", "names a directory"),
    (lambda d: "/dev/null", "not a regular file"),
    (lambda d: (os.mkfifo(d / "fifo"), str(d / "fifo"))[1], "not a regular file"),
    (lambda d: str(d / "missing" / "x.jsonl"), "does not exist"),
    (lambda d: str(d / ("x" * 238)), "too long"),
    (lambda d: ((d / "loop").symlink_to(d / "loop"), str(d / "loop"))[1], "loop"),
])
def test_what_is_refused_and_why(tmp_path, make, words):
    with pytest.raises(BadInput, match=words):
        writable_target(make(tmp_path))


def test_the_longest_name_that_fits_beside_its_temporary_name(tmp_path):
    target = writable_target(str(tmp_path / ("x" * 237)))
    with atomic_write(target) as f:
        f.write("ok\n")
    assert target.read_text() == "ok\n"


def test_links_are_written_through_and_a_file_keeps_its_mode(tmp_path):
    private = tmp_path / "private.jsonl"
    private.write_text("old\n")
    private.chmod(0o600)
    link = tmp_path / "latest.jsonl"
    link.symlink_to(private)
    dangling = tmp_path / "next.jsonl"
    dangling.symlink_to(tmp_path / "not-yet.jsonl")
    assert writable_target(str(link)) == private and writable_target(str(dangling)) == tmp_path / "not-yet.jsonl"
    with atomic_write(link) as f:
        f.write("new\n")
    assert link.is_symlink() and private.read_text() == "new\n" and private.stat().st_mode & 0o777 == 0o600


def test_atomic_write_never_replaces_a_device():
    with pytest.raises(BadInput, match="not a regular file"), atomic_write(Path("/dev/null")) as f:
        f.write("x")
    assert Path("/dev/null").exists() and not Path("/dev/null").is_file()


class HeldSink:
    """A sink whose writes wait until the test releases them (the writer thread's write under way)."""

    def __init__(self) -> None:
        self.release, self.started = threading.Event(), threading.Event()
        self.written: list[str] = []

    def write(self, text: str) -> int:
        self.started.set()
        self.release.wait(5)
        self.written.append(text)
        return len(text)


def test_the_background_writer_keeps_the_order_and_close_waits_for_the_last_byte():
    sink = HeldSink()
    writer = BackgroundWriter(sink, depth=2)
    for n in range(3):
        writer.write(f"batch {n};")
    assert sink.written == [], "the writing happens on its own thread"
    sink.release.set()
    writer.close()
    assert sink.written == ["batch 0;", "batch 1;", "batch 2;"]


def test_the_background_writer_raises_what_the_writing_met_and_writes_nothing_after():
    attempts: list[str] = []

    class ClosedAfterOne:
        def write(self, text: str) -> int:
            attempts.append(text)
            if len(attempts) > 1:
                raise BrokenPipeError(32, "Broken pipe")
            return len(text)

    writer = BackgroundWriter(ClosedAfterOne(), depth=1)
    writer.write("first")
    writer.write("second")  # meets the closed pipe on the writer's thread
    with pytest.raises(BrokenPipeError):
        for _ in range(100):  # raised at a later write at the latest once the writer got to it
            writer.write("more")
            time.sleep(0.01)
    with pytest.raises(BrokenPipeError):
        writer.close()
    assert attempts == ["first", "second"], "nothing is written after the error"


def test_the_background_writer_counts_only_what_was_written_in_full():
    sink = HeldSink()
    writer = BackgroundWriter(sink, depth=4)
    writer.write("a")
    writer.mark(1)
    writer.write("b")
    writer.mark(2)
    assert writer.done == 0, "queued is not written"
    sink.release.set()
    writer.close()
    assert (sink.written, writer.done) == (["a", "b"], 2)


def test_an_abandoned_background_writer_drops_what_waits():
    sink = HeldSink()
    writer = BackgroundWriter(sink, depth=3)
    writer.write("one")
    assert sink.started.wait(5)
    for text in ("two", "three"):
        writer.write(text)
    writer.abandon()
    sink.release.set()
    writer._thread.join(5)
    assert not writer._thread.is_alive()
    assert sink.written == ["one"], "only the write already under way finishes"


def test_an_interrupt_just_after_the_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """SIGTERM from `timeout` can land the instant the temporary file exists, before the writing
    starts (tempfile.mkstemp then still had to return its name, and the file stayed)."""
    real_open = os.open

    def open_then_interrupted(*args, **kwargs):
        real_open(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(files_module.os, "open", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_write(tmp_path / "out.jsonl") as f:
        f.write("never")
    assert list(tmp_path.iterdir()) == []
