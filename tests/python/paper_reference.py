"""Independent reference for the paper tests: OLS with explicit dummies in numpy.

Shares no code with pyfixest or lookahead.paper. Conventions written from the formula
(reghdfe, as the paper's Stata tables): singletons removed iteratively; coefficients from
least squares on [X, 1, entity dummies, date dummies]; CRV1 sandwich scaled by
G/(G-1) * (N-1)/(N-K), K = slopes + rank([1, dummies of the FE not nested in the
cluster]); p-values from t(G-1); R2 of the full dummy regression."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats


def drop_singletons(df: pd.DataFrame, fes: list[str]) -> pd.DataFrame:
    while True:
        keep = np.ones(len(df), bool)
        for f in fes:
            keep &= df.groupby(f)[f].transform("size").to_numpy() > 1
        if keep.all():
            return df
        df = df[keep]


def dummies(s: pd.Series) -> np.ndarray:
    codes, levels = pd.factorize(s, sort=True)
    d = np.zeros((len(s), len(levels)))
    d[np.arange(len(s)), codes] = 1.0
    return d


def _nested(df: pd.DataFrame, fe: str, cluster: str) -> bool:
    return bool((df.groupby(fe)[cluster].nunique() == 1).all())


def ols_dummies(df: pd.DataFrame, y: str, xs: list[list[str]], fes: list[str], cluster: str | None) -> dict:
    """xs: each regressor as the list of columns multiplied together."""
    df = df.dropna(subset=[y, *{c for x in xs for c in x}]).reset_index(drop=True)
    df = drop_singletons(df, fes).reset_index(drop=True)
    X = np.column_stack([np.prod([df[c].to_numpy(float) for c in x], axis=0) for x in xs])
    D = np.column_stack([np.ones(len(df))] + [dummies(df[f])[:, 1:] for f in fes])
    full = np.column_stack([X, D])
    yv = df[y].to_numpy(float)
    coef, *_ = np.linalg.lstsq(full, yv, rcond=None)
    resid = yv - full @ coef
    beta = coef[: X.shape[1]]
    # Frisch-Waugh: slopes' sandwich on FE-residualised regressors
    Xt = X - D @ np.linalg.lstsq(D, X, rcond=None)[0]
    bread = np.linalg.inv(Xt.T @ Xt)
    n, k = len(df), X.shape[1]
    out = {"beta": beta, "n": n, "r2": 1 - resid @ resid / ((yv - yv.mean()) @ (yv - yv.mean()))}
    if cluster is None:
        return out
    g = pd.factorize(df[cluster])[0]
    G = g.max() + 1
    meat = np.zeros((k, k))
    for j in range(G):
        s = Xt[g == j].T @ resid[g == j]
        meat += np.outer(s, s)
    non_nested = [f for f in fes if not _nested(df, f, cluster)]
    Dn = np.column_stack([np.ones(n)] + [dummies(df[f]) for f in non_nested])
    K = k + np.linalg.matrix_rank(Dn)
    V = bread @ meat @ bread * G / (G - 1) * (n - 1) / (n - K)
    se = np.sqrt(np.diag(V))
    t = beta / se
    out.update(se=se, t=t, p=2 * stats.t.sf(np.abs(t), G - 1), G=G)
    return out


def standardize_by_hand(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    d = df.dropna(subset=cols).copy()
    for c in cols:
        d[c + "_z"] = (d[c] - d[c].mean()) / d[c].std(ddof=1)
    return d
