"""The raw JSONL store: the cache and the source of truth for every LLM answer.

Why this shape: queries cost money and hours, and a job can die at any moment (kill -9,
OOM, a full disk). So every answer is appended as one JSON line, flushed and fsynced
before the next one is asked for; a rerun reads the finished keys and asks only for the
rest. The only damage a crash can do to an append-only file is a torn last line, which
is detected on open, moved aside to ``<file>.torn-<time>`` and cut off. A cached line is
reused only under the identical key, and the key covers the task, model, row (or
entity + target date), exact prompt and parameters, so changing any of them re-queries.

Derived files (summaries, parquet) are written to a temporary path and renamed, so a
reader never sees half a file.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

REQUIRED_FIELDS = (
    "key", "task", "model_id", "backend", "row_id", "entity_id", "target_date", "prompt",
    "query_text", "params", "response_text", "top_logprobs", "prompt_logprobs", "samples", "approximated",
    "first_token_prob", "stated_confidence", "started_at", "finished_at",
)


class CacheError(RuntimeError):
    """The raw file is damaged beyond a torn last line, or locked by another job."""


def params_json(params: Mapping[str, Any]) -> str:
    """Canonical JSON of the query parameters (sorted keys, no spaces)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def query_key(task: str, model_id: str, ident: str, prompt: str, params: Mapping[str, Any]) -> str:
    """sha256 hex of ``task|model_id|ident|prompt|params_json`` (docs/CONTRACTS.md).

    ident is the row_id (forecast, Min-K%) or ``entity_id|target_date`` (recall)."""
    text = f"{task}|{model_id}|{ident}|{prompt}|{params_json(params)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def utc_now() -> str:
    """ISO-8601 UTC timestamp with microseconds (orders lines written in one second)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


def repair_torn_tail(path: Path) -> int:
    """Cut a torn last line off ``path``; return how many bytes were moved aside.

    A line is torn when the file does not end with a newline or its last line is not
    valid JSON. Only the last line can be torn by a crash of an append-only writer, so a
    bad line anywhere else raises CacheError instead of being dropped."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, "rb") as fh:
        data = fh.read()
    cut = len(data)
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1  # 0 when the only line is torn
    else:
        start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            json.loads(data[start:])
        except ValueError:
            cut = start
    if cut == len(data):
        return 0
    torn = data[cut:]
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    with open(path.with_name(f"{path.name}.torn-{stamp}"), "wb") as fh:
        fh.write(torn)
        fh.flush()
        os.fsync(fh.fileno())
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())
    return len(torn)


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every line of a raw file as a dict; a malformed line raises CacheError naming it."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise CacheError(
                    f"{path}: line {lineno} is not valid JSON ({exc}); only a torn last line "
                    "can be repaired automatically"
                ) from None
            if not isinstance(rec, dict) or "key" not in rec:
                raise CacheError(f"{path}: line {lineno} has no 'key' field")
            yield rec


def load_records(path: Path, wanted: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """key -> record for the wanted keys (all when None); the first line of a key wins."""
    out: dict[str, dict[str, Any]] = {}
    for rec in iter_records(path):
        k = rec["key"]
        if (wanted is None or k in wanted) and k not in out:
            out[k] = rec
    return out


class RawStore:
    """Append-only JSONL file of query records, opened for one job run.

    Use as a context manager: it takes an exclusive lock (two jobs appending to one file
    would interleave and re-query), repairs a torn tail and loads the finished keys."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.keys: set[str] = set()
        self.duplicates = 0
        self.repaired_bytes = 0
        self._fh: Any = None
        self._lock: Any = None

    def __enter__(self) -> "RawStore":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.path.with_name(self.path.name + ".lock"), "a")
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise CacheError(f"{self.path} is being written by another job; wait for it to finish") from None
        self.repaired_bytes = repair_torn_tail(self.path)
        self.keys = set()
        self.duplicates = 0
        for rec in iter_records(self.path):  # streamed: Min-K% lines are large
            if rec["key"] in self.keys:
                self.duplicates += 1  # first line wins; never rewritten (append-only)
            self.keys.add(rec["key"])
        self._fh = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def __len__(self) -> int:
        return len(self.keys)

    def load(self, wanted: set[str]) -> dict[str, dict[str, Any]]:
        """The records of the ``wanted`` keys (first line per key), read from disk."""
        return load_records(self.path, wanted)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line, then flush and fsync before returning."""
        if self._fh is None:
            raise CacheError(f"{self.path} is not open for appending")
        missing = [f for f in REQUIRED_FIELDS if f not in record]
        if missing:
            raise ValueError(f"raw record lacks field(s) {missing}")
        if record["key"] in self.keys:
            raise CacheError(f"key {record['key']} is already in {self.path}; refusing a duplicate line")
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.keys.add(record["key"])


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_parquet(path: str | os.PathLike[str], df: Any) -> None:
    """A pandas DataFrame to parquet through a temp file and rename."""
    import io

    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    atomic_write_bytes(path, buf.getvalue())
