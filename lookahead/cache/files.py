"""A task's raw files on disk: where they are (the single-process file, the shards, the
failure lines beside them), their lines read back, and the repair of a torn last line.

Why apart from the store: readers that write nothing (the build's inputs, the claim
tables, a job's summary) read the same files by the same rules, and only a torn last
line is ever repaired (an append-only writer can tear nothing else)."""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lookahead.cache.locks import release_lock, try_lock
from lookahead.errors import UserError

SHARDS_DIR = "shards"  # <raw_dir>/shards/<shard>/<task>.jsonl: one folder per writer
SHARD_PATTERN = "**/{task}.jsonl"  # under raw_dir; models/staging/_sources.yml reads the same glob


class CacheError(UserError, RuntimeError):
    """The raw file is damaged beyond a torn last line, or locked by another job."""


def failures_path(raw_path: str | os.PathLike[str]) -> Path:
    """``<raw_dir>/<task>.failures.jsonl`` beside ``<raw_dir>/<task>.jsonl``."""
    p = Path(raw_path)
    return p.with_name(p.name[: -len(".jsonl")] + ".failures.jsonl" if p.name.endswith(".jsonl") else p.name + ".failures.jsonl")


def utc_now() -> str:
    """ISO-8601 UTC timestamp with microseconds (orders lines written in one second)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def repair_torn_tail(path: Path) -> int:
    """Cut a torn last line off ``path``; return how many bytes were moved aside.

    A line is torn when its last line is not valid JSON; a last line that parses (a JSON
    object with a key) but lacks its newline is whole, and gets its newline. Only the
    last line can be torn by a crash of an append-only writer, so a bad line anywhere
    else raises CacheError instead of being dropped."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    size = path.stat().st_size
    # only the last line is read (the file is a study's every answer: a gigabyte at a
    # million forecasts, all of it read here before just to look at its end)
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) != b"\n":
            cut = _line_start(fh, size)  # 0 when the only line is torn
            fh.seek(cut)
            if _whole_line(fh.read()):  # a whole last line that lost only its newline is kept
                with open(path, "ab") as out:
                    out.write(b"\n")
                    out.flush()
                    os.fsync(out.fileno())
                return 0
        else:
            cut = _line_start(fh, size - 1)
            fh.seek(cut)
            try:
                json.loads(fh.read().decode("utf-8"))
                cut = size
            except ValueError:
                pass
        if cut == size:
            return 0
        fh.seek(cut)
        torn = fh.read()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
    with open(path.with_name(f"{path.name}.torn-{stamp}"), "wb") as fh:
        fh.write(torn)
        fh.flush()
        os.fsync(fh.fileno())
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return len(torn)


TAIL_BLOCK = 1 << 20  # bytes read at a time, backwards, to find where the last line starts


def _line_start(fh: Any, end: int) -> int:
    """The offset just after the last newline before byte ``end`` (0 when there is none):
    where the line that ends at ``end`` starts, read backwards a block at a time."""
    pos = end
    while pos > 0:
        start = max(0, pos - TAIL_BLOCK)
        fh.seek(start)
        at = fh.read(pos - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        pos = start
    return 0


def _whole_line(raw: bytes) -> bool:
    """Whether a last line without its newline is nonetheless whole: it parses as a JSON
    object with a key. A writer writes a line and its newline in one call, so a cut line
    never parses (an object cut anywhere before its closing brace is not JSON)."""
    try:
        rec = json.loads(raw.decode("utf-8"))
    except ValueError:
        return False
    return isinstance(rec, dict) and isinstance(rec.get("key"), str)


def repair_idle_shard(path: Path) -> int:
    """Repair a torn tail of another writer's shard, only while no process writes it
    (its lock is free: a killed worker's lock went with it)."""
    lock = None
    if path.with_name(path.name + ".lock").exists():  # a shard without one was copied in by hand
        lock = try_lock(path)
        if lock is None:
            return 0
    try:
        return repair_torn_tail(path) + repair_torn_tail(failures_path(path))
    finally:
        if lock is not None:
            release_lock(lock)


def iter_records(path: Path, complete_only: bool = False) -> Iterator[dict[str, Any]]:
    """Every line of a raw file as a dict; a malformed line raises CacheError naming it.

    complete_only: skip a last line without its newline, for a file another process may
    be appending to (a line is complete only once its newline is written)."""
    for rec, _ in records_from(path, 0, complete_only):
        yield rec


def records_from(path: Path, offset: int, complete_only: bool) -> Iterator[tuple[dict[str, Any], int]]:
    """(record, offset after its line) for each line from byte ``offset`` on; nothing for
    a file that is not there (or no longer: a writer that asked nothing removes its shard
    when it stops, files_matching)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        fh.seek(offset)
        lineno = 0
        for raw in fh:
            lineno += 1
            offset += len(raw)
            if complete_only and not raw.endswith(b"\n"):
                return
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))  # UTF-8 as written: no encoding guessed from NULs
            except ValueError as exc:
                what = "is NUL bytes, not JSON (a disk or copy error)" if b"\x00" in raw else f"is not valid JSON ({exc})"
                raise CacheError(
                    f"{path}: line {lineno} {what}; only a torn last line can be repaired "
                    "automatically: move that line out of the file, then rerun"
                ) from None
            if not isinstance(rec, dict) or "key" not in rec:
                raise CacheError(f"{path}: line {lineno} has no 'key' field")
            yield rec, offset


def load_records(path: Path, wanted: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """key -> record for the wanted keys (all when None); the first line of a key wins."""
    out: dict[str, dict[str, Any]] = {}
    for rec in iter_records(path):
        k = rec["key"]
        if (wanted is None or k in wanted) and k not in out:
            out[k] = rec
    return out


def files_matching(root: Path, glob: str) -> list[Path]:
    """What ``root.glob(glob)`` lists for a ``**/<name pattern>`` glob (SHARD_PATTERN,
    raw_reads.RAW_GLOB, a task's plans): every entry whose name matches, in ``root`` or a
    folder under it, in path order; symlinked folders are not entered.

    Why not ``root.glob``: a writer that asked nothing removes its shard folder when it
    stops (RawStore.close) while other jobs and builds list the shards and plans, and the
    glob's walk raises FileNotFoundError for a folder gone between listing its parent and
    opening it; ``os.walk`` skips such a folder (a waiting job died of it)."""
    name = glob.removeprefix("**/")
    if name == glob or "/" in name:
        raise ValueError(f"files_matching takes a '**/<name pattern>' glob, not {glob!r}")
    found = [Path(folder) / f for folder, _dirs, files in os.walk(root) for f in fnmatch.filter(files, name)]
    return sorted(found, key=str)


def shard_files(raw_dir: str | os.PathLike[str], task: str) -> list[Path]:
    """Every file of a task's cache: each ``<task>.jsonl`` under ``raw_dir``, in path order
    (the order the staging models break ties in)."""
    return [p for p in files_matching(Path(raw_dir), SHARD_PATTERN.format(task=task)) if p.is_file()]
