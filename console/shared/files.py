"""Files written for people: complete or absent, never a partial file that looks complete."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


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
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
