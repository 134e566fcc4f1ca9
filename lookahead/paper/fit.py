"""One fixed-effects regression of the paper, fitted with pyfixest and returned as plain rows.

Every paper table is a set of such fits. The wrapper exists so that each table states
only *what* it regresses (outcome, named terms, fixed effects, cluster) while the
mechanics that people get wrong live once: interaction columns are built explicitly
(so a term's name says exactly what was multiplied), rows with a missing value in a used
column are dropped and counted, singletons and collinear drops are recorded, and the
demeaning tolerance is tight enough that coefficients are exact to ~1e-10 (pyfixest's
default 1e-6 is not, and the bootstrap is compared draw by draw against this fit).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from lookahead.stats.fe_regression import non_singleton_mask

#: MAP demeaning tolerance used for every paper regression (pyfixest default: 1e-6).
FIXEF_TOL = 1e-12

#: How the `cluster` setting maps onto panel columns (CONTRACTS.md panel).
CLUSTER_COLUMNS = {
    "entity": "entity_num",
    "period": "period_num",
    "date": "target_date",
}


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


def vcov_spec(cluster: str | None) -> tuple[object, str | None, str]:
    """pyfixest vcov argument, the panel column clustered on, and its printed name.

    `cluster` is the study setting (entity | period | date | none) or a panel column name.
    'none' gives HC1 (reghdfe vce(robust)), as lookahead.stats does; 'iid' the classical one."""
    if cluster == "iid":
        return "iid", None, "iid"
    if cluster in (None, "none", "hetero"):
        return "hetero", None, "HC1"
    col = CLUSTER_COLUMNS.get(cluster, cluster)
    return {"CRV1": "_cl"}, col, f"CRV1 by {cluster}"


def fit_fe(
    df: pd.DataFrame,
    outcome: str,
    terms: Sequence[Term],
    fixed_effects: Sequence[str] = ("entity_num", "period_num"),
    cluster: str | None = "date",
    spec: str = "",
) -> FitResult:
    """Fit `outcome ~ terms | fixed_effects` with pyfixest and collect the results.

    Columns are copied into a frame with safe names (y, x0.., fe0.., _cl) so user
    column names never meet formula parsing. A fixed effect with a single level is
    left out (it is the intercept, which FE models absorb anyway)."""
    import pyfixest as pf

    vcov, cl_col, vcov_name = vcov_spec(cluster)
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
    fes = []
    for j, fe in enumerate(fixed_effects):
        codes = pd.factorize(df[fe], use_na_sentinel=True)[0]
        work[f"fe{j}"] = np.where(codes < 0, np.nan, codes)
        fes.append(fe)
    if cl_col:
        codes = pd.factorize(df[cl_col], use_na_sentinel=True)[0]
        work["_cl"] = np.where(codes < 0, np.nan, codes)
    n_input = len(work)
    work = work.replace([np.inf, -np.inf], np.nan).dropna()
    n_missing = n_input - len(work)
    if len(work) == 0:
        raise PaperNotEstimable(f"spec '{spec}': no rows left after dropping missing values")
    used_fe = [f"fe{j}" for j in range(len(fes)) if work[f"fe{j}"].nunique() > 1]
    used_fe_names = tuple(fes[j] for j in range(len(fes)) if f"fe{j}" in used_fe)
    rhs = " + ".join(f"x{i}" for i in range(len(terms)))
    fml = f"y ~ {rhs}" + (f" | {' + '.join(used_fe)}" if used_fe else "")
    for c in used_fe + (["_cl"] if cl_col else []):
        work[c] = work[c].astype(np.int64)
    if used_fe:
        # pyfixest's compiled demeaner aborts the process when singleton removal leaves
        # nothing to demean; refuse such samples first (see lookahead.stats.fe_regression)
        kept = int(non_singleton_mask(work, used_fe).sum())
        if kept <= len(terms):
            raise PaperNotEstimable(
                f"spec '{spec}': {len(work) - kept} singleton observation(s) dropped leave "
                f"{kept} row(s) for {len(terms)} term(s)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = pf.feols(fml, data=work, vcov=vcov, fixef_tol=FIXEF_TOL)
    except ValueError as exc:  # e.g. every regressor collinear with the fixed effects
        raise PaperNotEstimable(f"spec '{spec}': {' '.join(str(exc).split())}") from None
    names = [t.name for t in terms]
    coef, se, tt, pp = fit.coef(), fit.se(), fit.tstat(), fit.pvalue()
    est, ses, ts, ps = {}, {}, {}, {}
    for i, name in enumerate(names):
        key = f"x{i}"
        if key in coef.index:
            est[name], ses[name] = float(coef[key]), float(se[key])
            ts[name], ps[name] = float(tt[key]), float(pp[key])
    dropped = [names[int(c[1:])] for c in (getattr(fit, "_collin_vars", None) or [])]
    n_clusters = None
    if cl_col:
        g = getattr(fit, "_G", None)
        n_clusters = int(min(g)) if g else None
    return FitResult(
        spec=spec, outcome=outcome, terms=names, estimate=est, std_error=ses, t=ts, p=ps,
        n_obs=int(fit._N), n_input=n_input, n_missing=n_missing,
        n_singletons=int(len(work) - fit._N),
        n_clusters=n_clusters, r2=float(fit._r2),
        r2_within=float(getattr(fit, "_r2_within", np.nan) or np.nan),
        fixed_effects=used_fe_names, vcov=vcov_name, dropped_terms=dropped,
    )
