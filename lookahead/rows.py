"""Input observations for the LLM jobs: read, rename, derive row_id, validate.

The jobs and the dbt staging models must agree on which rows exist and on their row_id,
otherwise raw lines cannot be merged back. So the rules live here once and the staging
SQL mirrors them literally:

* row_id, when ``column_map.row_id`` is null, is
  ``substr(sha256(entity_id || '|' || text_date || '|' || text), 1, 16)`` where
  entity_id is the value as text (the CSV cell as written), text_date is the parsed
  date written ``YYYY-MM-DD`` and text is the cell as written (no trimming).
* A row is valid when target_date > text_date (both parse as dates), outcome is numeric
  and not missing, and text is non-empty after stripping whitespace. Invalid rows are
  returned with a reason, never silently dropped.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd

from lookahead.config import PROTOCOL_COLUMNS, Study, StudyConfigError

REJECT_REASONS = (
    "unparseable text_date",
    "unparseable target_date",
    "target_date not after text_date",
    "outcome missing or not numeric",
    "empty text",
)


def derive_row_id(entity_id: str, text_date: str, text: str) -> str:
    """Deterministic row id: first 16 hex chars of sha256(entity_id|text_date|text)."""
    raw = f"{entity_id}|{text_date}|{text}".encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


def read_table(path: Path) -> pd.DataFrame:
    """Read the user's CSV or parquet file with every column as text.

    Text (not inferred dtypes) keeps ids such as ``007`` and the exact text cells that
    row_id hashes; outcome is converted to a number during validation."""
    if not path.exists():
        raise StudyConfigError(f"setting 'data_path': file '{path}' does not exist")
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        df = pd.read_parquet(path)
        return df.apply(lambda s: s.map(_cell_text))
    if suffix in (".csv", ".txt", ".tsv"):
        sep = "\t" if suffix == ".tsv" else ","
        return pd.read_csv(path, dtype=str, keep_default_na=False, sep=sep)
    raise StudyConfigError(
        f"setting 'data_path': '{path}' must be a .csv or .parquet file"
    )


def _cell_text(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, pd.Timestamp):
        return v.strftime("%Y-%m-%d")
    if hasattr(v, "isoformat") and not isinstance(v, str):
        return v.isoformat()[:10]
    return str(v)


def _iso_dates(s: pd.Series) -> pd.Series:
    """Parse dates to 'YYYY-MM-DD' text; unparseable cells become None."""
    parsed = pd.to_datetime(s.where(s.str.strip() != ""), errors="coerce", format="mixed")
    return parsed.dt.strftime("%Y-%m-%d").where(parsed.notna(), None)


def load_rows(study: Study) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(valid rows, rejected rows with `reject_reason`) under protocol column names.

    Extra columns named in ``extra_columns`` are carried along (prompts may use any
    input column as a placeholder, so all user columns are kept too)."""
    df = read_table(study.path("data_path"))
    cmap: dict[str, str | None] = study["column_map"]
    missing = [f"{proto} -> '{col}'" for proto, col in cmap.items() if col and col not in df.columns]
    if missing:
        raise StudyConfigError(
            f"setting 'column_map': column(s) not in {study['data_path']}: {', '.join(missing)}; "
            f"file has {', '.join(map(str, df.columns))}"
        )
    out = pd.DataFrame(index=df.index)
    for proto in PROTOCOL_COLUMNS:
        col = cmap.get(proto)
        out[proto] = df[col].astype(str) if col else ""
    for col in df.columns:  # user columns stay available as prompt placeholders
        if col not in out.columns:
            out[col] = df[col]
    out["text_date"] = _iso_dates(out["text_date"].astype(str))
    out["target_date"] = _iso_dates(out["target_date"].astype(str))
    if not cmap.get("row_id"):
        out["row_id"] = [
            derive_row_id(e, d if d is not None else "", t)
            for e, d, t in zip(out["entity_id"], out["text_date"], out["text"])
        ]
    outcome = pd.to_numeric(out["outcome"].astype(str).str.strip(), errors="coerce")
    reason = pd.Series([None] * len(out), index=out.index, dtype=object)
    reason = reason.mask(reason.isna() & out["text_date"].isna(), REJECT_REASONS[0])
    reason = reason.mask(reason.isna() & out["target_date"].isna(), REJECT_REASONS[1])
    ok_dates = out["text_date"].notna() & out["target_date"].notna()
    not_after = ok_dates & ~(out["target_date"].fillna("") > out["text_date"].fillna(""))
    reason = reason.mask(reason.isna() & not_after, REJECT_REASONS[2])
    reason = reason.mask(reason.isna() & outcome.isna(), REJECT_REASONS[3])
    reason = reason.mask(reason.isna() & (out["text"].astype(str).str.strip() == ""), REJECT_REASONS[4])
    out["outcome"] = outcome
    dupes = out.loc[reason.isna(), "row_id"].duplicated(keep=False)
    if dupes.any():
        ids = out.loc[reason.isna(), "row_id"][dupes].unique()[:5]
        raise StudyConfigError(
            f"column 'row_id' ({cmap.get('row_id') or 'derived'}) is not unique among valid rows: "
            f"{', '.join(map(str, ids))}"
        )
    valid = out[reason.isna()].reset_index(drop=True)
    rejects = out[reason.notna()].assign(reject_reason=reason[reason.notna()]).reset_index(drop=True)
    return valid, rejects


def subsample_rows(rows: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """A seeded random subsample that is the same for every job and any row order.

    Rows are ranked by sha256(seed|row_id), so forecast, recall and Min-K% runs with the
    same --subsample/--seed pick the same rows and their raw lines merge."""
    if n <= 0:
        raise StudyConfigError(f"--subsample {n}: must be a positive number of rows")
    if n >= len(rows):
        return rows
    rank = rows["row_id"].map(lambda r: hashlib.sha256(f"{seed}|{r}".encode()).hexdigest())
    keep = rank.sort_values(kind="stable").index[:n]
    return rows.loc[sorted(keep)].reset_index(drop=True)


def unique_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (entity_id, target_date): the recall query's unit (protocol step 2)."""
    return (
        rows.drop_duplicates(["entity_id", "target_date"], keep="first")
        .loc[:, ["entity_id", "entity_name", "ticker", "target_date"]]
        .reset_index(drop=True)
    )

