"""Which line answers a key, over every shard of a task's cache: the line whose fields
agree with the query (:func:`ident_of`) and that carries the extras the study needs, one
line per key (:func:`wins_over`), the rule the staging models follow too."""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from lookahead.cache.files import iter_records, shard_files
from lookahead.keys import fields_key, line_key
from lookahead.tasks import extras_bits, extras_rank, needs_bits

#: The fields a line must share with the query its key stands for (lookahead.keys): a line
#: whose key is right but whose task, model, row or (entity, date) is not is no answer to
#: that query (it is listed in the build's raw_line_rejects and the query is asked again).
IDENT_FIELDS = ("task", "model_id", "row_id", "entity_id", "target_date")
#: A line's IDENT_FIELDS as text, then whether its fields hash to its key (:func:`ident_of`).
Ident = tuple[Any, ...]


def ident_of(record: Mapping[str, Any]) -> Ident:
    """The line's identifying fields, as text (None stays None), then whether its fields
    hash to its key (:func:`lookahead.keys.fields_key`): a query's ident ends in True
    (llm_jobs.context.query_ident), so a line whose key was rewritten with its row, or
    whose query text or params were edited, is no answer however its ident reads."""
    fields = tuple(None if record.get(f) is None else str(record.get(f)) for f in IDENT_FIELDS)
    return (*fields, fields_key(record) == record.get("key"))


def wins_over(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether line ``a`` wins over an earlier-read line ``b`` of the same key: the line
    carrying more extras (:func:`lookahead.tasks.extras_rank`: the same forward pass, more of it kept), then
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
    a line is found by the forward pass it holds (:func:`lookahead.keys.line_key`).

    ``wanted`` as a mapping key -> expected ident (:func:`ident_of`) also skips a line whose
    fields disagree with its key, as the build does (int_*_lines, raw_line_rejects).
    ``needs``: the extras a line must carry (:data:`lookahead.tasks.LINE_EXTRA_BITS`) to answer."""
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
