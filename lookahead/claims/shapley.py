"""Shapley values of claims (seed 002, Eq. 2 and section 4.2).

A coalition S of claims is a bit mask over claim positions 0..n-1; v(S) is supplied by
the caller: the task kind's characteristic function (seed 002 Eq. 11) of the model's
answer given the task input and only the claims in S (lookahead.claims.tasks).

Exact whenever it is free or asked for. The plan (which coalitions the scoring job asks
for) is exact, all 2^n coalitions, when n <= ``exact_max`` or when the seeded Monte
Carlo draw would ask for every one of the 2^n coalitions anyway (scoring each coalition
once, exact then costs nothing more). The values side is exact whenever every one of
the 2^n coalitions is scored, whatever the plan, up to ``EXACT_STORED_MAX`` claims (the
cap on how many coalitions an instance's lookup enumerates). Otherwise m random
permutations are drawn with a fixed seed and each claim's value is the mean of its
marginal contributions (Monte Carlo, as the seed's Appendix A: 100 samples, seed 42);
each estimate carries its standard error sd/sqrt(m), and the permutation-level
marginals are kept so that a figure built from the phis (Shapley-DCLR) gets its own
standard error (lookahead.claims.metrics.shapley_dclr_interval). Every permutation's
marginals sum to v(N) - v(empty), so the estimates satisfy the efficiency identity
exactly, not only in expectation.

The permutations of an instance come from ``numpy.random.default_rng([seed,
crc32(instance key)])``, so the job that scores coalitions and the model that computes
the values draw the same ones without storing them, and instances differ.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

DEFAULT_EXACT_MAX = 10
DEFAULT_PERMUTATIONS = 100
DEFAULT_SEED = 42
# The most claims for which an instance's stored values are searched for all 2^n
# coalitions (65,536 lookups); above it only the plan's coalitions are read.
EXACT_STORED_MAX = 16


def mask_of(members: list[int] | tuple[int, ...] | set[int]) -> int:
    out = 0
    for i in members:
        out |= 1 << int(i)
    return out


def members_of(mask: int, n: int) -> list[int]:
    return [i for i in range(n) if mask >> i & 1]


def exact_shapley(n: int, v: Callable[[int], float] | Mapping[int, float]) -> np.ndarray:
    """Eq. 2 over all 2^n coalitions (v given as a function or a mask -> value map),
    vectorised over coalitions so that the stored-values path stays cheap up to
    ``EXACT_STORED_MAX`` claims."""
    value = v.__getitem__ if isinstance(v, Mapping) else v
    masks = np.arange(1 << n, dtype=np.int64)
    vals = np.array([float(value(int(mask))) for mask in masks])
    size = np.zeros(1 << n, dtype=np.int64)
    for i in range(n):
        size += (masks >> i) & 1
    weights = np.array([math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n) for s in range(n)])
    phi = np.zeros(n)
    for i in range(n):
        without = masks[((masks >> i) & 1) == 0]
        phi[i] = float((weights[size[without]] * (vals[without | (1 << i)] - vals[without])).sum())
    return phi


@dataclass(frozen=True)
class Plan:
    """Which coalitions one instance needs, and how its values become Shapley values."""

    n: int
    method: str  # "exact" | "monte_carlo" | "none"
    permutations: tuple[tuple[int, ...], ...] = ()

    @property
    def masks(self) -> list[int]:
        """The coalitions to score, each once, in a stable order (empty and full first)."""
        full = (1 << self.n) - 1
        if self.method in ("exact", "none"):
            order = list(range(1 << self.n))
        else:
            seen: dict[int, None] = {0: None, full: None}
            for perm in self.permutations:
                mask = 0
                for i in perm:
                    mask |= 1 << i
                    seen.setdefault(mask, None)
            order = list(seen)
        head = [0, full] if self.n else [0]
        return head + [m for m in order if m not in head]


def instance_rng(seed: int, instance_agent_id: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(instance_agent_id.encode("utf-8"))])


def plan_for(
    n: int,
    instance_agent_id: str,
    exact_max: int = DEFAULT_EXACT_MAX,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> Plan:
    """Exact up to ``exact_max`` claims; above it ``permutations`` seeded permutations,
    unless they would ask for every one of the 2^n coalitions anyway, where exact is
    free (each coalition is scored once) and the plan is exact."""
    if n == 0:
        return Plan(0, "none")
    if n <= exact_max:
        return Plan(n, "exact")
    if permutations < 2:
        raise ValueError("setting 'claims_mc_permutations' must be at least 2 (a standard error needs two)")
    rng = instance_rng(seed, instance_agent_id)
    perms = tuple(tuple(int(x) for x in rng.permutation(n)) for _ in range(permutations))
    mc = Plan(n, "monte_carlo", perms)
    # At most permutations * (n - 1) + 2 distinct coalitions: skip the count when 2^n exceeds it.
    if (1 << n) <= permutations * (n - 1) + 2 and len(mc.masks) == 1 << n:
        return Plan(n, "exact")
    return mc


def lookup_masks(plan: Plan) -> list[int]:
    """The coalitions whose stored values to read for ``plan``: all 2^n up to
    ``EXACT_STORED_MAX`` claims (so that a complete set, scored by any plan, gives the
    exact values), else the plan's own."""
    if plan.n <= EXACT_STORED_MAX:
        return list(range(1 << plan.n))
    return plan.masks


@dataclass(frozen=True)
class ShapleyResult:
    phi: np.ndarray  # one value per claim
    se: np.ndarray  # standard error per claim (0 for exact)
    v_all: float
    v_empty: float
    method: str
    # Monte Carlo only: one row per permutation, one column per claim (the marginal
    # contribution of that claim in that permutation); None for exact.
    marginals: np.ndarray | None = None

    @property
    def total(self) -> float:
        return float(self.phi.sum())


def shapley_values(plan: Plan, values: Mapping[int, float]) -> ShapleyResult:
    """Shapley values from the scored coalitions of ``plan``: exact (Eq. 2) when every
    one of the 2^n coalitions is in ``values`` (n <= ``EXACT_STORED_MAX``), whatever
    the plan, else the plan's Monte Carlo estimate. A coalition of the plan that is
    missing raises KeyError naming it (the scoring job has not finished that instance)."""
    n = plan.n
    missing = [m for m in plan.masks if m not in values]
    if missing:
        raise KeyError(f"{len(missing)} coalition(s) not scored, e.g. mask {missing[0]}")
    v_empty, v_all = float(values[0]), float(values[(1 << n) - 1])
    if plan.method == "none":
        return ShapleyResult(np.zeros(0), np.zeros(0), v_all, v_empty, "none")
    if plan.method == "exact" or (n <= EXACT_STORED_MAX and all(m in values for m in range(1 << n))):
        return ShapleyResult(exact_shapley(n, values), np.zeros(n), v_all, v_empty, "exact")
    marg = np.zeros((len(plan.permutations), n))
    for k, perm in enumerate(plan.permutations):
        mask, prev = 0, v_empty
        for i in perm:
            mask |= 1 << i
            cur = float(values[mask])
            marg[k, i] = cur - prev
            prev = cur
    phi = marg.mean(axis=0)
    se = marg.std(axis=0, ddof=1) / math.sqrt(len(plan.permutations))
    return ShapleyResult(phi, se, v_all, v_empty, "monte_carlo", marg)
