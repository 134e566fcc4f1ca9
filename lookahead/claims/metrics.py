"""Leakage and task metrics (seed 002, Eqs. 4, 6, 9, 10 and 14).

Unverifiable claims (A1-A3 that the corpus neither dates before nor after t_ref) are
not in the seed, which verifies every claim by web search. Every leakage metric is
therefore computed twice: unverifiable counted as not leaked (the primary figures) and
counted as leaked (the ``_unverifiable_leaked`` figures, an upper bound).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


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
