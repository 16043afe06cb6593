"""Files written for people: complete or absent, never a partial file that looks complete."""

from __future__ import annotations

import os
import queue
import secrets
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TextIO

from console.shared.errors import BadInput
from console.shared.text import sanitize

# the temporary name beside a target: a dot, the name, a dot, eight random characters, `.partial`
_TEMPORARY_EXTRA = len("..") + 8 + len(".partial")


def writable_target(text: str, *, what: str = "--output") -> Path:
    """The file an export may write to, checked before anything is read, as an absolute path with
    symbolic links resolved (a link is written through: it stays, its target is replaced). Bad
    input for: nothing given, a directory, anything at the path that is not a regular file (a
    device, a FIFO, a socket: renaming the finished file onto /dev/null or /dev/full would
    replace the device), a file this login cannot write, a missing or unwritable directory, a
    name too long to write under a temporary name beside it, a path the file system refuses."""
    raw = os.path.expanduser(text.strip())
    shown = sanitize(raw, max_chars=200)
    if not raw:
        raise BadInput(f"{what}: give a file to write to")
    try:
        if raw.endswith(os.sep) or os.path.isdir(raw):
            raise BadInput(f"{what} {shown} names a directory: give a file name")
        try:
            found = os.stat(raw)  # follows links: /dev/stdout is whatever it points at
        except FileNotFoundError:
            found = None
        if found is not None and not stat.S_ISREG(found.st_mode):
            instead = ("leave out --output to write to standard output, and redirect that" if what == "--output"
                       else "give the name of a file")
            raise BadInput(f"{what} {shown} is not a regular file (a device, a pipe or a socket): {instead}")
        path = Path(os.path.realpath(raw))
        if len(os.fsencode(path.name)) > 255 - _TEMPORARY_EXTRA:
            raise BadInput(f"{what}: the file name {sanitize(path.name, max_chars=60)} is too long")
        if found is not None and not os.access(path, os.W_OK):
            raise BadInput(f"{what} {shown} is read-only to you: nothing was written")
        if not path.parent.is_dir():
            raise BadInput(f"{what}: the directory {sanitize(str(path.parent), max_chars=200)} does not exist")
        if not os.access(path.parent, os.W_OK):
            raise BadInput(f"{what}: the directory {sanitize(str(path.parent), max_chars=200)} is not writable")
    except OSError as exc:  # a loop of links, a name too long for a directory on the way
        raise BadInput(f"{what} {shown}: {exc.strerror or exc}") from None
    return path


@contextmanager
def atomic_write(path: Path, *, encoding: str = "utf-8", newline: str | None = None) -> Iterator[IO[str]]:
    """Write to a temporary file beside `path` and rename it onto `path` only when the block
    finishes. Any exception (a closed pipe, Ctrl-C, a full disk) removes the temporary file and
    leaves `path` as it was. A symbolic link is written through; anything at `path` that is not a
    regular file is refused (writable_target says why), never replaced."""
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise BadInput(f"{sanitize(str(path), max_chars=200)} is not a regular file: nothing was written")
    fd, temporary = _temporary_beside(path)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600 whatever the umask; the finished file gets what a plain open() would
        # give it: the mode of the file it replaces, else the umask's
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new file beside `path` (0600), its name known before it exists: a signal that lands just
    after it was made (SIGTERM from `timeout` at the start of an export) still finds it to remove.
    tempfile.mkstemp names the file only once it returns, and an interrupt inside it left the file."""
    while True:
        temporary = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.partial")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), temporary
        except FileExistsError:
            continue
        except BaseException:
            _remove(temporary)
            raise


def _remove(temporary: str) -> None:
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass


def stdout_writer() -> DescriptorWriter | TextIO:
    """Standard output for a stream of rows: its descriptor when it has one (a terminal, a file, a
    pipe), else the stream itself (an in-memory stdout: a caller running the CLI in-process, which
    has no pipe to close under us)."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return sys.stdout
    return DescriptorWriter(fd)


class DescriptorWriter:
    """Text written straight to a file descriptor, every byte or an exception. A buffered stdout
    can take a short write into a closed pipe silently and exit 0 with the output cut; os.write
    in a loop turns the closed pipe into BrokenPipeError at the write that met it."""

    def __init__(self, fd: int, encoding: str = "utf-8") -> None:
        self.fd = fd
        self.encoding = encoding

    def write(self, text: str) -> int:
        data = memoryview(text.encode(self.encoding))
        while data:
            written = os.write(self.fd, data)
            data = data[written:]
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered here."""


class BackgroundWriter:
    """Text written on a thread of its own, so that the next batch is read from the database while
    the last one is written (135 MB into the page cache, or a pipe at its reader's pace, cost the
    `jobs --at --json` stream of 100,000 calls 0.15 s on the reading thread). At most `depth` batches
    wait. An error the writing met (a closed pipe, a full disk) is raised as it was at the next
    write or at close; after one, nothing more is written. `mark(n)` after a write records `n` as
    `done` once everything before it is written in full: what a message may say reached the reader."""

    _DONE = object()

    def __init__(self, sink: Any, depth: int = 2) -> None:
        self._sink = sink
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._abandoned = False
        self.done = 0
        self._thread = threading.Thread(target=self._run, name="leasectl-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not self._DONE and not self._abandoned:
            if self._error is not None:
                continue  # drained, never written: the queue must not fill up behind a failure
            if isinstance(item, _Mark):
                self.done = item.count
                continue
            try:
                self._sink.write(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
                self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def write(self, text: str) -> int:
        self._raise()
        self._queue.put(text)
        return len(text)

    def mark(self, count: int) -> None:
        self._queue.put(_Mark(count))

    def close(self) -> None:
        """Wait until everything is written; raise what the writing met."""
        self._queue.put(self._DONE)
        self._thread.join()
        self._raise()

    def abandon(self) -> None:
        """Stop: what still waits is dropped, not written (after an interrupt or an error, nothing
        should follow the message that says the output is incomplete). Does not wait."""
        self._abandoned = True
        try:
            self._queue.put_nowait(self._DONE)  # wakes a thread waiting for the next batch
        except queue.Full:
            pass  # then it is busy writing, and stops once that write returns


class _Mark:
    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


# ---------------------------------------------------------------- a browser's downloads (`leasectl serve`)
WEB_EXPORT_PREFIX = "leasectl-web-export-"


def private_export_directory() -> Path:
    """A directory (0700) for this console process's downloads, named with its pid: the process
    removes it as it ends, and `leasectl serve` removes it if the process was killed before."""
    return Path(tempfile.mkdtemp(prefix=f"{WEB_EXPORT_PREFIX}{os.getpid()}-"))


def remove_orphaned_export_directories(root: Path | None = None) -> list[Path]:
    """The download directories of console processes that ended without removing theirs (SIGKILL,
    the OOM killer): removed, with what a person exported in them. Only this user's, only those
    whose process is gone (a pid in use again keeps its directory until that process ends too)."""
    removed = []
    for directory in (root or Path(tempfile.gettempdir())).glob(f"{WEB_EXPORT_PREFIX}*"):
        try:
            pid = int(directory.name[len(WEB_EXPORT_PREFIX):].split("-", 1)[0])
            found = directory.lstat()
        except (ValueError, OSError):
            continue
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or _alive(pid):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
