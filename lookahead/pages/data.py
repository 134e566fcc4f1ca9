"""Tables the report's figures and hit-rate table are drawn from, computed once from the
panels when `lookahead report` exports the study and written as CSVs beside the others,
so every figure reads a file the tool wrote.

- ``lap_by_month``: mean LAP (and its quartiles) by calendar month of the realization
  date, pre and post cutoff; the figure marks the stated training cutoff.
- ``accuracy_by_lap_decile``: directional accuracy by LAP decile, deciles formed within
  each sample (lookahead.paper.figures.accuracy_by_decile, also the paper's figure).
- ``hit_rates``: directional accuracy by the study's high/low-LAP split, pre and post,
  with n and a 95% Wilson interval. A hit is sign(forecast) == sign(outcome) among rows
  with a non-zero forecast and a non-zero outcome (a zero has no direction)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lookahead.paper.figures import accuracy_by_decile

SAMPLES = ("pre", "post")  # the documented row order of every table: pre before post
HALVES = ("high LAP", "low LAP")
WILSON_Z = 1.959963984540054  # 95% two-sided


def wilson(hits: int, n: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval for a proportion (NaN, NaN with n = 0): it stays inside
    [0, 1] and keeps its coverage at small n, where the normal interval does not."""
    if n <= 0:
        return math.nan, math.nan
    p = hits / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def _directional(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("mu_hat", "outcome", "high_lap") if c in df.columns]
    if not {"mu_hat", "outcome"} <= set(cols):
        return pd.DataFrame(columns=["hit", "high_lap"])
    d = df[cols].apply(pd.to_numeric, errors="coerce").dropna(subset=["mu_hat", "outcome"])
    d = d[(d["mu_hat"] != 0) & (d["outcome"] != 0)]
    return d.assign(hit=(np.sign(d["mu_hat"]) == np.sign(d["outcome"])).astype(int))


def hit_rates(pre: pd.DataFrame, post: pd.DataFrame) -> pd.DataFrame:
    """Rows in order (pre, high), (pre, low), (post, high), (post, low)."""
    rows = []
    for sample, df in zip(SAMPLES, (pre, post), strict=False):
        d = _directional(df)
        for half, flag in zip(HALVES, (1, 0), strict=False):
            part = d[d["high_lap"] == flag] if "high_lap" in d.columns else d.iloc[0:0]
            n, hits = len(part), int(part["hit"].sum()) if len(part) else 0
            lo, hi = wilson(hits, n)
            rows.append(
                {
                    "sample": sample,
                    "lap_half": half,
                    "n": n,
                    "hits": hits,
                    "accuracy": hits / n if n else math.nan,
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
    return pd.DataFrame(rows)


def lap_by_month(pre: pd.DataFrame, post: pd.DataFrame) -> pd.DataFrame:
    """Mean and quartiles of LAP per realization month (target_date), pre before post."""
    parts = []
    for sample, df in zip(SAMPLES, (pre, post), strict=False):
        if not {"target_date", "lap"} <= set(df.columns) or df.empty:
            continue
        d = pd.DataFrame(
            {
                "month": pd.to_datetime(df["target_date"], errors="coerce").dt.to_period("M"),
                "lap": pd.to_numeric(df["lap"], errors="coerce"),
            }
        ).dropna()
        if d.empty:
            continue
        g = d.groupby("month")["lap"]
        out = pd.DataFrame({"n": g.size(), "mean_lap": g.mean(), "p25": g.quantile(0.25), "p75": g.quantile(0.75)}).reset_index()
        out.insert(0, "sample", sample)
        out["month"] = out["month"].dt.start_time.dt.strftime("%Y-%m-%d")
        parts.append(out)
    cols = ["sample", "month", "n", "mean_lap", "p25", "p75"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def accuracy_by_lap_decile(pre: pd.DataFrame, post: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for sample, df in zip(SAMPLES, (pre, post), strict=False):
        if {"lap", "mu_hat", "outcome"} <= set(df.columns) and len(df):
            acc = accuracy_by_decile(df, "lap")
            if len(acc):
                parts.append(acc.assign(sample=sample))
    cols = ["sample", "decile", "lap_mean", "accuracy", "n"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def derived_tables(pre: pd.DataFrame, post: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
    """name -> table, each written to <results>/<name>.csv by lookahead.pages.report."""
    post = post if post is not None else pre.iloc[0:0]
    return {
        "lap_by_month": lap_by_month(pre, post),
        "accuracy_by_lap_decile": accuracy_by_lap_decile(pre, post),
        "hit_rates": hit_rates(pre, post),
    }


BOOTSTRAP_BINS = 60


def bootstrap_histogram(boot: pd.DataFrame, bins: int = BOOTSTRAP_BINS) -> pd.DataFrame:
    """The pairs-bootstrap draws (paper Figure III) binned, with the in-sample estimate,
    the 95th percentile, the p-value and the number of draws on every row: the chart
    reads this small table instead of every draw."""
    d = pd.to_numeric(boot.get("coefficient", pd.Series(dtype=float)), errors="coerce").dropna().to_numpy()
    if not len(d):
        return pd.DataFrame(columns=["lower", "upper", "n", "in_sample_estimate", "percentile_95", "p_value", "draws"])
    counts, edges = np.histogram(d, bins=bins)
    return pd.DataFrame(
        {
            "lower": edges[:-1],
            "upper": edges[1:],
            "n": counts,
            "in_sample_estimate": float(boot["in_sample_estimate"].iloc[0]),
            "percentile_95": float(np.percentile(d, 95)),
            "p_value": float(boot["p_value"].iloc[0]),
            "draws": len(d),
        }
    )
