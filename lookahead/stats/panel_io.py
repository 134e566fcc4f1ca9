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

from typing import Any, Iterable

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
    return relation.project(", ".join(_quote(c) for c in keep)).df()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
