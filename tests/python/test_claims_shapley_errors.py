"""Exact Shapley where it is free, Top-5, and the errors on Shapley-DCLR and the summary means.

Every expected figure is computed here from the seed's equations, independently of the
code under test: Shapley values (Eq. 2) by enumerating all n! orderings, Shapley-DCLR
(Eq. 10) and Top-K (Eq. 14) by their definitions, the Monte Carlo draw of an instance by
its documented seed, and the intervals' coverage by simulation on a known game."""

from __future__ import annotations

import itertools
import math
import statistics
import zlib

import numpy as np
import pytest
from scipy import stats

from lookahead.claims import metrics, shapley


def _brute_force(n: int, v) -> np.ndarray:
    """Eq. 2 as the mean marginal contribution over all n! orderings."""
    phi = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        mask = 0
        for i in order:
            phi[i] += v(mask | 1 << i) - v(mask)
            mask |= 1 << i
    return phi / len(orders)


def _dclr(phi, leaked) -> float:
    w = np.abs(np.asarray(phi, dtype=float))
    return float((w * np.asarray(leaked, dtype=float)).sum() / w.sum())


# A known game: a probability from a logistic score with one interaction, claims 0, 2, 5 leaked.
W = np.array([1.2, -0.8, 0.6, 0.4, -0.5, 0.3, 0.9])
LEAKED = [0, 2, 5]
STATES = ["leaked" if i in LEAKED else "not_leaked" for i in range(len(W))]


def _game(mask: int) -> float:
    s = sum(W[i] for i in range(len(W)) if mask >> i & 1) + (0.7 if mask & 0b11 == 0b11 else 0.0)
    return 1.0 / (1.0 + math.exp(-s))


# ----------------------------------------------------------------------------- exact where free


def _seed_prefixes(n: int, key: str, m: int, seed: int) -> set[int]:
    """The coalitions the documented Monte Carlo draw asks for: every prefix of m
    permutations from default_rng([seed, crc32(key)])."""
    rng = np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])
    out = {0}
    for _ in range(m):
        mask = 0
        for i in rng.permutation(n):
            mask |= 1 << int(i)
            out.add(mask)
    return out


def test_plan_is_exact_when_monte_carlo_would_ask_every_coalition():
    seen = set()
    for k in range(40):
        key = f"inst{k}|agent"
        covers = len(_seed_prefixes(6, key, 100, 42)) == 64
        plan = shapley.plan_for(6, key, exact_max=5, permutations=100, seed=42)
        assert plan.method == ("exact" if covers else "monte_carlo")
        assert len(plan.masks) == (64 if covers else len(_seed_prefixes(6, key, 100, 42)))
        seen.add(covers)
    assert seen == {True, False}  # both sides of the rule are exercised
    # far above the Monte Carlo budget (2^12 > 100 * 11 + 2) the plan stays Monte Carlo
    assert shapley.plan_for(12, "a", exact_max=5, permutations=100).method == "monte_carlo"
    assert shapley.plan_for(5, "a", exact_max=5, permutations=100).method == "exact"


def test_values_are_exact_when_every_coalition_is_stored():
    n = len(W)
    plan = next(p for k in range(50) if (p := shapley.plan_for(n, f"k{k}", exact_max=5)).method == "monte_carlo")
    truth = _brute_force(n, _game)
    full = shapley.shapley_values(plan, {m: _game(m) for m in range(1 << n)})
    assert full.method == "exact" and full.marginals is None and np.all(full.se == 0)
    np.testing.assert_allclose(full.phi, truth, atol=1e-12, rtol=0)
    assert shapley.lookup_masks(plan) == list(range(1 << n))
    part = shapley.shapley_values(plan, {m: _game(m) for m in plan.masks})
    assert part.method == "monte_carlo" and part.marginals.shape == (100, n)
    assert not np.allclose(part.phi, truth, atol=1e-12)


def test_vectorised_exact_matches_enumeration_of_orderings():
    for n in (1, 4, 7):
        rng = np.random.default_rng(n)
        table = rng.normal(size=1 << n)
        v = lambda mask, t=table: float(t[mask])
        np.testing.assert_allclose(shapley.exact_shapley(n, v), _brute_force(n, v), atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- Top-5


def test_top5_against_the_definition_with_ties_by_claim_order():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        phi = rng.choice([-0.3, -0.1, 0.0, 0.1, 0.2, 0.3], size=n)  # many ties in |phi|
        states = list(rng.choice(["leaked", "not_leaked", "unverifiable"], size=n))
        order = sorted(range(n), key=lambda i: (-abs(phi[i]), i))  # the stated ties rule
        for k in (1, 3, 5):
            want = sum(states[i] == "leaked" for i in order[:k]) / k
            assert metrics.top_k_leakage(phi, states, k) == pytest.approx(want, abs=1e-15)
            avail = sum(states[i] == "leaked" for i in order[:k]) / min(k, n)
            assert metrics.top_k_leakage(phi, states, k, denominator="available") == pytest.approx(avail, abs=1e-15)
    # ties: equal |phi| keeps the earlier claim
    assert metrics.top_k_leakage([0.2, -0.2, 0.1], ["not_leaked", "leaked", "leaked"], 1) == 0.0
    assert metrics.TOP_K == (1, 3, 5)


# ----------------------------------------------------------------------------- errors


def test_exact_dclr_has_no_sampling_error():
    phi = _brute_force(len(W), _game)
    se, lo, hi = metrics.shapley_dclr_interval(phi, None, STATES)
    assert se == 0.0 and lo == hi == pytest.approx(_dclr(phi, [s == "leaked" for s in STATES]), abs=1e-12)
    assert metrics.shapley_dclr_interval([0.0, 0.0], None, ["leaked", "not_leaked"]) == (None, None, None)


def test_dclr_interval_covers_the_exact_value_about_95_percent():
    """Coverage of the delta-method 95% interval over 800 independent Monte Carlo runs
    (m = 100 permutations, the seed's sampling) of a 7-claim game whose exact
    Shapley-DCLR comes from enumerating all 5,040 orderings."""
    n = len(W)
    truth = _dclr(_brute_force(n, _game), [s == "leaked" for s in STATES])
    rng = np.random.default_rng(20240613)
    hits, est, ses = 0, [], []
    while len(est) < 800:
        plan = shapley.Plan(n, "monte_carlo", tuple(tuple(int(x) for x in rng.permutation(n)) for _ in range(100)))
        res = shapley.shapley_values(plan, {m: _game(m) for m in plan.masks})
        if res.method == "exact":  # the rare draw that asks every one of the 128 coalitions
            continue
        se, lo, hi = metrics.shapley_dclr_interval(res.phi, res.marginals, STATES)
        hits += lo <= truth <= hi
        est.append(metrics.shapley_dclr(res.phi, STATES))
        ses.append(se)
    coverage = hits / len(est)
    # binomial sd at 95% over 800 runs is 0.008: within about 3 sd
    assert 0.925 <= coverage <= 0.975, coverage
    # the reported SE matches the spread of the estimates across runs
    assert np.mean(ses) == pytest.approx(np.std(est, ddof=1), rel=0.15)


def test_mean_interval_against_the_t_formula():
    x = [0.2, 0.55, 0.4, 0.9, 0.1]
    mean, se, lo, hi = metrics.mean_interval([*x, None])
    want_se = statistics.stdev(x) / math.sqrt(len(x))
    want = stats.t.interval(0.95, len(x) - 1, loc=statistics.fmean(x), scale=want_se)
    assert mean == pytest.approx(statistics.fmean(x), abs=1e-15) and se == pytest.approx(want_se, abs=1e-15)
    assert (lo, hi) == pytest.approx((max(0.0, want[0]), min(1.0, want[1])), abs=1e-12)
    assert metrics.mean_interval([0.0, 0.0, 1.0])[2] == 0.0  # clipped to [0, 1]
    assert metrics.mean_interval([0.3]) == (0.3, None, None, None)
    assert metrics.mean_interval([]) == (None, None, None, None)


def test_summary_interval_covers_the_population_mean_about_95_percent():
    """Instances whose leakage figure is drawn from a known distribution (Beta(2, 3),
    mean 0.4) plus Monte Carlo noise: the t interval of the mean of 20 covers 0.4 about
    95% of the time."""
    rng = np.random.default_rng(7)
    hits, reps = 0, 2000
    for _ in range(reps):
        x = np.clip(rng.beta(2, 3, size=20) + rng.normal(0, 0.03, size=20), 0, 1)
        _, _, lo, hi = metrics.mean_interval(list(x))
        hits += lo <= 0.4 <= hi
    assert 0.93 <= hits / reps <= 0.97, hits / reps
