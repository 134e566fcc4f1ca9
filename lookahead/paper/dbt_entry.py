"""What the dbt Python models `paper_tables` and `bootstrap_results` call.

A dbt Python model cannot import another model, so the models are two-line wirings and
the logic (settings from `study_settings`, which frames come back, their dtypes) is here
where pytest can reach it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lookahead.paper import analysis as A
from lookahead.paper import bootstrap as bs
from lookahead.paper import tables as T
from lookahead.stats.fe_regression import NotEstimable
from lookahead.stats.protocol import study_from_frame

BOOTSTRAP_COLUMNS = {
    "draw": "int64",
    "coefficient": "float64",
    "in_sample_estimate": "float64",
    "out_of_sample_estimate": "float64",
    "p_value": "float64",
    "percentile_95": "float64",
    "seed": "int64",
    "n_obs": "int64",
    "method": "object",
}


def settings_from_frame(study_settings: pd.DataFrame) -> tuple[T.PaperSections, int, int]:
    """PaperSections, bootstrap draws and seed of the study a build recorded in the one-row
    `study_settings` table."""
    study = study_from_frame(study_settings)
    return T.PaperSections.from_study(study), study.paper.bootstrap_draws, study.paper.bootstrap_seed


def panel_columns(study_settings: pd.DataFrame) -> list[str]:
    """The panel columns `paper_tables_frame` and `bootstrap_frame` read for this study: the
    models fetch only these (lookahead.stats.panel_io)."""
    return T.paper_columns(settings_from_frame(study_settings)[0])


def bootstrap_frame(study_settings: pd.DataFrame, pre: pd.DataFrame, post: pd.DataFrame) -> pd.DataFrame:
    """One row per bootstrap draw; no rows when there is no post-cutoff sample or draws = 0."""
    s, draws, seed = settings_from_frame(study_settings)
    s, _ = T.paper_measure(pre, s)  # the measure paper_tables uses (Min-K% when computed)
    post, _ = T.out_of_sample(post, s)
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in BOOTSTRAP_COLUMNS.items()})
    if draws == 0 or not A._has_rows(post, s) or not A._has_rows(pre, s):
        return empty
    try:
        t5 = T.table5(pre, post, s)
    except NotEstimable:
        return empty  # paper_tables carries the note saying why
    in_est = t5.columns[1].estimate.get(T.INTERACTION_STD, np.nan)
    oos_est = t5.columns[3].estimate.get(T.INTERACTION_STD, np.nan)
    if not np.isfinite(in_est):
        return empty
    y, _, full = T.table5_terms(s)
    data = bs.prepare(T.table5_inputs(post, s), y, full, s.fixed_effects)
    res = bs.pairs_bootstrap(data, in_est, draws=draws, seed=seed, method="auto", out_of_sample_estimate=oos_est)
    return res.frame().astype(BOOTSTRAP_COLUMNS)


def paper_tables_frame(
    study_settings: pd.DataFrame, pre: pd.DataFrame, post: pd.DataFrame, boot: pd.DataFrame | None = None
) -> pd.DataFrame:
    """All paper specifications in long form, plus Table II's economic magnitudes and the
    bootstrap p-value as rows (`kind` tells them apart)."""
    s, _, seed = settings_from_frame(study_settings)
    res = A.run_paper_analysis(pre, post, s, draws=0, seed=seed)
    long = A.paper_long_table(res)
    long["kind"] = "coefficient"
    extra = []
    t2 = res.tables.get("table2")
    if t2 is not None:
        for q, v in t2.magnitudes.items():
            extra.append(
                {
                    "paper_table": "table2",
                    "table_column": 2,
                    "spec": "table2_magnitudes",
                    "sample": "pre",
                    "term": q,
                    "estimate": float(v),
                    "kind": "magnitude",
                    "n_obs": t2.columns[1].n_obs,
                    "note": t2.notes[0],
                }
            )
    if boot is not None and len(boot):
        b = boot.iloc[0]
        extra.append(
            {
                "paper_table": "table5",
                "table_column": 4,
                "spec": "table5_bootstrap",
                "sample": "post",
                "term": T.BOOTSTRAP_ROW,
                "estimate": float(b["p_value"]),
                "p": float(b["p_value"]),
                "kind": "bootstrap",
                "n_obs": int(b["n_obs"]),
                "note": (
                    f"The paper's procedure: {len(boot):,} pairs-bootstrap draws of the "
                    f"out-of-sample rows, seed {int(b['seed'])}; share of draws >= the in-sample "
                    f"estimate {float(b['in_sample_estimate']):.6g} (treated as fixed: no "
                    f"in-sample sampling error, no clustering); 95th percentile "
                    f"{float(b['percentile_95']):.6g}"
                ),
            }
        )
    t5 = res.tables.get("table5")
    if t5 is not None and "diff_difference" in t5.magnitudes:
        d = t5.magnitudes
        extra.append(
            {
                "paper_table": "table5",
                "table_column": 2,
                "spec": "table5_difference",
                "sample": "pre+post",
                "term": T.DIFFERENCE_ROW,
                "estimate": d["diff_difference"],
                "std_error": d["diff_std_error"],
                "t": d["diff_t"],
                "p": d["diff_p_one_sided"],
                "kind": "difference",
                "n_obs": int(d["diff_n_obs"]),
                "n_clusters": d["diff_n_clusters"] if np.isfinite(d["diff_n_clusters"]) else None,
                "vcov": t5.columns[1].vcov,
                "note": (
                    "In-sample minus out-of-sample LLM_std x LAP_std from one stacked "
                    "regression (period-specific slopes and fixed effects), clustered; p is "
                    "one-sided for in-sample > out-of-sample"
                ),
            }
        )
    notes = pd.DataFrame(
        [
            {
                "paper_table": "notes",
                "table_column": 0,
                "spec": "skipped",
                "sample": "pre",
                "term": n[:60],
                "kind": "note",
                "note": n,
            }
            for n in res.notes
        ]
    )
    out = pd.concat([long, pd.DataFrame(extra), notes], ignore_index=True)
    for c in ("lap_measure", "mink_mean"):
        out[c] = long[c].iloc[0] if len(long) else None
    num = ["estimate", "std_error", "t", "p", "r2", "r2_within"]
    out[num] = out[num].astype("float64")
    for c in ("table_column", "n_obs", "n_clusters", "n_singletons", "n_missing"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("Int64")
    for c in (
        "paper_table",
        "spec",
        "sample",
        "term",
        "dropped_terms",
        "fixed_effects",
        "vcov",
        "lap_measure",
        "mink_mean",
        "note",
        "kind",
    ):
        out[c] = out[c].astype("object").where(out[c].notna(), None)
    return out[[*A.LONG_COLUMNS, "kind"]]
