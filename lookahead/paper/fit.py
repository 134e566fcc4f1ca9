"""One fixed-effects regression of the paper, fitted with pyfixest and returned as plain rows.

Every paper table is a set of such fits. The wrapper exists so that each table states
only *what* it regresses (outcome, named terms, fixed effects, cluster) while the
mechanics that people get wrong live once: interaction columns are built explicitly
(so a term's name says exactly what was multiplied), rows with a missing value in a used
column are dropped and counted, singletons and collinear drops are recorded, and the
demeaning tolerance (lookahead.stats.fe_regression.FIXEF_TOL, the one tolerance of every
regression) is tight enough that coefficients are exact to ~1e-10 (pyfixest's default 1e-6
is not, and the bootstrap is compared draw by draw against this fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from lookahead.stats.fe_regression import CLUSTER_COLUMNS as STATS_CLUSTER_COLUMNS
from lookahead.stats.fe_regression import (
    FIXEF_TOL,  # noqa: F401  (one tolerance, declared there)
    FitRequest,
)
from lookahead.stats.fe_regression import fit_fe as stats_fit_fe


class PaperSpecError(ValueError):
    """Bad input for a paper specification; the message names the column or setting."""


class PaperNotEstimable(PaperSpecError):
    """The data cannot identify a specification (no rows, no variation, all singletons).

    Unlike a bad setting this is a finding, not an error: the analysis skips the table
    with a note saying why, as the protocol's regressions report NULL estimates."""


@dataclass(frozen=True)
class Term:
    """A regressor: a panel column, or the product of several (an interaction)."""

    name: str
    columns: tuple[str, ...]

    def values(self, df: pd.DataFrame) -> np.ndarray:
        out = np.ones(len(df))
        for c in self.columns:
            out = out * df[c].to_numpy(dtype=float)
        return out


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


def fit_fe(
    df: pd.DataFrame,
    outcome: str,
    terms: Sequence[Term],
    fixed_effects: Sequence[str] = ("entity_num", "period_num"),
    cluster: str | None = "date",
    spec: str = "",
) -> FitResult:
    """Fit `outcome ~ terms | fixed_effects` and collect the results.

    Interaction columns are built explicitly and copied, with the fixed effects, into a
    frame with safe names (y, x0.., fe0..), so user column names never meet formula
    parsing. The estimation itself is lookahead.stats.fit_fe, the protocol's wrapper:
    one small-sample convention (reghdfe's), one singleton rule and one guard against
    samples pyfixest cannot demean. A fixed effect with a single level is left out (it
    is the intercept, which FE models absorb anyway)."""
    cluster = cluster or "none"
    if cluster not in STATS_CLUSTER_COLUMNS:
        raise PaperSpecError(
            f"setting 'paper_cluster': '{cluster}' is not one of {', '.join(STATS_CLUSTER_COLUMNS)}")
    cl_col = STATS_CLUSTER_COLUMNS[cluster]
    needed = [outcome, *{c for t in terms for c in t.columns}, *fixed_effects]
    if cl_col:
        needed.append(cl_col)
    missing_cols = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing_cols:
        raise PaperSpecError(
            f"spec '{spec}': column(s) {missing_cols} not in the panel "
            f"(have: {', '.join(map(str, df.columns))})"
        )
    work = pd.DataFrame({"y": pd.to_numeric(df[outcome], errors="coerce").to_numpy(float)})
    for i, t in enumerate(terms):
        for c in t.columns:
            if not pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]):
                raise PaperSpecError(f"spec '{spec}': column '{c}' must be numeric")
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
        raise PaperNotEstimable(f"spec '{spec}': no rows left after dropping missing values")
    used = [j for j in range(len(fixed_effects)) if work[f"fe{j}"].nunique() > 1]
    for j in used:
        work[f"fe{j}"] = work[f"fe{j}"].astype(np.int64)
    names = [t.name for t in terms]
    rows = stats_fit_fe(work, FitRequest(
        spec=spec, sample="", outcome="y", regressors=[f"x{i}" for i in range(len(terms))],
        fixed_effects=[f"fe{j}" for j in used], cluster=cluster,
    ))
    rows = rows.astype({c: "float64" for c in ("estimate", "std_error", "t", "p_two_sided",
                                               "n_clusters", "r2", "r2_within")})
    if rows["estimate"].isna().all():
        raise PaperNotEstimable(f"spec '{spec}': {rows['warning'].iloc[0]}")
    est, ses, ts, ps = {}, {}, {}, {}
    for name, r in zip(names, rows.to_dict("records")):
        if np.isfinite(r["estimate"]):
            est[name], ses[name], ts[name], ps[name] = (
                float(r["estimate"]), float(r["std_error"]), float(r["t"]), float(r["p_two_sided"]))
    first = rows.iloc[0]
    dropped = [names[int(c.strip()[1:])] for c in str(first["dropped_terms"] or "").split(",") if c.strip()]
    n_clusters = int(first["n_clusters"]) if cl_col and np.isfinite(first["n_clusters"]) else None
    return FitResult(
        spec=spec, outcome=outcome, terms=names, estimate=est, std_error=ses, t=ts, p=ps,
        n_obs=int(first["n_obs"]), n_input=n_input, n_missing=n_missing,
        n_singletons=int(first["n_singletons"]), n_clusters=n_clusters,
        r2=float(first["r2"]), r2_within=float(first["r2_within"]),
        fixed_effects=tuple(fixed_effects[j] for j in used), vcov=vcov_label(cluster),
        dropped_terms=dropped,
    )
