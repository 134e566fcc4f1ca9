"""RawStore: the one writer of a cache file, opened for one job run (or one worker).

It appends each complete answer as one fsynced line (what makes a line a complete answer:
lookahead.tasks; its key: lookahead.keys), knows which keys the whole cache answers (every
shard, as they are written) and, on a raw_dir other studies share, appends to its own
shard and says what it is asking (lookahead.cache.locks)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lookahead.cache.atomic import atomic_write_text
from lookahead.cache.files import (
    SHARDS_DIR,
    CacheError,
    failures_path,
    files_matching,
    records_from,
    repair_idle_shard,
    repair_torn_tail,
    shard_files,
)
from lookahead.cache.index import KeyIndex
from lookahead.cache.locks import (
    PLAN_SUFFIX,
    Plan,
    lock_holder,
    lock_is_held,
    lock_writer,
    plan_path,
    read_plan,
    release_lock,
    try_lock,
)
from lookahead.cache.lookup import Ident, ident_of, load_cache
from lookahead.keys import line_key
from lookahead.tasks import clamp_near_zero, extras_bits, incomplete_reason

#: The fields every answer line holds (docs/CONTRACTS.md, "Raw JSONL").
REQUIRED_FIELDS = (
    "key",
    "task",
    "model_id",
    "backend",
    "row_id",
    "entity_id",
    "target_date",
    "prompt",
    "query_text",
    "params",
    "response_text",
    "top_logprobs",
    "prompt_logprobs",
    "samples",
    "approximated",
    "first_token_prob",
    "stated_confidence",
    "started_at",
    "finished_at",
)


#: The fields every failure line holds (docs/CONTRACTS.md, "Failures").
FAILURE_FIELDS = (
    "key",
    "task",
    "model_id",
    "row_id",
    "entity_id",
    "target_date",
    "params",
    "reason",
    "attempts",
    "failed_at",
)


#: The longest raw line the build can read: DuckDB's read_json reads one JSON object of at
#: most `maximum_object_size` bytes (16 MiB by default), and models/staging/_sources.yml
#: reads with the default. A longer line (a Min-K% line of a very long context) is refused
#: by the job with a line naming the setting, not written for the build to fail on.
MAX_LINE_BYTES = 16 * 1024 * 1024


class CacheLocked(CacheError):
    """The file is being written by another process (its lock is held)."""


class IncompleteAnswer(CacheError):
    """A record that is no complete answer was offered to the cache (it is refused)."""


EXTRAS_MASK = 3  # the low bits of an ident hash that hold a line's extras (RawStore)


class RawStore:
    """Append-only JSONL file of query records, opened for one job run (or one worker).

    Use as a context manager: it takes an exclusive lock on its own file (two processes
    appending to one file would interleave and re-query), repairs a torn tail and loads
    the finished keys of the whole cache: its own file and every other shard of the same
    task under ``root`` (default: the file's folder, which is raw_dir for the
    single-process file). Torn tails of shards whose writer is gone are repaired too.

    read_only_ok: when the lock cannot be taken (a read-only folder, or another job
    writing) the store opens for reading only (``read_only`` says why): a complete cache
    is still reused, and only a job with something left to ask stops
    (:meth:`require_writable`). A store that wrote nothing removes the empty files and
    lock it created (a declined confirmation leaves the folder as it was)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        root: str | os.PathLike[str] | None = None,
        read_only_ok: bool = False,
        own_shard: str | None = None,
    ) -> None:
        self.path = Path(path)
        # where this writer appends when another process writes `path` (another study
        # sharing raw_dir): <root>/shards/<own_shard>/<task>.jsonl, read by every reader
        # like a Ray worker's shard
        self.own_shard = own_shard
        self.shared_path = self.path  # the file it was asked to write, before any move to its own shard
        self.root = Path(root) if root is not None else self.path.parent
        self._plan_order: tuple[int, str] | None = None  # when this writer said what it asks (claim)
        self._plans: dict[Path, tuple[tuple[int, int, int], Plan | None]] = {}  # plans read, by stat
        self.task = self.path.name[: -len(".jsonl")] if self.path.name.endswith(".jsonl") else self.path.name
        # key -> hash of its first line's ident (:func:`lookahead.cache.lookup.ident_of`): one entry a key, no tuple of
        # texts kept per line (a million-row cache held more in these than in its queries); two
        # idents that differ hash alike with odds of 2**-64, and the line a summary reads is
        # checked against the ident itself (load_fields)
        self.idents = KeyIndex()  # 48 bytes a key, not a dict of key strings
        self._more_idents: dict[str, list[int]] = {}  # key -> ident hashes of its later lines
        self.duplicates = 0
        self.unhashed = 0  # lines read whose fields do not hash to their key (fields_key)
        self.repaired_bytes = 0
        self.clamped = 0  # log-probs in (0, LOGPROB_TOLERANCE] written as 0 by this store
        self.read_only_ok = read_only_ok
        self.read_only: str | None = None  # why the store could not be opened for writing
        self._fh: Any = None
        self._failures_fh: Any = None
        self.failures_path = failures_path(self.path)
        self._lock: Any = None
        self._offsets: dict[Path, int] = {}
        self._created: list[Path] = []

    def __enter__(self) -> RawStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        self._created = [p for p in (self.path, failures_path(self.path), lock_path) if not p.exists()]
        try:
            self._lock = try_lock(self.path, self.own_shard or "")
        except OSError as exc:
            if not self.read_only_ok:
                raise
            self._open_read_only(exc)
            return
        writer = lock_writer(self.path)[1:] if self._lock is None and self.own_shard else []
        if writer and writer != [self.own_shard]:
            # another study's job writes the shared file (it names its study in the lock);
            # a second job of this study, or a writer that does not say, would ask the
            # same queries again, so it stops as before
            self._move_to_own_shard()
        if self._lock is None:
            if not self.read_only_ok:
                raise CacheLocked(f"{self.path} is being written by another job{lock_holder(self.path)}; wait for it to finish")
            self._open_read_only(None)
            return
        plan_path(self.path).unlink(missing_ok=True)  # a killed writer's plan: nobody asks it now
        self.repaired_bytes = repair_torn_tail(self.path)
        self.failures_path = failures_path(self.path)
        self.repaired_bytes += repair_torn_tail(self.failures_path)
        for other in shard_files(self.root, self.task):
            if other.resolve() != self.path.resolve():
                self.repaired_bytes += repair_idle_shard(other)
        self._reset()
        self._fh = open(self.path, "ab", buffering=0)  # unbuffered: nothing left to flush on close
        self.refresh()
        # created even when empty, so `dbt build` always finds the failures source
        self._failures_fh = open(self.failures_path, "ab", buffering=0)

    def _move_to_own_shard(self) -> None:
        """Append to this writer's own shard instead of the file another process holds
        (issue 35: two studies sharing one raw_dir run at the same time); its answers
        stay visible to both (refresh reads every shard), so a key is asked once."""
        shard = self.root / SHARDS_DIR / self.own_shard / self.path.name  # type: ignore[operator]
        lock_path = shard.with_name(shard.name + ".lock")
        self.path = shard
        self.failures_path = failures_path(shard)
        self._created = [p for p in (shard, self.failures_path, lock_path, shard.parent) if not p.exists()]
        try:
            self._lock = try_lock(shard, self.own_shard or "")
        except OSError:
            self._lock = None

    def _reset(self) -> None:
        self.idents, self._more_idents = KeyIndex(), {}
        self.duplicates = self.unhashed = 0
        self._offsets = {}

    def _open_read_only(self, exc: OSError | None) -> None:
        """Read every shard's complete lines, write nothing (no lock, no repair)."""
        self._created = []
        if exc is None:
            self.read_only = f"{self.path} is being written by another job{lock_holder(self.path)}; wait for it to finish"
        else:
            where = exc.filename or self.path.parent
            self.read_only = (
                f"cannot use {where}: {exc.strerror or type(exc).__name__}; make the "
                "folder writable or point raw_dir at one that is"
            )
        self._reset()
        if self.root.is_dir():
            self.refresh()

    def require_writable(self, n_pending: int) -> None:
        """Raise CacheError (one line) when ``n_pending`` queries are left and this store
        cannot write their answers; a read-only store with nothing left is fine."""
        if n_pending and self.read_only:
            raise CacheError(f"{self.read_only} ({n_pending} queries are not cached yet)")

    def _note(self, rec: Mapping[str, Any]) -> bool:
        """Record a line under the key of the forward pass it holds (:func:`lookahead.keys.line_key`) with
        its ident, the ident hash's low bits holding the extras it carries
        (:func:`lookahead.tasks.extras_bits`); False when the key already had a line."""
        key, full = line_key(rec), ident_of(rec)
        if not full[-1]:
            self.unhashed += 1
        ident = (hash(full) & ~EXTRAS_MASK) | extras_bits(rec)
        if key in self.idents:
            self.duplicates += 1
            self._more_idents.setdefault(key, []).append(ident)
            return False
        self.idents.add(key, ident)
        return True

    def has_answer(self, key: str, ident: Ident | None = None, needs: int = 0) -> bool:
        """Whether the cache holds a line for ``key`` (whose fields agree with ``ident``,
        when given, and that carries the extras of mask ``needs``, :func:`lookahead.tasks.needs_bits`): only
        such a line answers the query, so only it counts as cached."""
        return self._answers(key, self.idents.get(key), ident, needs)

    def has_answers(self, keys: Sequence[str], idents: Sequence[Ident], needs: int = 0) -> list[bool]:
        """:meth:`has_answer` of each (key, ident), the keys looked up together."""
        return [
            self._answers(key, first, ident, needs)
            for key, first, ident in zip(keys, self.idents.get_many(keys), idents, strict=False)
        ]

    def _answers(self, key: str, first: int | None, ident: Ident | None, needs: int = 0) -> bool:
        """Whether a line of ``key`` (``first``: the hash of its first line's ident, None
        when the key has none) agrees with ``ident`` and carries the extras ``needs``."""
        if first is None:
            return False
        if ident is None and not needs:
            return True
        digest = None if ident is None else hash(ident) & ~EXTRAS_MASK
        return any(
            (digest is None or v & ~EXTRAS_MASK == digest) and v & needs == needs
            for v in (first, *self._more_idents.get(key, ()))
        )

    def refresh(self) -> int:
        """Read the lines appended to any shard since the last look (streamed: Min-K%
        lines are large); return how many new keys were found. Only complete lines
        count: another writer may be halfway through its last one."""
        found = 0
        for path in shard_files(self.root, self.task):
            start = self._offsets.get(path, 0)
            try:
                if path.stat().st_size <= start:
                    continue
            except FileNotFoundError:  # an empty shard removed as its writer stopped
                continue
            for rec, end in records_from(path, start, complete_only=True):
                found += self._note(rec)  # first line wins; never rewritten (append-only)
                self._offsets[path] = end
        return found

    def claim(self, keys: Iterable[str]) -> None:
        """Say which keys this writer is about to ask: ``<its file>.plan`` (its pid, its
        study's shard name, when it said so, then one key a line), written atomically and
        removed on close. Another study's job on the same raw_dir waits for the answers
        to these keys instead of asking them too (llm_jobs.sharing). A store that cannot
        write says nothing."""
        if self._lock is None or self._fh is None:
            return
        order = time.time_ns()
        label = self.own_shard or ""
        head = json.dumps({"pid": os.getpid(), "label": label, "order_ns": order})
        atomic_write_text(plan_path(self.path), head + "\n" + "".join(f"{k}\n" for k in keys))
        self._plan_order = (order, f"{label}:{os.getpid()}")

    def earlier_plans(self) -> list[Plan]:
        """The plans this writer waits for: every other live writer's plan said before
        its own (every one, when it said none), and the shared file's holder while it
        has not said yet (``keys`` None: it may ask anything).

        Why only earlier plans: the writers are then ordered by when they said what they
        ask, and a writer waits only for earlier ones, so no two writers can wait for
        each other (the first never waits). A plan counts only while its writer holds its
        file's lock and is the pid the lock names: a killed writer's plan is nobody's."""
        out: list[Plan] = []
        said_shared = False
        own = plan_path(self.path)
        for path in files_matching(self.root, f"**/{self.task}.jsonl{PLAN_SUFFIX}"):
            file = path.with_name(path.name[: -len(PLAN_SUFFIX)])
            if path == own or not lock_is_held(file):
                continue
            plan = self._read_plan(path)
            if plan is None or lock_writer(file)[:1] != [plan.pid]:
                continue
            said_shared = said_shared or file == self.shared_path
            if self._plan_order is None or plan.order < self._plan_order:
                out.append(plan)
        if not said_shared and self.path != self.shared_path and lock_is_held(self.shared_path):
            writer = lock_writer(self.shared_path)
            out.append(Plan(plan_path(self.shared_path), writer[0] if writer else "", " ".join(writer[1:]), (0, ""), None))
        return out

    def _read_plan(self, path: Path) -> Plan | None:
        """read_plan, re-read only when the file changed (a plan may hold a million keys)."""
        try:
            st = path.stat()
        except OSError:
            return None
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._plans.get(path)
        if cached is None or cached[0] != sig:
            cached = self._plans[path] = (sig, read_plan(path))
        return cached[1]

    def close(self) -> None:
        if self._lock is not None:  # its plan is void once it stops writing
            plan_path(self.path).unlink(missing_ok=True)
            self._plan_order = None
        wrote_nothing = all(not p.exists() or p.stat().st_size == 0 for p in (self.path, self.failures_path))
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._failures_fh is not None:
            self._failures_fh.close()
            self._failures_fh = None
        if wrote_nothing and self._lock is not None:
            for p in self._created:  # nothing asked (declined, or nothing to ask): leave no trace
                if p.is_dir():
                    with contextlib.suppress(OSError):
                        p.rmdir()
                else:
                    p.unlink(missing_ok=True)
        self._created = []
        if self._lock is not None:
            release_lock(self._lock)
            self._lock = None

    def forget(self) -> None:
        """Drop the index of the keys read (KeyIndex, 48 bytes a key): for a job's summary, which
        reads the lines themselves (load_fields) and need not hold a million keys twice.
        The store answers nothing afterwards (it is about to close); its counts stay."""
        self.idents, self._more_idents = KeyIndex(), {}

    def __contains__(self, key: str) -> bool:
        return key in self.idents

    def __len__(self) -> int:
        return len(self.idents)

    @property
    def keys(self) -> Any:
        """The keys with a line (a view of ``idents``: one table, not two)."""
        return self.idents.keys()

    def load(self, wanted: set[str] | Mapping[str, Ident]) -> dict[str, dict[str, Any]]:
        """The records of the ``wanted`` keys over every shard (one per key), read from disk;
        with idents (key -> ident), only lines that agree with their key."""
        return load_cache(self.root, self.task, wanted)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line, then flush and fsync before returning."""
        if self._fh is None:
            raise CacheError(self.read_only or f"{self.path} is not open for appending")
        missing = [f for f in REQUIRED_FIELDS if f not in record]
        if missing:
            raise ValueError(f"raw record lacks field(s) {missing}")
        if self.has_answer(line_key(record), ident_of(record), extras_bits(record)):
            # a second line of a key only when it carries extras no line of it has (a
            # study that needs them asked that row again)
            raise CacheError(f"key {record['key']} is already in {self.path}; refusing a duplicate line")
        self.clamped += clamp_near_zero(record)  # type: ignore[arg-type]
        reason = incomplete_reason(record)
        if reason:
            raise IncompleteAnswer(f"key {record['key']}: not a complete answer ({reason}); not cached")
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        size = len(line.encode("utf-8")) + 1
        if size > MAX_LINE_BYTES:
            raise IncompleteAnswer(
                f"key {record['key']}: the answer's line is {size:,} bytes, over the {MAX_LINE_BYTES:,} bytes "
                "dbt's read_json reads in one object (DuckDB's maximum_object_size); not cached. Lower the "
                "setting context_length (or prompt_overflow: truncate_text) so a prompt's log-probs fit"
            )
        _write_line(self._fh, line, self.path)
        self._note(record)
        self._offsets[self.path] = os.fstat(self._fh.fileno()).st_size  # refresh() skips our own lines

    def record_failure(self, record: Mapping[str, Any]) -> None:
        """Append one line to ``<task>.failures.jsonl``: a query that got no complete answer.

        Append-only like the cache (flushed, fsynced). The key stays out of the cache,
        so the next run asks again; a failure line whose key was answered later is
        history, and dbt counts only keys without an answer."""
        if self._failures_fh is None:
            raise CacheError(self.read_only or f"{self.failures_path} is not open for appending")
        missing = [f for f in FAILURE_FIELDS if f not in record]
        if missing:
            raise ValueError(f"failure record lacks field(s) {missing}")
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        _write_line(self._failures_fh, line, self.failures_path)


def _write_line(fh: Any, line: str, path: Path) -> None:
    """Append one line to an unbuffered file, then fsync; a write error names the file (a
    full disk says which file it could not grow). Unbuffered, so a failed write leaves no
    buffer behind for close() to flush again (that second error used to replace the one
    naming the file). A partly written line is a torn tail, cut on reopen."""
    data = memoryview((line + "\n").encode("utf-8"))
    try:
        while data:
            data = data[fh.write(data) :]
        os.fsync(fh.fileno())
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None
