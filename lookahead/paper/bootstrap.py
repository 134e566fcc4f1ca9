"""Pairs bootstrap of the out-of-sample interaction coefficient (paper Table V, Figure III).

The paper resamples the out-of-sample rows with replacement 10,000 times, re-estimates
the two-way fixed-effects regression  y = g1 LLM + g2 LAP + b LLM x LAP + mu_i + lambda_t
each time, and reports the share of draws at or above the in-sample estimate (p = 0.033).

Two implementations give the same draws:

* `naive_draws`: the baseline. Resample rows, refit with pyfixest, keep b (~30-45 ms a fit
  at 9,942 rows on this project's 2-core machine).
* `fast_draws`: a resample is an integer weight vector (how often each row was drawn), and
  duplicated rows are exactly frequency weights, so draw b is the weighted regression with
  weights w_b. Many draws are solved together:
    1. The FE with more levels ("absorbed", e.g. entities) is removed in closed form: its
       weighted means are bincount-style sparse products, vectorised over draws.
    2. What is left of the other FE ("kept", e.g. ~250 dates) is a small weighted graph
       Laplacian A_b = diag(W_t) - M_b' D_b^-1 M_b per draw, built from products of
       (entity, date) cell weights of cells sharing an entity, summed by one sparse product.
    3. The Laplacian is singular once per connected component of the date graph (the usual
       two-way FE collinearity; a resample can split components or leave dates empty).
       Components come from one scipy connected_components call per batch (block-diagonal
       entity-date graph). Each component's indicator is added back (A + c u u'), which
       leaves A^+ r unchanged for every right-hand side r orthogonal to the null space
       (ours are); a Cholesky solve (LAPACK dposv) then gives the FE-residualised Gram
       matrix of [y, x] and the k-regressor normal equations per draw.
  This is an exact direct solve (no iteration tolerance). Singleton groups need no special
  case: a row alone in its group is fitted exactly by its FE and contributes nothing to the
  slopes in both implementations, and pyfixest's singleton dropping changes no coefficient.

Both consume the same random stream: draw b is `rng.integers(0, n, n)` for b = 0, 1, ...
from `np.random.default_rng(seed)`, so results agree draw by draw (benchmarks/
bench_bootstrap.py: max difference ~5e-15 over 400 draws at 9,942 rows, ~2 ms a draw).
`pairs_bootstrap(method="auto")` uses the fast path unless both FE have more than
MAX_DENSE_LEVELS levels (the dense per-draw system would then cost more than a refit).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from threadpoolctl import threadpool_limits

from lookahead.stats.fe_regression import RegressionInputError, Term


@dataclass
class BootstrapData:
    """The estimation sample as arrays: Z = [y, x_1..x_k] and integer FE codes."""

    Z: np.ndarray  # (n, 1 + k)
    fe: list[np.ndarray]  # one code array per fixed effect
    term_names: list[str]
    _structure: _Structure | None = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        return self.Z.shape[0]


def prepare(df: pd.DataFrame, outcome: str, terms: Sequence[Term], fixed_effects: Sequence[str]) -> BootstrapData:
    """Rows with every used value present (what the regression itself uses), as arrays."""
    cols = [outcome, *{c for t in terms for c in t.columns}, *fixed_effects]
    missing = [c for c in dict.fromkeys(cols) if c not in df.columns]
    if missing:
        raise RegressionInputError(f"bootstrap: panel has no column(s) {missing}")
    Z = np.column_stack([pd.to_numeric(df[outcome], errors="coerce").to_numpy(float)] + [t.values(df) for t in terms])
    codes = [pd.factorize(df[f], use_na_sentinel=True)[0] for f in fixed_effects]
    ok = np.isfinite(Z).all(axis=1)
    for c in codes:
        ok &= c >= 0
    if ok.sum() < 2:
        raise RegressionInputError("bootstrap: fewer than 2 complete rows in the sample")
    fe = [pd.factorize(c[ok])[0].astype(np.int64) for c in codes]
    fe = [c for c in fe if c.max() > 0]  # a one-level FE is the intercept (as fit_fe drops it)
    return BootstrapData(Z=Z[ok], fe=fe, term_names=[t.name for t in terms])


#: Above this many levels in the smaller fixed effect, `method="auto"` uses the refit loop.
MAX_DENSE_LEVELS = 1_500


def draw_indices(rng: np.random.Generator, n: int) -> np.ndarray:
    """One pairs-bootstrap resample: n row indices drawn with replacement."""
    return rng.integers(0, n, size=n)


# --------------------------------------------------------------------------- baseline
def naive_draws(data: BootstrapData, draws: int, seed: int, target: int = -1, start: int = 0) -> np.ndarray:
    """Baseline: for each draw, resample rows and refit with pyfixest; return coefficient `target`.

    `start` skips that many draws of the stream, so a subset of the baseline can be timed
    against the same draws of the fast path. Demeaning uses the project's one tolerance,
    FIXEF_TOL."""
    import pyfixest as pf
    from pyfixest.demeaners import MapDemeaner

    from lookahead.stats.fe_regression import FIXEF_TOL

    k = data.Z.shape[1] - 1
    frame = pd.DataFrame(data.Z, columns=["y"] + [f"x{j}" for j in range(k)])
    for j, codes in enumerate(data.fe):
        frame[f"fe{j}"] = codes
    fml = "y ~ " + " + ".join(f"x{j}" for j in range(k))
    if data.fe:
        fml += " | " + " + ".join(f"fe{j}" for j in range(len(data.fe)))
    tname = f"x{range(k)[target]}"
    rng = np.random.default_rng(seed)
    for _ in range(start):
        draw_indices(rng, data.n)
    out = np.full(draws, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in range(draws):
            idx = draw_indices(rng, data.n)
            sub = frame.iloc[idx].reset_index(drop=True)
            try:
                fit = pf.feols(fml, data=sub, vcov="iid", demeaner=MapDemeaner(fixef_tol=FIXEF_TOL))
            except Exception:  # a degenerate resample (e.g. all rows singletons): no estimate
                continue
            coef = fit.coef()
            if tname in coef.index:
                out[b] = coef[tname]
    return out


# ------------------------------------------------------------------------------- fast
@dataclass
class _Structure:
    """Fixed sparsity structure of the data (independent of the draw)."""

    n: int
    k1: int  # 1 + k columns of Z
    n_abs: int  # levels of the absorbed FE
    n_keep: int  # levels of the kept FE (0: one-way FE)
    row_to_cell: sp.csr_matrix  # (n_cells, n)
    row_to_abs: sp.csr_matrix  # (n_abs, n)
    row_to_keep: sp.csr_matrix | None
    cell_to_abs: sp.csr_matrix  # (n_abs, n_cells)
    cell_to_keep: sp.csr_matrix | None
    cell_abs: np.ndarray
    pair_a: np.ndarray  # cells sharing an absorbed level, a < b
    pair_b: np.ndarray
    pair_to_key: sp.csr_matrix | None  # (n_keys, n_pairs)
    key_t: np.ndarray
    key_s: np.ndarray
    cell_keep: np.ndarray | None = None
    dense: bool = False  # kept-FE Laplacian by a dense product, not by cell pairs
    cc_cache: dict = field(default_factory=dict)  # batch size -> block-diagonal CSR layout
    zz_idx: list[tuple[int, int]] = field(default_factory=list)
    zz: np.ndarray | None = None  # (n_tri, n) products z_k z_l


#: The dense path is chosen when levels x kept^2 / this < the number of cell pairs.
#: Measured on this project's machine (1,587 entities x 600 dates, one BLAS thread, per
#: draw): the dense product costs about the same at every size (~0.5 s under load), the
#: pairs path ~0.2 s plus ~0.55 us a pair (10.3M pairs at 200,000 rows: 5.7 s a draw and
#: 1.9 GB, against 0.67 s and 0.4 GB dense); they break even near 600,000 pairs.
DENSE_PRODUCT_ADVANTAGE = 1000.0


def _indicator(codes: np.ndarray, n_levels: int) -> sp.csr_matrix:
    n = len(codes)
    return sp.csr_matrix((np.ones(n), (codes, np.arange(n))), shape=(n_levels, n))


def _structure(data: BootstrapData) -> _Structure:
    if len(data.fe) > 2:
        raise RegressionInputError("fast bootstrap supports one or two fixed effects")
    n, k1 = data.Z.shape
    if not data.fe:
        raise RegressionInputError("fast bootstrap needs at least one fixed effect")
    fe = sorted(data.fe, key=lambda c: -(c.max() + 1))  # absorbed = more levels
    ab = fe[0]
    n_abs = int(ab.max()) + 1
    keep = fe[1] if len(fe) == 2 else np.zeros(n, dtype=np.int64)
    n_keep = int(keep.max()) + 1 if len(fe) == 2 else 0
    cell_key = ab * max(n_keep, 1) + keep
    cells, row_cell = np.unique(cell_key, return_inverse=True)
    cell_abs = cells // max(n_keep, 1)
    cell_keep = cells % max(n_keep, 1)
    n_cells = len(cells)
    row_to_cell = _indicator(row_cell, n_cells)
    cell_to_abs = _indicator(cell_abs, n_abs)
    pair_a = pair_b = np.zeros(0, dtype=np.int64)
    pair_to_key = None
    key_t = key_s = np.zeros(0, dtype=np.int64)
    # The Laplacian's off-diagonal sums, over each absorbed level, the products of its
    # cells' weights: by listing the pairs of cells sharing a level (cheap while levels
    # have few cells each), or by one dense (levels x kept)' (levels x kept) product per
    # draw (cheaper once the pairs outnumber it: a dense panel, where the pair list
    # grows with the square of the rows per level and does not fit in memory).
    cells_per_abs = np.bincount(cell_abs, minlength=n_abs).astype(np.float64)
    n_pairs = float((cells_per_abs * (cells_per_abs - 1) / 2).sum())
    dense = bool(n_keep) and n_abs * float(n_keep) ** 2 / DENSE_PRODUCT_ADVANTAGE < n_pairs
    if n_keep and not dense:
        # cells are sorted by absorbed level: all pairs a < b inside each level
        order = np.argsort(cell_abs, kind="stable")
        starts = np.searchsorted(cell_abs[order], np.arange(n_abs))
        ends = np.searchsorted(cell_abs[order], np.arange(n_abs), side="right")
        pa, pb = [], []
        for s0, e0 in zip(starts, ends, strict=False):
            m = e0 - s0
            if m > 1:
                iu = np.triu_indices(m, 1)
                pa.append(order[s0 + iu[0]])
                pb.append(order[s0 + iu[1]])
        if pa:
            pair_a, pair_b = np.concatenate(pa), np.concatenate(pb)
            t, s_ = cell_keep[pair_a], cell_keep[pair_b]
            lo, hi = np.minimum(t, s_), np.maximum(t, s_)
            keys, pair_key = np.unique(lo * n_keep + hi, return_inverse=True)
            key_t, key_s = keys // n_keep, keys % n_keep
            pair_to_key = _indicator(pair_key, len(keys))
    tri = [(a, b) for a in range(k1) for b in range(a, k1)]
    zz = np.stack([data.Z[:, a] * data.Z[:, b] for a, b in tri])
    return _Structure(
        n=n,
        k1=k1,
        n_abs=n_abs,
        n_keep=n_keep,
        row_to_cell=row_to_cell,
        row_to_abs=_indicator(ab, n_abs),
        row_to_keep=_indicator(keep, n_keep) if n_keep else None,
        cell_to_abs=cell_to_abs,
        cell_to_keep=_indicator(cell_keep, n_keep) if n_keep else None,
        cell_abs=cell_abs,
        pair_a=pair_a,
        pair_b=pair_b,
        pair_to_key=pair_to_key,
        key_t=key_t,
        key_s=key_s,
        cell_keep=cell_keep,
        zz_idx=tri,
        zz=zz,
        dense=dense,
    )


def _solve_batch(st: _Structure, Z: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Coefficients (B, k) of the weighted two-way FE regressions, one per column of W."""
    B = W.shape[1]
    k1 = st.k1
    Mc = st.row_to_cell @ W  # (cells, B) cell weights
    We = st.cell_to_abs @ Mc  # (abs, B)
    inv_we = np.divide(1.0, We, out=np.zeros_like(We), where=We > 0)
    SeZ = np.stack([st.row_to_abs @ (W * Z[:, [j]]) for j in range(k1)])  # (k1, abs, B)
    # Gram of [y, x] after removing the absorbed FE (weighted within transformation)
    ZZ = st.zz @ W  # (n_tri, B)
    G = np.empty((B, k1, k1))
    for r, (a, b) in enumerate(st.zz_idx):
        v = ZZ[r] - np.einsum("eb,eb,eb->b", SeZ[a], SeZ[b], inv_we)
        G[:, a, b] = v
        G[:, b, a] = v
    if st.n_keep:
        G = G - _kept_fe_correction(st, Z, W, Mc, SeZ, inv_we)
    Gxx, Gxy = G[:, 1:, 1:], G[:, 1:, 0]
    beta = np.full((B, k1 - 1), np.nan)
    # a regressor without residual variation in a draw: no estimate (pyfixest drops it)
    raw = np.stack([ZZ[st.zz_idx.index((j, j))] for j in range(1, k1)], axis=1)  # (B, k)
    ok = np.all(np.einsum("bii->bi", Gxx) > 1e-10 * np.maximum(raw, 1e-300), axis=1)
    good = np.where(ok)[0]
    if len(good):
        good = good[np.linalg.cond(Gxx[good]) < 1e12]
    if len(good):
        beta[good] = np.linalg.solve(Gxx[good], Gxy[good][..., None])[..., 0]
    return beta


def _kept_fe_correction(
    st: _Structure, Z: np.ndarray, W: np.ndarray, Mc: np.ndarray, SeZ: np.ndarray, inv_we: np.ndarray
) -> np.ndarray:
    """R' A^+ R per draw: what the kept FE explains of [y, x] after the absorbed FE."""
    from scipy.linalg import blas, lapack

    B, T, k1 = W.shape[1], st.n_keep, st.k1
    Wd = st.cell_to_keep @ Mc  # (T, B) weight per kept level
    Xc = Mc * inv_we[st.cell_abs]  # (cells, B) cell weight / entity weight
    R = np.empty((B, T, k1))
    for j in range(k1):
        StZ = st.row_to_keep @ (W * Z[:, [j]])
        R[:, :, j] = (StZ - st.cell_to_keep @ (Xc * SeZ[j][st.cell_abs])).T
    # Laplacian A = diag(Wd) - M' D^-1 M, built flat: the diagonal, then each pair of cells
    # sharing an absorbed level once, into the upper triangle only (C order). LAPACK reads
    # A[b].T (Fortran order, no copy) and its lower triangle, which is that upper one.
    diag = (Wd - st.cell_to_keep @ (Mc * Xc)).T  # (B, T)
    A: np.ndarray | None
    if st.dense:
        A = None  # built per draw below, one (T, T) matrix at a time
        root = np.sqrt(inv_we)[st.cell_abs]  # (cells, B)
    else:
        flat = np.zeros((B, T * T))
        flat[:, np.arange(T) * (T + 1)] = diag
        if st.pair_to_key is not None:
            off = st.pair_to_key @ (Xc[st.pair_a] * Mc[st.pair_b])  # (keys, B)
            flat[:, st.key_t * T + st.key_s] = -off.T  # key_t < key_s
        A = flat.reshape(B, T, T)
    # Connected components of every draw's entity-level / kept-level bipartite graph at
    # once: one block-diagonal graph per batch, an edge per (entity, date) cell drawn.
    active = (Wd > 0).T  # (B, T)
    labels = _batch_components(st, Mc)  # (B, T)
    out = np.full((B, k1, k1), np.nan)
    for b in range(B):
        if A is None:
            # upper triangle of -(M' D^-1 M) by one symmetric rank-k product (BLAS dsyrk)
            Md = np.zeros((st.n_abs, T))
            Md[st.cell_abs, st.cell_keep] = Mc[:, b] * root[:, b]
            Ab = np.ascontiguousarray(blas.dsyrk(-1.0, Md, trans=1, lower=0))
            Ab[np.arange(T), np.arange(T)] = diag[b]
        else:
            Ab = A[b]
        act = active[b]
        scale = float(Ab.diagonal()[act].mean()) if act.any() else 1.0
        scale = scale if scale > 0 else 1.0  # any c > 0 works; keep it O(diag)
        lab = labels[b]
        if act.all() and (lab == lab[0]).all():
            Ab += scale / T  # A + c 11': one component, every level used
        else:
            inactive = ~act
            Ab[inactive, :] = 0.0
            Ab[:, inactive] = 0.0
            Ab[inactive, inactive] = 1.0
            for c in np.unique(lab[act]):
                u = (lab == c) & act
                Ab[np.ix_(u, u)] += scale / u.sum()
        _, x, info = lapack.dposv(Ab.T, R[b], lower=1, overwrite_a=True)
        if info == 0:
            out[b] = R[b].T @ x
    return out


def _batch_components(st: _Structure, Mc: np.ndarray) -> np.ndarray:
    """Component label of each kept level in each draw (B, T); unused levels get their own.

    Node j*(T+E)+t is kept level t of draw j, node j*(T+E)+T+e absorbed level e; an edge
    joins them when draw j drew a row of cell (e, t). Labels only need to be equal within
    a component and distinct across components of the same draw. The block-diagonal CSR
    layout is built once per batch size; a batch only masks the cells it did not draw."""
    n_cells, B = Mc.shape
    T, E = st.n_keep, st.n_abs
    N = T + E
    assert st.cell_keep is not None, "components are drawn for a kept fixed effect only (n_keep > 0)"
    if B not in st.cc_cache:
        j = np.repeat(np.arange(B), n_cells)
        c = np.tile(np.arange(n_cells), B)
        rows = j * N + T + st.cell_abs[c]
        cols = j * N + st.cell_keep[c]
        order = np.lexsort((cols, rows))
        indptr = np.zeros(B * N + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        st.cc_cache[B] = (np.cumsum(indptr), cols[order], order)
    indptr, indices, order = st.cc_cache[B]
    alive = (Mc.T > 0).ravel()[order].astype(np.int8)
    g = sp.csr_matrix((alive, indices, indptr), shape=(B * N, B * N))
    g.eliminate_zeros()
    _, lab = connected_components(g, directed=False)
    return lab.reshape(B, N)[:, :T]


def fast_draws(
    data: BootstrapData, draws: int, seed: int, target: int | None = -1, batch: int | None = None, start: int = 0
) -> np.ndarray:
    """All draws' coefficients (column `target`, or all when None) by batched weighted solves.

    `start` skips that many draws of the stream (as `naive_draws` does). The sparsity
    structure is built once per data set and kept on it."""
    if data._structure is None:
        data._structure = _structure(data)
    st = data._structure
    n = data.n
    if batch is None:
        per_draw = max(len(st.pair_a), st.n_keep**2, n, 1)  # pair_a is empty on the dense path
        batch = int(np.clip(4e6 // per_draw, 8, 64))  # measured: 32-64 draws a batch is fastest here
    rng = np.random.default_rng(seed)
    for _ in range(start):
        draw_indices(rng, n)
    out = np.full((draws, st.k1 - 1), np.nan)
    # one BLAS thread: the work is many small factorisations, where threads only contend
    with threadpool_limits(limits=1, user_api="blas"):
        for b0 in range(0, draws, batch):
            m = min(batch, draws - b0)
            W = np.empty((n, m))
            for j in range(m):
                W[:, j] = np.bincount(draw_indices(rng, n), minlength=n)
            out[b0 : b0 + m] = _solve_batch(st, data.Z, W)
    return out if target is None else out[:, target]


# ------------------------------------------------------------------------ the analysis
def bootstrap_pvalue(draws: np.ndarray, estimate: float) -> float:
    """One-sided bootstrap p: the share of draws at or above `estimate` (draws without an estimate excluded)."""
    d = np.asarray(draws, dtype=float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return float("nan")
    return float(np.mean(d >= estimate))


@dataclass
class BootstrapResult:
    """Draws of the out-of-sample interaction coefficient and the bootstrap p-value."""

    draws: np.ndarray
    in_sample_estimate: float
    out_of_sample_estimate: float
    p_value: float
    percentile_95: float
    seed: int
    n_draws: int
    n_obs: int
    n_failed: int
    method: str
    seconds: float

    def frame(self) -> pd.DataFrame:
        """One row per draw (the `bootstrap_results` table)."""
        return pd.DataFrame(
            {
                "draw": np.arange(1, self.n_draws + 1),
                "coefficient": self.draws,
                "in_sample_estimate": self.in_sample_estimate,
                "out_of_sample_estimate": self.out_of_sample_estimate,
                "p_value": self.p_value,
                "percentile_95": self.percentile_95,
                "seed": self.seed,
                "n_obs": self.n_obs,
                "method": self.method,
            }
        )


def pairs_bootstrap(
    data: BootstrapData,
    in_sample_estimate: float,
    draws: int = 10_000,
    seed: int = 20240101,
    method: str = "auto",
    out_of_sample_estimate: float = float("nan"),
) -> BootstrapResult:
    """Bootstrap the last term's coefficient on `data` and compare with `in_sample_estimate`."""
    if draws < 1:
        raise RegressionInputError(f"setting 'bootstrap_draws': {draws} must be a positive integer")
    if method == "auto":
        # the fast path solves a dense (levels x levels) system per draw for the smaller FE;
        # beyond ~1,500 levels on both FE the refit loop is the better choice
        ok = len(data.fe) in (1, 2) and min(int(c.max()) + 1 for c in data.fe) <= MAX_DENSE_LEVELS
        method = "fast" if ok else "naive"
    t0 = time.perf_counter()
    if method == "fast":
        d = fast_draws(data, draws, seed)
    elif method == "naive":
        d = naive_draws(data, draws, seed)
    else:
        raise RegressionInputError(f"bootstrap method '{method}' is not auto, fast or naive")
    sec = time.perf_counter() - t0
    fin = d[np.isfinite(d)]
    return BootstrapResult(
        draws=d,
        in_sample_estimate=float(in_sample_estimate),
        out_of_sample_estimate=float(out_of_sample_estimate),
        p_value=bootstrap_pvalue(d, in_sample_estimate),
        percentile_95=float(np.percentile(fin, 95)) if len(fin) else float("nan"),
        seed=int(seed),
        n_draws=int(draws),
        n_obs=data.n,
        n_failed=int(draws - len(fin)),
        method=method,
        seconds=sec,
    )
