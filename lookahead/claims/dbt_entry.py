"""What the dbt Python models of the claim pipeline call.

Each model reads the study as the build resolved it (`study_settings.settings_json`, the
one settings object every dbt Python model rebuilds), so the claim tables see the same
settings, defaults included, as the jobs that wrote their raw lines.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pandas as pd

from lookahead.claims.tables import STAGED_LINES, SUMMARY_INTERVAL_COLUMNS, ClaimLines, build
from lookahead.config import Study
from lookahead.stats.protocol import study_from_frame

TABLES = ("claims", "instance_leakage", "claims_summary", "claims_rejects", "claims_repredict")

# The five claim models come from one computation (lookahead.claims.tables.build); dbt
# runs them in one process, so the first computes it and the others take its tables.
# Keyed by the settings and the fingerprint of every file the build reads
# (lookahead.identity.inputs_fingerprint: the claim files and the claim jobs' raw lines),
# so a second build in the same process after an edit computes again. Before this, each
# model built all five tables and kept one: five times the work per build.
_LOCK = threading.Lock()
_BUILT: dict[tuple[str, str], dict[str, pd.DataFrame]] = {}


def _tables(study: Study, staged: Mapping[str, Any] | None) -> dict[str, pd.DataFrame]:
    from lookahead.identity import inputs_fingerprint

    key = (study.settings_hash, inputs_fingerprint(study))
    with _LOCK:  # dbt's threads: the second model waits for the first's tables
        if key not in _BUILT:
            _BUILT.clear()
            lines = None if staged is None else ClaimLines.from_staged({f: _frame(rel) for f, rel in staged.items()})
            _BUILT[key] = build(study, lines)
        return _BUILT[key]


def _frame(relation: Any) -> pd.DataFrame:
    return relation if isinstance(relation, pd.DataFrame) else relation.df()


def table(name: str, study_settings: pd.DataFrame, staged: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One of the claim tables for the study of this build (the `study_settings` row),
    from the claim staging models ``staged`` (ClaimLines field -> the model's relation or
    DataFrame, lookahead.claims.tables.STAGED_LINES; read only when the tables are
    computed); without them, from the claim jobs' raw files."""
    if name not in TABLES:
        raise ValueError(f"unknown claim table '{name}'")
    if staged is not None and set(staged) != set(STAGED_LINES):
        raise ValueError(f"the claim tables read the staged lines {sorted(STAGED_LINES)}, got {sorted(staged)}")
    return typed(_tables(study_from_frame(study_settings), staged)[name])


DATE_COLUMNS = {"t_ref", "tau", "temporal_reference_parsed"}
INT_COLUMNS = {
    "claim_id",
    "n_candidates",
    "n_supporting_docs",
    "n_claims",
    "n_coalitions",
    "n_instances",
    "n_scored",
    "n_outcomes",
    "row",
    "n_repredicted",
    "attempts",
}
FLOAT_COLUMNS = {
    "shapley",
    "shapley_se",
    "olr",
    "olr_unverifiable_leaked",
    "shapley_dclr",
    "shapley_dclr_unverifiable_leaked",
    "shapley_dclr_se",
    "shapley_dclr_ci_low",
    "shapley_dclr_ci_high",
    "top1_leakage",
    "top3_leakage",
    "top5_leakage",
    "top1_leakage_unverifiable_leaked",
    "top3_leakage_unverifiable_leaked",
    "top5_leakage_unverifiable_leaked",
    *[f"{c}_{p}" for c in SUMMARY_INTERVAL_COLUMNS for p in ("se", "ci_low", "ci_high")],
    "v_all",
    "v_empty",
    "shapley_sum",
    "efficiency_gap",
    "max_shapley_se",
    "p_positive",
    "brier",
    "accuracy",
    "task_metric",
    "original_probability",
    "repredicted_probability",
    "repred_error",
}


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """Fixed column types, so an empty table has the same schema as a full one."""
    out = df.copy()
    for col in out.columns:
        if col in DATE_COLUMNS:
            out[col] = pd.to_datetime(out[col]).astype("datetime64[us]")
        elif col in INT_COLUMNS:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("Int64")
        elif col in FLOAT_COLUMNS:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("Float64")
        else:
            out[col] = out[col].astype("string")
    return out
