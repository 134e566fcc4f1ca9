"""Restricted wild cluster bootstrap (WCR) p-values, from the maintained `wildboottest`
package through pyfixest's ``Feols.wildboottest``.

Why: with few clusters the CRV1 t(G-1) test over-rejects, most when the signal sits in a
few clusters (docs/montecarlo.md measures it). The WCR bootstrap (null imposed, as
Cameron, Gelbach and Miller 2008; MacKinnon and Webb 2017) holds its size much better.
The verdict uses it when a regression has fewer clusters than
``wild_bootstrap_min_clusters`` (see lookahead/stats/verdict.py); it is reported beside
CRV1 for every clustered regression otherwise.

How: pyfixest's ``Feols.wildboottest`` writes the fixed effects as dummies and runs
WildboottestCL on that dense design (bootstrap type 11, CRV1 scores, null imposed). Here
the same library class gets the same call sequence on the same kind of design, with one
difference: redundant dummies are removed first (``dense_design``), because pyfixest's
one-hot design is singular for overlapping fixed effects (the validation-difference
regression) and the library inverts X'X without a check. The small-sample factor counts
every dummy (unlike reghdfe), but a bootstrap p-value is invariant to a constant factor on
both the original and the bootstrap t.

One-sided p (H1: coefficient > 0) is the library's own ">" rule, mean(t_boot > t).

Speed: wildboottest 0.3.2 defines its numba kernel inside ``get_denom``, so numba
recompiles it on every call (~0.4 s, 30x the bootstrap itself at 1,000 rows). The kernel
takes everything as arguments, so one compiled dispatcher per (code, options) is
equivalent; ``_memoized_njit`` keeps it. The arithmetic is the library's, unchanged.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from lookahead.config import SCHEMA, setting_default

WILD_WEIGHTS = SCHEMA.settings["wild_bootstrap_weights"].allowed
DEFAULT_WILD_DRAWS = setting_default("wild_bootstrap_draws")
DEFAULT_WILD_SEED = setting_default("wild_bootstrap_seed")
DEFAULT_WILD_WEIGHTS = setting_default("wild_bootstrap_weights")
#: Below this many clusters the verdict reads the wild bootstrap p instead of CRV1's
#: (docs/montecarlo.md: CRV1 over-rejects at 10-30 clusters, the WCR holds its size).
DEFAULT_WILD_MIN_CLUSTERS = setting_default("wild_bootstrap_min_clusters")
#: With this many clusters or more (and at least min_clusters) the bootstrap is not run.
DEFAULT_WILD_MAX_CLUSTERS = setting_default("wild_bootstrap_max_clusters")
#: Largest dense design (rows x columns, fixed-effect dummies included) the bootstrap
#: builds; above it the p-value is skipped with a warning (~160 MB of float64).
MAX_DENSE_CELLS = 20_000_000


@dataclass(frozen=True)
class WildSettings:
    """Draws (0 = off), weights (webb | rademacher), seed, the cluster count below which
    the verdict uses the bootstrap p-values, and the one from which it is not computed."""

    draws: int = DEFAULT_WILD_DRAWS
    weights: str = DEFAULT_WILD_WEIGHTS
    seed: int = DEFAULT_WILD_SEED
    min_clusters: int = DEFAULT_WILD_MIN_CLUSTERS
    max_clusters: int = DEFAULT_WILD_MAX_CLUSTERS

    @property
    def cluster_limit(self) -> int:
        """Regressions with fewer clusters than this get bootstrap p-values: always where
        the verdict reads them (below min_clusters), and up to max_clusters beside CRV1.
        Many clusters make it costly (a dense rows x dummies design) and needless."""
        return max(self.min_clusters, self.max_clusters)

    def label(self) -> str:
        return (f"WCR bootstrap ({self.weights} weights, {self.draws} draws, seed {self.seed}, "
                "null imposed)")


_COMPILED: dict[Any, Any] = {}


def _memoized_njit(*args: Any, **kwargs: Any):
    """numba.njit that compiles a given function body once per process (see module doc)."""
    import numba

    def deco(fn):
        key = (fn.__code__, tuple(sorted(kwargs.items())))
        if key not in _COMPILED:
            _COMPILED[key] = numba.njit(**kwargs)(fn)
        return _COMPILED[key]

    if args and callable(args[0]):
        return deco(args[0])
    return deco


def _patch_library() -> None:
    import wildboottest.wildboottest as wb

    if getattr(wb, "njit", None) is not _memoized_njit:
        wb.njit = _memoized_njit


def dense_design(y: np.ndarray, regressors: np.ndarray, fe_codes: list[np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(Y, X): the regressors first, then an intercept and fixed-effect dummies, with the
    dummies that are linear combinations of earlier columns removed (pivoted QR).

    pyfixest's own one-hot design (``C(fe1) + C(fe2)`` with an intercept) is singular when
    the fixed effects overlap beyond one level, e.g. entity x half and period x half in the
    validation-difference regression, and wildboottest inverts X'X with ``np.linalg.inv``,
    so a singular design returns garbage silently. Dropping redundant dummies spans the same
    column space, so residuals and the regressors' coefficients are unchanged."""
    from scipy.linalg import lapack

    blocks = [np.ones((len(y), 1))]
    for codes in fe_codes:
        levels = int(codes.max()) + 1 if len(codes) else 0
        d = np.zeros((len(y), levels))
        d[np.arange(len(y)), codes] = 1.0
        blocks.append(d)
    dummies = np.hstack(blocks)
    # what the regressors do not explain of the dummies, then an independent subset of
    # those by pivoted Cholesky of their (small) Gram matrix
    if regressors.shape[1]:
        coef = np.linalg.lstsq(regressors, dummies, rcond=None)[0]
        resid = dummies - regressors @ coef
    else:
        resid = dummies
    gram = resid.T @ resid
    scale = float(np.max(np.diag(gram))) if gram.size else 1.0
    _, piv, rank, info = lapack.dpstrf(gram, lower=1, tol=1e-10 * max(scale, 1e-300))
    keep = np.sort(piv[:rank] - 1)
    return y, np.hstack([regressors, dummies[:, keep]])


def wild_p(y: np.ndarray, regressors: np.ndarray, fe_codes: list[np.ndarray],
           cluster: np.ndarray, column: int, settings: WildSettings, name: str = ""
           ) -> tuple[float, float, str]:
    """(two-sided p, one-sided p for H1 > 0, note) for regressor `column` of the regression
    y ~ regressors + fixed effects, clustered by `cluster`, by wildboottest's WildboottestCL
    with the call sequence pyfixest's ``Feols.wildboottest`` uses (type 11, CRV1 scores,
    small-sample adjustments on, null imposed). NaN p-values with a note when it cannot run."""
    try:
        _patch_library()
        from wildboottest.wildboottest import WildboottestCL
    except ImportError:
        return math.nan, math.nan, "wild bootstrap skipped: package 'wildboottest' not installed"
    n_cols = regressors.shape[1] + 1 + sum(int(c.max()) + 1 for c in fe_codes if len(c))
    if len(y) * n_cols > MAX_DENSE_CELLS:
        return math.nan, math.nan, (f"wild bootstrap skipped for {name}: dense design of {len(y)} "
                                    f"rows x {n_cols} columns exceeds {MAX_DENSE_CELLS:,} cells")
    try:
        Y, X = dense_design(y, regressors, fe_codes)
        R = np.zeros(X.shape[1])
        R[column] = 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            boot = WildboottestCL(X=X, Y=Y, cluster=cluster, R=R, B=int(settings.draws),
                                  seed=int(settings.seed), parallel=False)
            boot.get_scores(bootstrap_type="11", impose_null=True, adj=True, cluster_adj=True)
            boot.get_weights(weights_type=settings.weights)
            boot.get_numer()
            boot.get_denom()
            boot.get_tboot()
            boot.get_vcov()
            boot.get_tstat()
    except Exception as exc:  # a degenerate design: report, never crash the build
        msg = " ".join(str(exc).split())[:200]
        return math.nan, math.nan, f"wild bootstrap failed for {name}: {msg}"
    t_stat = float(np.asarray(boot.t_stat).ravel()[0])
    t_boot = np.asarray(boot.t_boot, dtype=float).ravel()
    if not np.isfinite(t_stat) or len(t_boot) == 0 or not np.isfinite(t_boot).all():
        return math.nan, math.nan, f"wild bootstrap for {name}: no finite t-statistic"
    p_two = float(np.mean(np.abs(t_stat) < np.abs(t_boot)))   # the library's "two-tailed"
    p_one = float(np.mean(t_stat < t_boot))                   # the library's ">"
    return p_two, p_one, ""
