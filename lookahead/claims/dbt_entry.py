"""What the dbt Python models of the claim pipeline call.

A dbt Python model sees the vars only through its config, so the YAML passes the claim
settings (and the model_id and raw_dir that select the raw lines) as one JSON string;
they override the project vars exactly as ``--vars`` does for the jobs.
"""

from __future__ import annotations

import json

import pandas as pd

from lookahead.claims.tables import build
from lookahead.config import load_study

TABLES = ("claims", "instance_leakage", "claims_summary", "claims_rejects")


def table(name: str, vars_json: str) -> pd.DataFrame:
    """One of the claim tables for the study described by the dbt vars in ``vars_json``."""
    if name not in TABLES:
        raise ValueError(f"unknown claim table '{name}'")
    overrides = {k: v for k, v in json.loads(vars_json).items()}
    study = load_study(None, overrides=overrides)
    df = build(study)[name].copy()
    return typed(df)


DATE_COLUMNS = {"t_ref", "tau", "temporal_reference_parsed"}
INT_COLUMNS = {"claim_id", "n_candidates", "n_supporting_docs", "n_claims", "n_coalitions", "n_instances",
               "n_scored", "n_outcomes", "row"}
FLOAT_COLUMNS = {"shapley", "shapley_se", "olr", "olr_unverifiable_leaked", "shapley_dclr",
                 "shapley_dclr_unverifiable_leaked", "top1_leakage", "top3_leakage",
                 "top1_leakage_unverifiable_leaked", "top3_leakage_unverifiable_leaked", "v_all", "v_empty",
                 "shapley_sum", "efficiency_gap", "max_shapley_se", "p_positive", "brier", "accuracy"}


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
