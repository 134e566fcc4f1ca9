"""One fixed-effects regression -> one tidy row per term, with everything the report
must quote (N, clusters, singletons, collinear drops, the vcov and its small-sample
correction).

Why a wrapper around pyfixest rather than calling ``feols`` in each model:
- pyfixest names its columns ``Std. Error`` / ``Pr(>|t|)``, reports singletons and
  collinear drops only as warnings/attributes, and gives two-sided p-values only; the
  result table contract (docs/CONTRACTS.md) needs them as columns.
- The protocol estimates with Stata ``reghdfe``. The small-sample correction used here
  is reghdfe's: CRV1 with ``G/(G-1) * (N-1)/(N-K)``, K = number of slope coefficients
  plus the fixed-effect levels that are *not* nested in the cluster variable (minus one
  redundant level per additional non-nested FE; K = k+1 when every FE is nested).
  pyfixest's ``ssc(k_adj=True, k_fixef="nonnested", G_adj=True)`` is that convention;
  tests/python/test_against_independent.py checks it against a dummies OLS written
  from the formula. p-values use a t distribution with G-1 degrees of freedom, as
  reghdfe does after clustering.
- A single entity is a time series: the protocol drops the entity FE and uses
  Newey-West (Stata ``newey``). Rows are ordered by (target_date, text_date, row_id)
  and treated as consecutive (``newey ..., force``); the Bartlett kernel with a stated
  lag; correction N/(N-K) and t(N-K) p-values, as ``newey`` and statsmodels
  ``HAC(use_correction=True), use_t=True``.
"""

from __future__ import annotations

import gc
import math
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lookahead.errors import UserError
from lookahead.settings_sections import ProtocolSettings
from lookahead.stats.wild import PartialledDesign, WildResult, wild_label

RESULT_COLUMNS: tuple[str, ...] = (
    "spec",
    "sample",
    "term",
    "estimate",
    "std_error",
    "t",
    "p_two_sided",
    "p_one_sided",
    "p_wild_two_sided",
    "p_wild_one_sided",
    "wild_bootstrap",
    "n_obs",
    "n_clusters",
    "n_singletons",
    "dropped_terms",
    "r2",
    "r2_within",
    "fixed_effects",
    "vcov",
    "warning",
    "df",
    "n_clusters_effective",
    "wild_draws",
    "p_wild_mc_se",
    "mde",
)

#: Demeaning (alternating projections) tolerance of every regression in the project,
#: protocol and paper alike. pyfixest's default 1e-6 moves standard errors in the 5th
#: digit (1.5e-5 against reghdfe's formula); 1e-12 agrees to ~1e-11.
FIXEF_TOL = 1e-12

# cluster setting -> panel column (docs/CONTRACTS.md). "date" is the realization date:
# outcomes realized on the same day share market-wide shocks (the paper clusters by date).
CLUSTER_COLUMNS: dict[str, str | None] = {
    "entity": "entity_num",
    "period": "period_num",
    "date": "target_date",
    "none": None,
}

MIN_CLUSTERS = 20  # protocol: "With few entities (< ~20 clusters), warn"
ENTITY_FE = "entity_num"
PERIOD_FE = "period_num"
#: The row order Newey-West uses for a single-entity panel (time series): the only
#: non-numeric panel columns a regression reads.
NW_ORDER_COLUMNS: tuple[str, ...] = ("target_date", "text_date", "row_id")
SSC_RULE = "reghdfe: G/(G-1)*(N-1)/(N-K), K = slopes + FE levels not nested in the cluster"


#: The estimator's own messages, in the user's terms: (pattern, text). pyfixest's texts
#: speak to its developers ("please reach out to the package authors!"); a report
#: quotes what the data did, so a message is matched here and replaced by its meaning.
ESTIMATOR_MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"All variables are collinear", re.I),
        "every regressor is collinear with the fixed effects or with the other regressors "
        "(nothing varies within entity and period)",
    ),
    (re.compile(r"singular|not invertible", re.I), "the regressors are linearly dependent (singular design)"),
    (re.compile(r"No observations|empty", re.I), "no observations left to fit"),
)


def estimator_message(exc: BaseException) -> str:
    """A fit's failure in the user's terms; unknown messages keep their first sentence only
    (the estimator's advice to its own developers never reaches the report)."""
    text = " ".join(str(exc).split())
    for pattern, meaning in ESTIMATOR_MESSAGES:
        if pattern.search(text):
            return meaning
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".!")
    return f"the estimator could not fit it ({type(exc).__name__}: {first})"


# --------------------------------------------------------------- the one error vocabulary
# Every regression of the package, protocol and paper alike, fails in one of two ways:
class RegressionInputError(UserError, ValueError):
    """Bad input for a regression (a missing or non-numeric column, an unknown setting
    value); the message names the column or setting. The user must change something."""


class NotEstimable(RegressionInputError):
    """The data cannot identify a specification (no rows, no variation, only singletons,
    all terms collinear); the message says why, in the words of ``not_estimable``.

    A finding, not an error: the protocol's ``fit_fe`` records it as NULL estimates with
    that warning (the verdict then reads "underpowered"); the paper skips the table with
    a note. It subclasses RegressionInputError so one ``except`` catches every failure."""


NOT_ESTIMABLE = "not estimable"


def not_estimable(reason: str) -> str:
    """The one wording of a not-estimable finding (a warning in regression_results, a
    note in paper_tables): 'not estimable: <reason>'."""
    return f"{NOT_ESTIMABLE}: {reason}"


def one_sided_p(t: float, p_two: float) -> float:
    """p-value of the one-sided test H1: coefficient > 0, from the two-sided p.

    Exactly the protocol's rule: p/2 when t > 0, else 1 - p/2 (t = 0 gives 1 - p/2).
    Missing inputs give NaN rather than a number that looks like evidence."""
    if t is None or p_two is None or not np.isfinite(t) or not np.isfinite(p_two):
        return math.nan
    return p_two / 2.0 if t > 0 else 1.0 - p_two / 2.0


def newey_west_default_lag(n_obs: int) -> int:
    """floor(4 * (N/100)^(2/9)), the Newey-West (1994) rule of thumb, at least 1.

    Stata's ``newey`` has no default lag; this states one and puts it in the vcov label."""
    if n_obs <= 0:
        return 1
    return max(1, int(math.floor(4.0 * (n_obs / 100.0) ** (2.0 / 9.0))))


@dataclass(frozen=True)
class Term:
    """A regressor as the paper's tables name it: a panel column, or the product of several
    (an interaction), under a printed name (e.g. 'LLM x LAP' for mu_hat * lap_mink).

    The protocol writes a term as a string, ``"mu_hat:lap"``, whose name is its formula;
    ``Term.of`` reads both, so a specification may list either."""

    name: str
    columns: tuple[str, ...]

    @classmethod
    def of(cls, term: str | Term) -> Term:
        """A Term from a Term or a formula string (columns joined by ':')."""
        return term if isinstance(term, Term) else cls(term, tuple(_term_columns(term)))

    def values(self, df: pd.DataFrame) -> np.ndarray:
        """The term's column on `df`: the product of its columns, as float."""
        out = np.ones(len(df))
        for c in self.columns:
            out = out * df[c].to_numpy(dtype=float)
        return out


@dataclass(frozen=True)
class FitRequest:
    """One regression specification: outcome on regressors with absorbed fixed effects,
    clustered by the `cluster` setting, on one sample. The one way the package declares a
    regression: the protocol's steps 3-5 (lookahead.stats.protocol) and the paper's
    Tables II-V (lookahead.paper.tables) alike.

    ``regressors`` are formula strings (``"mu_hat:lap"``, what ``fit_fe`` reads) or
    ``Term``s (a printed name for a product of columns, what the paper's
    ``lookahead.paper.fit.fit_column`` reads). ``one_sided_terms`` are the terms whose test
    is H1: coefficient > 0 (beta_3)."""

    spec: str
    sample: str
    outcome: str
    regressors: Sequence[str | Term]
    fixed_effects: Sequence[str] = (ENTITY_FE, PERIOD_FE)
    cluster: str = "entity"
    one_sided_terms: Sequence[str] = ()
    nw_lag: int | None = None
    notes: Sequence[str] = field(default_factory=tuple)
    wild_terms: Sequence[str] = ()  # terms that get a wild cluster bootstrap p-value
    #: the study's protocol section, whose wild_bootstrap_* settings the bootstrap reads
    wild: ProtocolSettings | None = None
    #: one-sided terms whose two-sided p a decision also reads (beta_3: "significantly
    #: negative"); the bootstrap extends its draws near 0.05 for those only
    wild_two_sided_terms: Sequence[str] = ()
    #: the level of the one-sided test whose minimum detectable effect (80% power) the
    #: column `mde` reports: the level the decision reads this regression at (5% for
    #: detection, 10% for the post-cutoff placebo)
    mde_alpha: float = 0.05

    @property
    def formula_regressors(self) -> list[str]:
        """The regressors as formula strings, what ``fit_fe`` reads. A specification with
        ``Term``s is the paper's, fitted by ``lookahead.paper.fit.fit_column``, which names
        their products safely and calls ``fit_fe`` with strings."""
        formulas = [t for t in self.regressors if isinstance(t, str)]
        if len(formulas) != len(self.regressors):
            raise RegressionInputError(
                f"regression '{self.spec}': fit_fe reads formula strings; a specification with "
                "Term regressors is fitted by lookahead.paper.fit.fit_column"
            )
        return formulas


def _term_columns(term: str) -> list[str]:
    return term.split(":")


def _empty_rows(
    req: FitRequest, fixed_effects: str, vcov: str, warning: str, n_obs: int = 0, n_clusters: float = math.nan
) -> pd.DataFrame:
    rows = [
        {
            "spec": req.spec,
            "sample": req.sample,
            "term": term,
            "estimate": math.nan,
            "std_error": math.nan,
            "t": math.nan,
            "p_two_sided": math.nan,
            "p_one_sided": math.nan,
            "p_wild_two_sided": math.nan,
            "p_wild_one_sided": math.nan,
            "wild_bootstrap": "",
            "n_obs": n_obs,
            "n_clusters": n_clusters,
            "n_singletons": 0,
            "dropped_terms": "",
            "r2": math.nan,
            "r2_within": math.nan,
            "fixed_effects": fixed_effects,
            "vcov": vcov,
            "warning": warning,
            "df": math.nan,
            "n_clusters_effective": math.nan,
            "wild_draws": 0,
            "p_wild_mc_se": math.nan,
            "mde": math.nan,
        }
        for term in req.regressors
    ]
    return _typed(pd.DataFrame(rows, columns=list(RESULT_COLUMNS)))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Nullable dtypes so that a missing estimate is NULL in DuckDB, not NaN."""
    floats = [
        "estimate",
        "std_error",
        "t",
        "p_two_sided",
        "p_one_sided",
        "p_wild_two_sided",
        "p_wild_one_sided",
        "r2",
        "r2_within",
        "df",
        "n_clusters_effective",
        "p_wild_mc_se",
        "mde",
    ]
    out = df.copy()
    for c in floats:
        vals = pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=float, na_value=np.nan).copy()
        vals[~np.isfinite(vals)] = np.nan
        out[c] = pd.array(vals, dtype="Float64")  # NaN -> <NA>
    for c in ["n_obs", "n_clusters", "n_singletons", "wild_draws"]:
        out[c] = pd.array(pd.to_numeric(out[c], errors="coerce").round(), dtype="Int64")
    for c in ["spec", "sample", "term", "dropped_terms", "fixed_effects", "vcov", "warning", "wild_bootstrap"]:
        out[c] = out[c].astype("string")
    return out[list(RESULT_COLUMNS)]


def _check_columns(df: pd.DataFrame, req: FitRequest, cluster_col: str | None) -> None:
    needed = [req.outcome, *{c for t in req.formula_regressors for c in _term_columns(t)}, *req.fixed_effects]
    if cluster_col:
        needed.append(cluster_col)
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        raise RegressionInputError(
            f"regression '{req.spec}' on sample '{req.sample}': panel lacks column(s) "
            f"{missing}; available: {sorted(map(str, df.columns))}"
        )
    for c in [req.outcome, *{c for t in req.formula_regressors for c in _term_columns(t)}]:
        if not (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c])):
            converted = pd.to_numeric(df[c], errors="coerce")
            bad = df[c].notna() & converted.isna()
            if bad.any():
                first = df.index[bad.to_numpy()][0]
                raise RegressionInputError(
                    f"regression '{req.spec}' on sample '{req.sample}': column '{c}' is "
                    f"not numeric (row index {first}: {df.loc[first, c]!r})"
                )


def _prepare(df: pd.DataFrame, req: FitRequest, cluster_col: str | None) -> tuple[pd.DataFrame, int]:
    """Numeric copy with the rows usable by this regression; returns (data, n_missing)."""
    cols = [req.outcome, *{c for t in req.formula_regressors for c in _term_columns(t)}]
    data = pd.DataFrame(index=df.index)
    for c in cols:
        data[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    for fe in req.fixed_effects:
        data[fe] = df[fe]
    for extra in NW_ORDER_COLUMNS:
        if extra in df.columns:
            data[extra] = df[extra]
    if cluster_col:
        data["_cluster"] = df[cluster_col]
    keys = cols + list(req.fixed_effects) + (["_cluster"] if cluster_col else [])
    usable = data[keys].notna().all(axis=1)
    if not usable.all():  # a new frame either way (copy-on-write): no copy when no row goes
        data = data.loc[usable]
    for fe in req.fixed_effects:  # pyfixest wants integer FE codes
        data[fe] = pd.factorize(data[fe], sort=True)[0].astype("int64")
    if cluster_col:
        data["_cluster"] = pd.factorize(data["_cluster"], sort=True)[0].astype("int64")
    data = data.reset_index(drop=True)
    return data, int((~usable).sum())


def column_scales(data: pd.DataFrame, columns: Iterable[str]) -> dict[str, float]:
    """Standard deviation of each column on the estimation rows (1 when it is 0 or NaN).

    Every regression is fitted on columns divided by these scales and its estimates
    multiplied back, so that nothing depends on the units of a regressor: pyfixest judges
    collinearity and demeaning convergence with absolute tolerances, and a LAP with sd
    2.7e-6 (the paper's Min-K%) would otherwise see its interaction dropped as collinear.
    t-statistics, p-values and R2 are unchanged by the rescaling (exactly, up to rounding)."""
    out = {}
    for c in columns:
        sd = float(np.std(data[c].to_numpy(dtype=float)))
        out[c] = sd if np.isfinite(sd) and sd > 0 else 1.0
    return out


def non_singleton_mask(data: pd.DataFrame, fixed_effects: Sequence[str]) -> np.ndarray:
    """Rows left after iteratively dropping singleton fixed-effect groups (as reghdfe)."""
    keep = np.ones(len(data), dtype=bool)
    while True:
        changed = False
        for fe in fixed_effects:
            codes = data[fe].to_numpy()
            counts = np.bincount(codes[keep], minlength=int(codes.max()) + 1 if len(codes) else 0)
            single = keep & (counts[codes] == 1)
            if single.any():
                keep &= ~single
                changed = True
        if not changed:
            return keep


def extra_redundant_levels(data: pd.DataFrame, fixed_effects: Sequence[str], cluster: str | None) -> int:
    """Redundant fixed-effect levels reghdfe finds beyond pyfixest's count.

    reghdfe's K counts rank([1, dummies of the fixed effects not nested in the cluster]).
    With two such fixed effects that rank is L1 + L2 - C, C the connected components of
    the bipartite graph of their levels; pyfixest assumes C = 1. Returns C - 1 in that
    case (a stacked regression of two disconnected halves: 1), else 0 (one non-nested
    fixed effect, or more than two: pyfixest's and reghdfe's default counts agree)."""
    if len(fixed_effects) != 2 or len(data) == 0:
        return 0
    if cluster is not None:
        for fe in fixed_effects:
            if data.groupby(fe, sort=False)[cluster].nunique().max() == 1:
                return 0  # nested: not counted, no redundancy between the two
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    a = pd.factorize(data[fixed_effects[0]])[0]
    b = pd.factorize(data[fixed_effects[1]])[0]
    n_a, n_b = int(a.max()) + 1, int(b.max()) + 1
    graph = coo_matrix((np.ones(len(a)), (a, n_a + b)), shape=(n_a + n_b, n_a + n_b))
    n_comp, _ = connected_components(graph, directed=False)
    return int(n_comp) - 1


def _formula(req: FitRequest, fixed_effects: Sequence[str]) -> str:
    rhs = " + ".join(req.formula_regressors)
    fe = " + ".join(fixed_effects)
    return f"{req.outcome} ~ {rhs}" + (f" | {fe}" if fe else "")


def fit_fe(df: pd.DataFrame, req: FitRequest) -> pd.DataFrame:
    """Estimate one specification; one row per requested term (RESULT_COLUMNS).

    Never raises for statistical degeneracy (empty sample, all terms collinear,
    singular fit): those give rows with NULL estimates and a warning that says why
    (``not_estimable``), because the verdict must then say "underpowered" rather than
    crash. Raises RegressionInputError for user errors (missing column, bad cluster
    setting). Regressors are formula strings here; ``Term``s go through the paper's
    ``fit_column``, which names their products safely and calls this."""
    import pyfixest as pf  # imported here: ~2 s, only when a regression runs

    regressors = req.formula_regressors

    if req.cluster not in CLUSTER_COLUMNS:
        raise RegressionInputError(f"setting 'cluster': '{req.cluster}' is not one of {', '.join(CLUSTER_COLUMNS)}")
    cluster_col = CLUSTER_COLUMNS[req.cluster]
    _check_columns(df, req, cluster_col)
    data, n_missing = _prepare(df, req, cluster_col)
    notes = list(req.notes)
    if n_missing:
        notes.append(f"{n_missing} row(s) with a missing value in this regression's columns dropped")

    fixed_effects = list(req.fixed_effects)
    n_entities = data[ENTITY_FE].nunique() if ENTITY_FE in data else 0
    single_entity = ENTITY_FE in fixed_effects and n_entities == 1
    if single_entity:
        fixed_effects.remove(ENTITY_FE)
    fe_label = " + ".join(fixed_effects) if fixed_effects else "none"

    def not_fitted(why: str, n_obs: int = 0, n_clusters: float = math.nan) -> pd.DataFrame:
        """The regression's rows without estimates: the notes so far, then why it was not estimable."""
        vcov = _vcov_label(req, single_entity, None)
        return _empty_rows(req, fe_label, vcov, "; ".join([*notes, not_estimable(why)]), n_obs=n_obs, n_clusters=n_clusters)

    if len(data) == 0:
        return not_fitted("no observations")

    if not single_entity and cluster_col is not None and data["_cluster"].nunique() < 2:
        why = f"only one {cluster_col} cluster; cluster-robust standard errors need at least 2 (setting 'cluster')"
        return not_fitted(why, n_obs=len(data), n_clusters=1)

    vcov_arg: object
    vcov_kwargs: dict[str, object] | None = None
    fixef_rm = "singleton"  # reghdfe drops singletons by default
    if single_entity:
        lag = req.nw_lag if req.nw_lag is not None else newey_west_default_lag(len(data))
        order_cols = [c for c in NW_ORDER_COLUMNS if c in data.columns]
        if order_cols:
            data = data.sort_values(order_cols, kind="mergesort").reset_index(drop=True)
            if "target_date" in data and data["target_date"].duplicated().any():
                notes.append(
                    f"{int(data['target_date'].duplicated().sum())} row(s) share a target_date; "
                    "Newey-West treats rows as consecutive in (target_date, text_date, row_id) "
                    "order (as Stata newey, force)"
                )
        data["_time"] = np.arange(1, len(data) + 1, dtype=float)
        vcov_arg, vcov_kwargs = "NW", {"time_id": "_time", "lag": int(lag)}
        fixef_rm = "none"  # newey has no singleton rule; keep its sample
        notes.append(
            f"single entity: entity fixed effects dropped, Newey-West standard errors "
            f"(Bartlett, lag {lag}); power is limited (protocol)"
        )
    elif cluster_col is None:
        vcov_arg = "hetero"
    else:
        vcov_arg = {"CRV1": "_cluster"}

    kept_mask = np.ones(len(data), dtype=bool)
    if fixef_rm == "singleton" and fixed_effects:
        # pyfixest's compiled demeaner aborts the whole process (a Rust panic, not an
        # exception) when singleton removal leaves nothing to demean, as with a sparse
        # daily panel; so count what would remain first and refuse to fit such a sample.
        kept_mask = non_singleton_mask(data, fixed_effects)
        kept = int(kept_mask.sum())
        if kept <= len(regressors):
            return not_fitted(
                f"{len(data) - kept} singleton observation(s) dropped leave {kept} row(s) "
                f"for {len(regressors)} term(s) (a coarser period_frequency gives fewer singletons)",
                n_obs=kept,
            )

    from pyfixest.demeaners import MapDemeaner

    raw_columns = [req.outcome, *dict.fromkeys(c for t in regressors for c in _term_columns(t))]
    scales = column_scales(data, raw_columns)
    for c in raw_columns:
        data[c] = data[c] / scales[c]
    ssc = pf.ssc(k_adj=True, k_fixef="nonnested", G_adj=True, G_df="min")
    fml = _formula(req, fixed_effects)
    try:
        # pyfixest announces the singletons it drops only as a warning; the count below
        # comes from kept_mask instead (the same reghdfe rule), because warning capture
        # is process-wide and two fits in parallel dbt threads could swap their counts.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # pyfixest deep-copies its input unless copy_data=False, and then resets its
            # index and drops rows from it in place; a shallow copy of `data` (no column
            # is copied; copy-on-write) takes any such change, so `data` stays as it is
            # for the wild bootstrap below and no copy is made (at 800,000 rows and
            # seven terms: 114 MiB less at the fit's peak, the same estimates).
            fit = pf.feols(
                fml,
                data=data.copy(deep=False),
                vcov=vcov_arg,
                vcov_kwargs=vcov_kwargs,
                ssc=ssc,
                fixef_rm=fixef_rm,
                demeaner=MapDemeaner(fixef_tol=FIXEF_TOL),
                copy_data=False,
            )
    except Exception as exc:  # pyfixest raises ValueError for all-collinear etc.
        return not_fitted(estimator_message(exc), n_obs=len(data))

    n_singletons = int(len(data) - kept_mask.sum())
    collinear = [str(v) for v in (getattr(fit, "_collin_vars", None) or [])]
    names = [str(n) for n in fit._coefnames]
    coefs = dict(zip(names, np.asarray(fit._beta_hat, dtype=float).ravel(), strict=False))
    ses = dict(zip(names, np.sqrt(np.diag(np.asarray(fit._vcov, dtype=float))), strict=False))
    n_obs = int(fit._N)

    n_clusters: float = math.nan
    vcov_factor = 1.0
    if single_entity:
        df_t = float(n_obs - fit._df_k)  # Stata newey / statsmodels use_t: t(N-K)
    else:
        df_t = float(np.min(fit._df_t))  # CRV: G-1; HC1: N-K (as reghdfe)
        extra = extra_redundant_levels(data.loc[kept_mask], fixed_effects, "_cluster" if cluster_col else None)
        if extra:
            # pyfixest counts one redundant level per additional fixed effect; reghdfe
            # counts the connected components of two non-nested fixed effects (a stacked
            # regression of disconnected halves has two): K is `extra` smaller.
            k_pf = float(fit._df_k)
            vcov_factor = (n_obs - k_pf) / (n_obs - k_pf + extra)
            if cluster_col is None:
                df_t += extra
        if cluster_col is not None:
            # clusters the fit used: after singletons are dropped (pyfixest's count)
            n_clusters = float(np.min(fit._G))
            if n_clusters < MIN_CLUSTERS:
                notes.append(
                    f"only {int(n_clusters)} clusters (< {MIN_CLUSTERS}): cluster-robust inference is unreliable (protocol)"
                )
    if collinear:
        notes.append(f"collinear term(s) dropped: {', '.join(collinear)}")
    if n_singletons:
        notes.append(f"{n_singletons} singleton observation(s) dropped")

    ses = {k: v * math.sqrt(vcov_factor) for k, v in ses.items()}
    r2 = float(getattr(fit, "_r2", math.nan))
    r2_within = float(getattr(fit, "_r2_within", math.nan)) if fixed_effects else r2
    _release(fit)
    vcov_label = _vcov_label(req, single_entity, vcov_kwargs)
    rows = []
    # every clustered regression with terms the verdict reads gets the fast WCR bootstrap
    # (lookahead/stats/wild.py) and the effective number of clusters G*, at any G
    clustered = cluster_col is not None and not single_entity
    wild_wanted = [t for t in regressors if t in req.wild_terms]
    run_wild = clustered and req.wild is not None and bool(wild_wanted)
    boot_on = run_wild and req.wild is not None and req.wild.wild_bootstrap_draws > 0
    design: PartialledDesign | None = None
    fitted_terms: list[str] = []
    if run_wild:
        wd = data.loc[kept_mask]
        fitted_terms = [t for t in regressors if _match_name(t, names)]
        w_x = (
            np.column_stack([np.prod([wd[c].to_numpy(float) for c in _term_columns(t)], axis=0) for t in fitted_terms])
            if fitted_terms
            else np.zeros((len(wd), 0))
        )
        try:
            design = PartialledDesign(
                wd[req.outcome].to_numpy(float), w_x, [pd.factorize(wd[fe])[0] for fe in fixed_effects], wd["_cluster"].to_numpy()
            )
        except (ValueError, np.linalg.LinAlgError) as exc:
            notes.append(f"wild bootstrap failed for {req.spec} ({req.sample}): " + " ".join(str(exc).split())[:200])
        del wd, w_x
    from scipy.stats import t as t_dist  # here, not at import: the report reads this module's constants

    # an interaction whose main effect was dropped as collinear (e.g. mu_hat identical to
    # LAP: lap dropped, and mu_hat:lap would then be the slope on mu_hat squared) is not
    # the coefficient asked for: it is not estimable, never reported under its name
    dropped_main = [t for t in regressors if len(_term_columns(t)) == 1 and not _match_name(t, names)]
    for term in regressors:
        key = _match_name(term, names)
        lost = [m for m in dropped_main if m in _term_columns(term)] if len(_term_columns(term)) > 1 else []
        if key and lost:
            key = None
            notes.append(
                not_estimable(
                    f"{term}: its main effect {', '.join(lost)} was dropped as collinear, so the "
                    f"remaining coefficient would measure a different product"
                )
            )
        unscale = scales[req.outcome] / math.prod(scales[c] for c in _term_columns(term))
        b = coefs.get(key, math.nan) * unscale if key else math.nan
        se = ses.get(key, math.nan) * unscale if key else math.nan
        t = b / se if (np.isfinite(b) and np.isfinite(se) and se > 0) else math.nan
        p2 = float(2.0 * t_dist.sf(abs(t), df_t)) if np.isfinite(t) and df_t > 0 else math.nan
        one_sided = term in req.one_sided_terms
        wres = WildResult()
        if design is not None and term in req.wild_terms and key and np.isfinite(t):
            col = fitted_terms.index(term)
            if boot_on and req.wild is not None:
                wres = design.bootstrap(
                    col, req.wild, one_sided=one_sided, two_sided_read=term in req.wild_two_sided_terms, mde_alpha=req.mde_alpha
                )
                if wres.note:
                    notes.append(f"wild bootstrap for {term} in {req.spec} ({req.sample}): {wres.note}")
            else:
                wres = WildResult(g_star=design.g_star(col))
        # minimum detectable effect of the one-sided test at req.mde_alpha (the level the
        # decision reads it at) with 80% power, by the inference a decision reads: the
        # bootstrap t distribution when it ran, else t(df)
        mde = math.nan
        if one_sided and np.isfinite(se):
            if np.isfinite(wres.mde):
                mde = wres.mde * unscale
            elif df_t > 0:
                mde = float((t_dist.ppf(1 - req.mde_alpha, df_t) + t_dist.ppf(0.80, df_t)) * se)
        p_read = wres.p_one if one_sided else wres.p_two
        rows.append(
            {
                "spec": req.spec,
                "sample": req.sample,
                "term": term,
                "estimate": b,
                "std_error": se,
                "t": t,
                "p_two_sided": p2,
                "p_one_sided": one_sided_p(t, p2) if one_sided else math.nan,
                "p_wild_two_sided": wres.p_two,
                "p_wild_one_sided": wres.p_one if one_sided else math.nan,
                "wild_bootstrap": (wild_label(req.wild, wres.draws) if wres.draws and req.wild is not None else ""),
                "n_obs": n_obs,
                "n_clusters": n_clusters,
                "n_singletons": n_singletons,
                "dropped_terms": ", ".join(collinear),
                "r2": r2,
                "r2_within": r2_within,
                "fixed_effects": fe_label,
                "vcov": vcov_label,
                "df": df_t,
                "n_clusters_effective": wres.g_star,
                "wild_draws": wres.draws,
                "p_wild_mc_se": (
                    math.sqrt(p_read * (1 - p_read) / wres.draws) if wres.draws and np.isfinite(p_read) else math.nan
                ),
                "mde": mde,
            }
        )
    warning = "; ".join(notes)
    for r in rows:
        r["warning"] = warning
    return _typed(pd.DataFrame(rows, columns=list(RESULT_COLUMNS)))


def _release(fit: object) -> None:
    """Free what a fitted pyfixest model holds, once its numbers are read.

    Why: the model and formulaic's model-matrix objects sit in reference cycles, so they
    are freed only when Python's cycle collector runs, which in a long build (few new
    Python objects; gc.freeze in lookahead.dbt_plugin) can be several regressions later;
    until then they keep copies of the sample (data, model matrices, demeaned columns,
    scores). At 800,000 rows each fit left 150-250 MiB behind and the paper's fits piled
    up (benchmarks/HISTORY.md). Emptying the model's attributes frees its arrays at once; a
    collection of the two young generations then frees the cycles this fit made
    (milliseconds: the long-lived objects of the oldest generation are not walked)."""
    vars(fit).clear()
    gc.collect(1)


def _match_name(term: str, names: Iterable[str]) -> str | None:
    """pyfixest may write an interaction as a:b or b:a; match either order."""
    names = list(names)
    if term in names:
        return term
    parts = sorted(_term_columns(term))
    for n in names:
        if sorted(n.split(":")) == parts:
            return n
    return None


def _vcov_label(req: FitRequest, single_entity: bool, vcov_kwargs: dict | None) -> str:
    if single_entity:
        lag = (vcov_kwargs or {}).get("lag", req.nw_lag)
        return f"NW(lag={lag}, Bartlett; N/(N-K))"
    col = CLUSTER_COLUMNS[req.cluster]
    if col is None:
        return "HC1 (N/(N-K))"
    return f"CRV1({col}; G/(G-1)*(N-1)/(N-K))"
