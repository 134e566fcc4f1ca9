"""The raw JSONL store: the cache and the source of truth for every LLM answer.

Why this shape: queries cost money and hours, and a job can die at any moment (kill -9,
OOM, a full disk). So every answer is appended as one JSON line, flushed and fsynced
before the next one is asked for; a rerun reads the finished keys and asks only for the
rest. The only damage a crash can do to an append-only file is a torn last line, which
is detected on open, moved aside to ``<file>.torn-<time>`` and cut off. A cached line is
reused only under the identical key, and the key covers the task, model, row (or
entity + target date), exact prompt and parameters, so changing any of them re-queries.

Sharded caches (the Ray runner, docs/scaling.md): every writer appends to its own file,
so no two processes ever append to one file. A task's cache is every ``<task>.jsonl``
under ``raw_dir`` (:data:`SHARD_PATTERN`, the glob dbt's raw source reads too): the
single-process file ``<raw_dir>/<task>.jsonl`` and the workers' shards
``<raw_dir>/shards/<host>-<slot>/<task>.jsonl``. Readers take the union; a key written
twice (never by this project's writers, but a hand-copied shard could) counts once, the
line with the earliest ``finished_at`` winning (then the path, then the line), the same
rule in Python (:func:`load_cache`) and in the staging models. A store sees its
siblings' answers as they are written (:meth:`RawStore.refresh`), so a worker never
asks for a key another worker, or a killed one, already wrote.

Studies sharing one raw_dir (docs/scaling.md): a job of another study appends to its
own shard ``shards/study-<name>-<hash>/`` while one holds ``<raw_dir>/<task>.jsonl``, and
every writer says which keys it is about to ask in ``<its file>.plan``
(:meth:`RawStore.claim`), so a later job waits for those answers instead of asking them
too (:meth:`RawStore.earlier_plans`, llm_jobs.sharing).

Derived files (summaries, parquet) are written to a temporary path and renamed, so a
reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import itertools
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lookahead.errors import UserError
from lookahead.measures import REFERENCE_TASK, VOCAB_MOMENTS, ZLIB_BYTES

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

SHARDS_DIR = "shards"  # <raw_dir>/shards/<shard>/<task>.jsonl: one folder per writer
SHARD_PATTERN = "**/{task}.jsonl"  # under raw_dir; models/staging/_sources.yml reads the same glob


class CacheError(UserError, RuntimeError):
    """The raw file is damaged beyond a torn last line, or locked by another job."""


class CacheLocked(CacheError):
    """The file is being written by another process (its lock is held)."""


class IncompleteAnswer(CacheError):
    """A record that is no complete answer was offered to the cache (it is refused)."""


#: How far above 0 a log-prob may be and still be read as 0 (a log-probability is never
#: positive; a server that rounds a near-certain token may send +1e-7). Above it, the
#: answer is no answer: the backend asks again with the reason, the cache refuses it, and
#: after the retry bound the query is recorded as a failure (a +2.5 would give P > 1).
LOGPROB_TOLERANCE = 1e-4


def _finite_logprob(entry: Any) -> bool:
    value = entry.get("logprob") if isinstance(entry, Mapping) else None
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value <= LOGPROB_TOLERANCE


def positive_logprob_reason(value: float) -> str:
    """The reason a log-prob above LOGPROB_TOLERANCE is not an answer (one wording)."""
    return f"log-prob {value:+g} is positive (above the tolerance {LOGPROB_TOLERANCE:g}; a log-probability is <= 0)"


def clamp_near_zero(record: MutableMapping[str, Any]) -> int:
    """Set every log-prob in (0, LOGPROB_TOLERANCE] to 0 in place (top and prompt
    log-probs) and return how many; the count is kept in the line as
    ``clamped_logprobs`` (absent when none), so the study can say how many it read as 0."""
    n = 0
    for field in ("top_logprobs", "prompt_logprobs"):
        for entry in record.get(field) or ():
            value = entry.get("logprob") if isinstance(entry, dict) else None
            if isinstance(value, float) and 0 < value <= LOGPROB_TOLERANCE:
                entry["logprob"] = 0.0
                n += 1
    if n:
        record["clamped_logprobs"] = n
    return n


def incomplete_reason(record: Mapping[str, Any]) -> str | None:
    """Why ``record`` is not a complete answer for its task, or None when it is.

    The rule the cache enforces, so that a half answer is never read later as a real
    one (an empty top-k would read as a censored recall, LAP 0):
    - forecast: response text, and top log-probs at the first position when they were
      asked for (params.top_logprobs > 0);
    - recall: top log-probs (or, in the sampling fallback, all n_samples answers);
    - mink (and reference, the same prompt scored by the reference model): a finite
      log-prob for every prompt token after the first.
    Every log-prob present must be finite and at most LOGPROB_TOLERANCE."""
    task = record.get("task")
    params = record.get("params") or {}
    top = record.get("top_logprobs")
    if top and not all(_finite_logprob(t) for t in top):
        worst = max(
            (
                float(t["logprob"])
                for t in top
                if isinstance(t, Mapping) and isinstance(t.get("logprob"), float) and math.isfinite(t["logprob"])
            ),
            default=None,
        )
        if worst is not None and worst > LOGPROB_TOLERANCE:
            return positive_logprob_reason(worst)
        return "a top log-prob is missing or not finite"
    if task == "forecast":
        if not isinstance(record.get("response_text"), str):
            return "no response text"
        if (params.get("top_logprobs") or 0) > 0 and not top:
            return "no top log-probs at the first position"
        return None
    if task == "recall":
        n = params.get("n_samples")
        if n:
            samples = record.get("samples") or []
            if len(samples) != int(n) or not all(isinstance(x, str) for x in samples):
                return f"{len(samples)} of {n} samples"
            return None
        if not top:
            return "no top log-probs"
        return None
    if task in ("mink", REFERENCE_TASK):  # the reference model's line is a Min-K% line
        lps = record.get("prompt_logprobs") or []
        if not lps:
            return "no prompt log-probs"
        if not all(_finite_logprob(t) for t in lps[1:]):
            return "a prompt token after the first has no finite log-prob at or below 0"
        return _line_extras_problem(record, params.get("line_extras") or ())
    return None


def _line_extras_problem(record: Mapping[str, Any], extras: Sequence[str]) -> str | None:
    """What a Min-K% line lacks of the extras its key asked for (a line written when the
    extras joined the key: its params name them, :data:`KEY_FREE_PARAMS`)."""
    for name in extras:
        bit_check = LINE_EXTRA_BITS.get(name)
        if bit_check is not None and not bit_check[1](record):
            return EXTRA_LACKS[name]
    return None


def _has_zlib_bytes(record: Mapping[str, Any]) -> bool:
    value = record.get("zlib_bytes")
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _has_vocab_moments(record: Mapping[str, Any]) -> bool:
    tokens = record.get("prompt_logprobs") or []
    if len(tokens) < 2:
        return False
    for t in tokens[1:]:
        mu, var = (t.get("vocab_mean"), t.get("vocab_var")) if isinstance(t, Mapping) else (None, None)
        if not (
            isinstance(mu, (int, float))
            and isinstance(var, (int, float))
            and math.isfinite(mu)
            and math.isfinite(var)
            and var >= 0
        ):
            return False
    return True


#: What a prompt-scoring line may carry beside its log-probs (lookahead.measures
#: LINE_EXTRAS, a measure's `needs`), each with its bit in the line's extras mask and the
#: test that a line holds it. Why a mask and not part of the key: the key stands for the
#: forward pass (task, model, prompt, decoding parameters), and the same pass serves a study that needs
#: all of these and one that needs none; the mask says which studies a line serves.
LINE_EXTRA_BITS: dict[str, tuple[int, Callable[[Mapping[str, Any]], bool]]] = {
    ZLIB_BYTES: (1, _has_zlib_bytes),
    VOCAB_MOMENTS: (2, _has_vocab_moments),
}
EXTRA_LACKS = {ZLIB_BYTES: "no zlib_bytes", VOCAB_MOMENTS: "a prompt token after the first has no finite vocabulary moments"}
EXTRAS_MASK = 3  # the low bits of an ident hash that hold a line's extras (RawStore)
#: The tasks whose lines carry extras (a prompt scored token by token).
PROMPT_TASKS = ("mink", REFERENCE_TASK)
#: Query parameters that joined a Min-K% line's key before the key stood for the forward
#: pass alone (lookahead.keys): a line whose params hold them was keyed with them and is
#: found by the key its fields hash to without them (:func:`line_key`), so an older cache
#: serves every study it can with nothing asked again.
KEY_FREE_PARAMS = ("line_extras",)


def extras_bits(record: Mapping[str, Any]) -> int:
    """The extras a line carries (:data:`LINE_EXTRA_BITS`) as a bit mask; 0 for a task that
    carries none."""
    if record.get("task") not in PROMPT_TASKS:
        return 0
    return sum(bit for bit, holds in LINE_EXTRA_BITS.values() if holds(record))


def needs_bits(extras: Iterable[str]) -> int:
    """The bit mask of the named extras (one clear error for a name not in LINE_EXTRA_BITS)."""
    out = 0
    for name in extras:
        if name not in LINE_EXTRA_BITS:
            raise ValueError(f"unknown line extra {name!r}; one of {', '.join(LINE_EXTRA_BITS)}")
        out |= LINE_EXTRA_BITS[name][0]
    return out


def extras_rank(bits: int) -> int:
    """How many extras a mask holds: among a key's lines the richest wins (same pass)."""
    return bin(bits).count("1")


def line_key(record: Mapping[str, Any]) -> str:
    """The key of the forward pass a line holds: its own key, or, for a line written when
    its params' extras (:data:`KEY_FREE_PARAMS`) joined the key and whose fields hash to
    that key, the key its fields hash to without them (the key a study asks for now).
    A line whose fields do not hash to its key keeps its key (it answers nothing)."""
    params = record.get("params")
    if not isinstance(params, dict) or not any(p in params for p in KEY_FREE_PARAMS):
        return record["key"]
    if fields_key(record) != record.get("key"):
        return record["key"]
    bare = {k: v for k, v in params.items() if k not in KEY_FREE_PARAMS}
    return fields_key({**record, "params": bare}) or record["key"]


def failures_path(raw_path: str | os.PathLike[str]) -> Path:
    """``<raw_dir>/<task>.failures.jsonl`` beside ``<raw_dir>/<task>.jsonl``."""
    p = Path(raw_path)
    return p.with_name(p.name[: -len(".jsonl")] + ".failures.jsonl" if p.name.endswith(".jsonl") else p.name + ".failures.jsonl")


def params_json(params: Mapping[str, Any]) -> str:
    """Canonical JSON of the query parameters (sorted keys, no spaces)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


#: The key text is these fields in this order, joined by KEY_SEPARATOR (docs/CONTRACTS.md);
#: a recall ident is ``entity_id|target_date``, joined by the same separator.
KEY_FIELDS = ("task", "model_id", "ident", "prompt", "params_json")
KEY_SEPARATOR = "|"
#: Rows keyed at a time by `query_keys` (their joined texts are what it holds).
KEY_SLICE = 262_144


def query_key(task: str, model_id: str, ident: str, prompt: str, params: Mapping[str, Any] | str) -> str:
    """sha256 hex of ``task|model_id|ident|prompt|params_json`` (docs/CONTRACTS.md).

    ident is the row_id (forecast, Min-K%) or ``entity_id|target_date`` (recall).
    ``params`` may be given as its ``params_json`` text already. One key is `query_keys`
    on one-element columns, so the jobs' keys and a build's are made by one rule."""
    return query_keys(task, model_id, pa.array([ident], pa.string()), pa.array([prompt], pa.string()), params)[0].as_py()


def query_keys(task: str, model_id: str, idents: pa.Array, prompts: pa.Array, params: Mapping[str, Any] | str) -> pa.Array:
    """`query_key` of every (ident, prompt) pair, column-wise (Arrow strings in, out).

    Why column-wise: a build keys every row of a study (millions of keys) and a Python
    loop over the key texts was most of its time; the texts are joined by Arrow and
    hashed with no Python code per key (`sha256_hex`). Why in slices of KEY_SLICE rows,
    as large strings: the key texts of 5,000,000 recall pairs (2,000 entities by 2,500
    dates) are 2.3 GB, past the 2 GiB an Arrow string array holds, and the joined texts
    of a slice are all that is held at a time."""
    text = {"task": task, "model_id": model_id, "params_json": params if isinstance(params, str) else params_json(params)}
    parts = []
    for start in range(0, len(idents), KEY_SLICE):
        fields = {
            **{k: pa.scalar(v, pa.large_string()) for k, v in text.items()},
            "ident": idents.slice(start, KEY_SLICE).cast(pa.large_string()),
            "prompt": prompts.slice(start, KEY_SLICE).cast(pa.large_string()),
        }
        parts.append(
            sha256_hex(pc.binary_join_element_wise(*(fields[f] for f in KEY_FIELDS), pa.scalar(KEY_SEPARATOR, pa.large_string())))
        )
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def recall_idents(entity_ids: pa.Array, target_dates: pa.Array) -> pa.Array:
    """The ident of recall keys: ``entity_id|target_date`` (text columns)."""
    return pc.binary_join_element_wise(entity_ids, target_dates, KEY_SEPARATOR)


def sha256_hex(texts: pa.Array) -> pa.Array:
    """Lowercase hex sha256 of the UTF-8 bytes of each text (hashlib's ``hexdigest``).

    hashlib (OpenSSL, with the CPU's SHA instructions) mapped over the texts' bytes, no
    Python code per key: about a microsecond a key, most of a build's keying time. DuckDB's
    vectorised ``sha256`` gives the same digests but took about three times as long.
    The texts go in slices of HASH_SLICE: a map over C functions never gives up the
    interpreter lock, so one map over a million keys stalled the other dbt thread (a
    Python model, or the hashing of build_identity) for a second at a time."""
    parts = []
    for start in range(0, len(texts), HASH_SLICE):
        data = texts.slice(start, HASH_SLICE).cast(pa.binary()).to_pylist()
        parts.append(pa.array(list(map(_HEXDIGEST, map(hashlib.sha256, data))), pa.string()))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


_HEXDIGEST = methodcaller("hexdigest")
HASH_SLICE = 16384  # keys hashed between two chances for another thread: about 15 ms


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
    for rec, _ in _records_from(path, 0, complete_only):
        yield rec


def _records_from(path: Path, offset: int, complete_only: bool) -> Iterator[tuple[dict[str, Any], int]]:
    """(record, offset after its line) for each line from byte ``offset`` on."""
    if not path.exists():
        return
    with open(path, "rb") as fh:
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


#: The fields a line must share with the query its key stands for (lookahead.keys): a line
#: whose key is right but whose task, model, row or (entity, date) is not is no answer to
#: that query (it is listed in the build's raw_line_rejects and the query is asked again).
IDENT_FIELDS = ("task", "model_id", "row_id", "entity_id", "target_date")
#: params a line records beside the key's own (docs/CONTRACTS.md): not hashed into the key.
UNKEYED_PARAMS = ("text_truncated_to_chars",)
Ident = tuple[Any, ...]


def ident_of(record: Mapping[str, Any]) -> Ident:
    """The line's identifying fields, as text (None stays None), then whether its fields
    hash to its key (:func:`fields_key`): a query's ident ends in True
    (llm_jobs.context.query_ident), so a line whose key was rewritten with its row, or
    whose query text or params were edited, is no answer however its ident reads."""
    fields = tuple(None if record.get(f) is None else str(record.get(f)) for f in IDENT_FIELDS)
    return (*fields, fields_key(record) == record.get("key"))


def fields_key(record: Mapping[str, Any]) -> str | None:
    """The key a line's own fields hash to (`query_key` of its task, model_id, ident,
    query_text and params less UNKEYED_PARAMS); None when a field is missing.

    Why on read: a line is trusted by its key, and the key alone cannot show that the
    answer beside it is that query's (a line copied under another row's key and row_id
    read as that row's answer). The same rule in SQL is macros/study_helpers.sql's
    `fields_match`. hashlib on one text, not `query_key`: this runs for every line a
    store reads, and an Arrow array per line cost ten times as much."""
    task, model_id, text, params = (record.get(f) for f in ("task", "model_id", "query_text", "params"))
    ident = f"{record.get('entity_id')}{KEY_SEPARATOR}{record.get('target_date')}" if task == "recall" else record.get("row_id")
    if not (
        isinstance(task, str)
        and isinstance(model_id, str)
        and isinstance(ident, str)
        and isinstance(text, str)
        and isinstance(params, dict)
    ):
        return None
    keyed = {k: v for k, v in params.items() if k not in UNKEYED_PARAMS}
    text = KEY_SEPARATOR.join((task, model_id, ident, text, params_json(keyed)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_records(path: Path, wanted: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """key -> record for the wanted keys (all when None); the first line of a key wins."""
    out: dict[str, dict[str, Any]] = {}
    for rec in iter_records(path):
        k = rec["key"]
        if (wanted is None or k in wanted) and k not in out:
            out[k] = rec
    return out


def shard_files(raw_dir: str | os.PathLike[str], task: str) -> list[Path]:
    """Every file of a task's cache: each ``<task>.jsonl`` under ``raw_dir``, in path order
    (the order the staging models break ties in)."""
    root = Path(raw_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.glob(SHARD_PATTERN.format(task=task)) if p.is_file()), key=str)


def wins_over(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether line ``a`` wins over an earlier-read line ``b`` of the same key: the line
    carrying more extras (:func:`extras_rank`: the same forward pass, more of it kept), then
    first write wins, by ``finished_at`` (lines are read in path, then line order, so a tie
    keeps the one read first). The staging models rank by the same rule
    (macros/study_helpers.sql first_written_line)."""
    ra, rb = extras_rank(extras_bits(a)), extras_rank(extras_bits(b))
    if ra != rb:
        return ra > rb
    return _earlier(a.get("finished_at"), b.get("finished_at"))


def _earlier(fa: Any, fb: Any) -> bool:
    """Whether finished_at ``fa`` is before ``fb`` (a missing time sorts last)."""
    if not isinstance(fa, str):
        return False  # a line without a time sorts last (as SQL's nulls last)
    return not isinstance(fb, str) or fa < fb


def load_cache(
    raw_dir: str | os.PathLike[str], task: str, wanted: set[str] | Mapping[str, Ident] | None = None, needs: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """key -> record over every shard of a task's cache, one record per key (wins_over);
    a line is found by the forward pass it holds (:func:`line_key`).

    ``wanted`` as a mapping key -> expected ident (:func:`ident_of`) also skips a line whose
    fields disagree with its key, as the build does (int_*_lines, raw_line_rejects).
    ``needs``: the extras a line must carry (:data:`LINE_EXTRA_BITS`) to answer."""
    out: dict[str, dict[str, Any]] = {}
    expect = wanted if isinstance(wanted, Mapping) else None
    need = needs_bits(needs)
    for path in shard_files(raw_dir, task):
        for rec in iter_records(path, complete_only=True):
            k = line_key(rec)
            if wanted is not None and k not in wanted:
                continue
            if expect is not None and ident_of(rec) != expect[k]:
                continue
            if need and extras_bits(rec) & need != need:
                continue
            if k not in out or wins_over(rec, out[k]):
                out[k] = rec
    return out


def load_fields(
    raw_dir: str | os.PathLike[str],
    task: str,
    wanted: Mapping[str, int],
    fields: Sequence[str],
    expect: Callable[[int], Ident] | None = None,
    n: int | None = None,
    derived: Mapping[str, Callable[[dict[str, Any]], Any]] | None = None,
    needs: Iterable[str] = (),
) -> tuple[list[bool], dict[str, list[Any]]]:
    """The named ``fields`` of each wanted key's line, as columns: ``wanted`` maps a key to
    its position (0 to n-1; n defaults to the largest position + 1); returns (found,
    {field: n values}), None where nothing answers.

    The same line as :func:`load_cache` picks (every shard, only lines that agree with
    ``expect(position)``, one line per key by :func:`wins_over`), but only the fields asked
    for are kept: a job's summary of a million rows held every whole line before (prompt,
    log-probs, about 14.5 KB a row in Python objects), and now holds a few values a row.
    The kept line's finished_at (for wins_over, when a key has a second line) is held
    as a number where it is written as utc_now writes it (:class:`FinishedTimes`).
    ``derived`` names values computed from the kept line as it is read (a Min-K% line's
    LAP from its prompt log-probs): the line itself is let go. ``needs``: the extras a
    line must carry to answer (:func:`load_cache`)."""
    if n is None:
        n = max(wanted.values(), default=-1) + 1
    found = [False] * n
    finished = FinishedTimes(n)  # the kept line's finished_at, for wins_over
    ranks = bytearray(n)  # the kept line's extras_rank, for wins_over
    need = needs_bits(needs)
    cols: dict[str, list[Any]] = {f: [None] * n for f in (*fields, *(derived or {}))}
    for path in shard_files(raw_dir, task):
        for rec in iter_records(path, complete_only=True):
            i = wanted.get(line_key(rec))
            if i is None or (expect is not None and ident_of(rec) != expect(i)):
                continue
            bits = extras_bits(rec)
            if need and bits & need != need:
                continue
            rank = extras_rank(bits)
            if found[i] and (rank < ranks[i] or (rank == ranks[i] and not _earlier(rec.get("finished_at"), finished[i]))):
                continue
            found[i] = True
            ranks[i] = rank
            finished[i] = rec.get("finished_at")
            for f in fields:
                value = rec.get(f)
                # one object per distinct text: a million answers are mostly a few labels
                cols[f][i] = sys.intern(value) if isinstance(value, str) else value
            for f, fn in (derived or {}).items():
                cols[f][i] = fn(rec)
    return found, cols


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


class FinishedTimes:
    """n finished_at values, each held as microseconds since 1970 (8 bytes) where it reads
    back as the same text (``utc_now``'s form), else as itself.

    Why: a summary of a million rows kept each line's finished_at text (about 80 bytes
    each) only to compare it with a second line of the same key, which is rare. The text
    is given back exactly, so wins_over compares the same strings as before."""

    NONE = np.iinfo(np.int64).min  # no value (None)
    OTHER = NONE + 1  # a value held as itself in ``other``

    def __init__(self, n: int) -> None:
        self._micros = np.full(n, self.NONE, dtype=np.int64)
        self._other: dict[int, Any] = {}

    @staticmethod
    def micros(value: Any) -> int | None:
        """The microseconds of a utc_now text that reads back as itself, else None."""
        if not (isinstance(value, str) and len(value) == 32 and value.endswith("+00:00")):
            return None
        try:
            t = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        if t.utcoffset() != dt.timedelta(0) or t.isoformat(timespec="microseconds") != value:
            return None
        return (t - _EPOCH) // _MICROSECOND

    def __setitem__(self, i: int, value: Any) -> None:
        self._other.pop(i, None)
        m = None if value is None else self.micros(value)
        if m is not None and m > self.OTHER:
            self._micros[i] = m
        elif value is None:
            self._micros[i] = self.NONE
        else:
            self._micros[i] = self.OTHER
            self._other[i] = value

    def __getitem__(self, i: int) -> Any:
        m = int(self._micros[i])
        if m == self.NONE:
            return None
        if m == self.OTHER:
            return self._other[i]
        return (_EPOCH + m * _MICROSECOND).isoformat(timespec="microseconds")


_HEX_KEY = re.compile(r"[0-9a-f]{64}")


def is_digest_key(key: Any) -> bool:
    """Whether ``key`` is a key as this project writes it: a lowercase sha256 hex digest."""
    return isinstance(key, str) and len(key) == 64 and _HEX_KEY.fullmatch(key) is not None


class SortedDigests:
    """Digest keys held as one sorted block of their 32 bytes, with numpy arrays of their
    first 8 bytes (to search) and of one int64 value each: 48 bytes a key, where a dict
    of key strings to ints took about 200. Built once from (keys, values); a key given
    twice keeps its first value, and ``again`` lists (index, first index) of the others."""

    def __init__(self, blob: bytes | bytearray, values: np.ndarray) -> None:
        digests = np.frombuffer(blob, dtype=">u8").reshape(-1, 4)
        # stable: among equal digests the first given comes first
        order = np.lexsort((digests[:, 3], digests[:, 2], digests[:, 1], digests[:, 0]))
        digests, at, values = digests[order], order, values[order]
        again = np.zeros(len(digests), dtype=bool)
        if len(digests) > 1:
            again[1:] = (digests[1:] == digests[:-1]).all(axis=1)
        self.again: list[tuple[int, int]] = []
        if again.any():
            starts = np.maximum.accumulate(np.where(again, 0, np.arange(len(digests))))
            self.again = [(int(at[k]), int(at[starts[k]])) for k in np.flatnonzero(again)]
            digests, values = digests[~again], values[~again]
        self.first = digests[:, 0].astype(np.uint64)
        self.blob = digests.tobytes()
        self.values = np.ascontiguousarray(values, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.values)

    def find(self, key: str) -> int:
        """Where the digest key ``key`` is (-1 when absent)."""
        raw = bytes.fromhex(key)
        prefix = int.from_bytes(raw[:8], "big")
        k = int(self.first.searchsorted(np.uint64(prefix)))
        while k < len(self.values) and int(self.first[k]) == prefix:  # keys sharing 8 bytes
            if self.blob[32 * k : 32 * k + 32] == raw:
                return k
            k += 1
        return -1

    def value(self, key: str, default: Any = None) -> Any:
        """The value of the digest key ``key`` (``default`` when absent)."""
        k = self.find(key)
        return default if k < 0 else int(self.values[k])

    def keys(self) -> Iterator[str]:
        for k in range(len(self.values)):
            yield self.blob[32 * k : 32 * k + 32].hex()


class KeyPositions(Mapping[str, int]):
    """key -> its first position in a sequence of keys, without a Python string a key.

    Why: a summary looks up each line's key among the study's keys; a dict of a million
    key strings was about 200 MB of a job's memory at its peak. A key as this project
    writes it (a sha256 hex digest, lookahead.keys) is held in :class:`SortedDigests`
    (48 bytes a key); a key of another form goes into a dict beside. ``duplicates`` lists
    (position, first position) of every key that appears again."""

    SLICE = 65_536

    def __init__(self, keys: Iterable[str]) -> None:
        self._other: dict[str, int] = {}
        self.duplicates: list[tuple[int, int]] = []
        blob = bytearray()  # one buffer grown in place: no list of parts joined (twice the bytes)
        at: list[np.ndarray] = []
        n = 0
        it = iter(keys)
        while chunk := list(itertools.islice(it, self.SLICE)):
            mask = [is_digest_key(k) for k in chunk]
            if all(mask):
                at.append(np.arange(n, n + len(chunk), dtype=np.int64))
                blob += bytes.fromhex("".join(chunk))
            else:
                at.append(n + np.flatnonzero(mask).astype(np.int64))
                blob += bytes.fromhex("".join(k for k, m in zip(chunk, mask, strict=False) if m))
                for i, (k, is_hex) in enumerate(zip(chunk, mask, strict=False)):
                    if not is_hex:
                        if k in self._other:
                            self.duplicates.append((n + i, self._other[k]))
                        else:
                            self._other[k] = n + i
            n += len(chunk)
        self.n = n
        positions = np.concatenate(at) if at else np.zeros(0, np.int64)
        self._digests = SortedDigests(blob, positions)
        del blob
        # SortedDigests' (index, first index) given -> the positions they stand for
        self.duplicates += [(int(positions[i]), int(positions[j])) for i, j in self._digests.again]

    def get(self, key: Any, default: Any = None) -> Any:
        if is_digest_key(key):
            return self._digests.value(key, default)
        return self._other.get(key, default)

    def __getitem__(self, key: str) -> int:
        at = self.get(key)
        if at is None:
            raise KeyError(key)
        return at

    def __len__(self) -> int:
        return len(self._digests) + len(self._other)

    def __iter__(self) -> Iterator[str]:
        yield from self._digests.keys()
        yield from self._other


class KeyIndex(MutableMapping[str, int]):
    """key -> one int (the hash of its first line's ident), for a cache of a million keys:
    the keys read so far in :class:`SortedDigests` (48 bytes a key), those added since in
    a dict that is folded into it when it grows to a quarter of it (a sort each time,
    a few in all), and keys of another form in a dict of their own.

    Why: RawStore's dict of a million key strings was about 230 MB of the forecast job's
    memory while it asked (BENCHMARKS.md "Job memory at a million rows"). A lookup costs
    a few microseconds instead of a fraction of one. Keys are added, never changed or
    removed (the cache is append-only; :meth:`RawStore.forget` makes a new index)."""

    FOLD_AT = 65_536

    def __init__(self) -> None:
        self._sorted = SortedDigests(b"", np.zeros(0, np.int64))
        self._recent: dict[str, int] = {}  # digest keys not yet folded in
        self._other: dict[str, int] = {}  # keys of another form

    def get(self, key: Any, default: Any = None) -> Any:
        got = self._recent.get(key)
        if got is not None:
            return got
        if is_digest_key(key):
            return self._sorted.value(key, default)
        return self._other.get(key, default)

    def get_many(self, keys: Sequence[str]) -> list[int | None]:
        """:meth:`get` of each key, the digest keys of the sorted block looked up together
        (one ``searchsorted`` for them all: a job checks a million keys a slice at a time)."""
        out: list[int | None] = [None] * len(keys)
        at: list[int] = []
        for i, key in enumerate(keys):
            got = self._recent.get(key)
            if got is not None:
                out[i] = got
            elif is_digest_key(key):
                at.append(i)
            else:
                out[i] = self._other.get(key)
        if not at or not len(self._sorted):
            return out
        asked = np.frombuffer(bytes.fromhex("".join(keys[i] for i in at)), dtype=">u8").reshape(-1, 4)
        first = self._sorted.first
        k = np.minimum(first.searchsorted(asked[:, 0].astype(np.uint64)), len(first) - 1)
        held = np.frombuffer(self._sorted.blob, dtype=">u8").reshape(-1, 4)[k]
        hit = (held == asked).all(axis=1)
        prefix = first[k] == asked[:, 0].astype(np.uint64)
        values = self._sorted.values[k]
        for j, i in enumerate(at):
            if hit[j]:
                out[i] = int(values[j])
            elif prefix[j]:  # another key shares its first 8 bytes: look along them
                out[i] = self.get(keys[i])
        return out

    def __getitem__(self, key: str) -> int:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def __setitem__(self, key: str, value: int) -> None:
        if key in self:
            raise ValueError(f"key {key} is in the index already (keys are added once)")
        self.add(key, value)

    def add(self, key: str, value: int) -> None:
        """Add a key the caller found absent (one lookup, not two: RawStore reads a million)."""
        if not is_digest_key(key):
            self._other[key] = value
            return
        self._recent[key] = value
        if len(self._recent) >= max(self.FOLD_AT, len(self._sorted) // 4):
            self._fold()

    def _fold(self) -> None:
        keys = list(self._recent)
        blob = self._sorted.blob + bytes.fromhex("".join(keys))
        values = np.concatenate([self._sorted.values, np.fromiter(self._recent.values(), np.int64, len(keys))])
        self._recent = {}
        self._sorted = SortedDigests(blob, values)

    def __delitem__(self, key: str) -> None:
        raise TypeError("a key index is append-only")

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent) + len(self._other)

    def __iter__(self) -> Iterator[str]:
        yield from self._sorted.keys()
        yield from list(self._recent)
        yield from list(self._other)


def lock_writer(path: Path) -> list[str]:
    """What the holder of a cache file's lock wrote into it: [pid, writer label] ([] when
    unreadable or empty)."""
    try:
        return path.with_name(path.name + ".lock").read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return []


def try_lock(path: Path, label: str = "") -> Any:
    """The exclusive lock ``<file>.lock`` of a cache file, or None when another process
    holds it. The holder's pid and ``label`` (its study's shard name) are written into it
    (error messages, and whether a busy file is another study's: RawStore own_shard)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path.with_name(path.name + ".lock"), "a+")
    for pause in (*LOCK_RETRY_S, None):
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if pause is None:
                fh.close()
                return None
            time.sleep(pause)  # a reader's liveness probe (lock_is_held) holds it for microseconds
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()} {label}".rstrip() + "\n")
    fh.flush()
    return fh


#: Pauses before try_lock gives up on a busy lock: a waiting job's probe (lock_is_held)
#: takes the lock shared for a moment, which must not read as a writer.
LOCK_RETRY_S = (0.01, 0.05)


def lock_is_held(path: Path) -> bool:
    """Whether a process holds the lock of cache file ``path`` (a killed one's lock went
    with it). Probed with a shared lock taken and dropped at once, so the probe never
    writes the lock file (which names its holder)."""
    try:
        fh = open(path.with_name(path.name + ".lock"), "rb")
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


PLAN_SUFFIX = ".plan"  # <cache file>.plan: the keys its writer is asking (RawStore.claim)


def plan_path(path: Path) -> Path:
    """``<file>.plan`` beside a cache file: the keys its writer is about to ask."""
    return path.with_name(path.name + PLAN_SUFFIX)


@dataclass(frozen=True)
class Plan:
    """What one live writer of a shared cache said it is asking (RawStore.claim): its
    pid, its label (the study's shard name), when it said so and the keys. ``keys`` is
    None for the holder of the shared file that has not said yet."""

    path: Path
    pid: str
    label: str
    order: tuple[int, str]
    keys: frozenset[str] | None


def read_plan(path: Path) -> Plan | None:
    """The plan written at ``path`` (a cache file's .plan), or None when absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = json.loads(fh.readline())
            keys = frozenset(line.strip() for line in fh if line.strip())
    except (OSError, ValueError):
        return None
    if not isinstance(head, dict):
        return None
    label, pid = str(head.get("label") or ""), str(head.get("pid") or "")
    return Plan(path, pid, label, (int(head.get("order_ns") or 0), f"{label}:{pid}"), keys)


def lock_holder(path: Path) -> str:
    """' (process N)' for the job holding a cache file's lock (the pid try_lock wrote), or
    '' when the lock file does not say: for the line that tells a second start to wait."""
    try:
        pid = path.with_name(path.name + ".lock").read_text(encoding="utf-8").split()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return ""
    return f" (process {pid})" if pid.isdigit() else ""


def release_lock(fh: Any) -> None:
    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    fh.close()


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
        # key -> hash of its first line's ident (:func:`ident_of`): one entry a key, no tuple of
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
        own = self.own_shard
        writer = lock_writer(self.path)[1:] if self._lock is None and own else []
        if own and writer and writer != [own]:
            # another study's job writes the shared file (it names its study in the lock);
            # a second job of this study, or a writer that does not say, would ask the
            # same queries again, so it stops as before
            self._move_to_own_shard(own)
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

    def _move_to_own_shard(self, own_shard: str) -> None:
        """Append to this writer's own shard instead of the file another process holds
        (issue 35: two studies sharing one raw_dir run at the same time); its answers
        stay visible to both (refresh reads every shard), so a key is asked once."""
        shard = self.root / SHARDS_DIR / own_shard / self.path.name
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
        """Record a line under the key of the forward pass it holds (:func:`line_key`) with
        its ident, the ident hash's low bits holding the extras it carries
        (:func:`extras_bits`); False when the key already had a line."""
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
        when given, and that carries the extras of mask ``needs``, :func:`needs_bits`): only
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
            if path.stat().st_size <= start:
                continue
            for rec, end in _records_from(path, start, complete_only=True):
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
        for path in sorted(self.root.glob(f"**/{self.task}.jsonl{PLAN_SUFFIX}"), key=str):
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

    def append(self, record: MutableMapping[str, Any]) -> None:
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
        self.clamped += clamp_near_zero(record)
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
