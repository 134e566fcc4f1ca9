"""The paper's view of a fit: one table column from the one fixed-effects fit.

Every paper table is a set of regressions declared as ``FitRequest``s (the one
specification type, lookahead.stats.fe_regression) with ``Term`` regressors, fitted by
the one fit, ``lookahead.stats.fe_regression.fit_fe``: one small-sample convention
(reghdfe's, K included), one singleton rule, one demeaning tolerance (FIXEF_TOL), one
error vocabulary (RegressionInputError, NotEstimable). What this module adds is what a
table column needs around that fit: interaction columns are built explicitly (so a
term's name says exactly what was multiplied) under safe names, rows with a missing or
infinite value in a used column are dropped and counted, and the result is keyed by the
terms' printed names (``FitResult``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from lookahead.stats.fe_regression import CLUSTER_COLUMNS as STATS_CLUSTER_COLUMNS
from lookahead.stats.fe_regression import (
    FIXEF_TOL,  # noqa: F401  (one tolerance, declared there)
    FitRequest,
    NotEstimable,
    RegressionInputError,
    Term,
    fit_fe,
    not_estimable,
)


@dataclass
class FitResult:
    """A fitted specification: one entry per term, plus the facts a table footer needs."""

    spec: str
    outcome: str
    terms: list[str]
    estimate: dict[str, float]
    std_error: dict[str, float]
    t: dict[str, float]
    p: dict[str, float]
    n_obs: int
    n_input: int
    n_missing: int
    n_singletons: int
    n_clusters: int | None
    r2: float
    r2_within: float
    fixed_effects: tuple[str, ...]
    vcov: str
    dropped_terms: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        """Long format: one dict per term."""
        return [
            {
                "spec": self.spec,
                "term": term,
                "estimate": self.estimate.get(term, np.nan),
                "std_error": self.std_error.get(term, np.nan),
                "t": self.t.get(term, np.nan),
                "p": self.p.get(term, np.nan),
                "n_obs": self.n_obs,
                "n_clusters": self.n_clusters,
                "n_singletons": self.n_singletons,
                "n_missing": self.n_missing,
                "dropped_terms": ",".join(self.dropped_terms),
                "r2": self.r2,
                "r2_within": self.r2_within,
                "fixed_effects": "+".join(self.fixed_effects),
                "vcov": self.vcov,
            }
            for term in self.terms
        ]


def vcov_label(cluster: str | None) -> str:
    """How a paper table prints its standard errors for the `cluster` setting."""
    if cluster in (None, "none"):
        return "HC1"
    return f"CRV1 by {cluster}"


def fit_column(df: pd.DataFrame, req: FitRequest) -> FitResult:
    """Fit one paper table column, `req.outcome ~ req.regressors | req.fixed_effects`.

    Interaction columns are built explicitly and copied, with the fixed effects, into a
    frame with safe names (y, x0.., fe0..), so user column names never meet formula
    parsing; that frame is fitted by the one fit, ``fit_fe``. A fixed effect with a single
    level is left out (it is the intercept, which FE models absorb anyway). Raises
    RegressionInputError naming the column or setting ('paper_cluster'), and NotEstimable
    when the data cannot identify the column."""
    spec, outcome = req.spec, req.outcome
    terms = [Term.of(t) for t in req.regressors]
    fixed_effects = tuple(req.fixed_effects)
    cluster = req.cluster or "none"
    if cluster not in STATS_CLUSTER_COLUMNS:
        raise RegressionInputError(f"setting 'paper_cluster': '{cluster}' is not one of {', '.join(STATS_CLUSTER_COLUMNS)}")
    cl_col = STATS_CLUSTER_COLUMNS[cluster]
    needed = [outcome, *{c for t in terms for c in t.columns}, *fixed_effects]
    if cl_col:
        needed.append(cl_col)
    missing_cols = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing_cols:
        raise RegressionInputError(
            f"spec '{spec}': column(s) {missing_cols} not in the panel (have: {', '.join(map(str, df.columns))})"
        )
    work = pd.DataFrame({"y": pd.to_numeric(df[outcome], errors="coerce").to_numpy(float)})
    for i, t in enumerate(terms):
        for c in t.columns:
            if not pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]):
                raise RegressionInputError(f"spec '{spec}': column '{c}' must be numeric")
        work[f"x{i}"] = t.values(df)
    for j, fe in enumerate(fixed_effects):
        codes = pd.factorize(df[fe], use_na_sentinel=True)[0]
        work[f"fe{j}"] = np.where(codes < 0, np.nan, codes)
    if cl_col:
        codes = pd.factorize(df[cl_col], use_na_sentinel=True)[0]
        work[cl_col] = np.where(codes < 0, np.nan, codes)
    n_input = len(work)
    # rows with a missing or infinite value in any column are dropped; every column is
    # float64 here, and the frame is copied only when a row goes (not twice, always)
    finite = np.ones(n_input, dtype=bool)
    for c in work.columns:
        finite &= np.isfinite(work[c].to_numpy())
    if not finite.all():
        work = work.loc[finite]
    work = work.reset_index(drop=True)
    n_missing = n_input - len(work)
    if len(work) == 0:
        raise NotEstimable(f"spec '{spec}': " + not_estimable("no rows left after dropping missing values"))
    used = [j for j in range(len(fixed_effects)) if work[f"fe{j}"].nunique() > 1]
    for j in used:
        work[f"fe{j}"] = work[f"fe{j}"].astype(np.int64)
    names = [t.name for t in terms]
    rows = fit_fe(
        work,
        replace(
            req,
            sample="",
            outcome="y",
            regressors=[f"x{i}" for i in range(len(terms))],
            fixed_effects=[f"fe{j}" for j in used],
            cluster=cluster,
        ),
    )
    rows = rows.astype({c: "float64" for c in ("estimate", "std_error", "t", "p_two_sided", "n_clusters", "r2", "r2_within")})
    if rows["estimate"].isna().all():
        raise NotEstimable(f"spec '{spec}': {rows['warning'].iloc[0]}")
    est, ses, ts, ps = {}, {}, {}, {}
    for name, r in zip(names, rows.to_dict("records"), strict=False):
        if np.isfinite(r["estimate"]):
            est[name], ses[name], ts[name], ps[name] = (
                float(r["estimate"]),
                float(r["std_error"]),
                float(r["t"]),
                float(r["p_two_sided"]),
            )
    first = rows.iloc[0]
    dropped = [names[int(c.strip()[1:])] for c in str(first["dropped_terms"] or "").split(",") if c.strip()]
    n_clusters = int(first["n_clusters"]) if cl_col and np.isfinite(first["n_clusters"]) else None
    return FitResult(
        spec=spec,
        outcome=outcome,
        terms=names,
        estimate=est,
        std_error=ses,
        t=ts,
        p=ps,
        n_obs=int(first["n_obs"]),
        n_input=n_input,
        n_missing=n_missing,
        n_singletons=int(first["n_singletons"]),
        n_clusters=n_clusters,
        r2=float(first["r2"]),
        r2_within=float(first["r2_within"]),
        fixed_effects=tuple(fixed_effects[j] for j in used),
        vcov=vcov_label(cluster),
        dropped_terms=dropped,
    )
