"""Whole files written atomically: to a temporary path in the same folder, fsynced, then
renamed over the target, so a reader sees the old file or the new one, never half of one
(a writer's ``.plan``, a report's files)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Any]:
    """A binary file opened on a temp path in ``path``'s folder: fsynced and renamed over
    ``path`` when the block ends, removed when it raises, so a reader sees the old file or
    the new one, never half of one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    with atomic_file(path) as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
