"""Reading the panel into a dbt Python model: only the columns a model uses.

Why: `dbt.ref("panel_pre").df()` converts every panel column to pandas, most of them
strings (row ids, names, cache keys) that become one Python object per value. At
1,000,000 rows that is about 1 GB per copy, and three models held it (regression
results, the verdict, the paper tables). Each consumer declares the columns it reads
(`lookahead.stats.protocol.protocol_columns`, `lookahead.stats.verdict.VERDICT_COLUMNS`,
`lookahead.paper.tables.paper_columns`) and gets exactly those, converted by DuckDB
with the same per-column types as `.df()`, so every result is the same as from the
whole panel (the projection drops columns, never rows or their order)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd


def relation_columns(relation: Any) -> list[str]:
    """Column names of a DuckDB relation (a dbt `ref`)."""
    return list(relation.columns)


def read_columns(relation: Any, columns: Iterable[str]) -> pd.DataFrame:
    """The relation's `columns` that exist, in the relation's order, as pandas.

    A requested column the relation lacks is left out, not an error here: the consumer
    checks its inputs and names what is missing (one check, in one place)."""
    wanted = set(columns)
    keep = [c for c in relation_columns(relation) if c in wanted]
    if not keep:
        return pd.DataFrame(index=pd.RangeIndex(int(relation.aggregate("count(*)").fetchone()[0])))
    return to_pandas(relation.project(", ".join(_quote(c) for c in keep)))


def to_pandas(relation: Any) -> pd.DataFrame:
    """The relation as pandas, the same frame as `relation.df()` (columns, dtypes, values,
    row order), with its text columns converted through Arrow.

    Why: `.df()` turns each VARCHAR value into a Python string and pandas then copies
    those into its Arrow-backed string columns; at 1,000,000 rows the four text columns
    gate_panel checks cost about 1 GB at the conversion's peak for a 200 MiB frame
    (benchmarks/HISTORY.md). Through Arrow the strings go straight into those columns, at half
    the time. The other columns still come from `.df()` (dates, nullable integers and
    booleans convert differently through Arrow), from a second scan of the same table:
    a dbt `ref` is a stored table, and DuckDB returns a table's rows in the order they
    were stored. A text column with no value at all (or no rows) is an `object` column
    in `.df()`, so such a relation is converted by `.df()` alone."""
    columns = list(relation.columns)
    text = [c for c, t in zip(columns, relation.types, strict=False) if str(t) == "VARCHAR"]
    if not text:
        return relation.df()
    strings = relation.project(", ".join(_quote(c) for c in text)).to_arrow_table()
    if any(strings.column(c).null_count == strings.num_rows for c in text):
        return relation.df()
    strings = strings.to_pandas()
    rest = [c for c in columns if c not in text]
    if not rest:
        return strings[columns]
    other = relation.project(", ".join(_quote(c) for c in rest)).df()
    return pd.concat([other, strings], axis=1)[columns]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
