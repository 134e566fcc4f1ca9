"""Leakage and task metrics (seed 002, Eqs. 4, 6, 9, 10 and 14).

Unverifiable claims (A1-A3 that the corpus neither dates before nor after t_ref) are
not in the seed, which verifies every claim by web search. Every leakage metric is
therefore computed twice: unverifiable counted as not leaked (the primary figures) and
counted as leaked (the ``_unverifiable_leaked`` figures, an upper bound).

Errors. A Monte Carlo instance's Shapley-DCLR gets a standard error by the delta method
over its permutations (``shapley_dclr_interval``); a summary mean over instances gets
the standard error of a mean and a t interval (``mean_interval``). Both 95% intervals
are clipped to [0, 1], the range of every leakage figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# Eq. 14's K values: the seed reports Top-1, Top-3 and Top-5 (Table 6).
TOP_K = (1, 3, 5)
CONFIDENCE = 0.95


def leak_indicator(states: Sequence[str], unverifiable_leaked: bool = False) -> np.ndarray:
    """l(c) per claim: 1 for leaked, 0 for not leaked, unverifiable as chosen."""
    return np.array([1.0 if s == "leaked" or (unverifiable_leaked and s == "unverifiable") else 0.0 for s in states])


def olr(states: Sequence[str], unverifiable_leaked: bool = False) -> float | None:
    """Eq. 9: share of leaked claims; None without claims."""
    if not len(states):
        return None
    return float(leak_indicator(states, unverifiable_leaked).mean())


def shapley_dclr(phi: npt.ArrayLike, states: Sequence[str], unverifiable_leaked: bool = False) -> float | None:
    """Eq. 10: sum |phi| l / sum |phi|; None without claims or when every phi is 0
    (no claim moves the prediction, so no share of influence is defined)."""
    w = np.abs(np.asarray(phi, dtype=float))
    if not len(w) or w.sum() == 0:
        return None
    return float((w * leak_indicator(states, unverifiable_leaked)).sum() / w.sum())


def shapley_dclr_interval(
    phi: npt.ArrayLike, marginals: npt.ArrayLike | None, states: Sequence[str], unverifiable_leaked: bool = False
) -> tuple[float | None, float | None, float | None]:
    """Standard error and 95% interval of one instance's Shapley-DCLR (Eq. 10).

    Exact Shapley values (``marginals`` None) have no sampling error: SE 0 and the
    interval is the point. For a Monte Carlo estimate from m permutations, the delta
    method: DCLR = g(phi) = sum |phi_i| l_i / sum |phi_i| has gradient
    d_i = sign(phi_i) (l_i - g) / sum |phi|, and phi-hat is the mean of the m
    permutations' marginal vectors Delta_k, so Var(g) ~ Var(d . Delta_k) / m, which
    carries the covariance between claims (a permutation's marginals sum to
    v(N) - v(empty)). The interval is g +- z_0.975 SE clipped to [0, 1]. It assumes each
    |phi_i| is well away from zero relative to its SE (|.| is not smooth at 0); the
    coverage test in tests/python/test_claims_shapley_errors.py measures it on a known
    game. None, None, None where Shapley-DCLR is undefined."""
    g = shapley_dclr(phi, states, unverifiable_leaked)
    if g is None:
        return None, None, None
    if marginals is None:
        return 0.0, g, g
    p = np.asarray(phi, dtype=float)
    marg = np.asarray(marginals, dtype=float)
    m = marg.shape[0]
    if m < 2:
        return None, None, None
    grad = np.sign(p) * (leak_indicator(states, unverifiable_leaked) - g) / np.abs(p).sum()
    se = float(np.std(marg @ grad, ddof=1) / math.sqrt(m))
    from scipy import stats  # here, not at import: the jobs import this module, and a cached run loads no scipy

    z = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))
    return se, max(0.0, g - z * se), min(1.0, g + z * se)


def mean_interval(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None, float | None]:
    """Mean, its standard error and 95% t interval over instances (the figures where
    defined; None entries are left out). SE = sd / sqrt(k) with the k - 1 divisor; the
    interval is mean +- t_{0.975, k-1} SE clipped to [0, 1]. The spread across
    instances already holds each instance's Monte Carlo error, so it is not added
    again. With one instance: the mean and no error."""
    x = np.array([float(v) for v in values if v is not None and not math.isnan(float(v))])
    if not len(x):
        return None, None, None, None
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None, None, None
    se = float(x.std(ddof=1) / math.sqrt(len(x)))
    from scipy import stats  # as above

    t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(x) - 1))
    return mean, se, max(0.0, mean - t * se), min(1.0, mean + t * se)


TOPK_DENOMINATORS = ("k", "available")


def top_k_leakage(
    phi: npt.ArrayLike, states: Sequence[str], k: int, unverifiable_leaked: bool = False, denominator: str = "k"
) -> float | None:
    """Eq. 14: leaked claims among the k with the largest |phi| (ties broken by claim
    order), divided by K as the seed writes it (``denominator="k"``: a rationale with
    fewer than K claims cannot reach 1), or by min(K, n) (``"available"``: the leaked
    share of the claims there are). Setting ``claims_topk_denominator``."""
    if not len(states):
        return None
    if denominator not in TOPK_DENOMINATORS:
        raise ValueError(f"top-k denominator '{denominator}' is not one of {', '.join(TOPK_DENOMINATORS)}")
    w = np.abs(np.asarray(phi, dtype=float))
    order = sorted(range(len(w)), key=lambda i: (-w[i], i))[:k]
    leaked = leak_indicator([states[i] for i in order], unverifiable_leaked).sum()
    return float(leaked / (k if denominator == "k" else len(order)))


def brier(p_positive: Sequence[float], outcome_positive: Sequence[float]) -> float | None:
    """Eq. 6: mean squared error of the probability of the positive class."""
    p = np.asarray(p_positive, dtype=float)
    o = np.asarray(outcome_positive, dtype=float)
    if not len(p):
        return None
    return float(np.mean((p - o) ** 2))
