"""Files written for people: complete or absent, never a partial file that looks complete."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TextIO


@contextmanager
def atomic_write(path: Path, *, encoding: str = "utf-8", newline: str | None = None) -> Iterator[IO[str]]:
    """Write to a temporary file beside `path` and rename it onto `path` only when the block
    finishes. Any exception (a closed pipe, Ctrl-C, a full disk) removes the temporary file and
    leaves `path` as it was."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=directory)
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
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


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
