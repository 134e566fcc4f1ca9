"""Whole files written atomically: to a temporary path in the same folder, fsynced, then
renamed over the target, so a reader sees the old file or the new one, never half of one
(a job's summaries, a writer's ``.plan``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike[str]) -> Iterator[Any]:
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
    with _atomic_file(path) as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_parquet(path: str | os.PathLike[str], df: Any) -> None:
    """A pandas DataFrame to parquet through a temp file and rename."""
    import io

    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    atomic_write_bytes(path, buf.getvalue())


@contextlib.contextmanager
def atomic_parquet_writer(path: str | os.PathLike[str], schema: pa.Schema) -> Iterator[Any]:
    """A parquet writer of ``schema`` on a temp file in the same folder, renamed over
    ``path`` when the block ends (removed when it raises): a summary written a chunk at a
    time, so its memory is one chunk, and a reader still sees the old file or the new one."""
    import pyarrow.parquet as pq

    with _atomic_file(path) as fh, pq.ParquetWriter(fh, schema) as writer:
        yield writer
