"""Restricted wild cluster bootstrap (WCR) p-values by the "fast and wild" route of Roodman,
MacKinnon, Nielsen and Webb (2019): the fixed effects are partialled out once, and every
bootstrap draw is computed from cluster-level sums, so no rows x dummies design is built
and the cost does not grow with the number of clusters beyond G x B.

Why: with few clusters, or with the signal in a few clusters, the CRV1 t(G-1) test
over-rejects (docs/montecarlo.md measures it); the WCR bootstrap (null imposed: Cameron,
Gelbach and Miller 2008; MacKinnon and Webb 2017) holds its size. The verdict reads it
for every test at every cluster count (lookahead/stats/verdict.py).

The algebra (one tested coefficient j, H0: beta_j = 0). Let X~ and y~ be the regressors
and outcome with the fixed effects partialled out (pyfixest's alternating-projections
demeaner), A = (X~'X~)^-1, a = A[j] and w = X~ a, so that beta_j = w'y~ (Frisch-Waugh-
Lovell). The restricted fit drops column j: residuals u~. A draw multiplies u~ by a weight
v_g per cluster; with S = [X~_g'u~_g]_g (k x G), c_g = w_g'u~_g and m_g = X~_g'w_g:
  beta*_j = c'v,   cluster score of the draw  s*_g = c_g v_g - m_g' A S v,
  t*      = beta*_j / sqrt(sum_g s*_g^2).
Each draw costs O(G k); B draws are two (G x B) products. The original t uses the same
formula on the unrestricted residuals. A constant small-sample factor (CRV1's G/(G-1) ...)
multiplies both t and t* alike and so cannot move the p-value; it is left out.

Fixed effects not nested in the clusters (period effects with entity clusters; period x
half in the validation difference). The dummies bootstrap multiplies the restricted
residuals by v and refits the dummies, so its draw is re-projected off the fixed effects:
the bootstrap fit's residuals are e* = M_D z - X~ A X~'z with z = u~ * v (X~ is
orthogonal to D). For fixed effects nested in the clusters P_D z = 0 (D'z sums u~ within a
level, inside one cluster, where u~ sums to zero). For the non-nested ones it is not zero,
and dropping it (treating the partialled-out model as the model) makes the draws' scores
too large when a period holds few clusters: an O(1/G_t) error, G_t the clusters of period
t, which at 4-10 entities per period moved p-values by up to 0.04, toward rejection. So
the draws are re-projected, still on cluster sums: split the fixed effects into M (nested
in the clusters) and N (the rest, L levels). D_M'z = 0, so P_D z = F S^+ F'z with F =
M_{D_M} D_N and S = F'F (an L x L matrix of level counts), and F'z = Gamma v, Gamma[l, g]
= the sum of u~ over the rows of level l in cluster g. The term it adds to cluster h's
score is w_h'(P_D z)_h = Omega[h] S^+ Gamma v, Omega[h, l] = the sum of w over the rows of
level l in cluster h (the M part of F sums to zero against w within each nested level).
Each draw costs O(G k + G L) more; S is built from counts when M holds at most one fixed
effect, else by partialling D_N off the nested ones. The result is the dummies WCR exactly
(up to its random draws): tests/python/test_wild_bootstrap.py checks it against an
independent dense-dummies WCR at 4 and 10 entities per period, and against
`wildboottest`'s dummies design.

Effective number of clusters (Carter, Schnepel and Steigerwald 2017): G* = G / (1 +
Gamma), Gamma = the squared coefficient of variation of gamma_g = a'X~_g'Omega_g X~_g a
over clusters. With Omega_g = I (rho = 0: Lee and Steigerwald's clusteff with rho(0),
MacKinnon, Nielsen and Webb's summclust G*(0)), gamma_g = sum of w_i^2 over cluster g.
rho = 1 is undefined here: with entity effects nested in entity clusters X~ sums to zero
within every cluster, so gamma_g(1) = 0. G* far below G warns that a few clusters carry
the coefficient's variation.

Borderline p-values: when a p the verdict reads is within 2 Monte Carlo standard errors
sqrt(p(1-p)/B) of a threshold the rule reads it against (0.05 or 0.10), the same stream
of draws is extended (B -> 4(B+1)-1) up to MAX_WILD_DRAWS; the first B draws are the same
as before, so a larger B refines the p-value rather than replacing it.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lookahead.config import SCHEMA
from lookahead.settings_sections import ProtocolSettings

WILD_WEIGHTS = SCHEMA.settings["wild_bootstrap_weights"].allowed
#: The most draws a borderline p-value is extended to (B -> 4(B+1)-1 from the study's
#: draws: 999, 3,999, 15,999, 63,999). At 63,999 draws the Monte Carlo SE of a p near
#: 0.05 is 0.0009; a p still within two of them of a threshold is reported "borderline".
MAX_WILD_DRAWS = 63_999
#: Thresholds a verdict reads a p-value against (detection and validation 5%, placebo
#: 10%); lookahead.stats.verdict checks its own constants are these.
WILD_THRESHOLDS: tuple[float, ...] = (0.05, 0.10)
#: How close, in Monte Carlo SEs, a p may sit to a threshold before more draws are taken.
BORDERLINE_MC_SE = 2.0
#: Draws are generated and reduced in chunks of this many (memory G x chunk floats).
CHUNK_DRAWS = 1_000
#: Demeaning tolerance (the same as every regression's, lookahead.stats.fe_regression).
DEMEAN_TOL = 1e-12

_WEBB = np.array([-math.sqrt(1.5), -1.0, -math.sqrt(0.5), math.sqrt(0.5), 1.0, math.sqrt(1.5)])


def wild_label(settings: ProtocolSettings, draws: int | None = None) -> str:
    """How a result names the bootstrap behind its p-value: the study's weights and seed
    (section protocol's wild_bootstrap_*), and ``draws`` when a borderline p was extended
    past the study's draws."""
    b = settings.wild_bootstrap_draws if draws is None else draws
    weights, seed = settings.wild_bootstrap_weights, settings.wild_bootstrap_seed
    return f"WCR bootstrap ({weights} weights, {b} draws, seed {seed}, null imposed)"


@dataclass(frozen=True)
class WildResult:
    """One coefficient's bootstrap: p-values (two-sided |t*| > |t|, one-sided t* > t for
    H1 > 0), the draws behind them, the minimum detectable effect of the one-sided test
    (at the level the decision reads it) at 80% power from the bootstrap t distribution (in the regressor's units as given),
    the effective number of clusters G*, and a note when it could not run."""

    p_two: float = math.nan
    p_one: float = math.nan
    draws: int = 0
    mde: float = math.nan
    g_star: float = math.nan
    note: str = ""


def mc_se(p: float, draws: int) -> float:
    """Monte Carlo standard error of a bootstrap p-value from `draws` draws."""
    if not (np.isfinite(p) and draws > 0):
        return math.nan
    return math.sqrt(max(p * (1 - p), 0.0) / draws)


def near_threshold(p: float, draws: int, thresholds: Sequence[float] = WILD_THRESHOLDS) -> bool:
    """True when p is within BORDERLINE_MC_SE Monte Carlo SEs of one of `thresholds`
    (the SE at the threshold, so that a p of 0 or 1 is judged too)."""
    if not (np.isfinite(p) and draws > 0):
        return False
    return any(abs(p - th) < BORDERLINE_MC_SE * max(mc_se(p, draws), mc_se(th, draws)) for th in thresholds)


def partial_out(matrix: np.ndarray, fe_codes: list[np.ndarray]) -> np.ndarray:
    """The columns of `matrix` with the fixed effects (integer codes) partialled out:
    pyfixest's alternating-projections demeaner; with none, the mean (the intercept)."""
    m = np.ascontiguousarray(matrix, dtype=float)
    codes = [np.asarray(c) for c in fe_codes if len(c)]
    if not codes:
        return m - m.mean(axis=0, keepdims=True)
    from pyfixest.core.demean import demean

    flist = np.column_stack(codes).astype(np.uint64)
    out, ok = demean(m, flist, np.ones(len(m)), DEMEAN_TOL, 100_000)
    if not ok:
        warnings.warn("fixed-effect demeaning did not converge for the wild bootstrap", RuntimeWarning, stacklevel=2)
    return np.asarray(out, dtype=float)


def _weights(rng: np.random.Generator, kind: str, shape: tuple[int, int]) -> np.ndarray:
    if kind == "rademacher":
        return rng.integers(0, 2, size=shape, dtype=np.int8).astype(float) * 2.0 - 1.0
    return _WEBB[rng.integers(0, 6, size=shape, dtype=np.int8)]


def _cluster_sums(values: np.ndarray, cluster: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum of each column of `values` (n x m) within each cluster: (G x m)."""
    values = values.reshape(len(values), -1)
    return np.stack([np.bincount(cluster, weights=values[:, i], minlength=n_groups) for i in range(values.shape[1])], axis=1)


def effective_clusters(w: np.ndarray, cluster: np.ndarray, n_groups: int) -> float:
    """G*(0) of Carter, Schnepel and Steigerwald (2017) for the coefficient beta = w'y."""
    gamma = np.bincount(cluster, weights=w * w, minlength=n_groups)
    mean = float(gamma.mean())
    if not (np.isfinite(mean) and mean > 0):
        return math.nan
    return float(n_groups / (1.0 + float(np.mean((gamma - mean) ** 2)) / mean**2))


class PartialledDesign:
    """A regression with its fixed effects partialled out once, ready to bootstrap any of
    its coefficients: y~ (n), X~ (n x k), cluster codes 0..G-1."""

    def __init__(self, y: np.ndarray, regressors: np.ndarray, fe_codes: list[np.ndarray], cluster: np.ndarray) -> None:
        yx = partial_out(np.column_stack([y, regressors]), fe_codes)
        self.y, self.x = yx[:, 0], yx[:, 1:]
        codes, self.cluster = np.unique(np.asarray(cluster), return_inverse=True)
        self.n_groups = len(codes)
        self.xtx_inv = np.linalg.pinv(self.x.T @ self.x)
        self._fe_codes = fe_codes

    @functools.cached_property
    def _crossed(self) -> _CrossedEffects | None:
        """The fixed effects crossed with the clusters, built on the first bootstrap.

        Why lazily: G* (:meth:`g_star`) needs only the partialled design, while this needs
        the pseudo-inverse of an L x L matrix, L the crossed levels (a period effect of
        3,000 trading days, 6,000 in the difference regression's period x half): minutes
        of CPU per regression at 91,361 rows, spent for nothing when wild_bootstrap_draws
        is 0 and the regressions report G* alone."""
        return _CrossedEffects.build([_dense_codes(c) for c in self._fe_codes if len(c)], self.cluster, self.n_groups)

    def g_star(self, column: int) -> float:
        return effective_clusters(self.x @ self.xtx_inv[column], self.cluster, self.n_groups)

    def bootstrap(
        self,
        column: int,
        settings: ProtocolSettings,
        one_sided: bool,
        max_draws: int = MAX_WILD_DRAWS,
        thresholds: Sequence[float] = WILD_THRESHOLDS,
        two_sided_read: bool = True,
        mde_alpha: float = 0.05,
    ) -> WildResult:
        """The WCR bootstrap of coefficient `column` (see the module doc for the algebra),
        extended while the p the verdict reads sits within two Monte Carlo SEs of a
        threshold, up to `max_draws`. The minimum detectable effect is that of the
        one-sided test at `mde_alpha` (the level the decision reads it at) with 80% power."""
        x, y, cl, G = self.x, self.y, self.cluster, self.n_groups
        A = self.xtx_inv
        a = A[column]
        w = x @ a
        g_star = effective_clusters(w, cl, G)
        # the original t (unrestricted residuals), without the constant CRV1 factor
        u_hat = y - x @ (A @ (x.T @ y))
        score = np.bincount(cl, weights=w * u_hat, minlength=G)
        se = math.sqrt(float(score @ score))
        beta = float(w @ y)
        if not (se > 0 and np.isfinite(beta)):
            return WildResult(g_star=g_star, note="no finite t-statistic")
        t_hat = beta / se
        # the restricted fit: column j dropped (the null beta_j = 0 imposed)
        keep = [i for i in range(x.shape[1]) if i != column]
        xr = x[:, keep]
        u_r = y - xr @ np.linalg.lstsq(xr, y, rcond=None)[0] if keep else y.copy()
        S = np.ascontiguousarray(_cluster_sums(x * u_r[:, None], cl, G).T)  # k x G
        c = np.bincount(cl, weights=w * u_r, minlength=G)  # G
        D = _cluster_sums(x * w[:, None], cl, G) @ A  # G x k  (m_g' A)
        # fixed effects crossed with the clusters: the re-projection of each draw off
        # them, as the G x G operator (left, right) with term = left @ (right @ v)
        reproject = self._crossed.operator(w, u_r) if self._crossed is not None else None
        if reproject is not None and reproject[1] is not None:
            # one product per chunk: the re-projection stacked onto m_g' A S
            D, S = np.hstack([D, reproject[0]]), np.vstack([S, reproject[1]])
            reproject = None
        rng = np.random.default_rng(int(settings.wild_bootstrap_seed))
        t_star: list[np.ndarray] = []
        target = int(settings.wild_bootstrap_draws)
        # the products are (k x G)(G x chunk) with k <= 3: one BLAS thread does them
        # fastest, and threads only contend with the build's other work
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(1)
        try:
            return self._draws(
                t_star,
                rng,
                settings,
                target,
                max_draws,
                thresholds,
                c,
                D,
                S,
                t_hat,
                se,
                g_star,
                one_sided,
                two_sided_read,
                mde_alpha,
                reproject,
            )
        finally:
            limit.restore_original_limits()

    def _draws(
        self,
        t_star: list[np.ndarray],
        rng: np.random.Generator,
        settings: ProtocolSettings,
        target: int,
        max_draws: int,
        thresholds: Sequence[float],
        c: np.ndarray,
        D: np.ndarray,
        S: np.ndarray,
        t_hat: float,
        se: float,
        g_star: float,
        one_sided: bool,
        two_sided_read: bool,
        mde_alpha: float = 0.05,
        reproject: tuple[np.ndarray, np.ndarray | None] | None = None,
    ) -> WildResult:
        G = self.n_groups
        while True:
            done = sum(len(t) for t in t_star)
            while done < target:
                m = min(CHUNK_DRAWS, target - done)
                v = _weights(rng, settings.wild_bootstrap_weights, (G, m))
                num = c @ v
                scores = c[:, None] * v - D @ (S @ v)
                if reproject is not None:
                    left, right = reproject
                    scores -= left @ v if right is None else left @ (right @ v)
                den = np.sqrt(np.einsum("gb,gb->b", scores, scores))
                with np.errstate(divide="ignore", invalid="ignore"):
                    t_star.append(num / den)
                done += m
            ts = np.concatenate(t_star)
            ts = ts[np.isfinite(ts)]
            b = len(ts)
            if b == 0:
                return WildResult(g_star=g_star, note="no finite bootstrap t-statistic")
            p_two = float(np.mean(np.abs(ts) > abs(t_hat)))
            p_one = float(np.mean(ts > t_hat))
            # the p the verdict reads against 0.05 / 0.10; for a one-sided term whose
            # two-sided p is read too (beta_3), with a negative t also that one, which tells
            # "significantly negative" from "indistinguishable from zero" at 0.05 (with t > 0
            # a two-sided p near 0.05 has a one-sided p near 0.025 and decides nothing)
            close = (
                near_threshold(p_one, b, thresholds)
                or (two_sided_read and t_hat < 0 and near_threshold(p_two, b, thresholds[:1]))
                if one_sided
                else near_threshold(p_two, b, thresholds)
            )
            if target >= max_draws or not close:
                break
            target = min(max_draws, 4 * (target + 1) - 1)
        q_reject, q20 = np.quantile(ts, [1 - mde_alpha, 0.20])
        return WildResult(p_two=p_two, p_one=p_one, draws=b, mde=float((q_reject - q20) * se), g_star=g_star)


def _dense_codes(codes: np.ndarray) -> np.ndarray:
    """Integer codes 0..k-1 for a fixed effect's levels (hashing, no sort)."""
    import pandas as pd

    return pd.factorize(np.asarray(codes))[0].astype(np.int64)


class _GramSolve:
    """X = S^+ R for the crossed levels' Gram matrix S = (M_{D_M} D_N)'(M_{D_M} D_N), any
    fixed effects (the general route): S^+ by an eigendecomposition, O(L^3) at about ten
    times a Cholesky's cost. Used where the two-way route below does not apply."""

    def __init__(self, gram: np.ndarray) -> None:
        self.s_pinv = np.linalg.pinv(gram, hermitian=True)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return self.s_pinv @ rhs


class _TwoWaySolve:
    """X = S^+ R for one nested fixed effect A (a levels) and one crossed B (b levels),
    S = N_B - C' N_A^-1 C (C: the a x b counts of rows per pair of levels), without S^+.

    Why: S^+ by eigh was nearly all of regression_results at the default 999 draws (L =
    2,405 and 4,810 at 91,361 rows: 105 of 134 s). S's null space is known up front: the
    rows tie A's and B's levels into connected components, and [y; x] with D_A y = D_B x
    is constant on each, so S x = 0 exactly when x is constant on each component's B
    levels. Dropping one level per component leaves a positive definite block, factored
    once by Cholesky; any solution of S X = R then differs from S^+ R by a vector constant
    on components, which the projection off them removes (it makes R consistent first:
    the partialled design is orthogonal to D only to the demeaner's tolerance). The block
    factored is the smaller side's: for B, S itself; for A, the Schur complement
    E = N_A - C N_B^-1 C' of the augmented system [[N_A, C], [C', N_B]] [y; x] = [0; R],
    with x = N_B^-1 (R - C'y) (the difference regression's period x half: 1,587 entity x
    half levels against 4,810)."""

    def __init__(self, nested: np.ndarray, crossed: np.ndarray, n_nested: int, n_crossed: int) -> None:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        ones = np.ones(len(nested))
        counts = coo_matrix((ones, (nested, crossed)), shape=(n_nested, n_crossed)).tocsr()
        self.counts = counts
        self.n_a = np.asarray(counts.sum(axis=1)).ravel()
        self.n_b = np.asarray(counts.sum(axis=0)).ravel()
        a, b = n_nested, n_crossed
        graph = coo_matrix((ones, (nested, crossed + a)), shape=(a + b, a + b))
        n_comp, labels = connected_components(graph, directed=False)
        self.component = labels[a:]
        self.n_components = n_comp
        self.component_size = np.bincount(self.component, minlength=n_comp).astype(float)
        self.factor_crossed = b <= a
        side = labels[a:] if self.factor_crossed else labels[:a]
        keep = np.ones(len(side), dtype=bool)
        keep[np.unique(side, return_index=True)[1]] = False  # each component's first level
        self.keep = np.flatnonzero(keep)
        if self.factor_crossed:
            block = (counts.T @ counts.multiply(1.0 / self.n_a[:, None]).tocsr()).toarray()
            block = np.diag(self.n_b) - block
        else:
            block = (counts @ counts.multiply(1.0 / self.n_b[None, :]).T.tocsr()).toarray()
            block = np.diag(self.n_a) - block
        from scipy.linalg import cho_factor

        self.factor = cho_factor(block[np.ix_(self.keep, self.keep)], lower=True, check_finite=False)

    def _off_components(self, x: np.ndarray) -> np.ndarray:
        """x (b x m) less its mean over each component's B levels: the part in range(S)."""
        k = self.n_components
        means = np.stack([np.bincount(self.component, weights=x[:, i], minlength=k) for i in range(x.shape[1])], axis=1)
        return x - (means / self.component_size[:, None])[self.component]

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        from scipy.linalg import cho_solve

        r = self._off_components(rhs)
        if self.factor_crossed:
            x = np.zeros_like(r)
            x[self.keep] = cho_solve(self.factor, r[self.keep], check_finite=False)
        else:
            r_b = r / self.n_b[:, None]
            y = np.zeros((len(self.n_a), r.shape[1]))
            y[self.keep] = cho_solve(self.factor, -(self.counts @ r_b)[self.keep], check_finite=False)
            x = r_b - (self.counts.T @ y) / self.n_b[:, None]
        return self._off_components(x)


class _DiagonalSolve:
    """X = S^+ R where S is diagonal: one crossed fixed effect and no nested one (S = the
    level counts)."""

    def __init__(self, counts: np.ndarray) -> None:
        self.counts = counts

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return rhs / self.counts[:, None]


@dataclass(frozen=True)
class _CrossedEffects:
    """The fixed effects not nested in the clusters, as what the re-projection of a draw
    needs (module doc): each row's level among the L crossed levels (one column per
    crossed fixed effect, offsets applied) and what applies S^+ = ((M_{D_M} D_N)'(M_{D_M}
    D_N))^+ to a matrix, built once per design."""

    levels: np.ndarray  # n x (crossed fixed effects): level index 0..L-1
    n_levels: int
    solver: _GramSolve | _TwoWaySolve | _DiagonalSolve
    cluster: np.ndarray
    n_groups: int

    @staticmethod
    def build(fe_codes: list[np.ndarray], cluster: np.ndarray, n_groups: int) -> _CrossedEffects | None:
        """None when every fixed effect is nested in the clusters (nothing to re-project)."""
        nested: list[tuple[np.ndarray, int]] = []
        crossed: list[tuple[np.ndarray, int]] = []
        for codes in fe_codes:
            k = int(codes.max()) + 1 if len(codes) else 0
            # nested: every level lies in one cluster (a level's cluster, read back per row)
            owner = np.empty(k, dtype=cluster.dtype)
            owner[codes] = cluster
            (nested if bool(np.all(owner[codes] == cluster)) else crossed).append((codes, k))
        if not crossed:
            return None
        offsets = np.cumsum([0] + [k for _, k in crossed])
        levels = np.column_stack([codes + off for (codes, _), off in zip(crossed, offsets, strict=False)])
        n_levels = int(offsets[-1])
        solver: _GramSolve | _TwoWaySolve | _DiagonalSolve
        if len(crossed) == 1 and len(nested) <= 1:
            codes = levels[:, 0]
            try:
                solver = (
                    _TwoWaySolve(nested[0][0].astype(np.int64), codes, nested[0][1], n_levels)
                    if nested
                    else _DiagonalSolve(np.bincount(codes, minlength=n_levels).astype(float))
                )
                return _CrossedEffects(levels=levels, n_levels=n_levels, solver=solver, cluster=cluster, n_groups=n_groups)
            except np.linalg.LinAlgError:
                pass  # a block not positive definite in floating point: the general route
        if len(nested) <= 1:
            # S = D_N'D_N - C' diag(1/n_M) C from counts (C: nested levels x crossed levels)
            flat, L = levels, n_levels
            gram = (
                sum(
                    (
                        np.bincount(flat[:, i] * L + flat[:, j], minlength=L * L)
                        for i in range(flat.shape[1])
                        for j in range(flat.shape[1])
                    ),
                    np.zeros(L * L, dtype=np.intp),  # a start of the counts' type: the sum is an array
                )
                .reshape(L, L)
                .astype(float)
            )
            if nested:
                m_codes, m_k = nested[0]
                cross = (
                    sum(
                        (np.bincount(m_codes.astype(np.int64) * L + flat[:, i], minlength=m_k * L) for i in range(flat.shape[1])),
                        np.zeros(m_k * L, dtype=np.intp),
                    )
                    .reshape(m_k, L)
                    .astype(float)
                )
                n_m = np.bincount(m_codes, minlength=m_k).astype(float)
                with np.errstate(divide="ignore", invalid="ignore"):
                    inv = np.where(n_m > 0, 1.0 / n_m, 0.0)
                gram -= cross.T @ (cross * inv[:, None])
        else:
            dummies = np.zeros((len(levels), n_levels))
            for i in range(levels.shape[1]):
                dummies[np.arange(len(levels)), levels[:, i]] = 1.0
            f = partial_out(dummies, [c for c, _ in nested])
            gram = f.T @ f
        return _CrossedEffects(levels=levels, n_levels=n_levels, solver=_GramSolve(gram), cluster=cluster, n_groups=n_groups)

    def _sums(self, values: np.ndarray) -> np.ndarray:
        """L x G: the sum of `values` over the rows of each crossed level and cluster."""
        L, G = self.n_levels, self.n_groups
        out = np.zeros(L * G)
        for i in range(self.levels.shape[1]):
            out += np.bincount(self.levels[:, i] * G + self.cluster, weights=values, minlength=L * G)
        return out.reshape(L, G)

    def _sparse_sums(self, values: np.ndarray) -> Any:
        """G x L, sparse (at most one entry per row): the sum of `values` over the rows of
        each cluster and crossed level."""
        from scipy.sparse import coo_matrix

        L, G = self.n_levels, self.n_groups
        k = self.levels.shape[1]
        return coo_matrix((np.tile(values, k), (np.tile(self.cluster, k), self.levels.T.ravel())), shape=(G, L)).tocsr()

    def operator(self, w: np.ndarray, u_r: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(left, right) with left @ (right @ v) = [w_h'(P_D (u_r * v))_h]_h: left =
        Omega (G x L), right = S^+ Gamma (L x G); multiplied out (right None) when G <= L,
        so each draw costs the smaller of G x G and 2 G x L."""
        right = self.solver.solve(self._sums(u_r))  # L x G
        if self.n_groups <= self.n_levels:
            return np.asarray(self._sparse_sums(w) @ right), None
        return self._sums(w).T, right


def wild_p(
    y: np.ndarray,
    regressors: np.ndarray,
    fe_codes: list[np.ndarray],
    cluster: np.ndarray,
    column: int,
    settings: ProtocolSettings,
    name: str = "",
    one_sided: bool = True,
) -> WildResult:
    """The WCR bootstrap of regressor `column` of y ~ regressors + fixed effects, clustered
    by `cluster` (one coefficient; ``PartialledDesign`` bootstraps several from one
    partialling-out). A degenerate design gives NaN p-values and a note, never an error."""
    try:
        return PartialledDesign(y, regressors, fe_codes, cluster).bootstrap(column, settings, one_sided)
    except (ValueError, np.linalg.LinAlgError) as exc:
        msg = " ".join(str(exc).split())[:200]
        return WildResult(note=f"wild bootstrap failed for {name}: {msg}")


# ------------------------------------------------------------ the library reference

_COMPILED: dict[Any, Any] = {}


def _memoized_njit(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
    """numba.njit that compiles a given function body once per process: wildboottest
    0.3.2 defines its kernel inside ``get_denom`` and would recompile it on every call."""
    import numba

    def deco(fn: Callable[..., Any]) -> Any:
        key = (fn.__code__, tuple(sorted(kwargs.items())))
        if key not in _COMPILED:
            _COMPILED[key] = numba.njit(**kwargs)(fn)
        return _COMPILED[key]

    if args and callable(args[0]):
        return deco(args[0])
    return deco


def dense_design(y: np.ndarray, regressors: np.ndarray, fe_codes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(Y, X): the regressors first, then an intercept and fixed-effect dummies, with the
    dummies that are linear combinations of earlier columns removed (pivoted Cholesky), so
    that a design with overlapping fixed effects is not singular (wildboottest inverts X'X
    without a check)."""
    from scipy.linalg import lapack

    blocks = [np.ones((len(y), 1))]
    for codes in fe_codes:
        levels = int(codes.max()) + 1 if len(codes) else 0
        d = np.zeros((len(y), levels))
        d[np.arange(len(y)), codes] = 1.0
        blocks.append(d)
    dummies = np.hstack(blocks)
    if regressors.shape[1]:
        coef = np.linalg.lstsq(regressors, dummies, rcond=None)[0]
        resid = dummies - regressors @ coef
    else:
        resid = dummies
    gram = resid.T @ resid
    scale = float(np.max(np.diag(gram))) if gram.size else 1.0
    _, piv, rank, _info = lapack.dpstrf(gram, lower=1, tol=1e-10 * max(scale, 1e-300))
    keep = np.sort(piv[:rank] - 1)
    return y, np.hstack([regressors, dummies[:, keep]])


def wild_p_dense(
    y: np.ndarray,
    regressors: np.ndarray,
    fe_codes: list[np.ndarray],
    cluster: np.ndarray,
    column: int,
    settings: ProtocolSettings,
) -> tuple[float, float]:
    """(two-sided, one-sided) p by the `wildboottest` package on the dense dummies design,
    with the call sequence pyfixest's ``Feols.wildboottest`` uses (type 11, CRV1 scores,
    null imposed). The reference the fast route is tested and benchmarked against; its
    memory is rows x (regressors + dummies), so it cannot run at the paper's scale."""
    import wildboottest.wildboottest as wb

    if getattr(wb, "njit", None) is not _memoized_njit:
        wb.njit = _memoized_njit
    Y, X = dense_design(y, regressors, fe_codes)
    R = np.zeros(X.shape[1])
    R[column] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draws, seed = int(settings.wild_bootstrap_draws), int(settings.wild_bootstrap_seed)
        boot = wb.WildboottestCL(X=X, Y=Y, cluster=cluster, R=R, B=draws, seed=seed, parallel=False)
        boot.get_scores(bootstrap_type="11", impose_null=True, adj=True, cluster_adj=True)
        boot.get_weights(weights_type=settings.wild_bootstrap_weights)
        boot.get_numer()
        boot.get_denom()
        boot.get_tboot()
        boot.get_vcov()
        boot.get_tstat()
    t_stat = float(np.asarray(boot.t_stat).ravel()[0])
    t_boot = np.asarray(boot.t_boot, dtype=float).ravel()
    return float(np.mean(np.abs(t_stat) < np.abs(t_boot))), float(np.mean(t_stat < t_boot))
