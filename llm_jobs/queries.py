"""A job's pending queries: :class:`Query`, one query, and :class:`QueryPlan`, the
queries of a one-per-row task (forecast, Min-K%) held as columns.

Why a module of their own: every job, the planning, the query loop, the failure tally and
the runners pass queries around, while only the jobs' set-up needs the context
(llm_jobs.context); the query types import nothing from the jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa


@dataclass(slots=True)
class Query:
    """One pending query: its key, the prompt and the identifying fields.

    ``text`` is the prompt as rendered from the study's template (what the key hashes);
    ``prompt`` is the exact text sent: the same until JobContext.for_backend applies the
    model's chat template, and a cut text when prompt_overflow: truncate_text had to fit
    the context (``params`` then records how much it kept, beside the key's params).
    ``row`` is the input row of a query whose text may be cut; a forecast or Min-K% query
    leaves it None and the row is read back by its row_id when needed
    (:meth:`JobContext.input_row`): a dict per query weighed more than the query."""

    key: str
    prompt: str
    row_id: str | None = None
    entity_id: str | None = None
    target_date: str | None = None
    text: str = ""
    row: dict[str, Any] | None = None
    truncated_to: int | None = None

    def __post_init__(self) -> None:
        self.text = self.text or self.prompt


class QueryPlan(Sequence[Query]):
    """A job's queries of one per row (forecast, Min-K%), held as columns: a read-only
    sequence of :class:`Query` whose objects are made a slice at a time, when read.

    Why: a million Query objects (key, prompt and row id as Python strings) were the
    largest part of the forecast job's memory, held from the plan to the summary. The
    plan holds only what cannot be read back: each query's key (an Arrow column) and its
    row (a position in ``rows``, the job's rows); the prompt is rendered again from the
    row when a slice is read (``render``: the study's template, column-wise, a few ms a
    slice), the row_id is the row's. What JobContext.for_backend sends in place of the
    rendered text (a chat template) is a column of its own (``sent``) only where it
    differs, and the few queries whose text had to be cut are kept whole (``replaced``).
    Reading it gives the Query objects the list it replaces held, row for row
    (tests/python/test_query_plan.py)."""

    #: Queries made at a time when the plan is iterated.
    SLICE_ROWS = 4096

    def __init__(
        self,
        keys: pa.Array,
        rows: pd.DataFrame,
        render: Callable[[pd.DataFrame], pa.Array],
        positions: np.ndarray | None = None,
        start: int = 0,
        sent: pa.Array | None = None,
        replaced: dict[int, Query] | None = None,
    ) -> None:
        self.keys = keys
        self._rows = rows
        self._render = render
        self._positions = positions  # the row of query i in ``rows``; None: row start + i
        self._start = start
        self._sent = sent  # the text sent, where the backend sends another (JobContext.for_backend)
        self._replaced = replaced or {}  # query i -> its Query with a cut text (fit_forecast_prompts)
        self._row_id_column: pa.ChunkedArray | None = None  # rows' row_id as Arrow (row_id_at)

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"QueryPlan({len(self)} queries)"

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, slice):
            a, b, step = at.indices(len(self))
            if step != 1:
                return self.take(np.arange(a, b, step))
            b = max(a, b)
            return QueryPlan(
                self.keys[a:b],
                self._rows,
                self._render,
                None if self._positions is None else self._positions[a:b],
                self._start + a,
                None if self._sent is None else self._sent[a:b],
                {i - a: q for i, q in self._replaced.items() if a <= i < b},
            )
        i = int(at)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"query {at} of {len(self)}")
        return self._make(i, i + 1)[0]

    def __iter__(self) -> Iterator[Query]:
        for a in range(0, len(self), self.SLICE_ROWS):
            yield from self._make(a, min(len(self), a + self.SLICE_ROWS))

    def take(self, indices: Sequence[int] | np.ndarray) -> QueryPlan:
        """The queries at ``indices``, in that order (a plan of its own)."""
        at = np.asarray(indices, dtype=np.int64)
        where = {int(i): n for n, i in enumerate(at)} if self._replaced else {}
        return QueryPlan(
            self.keys.take(pa.array(at, type=pa.int64())),
            self._rows,
            self._render,
            self.row_positions()[at],
            0,
            None if self._sent is None else self._sent.take(pa.array(at, type=pa.int64())),
            {where[i]: q for i, q in self._replaced.items() if i in where},
        )

    def row_positions(self, a: int = 0, b: int | None = None) -> np.ndarray:
        """Where the rows of queries a to b are in ``rows``."""
        b = len(self) if b is None else b
        if self._positions is None:
            return np.arange(self._start + a, self._start + b, dtype=np.int64)
        return self._positions[a:b]

    def rows(self, a: int = 0, b: int | None = None) -> pd.DataFrame:
        """The input rows of queries a to b."""
        b = len(self) if b is None else b
        if self._positions is None:
            return self._rows.iloc[self._start + a : self._start + b]
        return self._rows.iloc[self._positions[a:b]]

    def row_ids(self, a: int = 0, b: int | None = None) -> list[str]:
        """The row_id of queries a to b (as Query.row_id holds it), without making the queries."""
        return [str(r) for r in self.rows(a, b)["row_id"]]

    def row_id_at(self, i: int) -> str:
        """The row_id of query i (as Query.row_id holds it), read from the rows' column."""
        if self._row_id_column is None:
            self._row_id_column = pa.chunked_array(pa.array(self._rows["row_id"]))
        at = self._start + i if self._positions is None else int(self._positions[i])
        return str(self._row_id_column[at].as_py())

    def texts(self, a: int = 0, b: int | None = None) -> list[str]:
        """The rendered text of queries a to b (the text the key hashes, before any cut)."""
        return self._render(self.rows(a, b)).to_pylist()

    def sending(self, send: Callable[[str], str]) -> QueryPlan:
        """The plan with the text ``send`` makes of each rendered text (JobContext.for_backend):
        the same plan when it sends every text as it is, else one with the sent texts as a
        column (a model's chat template is applied once, not at every read)."""
        chunks: list[pa.Array] = []
        differs = False
        for a in range(0, len(self), self.SLICE_ROWS):
            texts = self.texts(a, min(len(self), a + self.SLICE_ROWS))
            sent = [send(t) for t in texts]
            differs = differs or sent != texts
            chunks.append(pa.array(sent, type=pa.large_string()))
        if not differs:
            return self
        column = pa.chunked_array(chunks, type=pa.large_string()).combine_chunks()
        return QueryPlan(self.keys, self._rows, self._render, self._positions, self._start, column, self._replaced)

    def with_replaced(self, replaced: dict[int, Query]) -> QueryPlan:
        """The plan with query i read as ``replaced[i]`` (a text cut to fit the context)."""
        return QueryPlan(
            self.keys, self._rows, self._render, self._positions, self._start, self._sent, {**self._replaced, **replaced}
        )

    def _make(self, a: int, b: int) -> list[Query]:
        keys = self.keys[a:b].to_pylist()
        rows = self.rows(a, b)
        texts = self._render(rows).to_pylist()
        row_ids = [str(r) for r in rows["row_id"]]
        sent = self._sent[a:b].to_pylist() if self._sent is not None else None
        out = []
        for i, (key, text, row_id) in enumerate(zip(keys, texts, row_ids, strict=False)):
            q = self._replaced.get(a + i)
            if q is None:
                prompt = text if sent is None else sent[i]
                q = Query(key, prompt, row_id=row_id) if prompt == text else Query(key, prompt, row_id=row_id, text=text)
            out.append(q)
        return out


def keys_of(queries: Sequence[Query]) -> Iterator[str]:
    """Each query's key, in order (a QueryPlan's without making its queries)."""
    if isinstance(queries, QueryPlan):
        for a in range(0, len(queries), QueryPlan.SLICE_ROWS):
            yield from queries.keys[a : a + QueryPlan.SLICE_ROWS].to_pylist()
    else:
        yield from (q.key for q in queries)
