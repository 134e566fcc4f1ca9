"""The effective training cutoff, read from the study's own LAP, month by month.

Why: the whole test hangs on `training_cutoff`, a date copied from a model card, and
effective cutoffs are often months away from the stated ones (Cheng et al. 2024, "Dated
Data: Tracing Knowledge Cutoffs in Large Language Models"). LAP by realization month
shows where the model's knowledge ends: LAP stays high while the model saw the period
and falls where its training data ends.

Method (docs/cutoff.md has the why and the citations):
  * LAP by month (mart `lap_by_period`): per measure and realization month (the calendar
    month of target_date), n, mean, a 10% trimmed mean, and a 95% percentile interval
    for the mean from a bootstrap that resamples entities (the protocol's clusters:
    one entity's rows move together, so within-entity correlation is kept).
  * The break (mart `effective_cutoff`): a fall in LAP beyond what a linear trend over
    time explains. The monthly means, weighted by each month's n, are fitted by least
    squares with an intercept and a linear trend in the month (the null: LAP may drift,
    e.g. older texts better memorized, but does not break) and, for each candidate month
    boundary k, the same plus a level shift after k (Bai 1994, 1997; Bai and Perron
    1998). The break is the k with the largest sup-F among the shifts that are falls,
    F_k = (SSR_0 - SSR_k) / (SSR_k / (M - 3)), the trend in both models (Andrews 1993).
    Each segment keeps at least MIN_SEGMENT_SHARE of the months (Andrews' 15% trimming),
    at least one. One break, not PELT (Killick et al. 2012): a training cutoff is one
    break by design, and a one-break fit has no penalty to tune.
  * Is there a fall at all: the sup-F against its distribution under the null of a trend
    without a break, from a wild bootstrap of the trend fit's monthly residuals
    (Rademacher, one weight per month, NULL_DRAWS draws; the same sup over the same
    candidates in every draw). A permutation of the months is not used: it asks whether
    months are exchangeable, which a steady decline is not, and called a decline a break.
    With p >= ALPHA_FALL no month is named; the row says "steady decline" when the trend
    is significantly negative (two-sided p < ALPHA_FALL, t on M - 2 df, the slope
    reported per month), else "no significant fall".
  * Its interval: Bai (1997)'s for a shift in mean: k +- (floor(c lambda) + 1) months,
    lambda = sigma^2 / delta^2, delta the shift, sigma^2 the residual variance of a
    month's mean (the broken-trend fit's weighted residual variance over the mean n),
    c = BAI_C (the 97.5% quantile of the argmax of a two-sided Brownian motion with drift
    -|s|/2; 11.03 for a 95% interval). It rests on the month-level residuals, so few
    entities widen it through the noise of the month means, not through a bootstrap of
    an argmax (which under-covered with few entities).
  * The size of the fall: (mean before - mean after) / sd of the rows before the break.

The break month is the LAST month of the high-LAP regime (the model's knowledge reaches
its end), so it reads like `training_cutoff`: a stated cutoff of 2021-12-31 is "inside"
when 2021-12 lies in the interval."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

#: The interval's level, the trimmed mean's share cut from each tail, the draws.
LEVEL = 0.95
TRIM = 0.10
BOOTSTRAP_DRAWS = 999
#: Draws of the wild bootstrap of the no-break (trend) fit behind p_fall.
NULL_DRAWS = 999
SEED = 20240611
#: A fall is significant when the permutation p is below this.
ALPHA_FALL = 0.05
#: Each segment keeps at least this share of the months (Andrews 1993), at least one month.
MIN_SEGMENT_SHARE = 0.15
#: Bai (1997): the 97.5% quantile of argmax_s (W(s) - |s|/2), the constant of the 95%
#: interval for a break date, k +- (floor(BAI_C sigma^2 / delta^2) + 1).
BAI_C = 11.03
#: Fewest months a break with a trend is fitted on (3 coefficients, 2 residual df).
MIN_MONTHS = 5

#: Why a fall of LAP at the cutoff is no verdict by itself (docs/cutoff.md, "When not to
#: trust it"): the report prints it wherever it shows the fall.
EXPOSURE_NOTE = (
    "LAP measures exposure to the texts, not knowledge of the outcomes: a model that read "
    "the pre-cutoff texts without learning their outcomes (the demo's clean control) shows "
    "the same fall, so the fall dates the model's reading and beta_3, validation and the "
    "placebo decide contamination (docs/cutoff.md)."
)


BREAK, DECLINE, NO_FALL, TOO_FEW = "break", "steady decline", "no significant fall", "too few months"
STATUSES = (BREAK, DECLINE, NO_FALL, TOO_FEW)
#: How the report words a steady decline.
DECLINE_TEXT = "LAP declines steadily; no break"
METHOD = (
    "level shift (a fall) against a linear trend in monthly LAP weighted by n (Bai 1994, "
    "1997), break at a month boundary, each segment >= 15% of the months; sup-F with the "
    "trend in both models, p from a wild bootstrap of the no-break trend fit; Bai (1997) "
    "interval"
)

LAP_BY_PERIOD_COLUMNS = (
    "measure",
    "is_selected_measure",
    "month",
    "month_label",
    "after_stated_cutoff",
    "n",
    "n_entities",
    "mean",
    "trimmed_mean",
    "sd",
    "ci_low",
    "ci_high",
    "bootstrap_draws",
)
EFFECTIVE_CUTOFF_COLUMNS = (
    "measure",
    "is_selected_measure",
    "status",
    "break_month",
    "effective_cutoff",
    "interval_low_month",
    "interval_high_month",
    "interval_level",
    "stated_cutoff",
    "stated_cutoff_month",
    "stated_in_interval",
    "mean_before",
    "mean_after",
    "sd_before",
    "fall_sd",
    "p_fall",
    "n_before",
    "n_after",
    "n_months",
    "first_month",
    "last_month",
    "bootstrap_draws",
    "interval_half_width",
    "null_draws",
    "trend_per_month",
    "trend_p",
    "method",
)


@dataclass(frozen=True)
class Cells:
    """One measure's rows summed by entity (rows of the arrays) and month (columns)."""

    months: pd.DatetimeIndex  # first day of each month, ascending, every month with a row
    entities: np.ndarray  # entity ids (rows)
    sums: np.ndarray  # E x M sum of LAP
    counts: np.ndarray  # E x M number of rows
    values: pd.DataFrame  # the rows: entity, month (index into months), lap


def month_start(dates: pd.Series) -> pd.Series:
    """The first day of each date's calendar month."""
    return pd.to_datetime(dates).dt.to_period("M").dt.to_timestamp()


def cells(frame: pd.DataFrame, column: str, entities: Sequence[str]) -> Cells:
    """The rows of `frame` with a value of `column`, summed by entity and month.

    `entities` fixes the row order (every measure uses the same entity list, so the same
    bootstrap draws resample the same entities)."""
    lap = pd.to_numeric(frame[column], errors="coerce").astype(float)
    ok = lap.notna() & np.isfinite(lap)
    rows = pd.DataFrame(
        {
            "entity": frame.loc[ok, "entity_id"].astype(str).to_numpy(),
            "month": month_start(frame.loc[ok, "target_date"]).to_numpy(),
            "lap": lap[ok].to_numpy(),
        }
    )
    months = pd.DatetimeIndex(sorted(rows["month"].unique()))
    e_idx = pd.Index(entities).get_indexer(rows["entity"])
    m_idx = months.get_indexer(rows["month"])
    sums = np.zeros((len(entities), len(months)))
    counts = np.zeros((len(entities), len(months)))
    np.add.at(sums, (e_idx, m_idx), rows["lap"].to_numpy())
    np.add.at(counts, (e_idx, m_idx), 1.0)
    rows["m"] = m_idx
    return Cells(months=months, entities=np.asarray(entities), sums=sums, counts=counts, values=rows)


def entity_draws(n_entities: int, draws: int = BOOTSTRAP_DRAWS, seed: int = SEED) -> np.ndarray:
    """draws x entities: how often each entity is drawn (n_entities draws with replacement)."""
    rng = np.random.default_rng(seed)
    if n_entities == 0:
        return np.zeros((draws, 0))
    return rng.multinomial(n_entities, np.full(n_entities, 1.0 / n_entities), size=draws).astype(float)


def trimmed_mean(x: np.ndarray, trim: float = TRIM) -> float:
    """Mean after cutting floor(trim * n) values from each tail (scipy's trim_mean)."""
    x = np.sort(np.asarray(x, dtype=float))
    k = int(math.floor(trim * len(x)))
    kept = x[k : len(x) - k]
    return float(kept.mean()) if len(kept) else math.nan


def _quantiles(x: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan
    a = (1 - level) / 2
    return float(np.quantile(x, a)), float(np.quantile(x, 1 - a))


def _by_month(c: Cells) -> list[np.ndarray]:
    """Each month's LAP values, in row order (one stable sort, not a scan per month)."""
    m = c.values["m"].to_numpy()
    order = np.argsort(m, kind="stable")
    bounds = np.searchsorted(m[order], np.arange(len(c.months) + 1))
    lap = c.values["lap"].to_numpy()[order]
    return [lap[bounds[j] : bounds[j + 1]] for j in range(len(c.months))]


def monthly_table(c: Cells, weights: np.ndarray, level: float = LEVEL) -> pd.DataFrame:
    """Per month: n, entities, mean, trimmed mean, sd and the entity-bootstrap interval."""
    n = c.counts.sum(axis=0)
    mean = c.sums.sum(axis=0) / np.where(n > 0, n, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (weights @ c.sums) / (weights @ c.counts)
    out = []
    for j, (m, x) in enumerate(zip(c.months, _by_month(c), strict=True)):
        lo, hi = _quantiles(boot[:, j], level)
        out.append(
            {
                "month": m,
                "n": int(n[j]),
                "n_entities": int((c.counts[:, j] > 0).sum()),
                "mean": float(mean[j]),
                "trimmed_mean": trimmed_mean(x),
                "sd": float(np.std(x, ddof=1)) if len(x) > 1 else math.nan,
                "ci_low": lo,
                "ci_high": hi,
            }
        )
    return pd.DataFrame(out)


def min_segment(n_months: int) -> int:
    """Fewest months a segment keeps: MIN_SEGMENT_SHARE of them, at least one."""
    return max(1, int(math.ceil(MIN_SEGMENT_SHARE * n_months)))


def _design(x: np.ndarray, k: int | None) -> np.ndarray:
    """Columns: intercept, linear trend in the month, and (k given) a shift after month k."""
    cols = [np.ones_like(x), x]
    if k is not None:
        cols.append((np.arange(len(x)) > k).astype(float))
    return np.column_stack(cols)


@dataclass(frozen=True)
class TrendBreakFit:
    """The trend-and-break fits of one monthly series (module doc): per candidate k the
    shift (negative: a fall) and F_k; the break k (-1: no fall among the candidates) and
    its sup-F; the no-break trend fit's slope, its p and its fitted values and residuals."""

    k: int
    sup_f: float
    shift: float
    ssr_break: float
    slope: float
    slope_p: float
    fitted0: np.ndarray
    resid0: np.ndarray


def _sup_f(y: np.ndarray, n: np.ndarray, x: np.ndarray, seg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For the columns of y (M x B): (best k, sup-F, its shift, its SSR); k = -1 where no
    candidate is a fall. Weighted least squares, weights n (the row-level fit on month
    boundaries)."""
    m = len(x)
    sw = np.sqrt(n)[:, None]
    yw = y * sw
    x0 = _design(x, None) * sw
    q0, _ = np.linalg.qr(x0)
    ssr0 = np.einsum("mb,mb->b", yw, yw) - np.einsum("kb,kb->b", q0.T @ yw, q0.T @ yw)
    best_f = np.full(y.shape[1], -np.inf)
    best_k = np.full(y.shape[1], -1)
    best_shift = np.full(y.shape[1], np.nan)
    best_ssr = np.full(y.shape[1], np.nan)
    for k in range(m - 1):
        if not (k + 1 >= seg and m - (k + 1) >= seg):
            continue
        xk = _design(x, k) * sw
        pinv = np.linalg.pinv(xk)
        coef = pinv @ yw
        r = yw - xk @ coef
        ssr = np.einsum("mb,mb->b", r, r)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = (ssr0 - ssr) / (ssr / (m - 3))
        f = np.where((ssr <= 1e-300 * np.maximum(ssr0, 1e-300)) & (ssr0 - ssr > 0), np.inf, f)
        fall = coef[2] < -1e-15 * np.maximum(np.abs(y).max(axis=0), 1e-300)
        better = fall & np.isfinite(np.where(np.isinf(f), 0.0, f)) & (f > best_f)
        best_f = np.where(better, f, best_f)
        best_k = np.where(better, k, best_k)
        best_shift = np.where(better, coef[2], best_shift)
        best_ssr = np.where(better, ssr, best_ssr)
    return best_k, best_f, best_shift, best_ssr


def fit_trend_break(month_sums: np.ndarray, month_counts: np.ndarray, x: np.ndarray, seg: int) -> TrendBreakFit:
    """The observed series' fits (months with rows only)."""
    n = month_counts
    y = month_sums / n
    k, f, shift, ssr = _sup_f(y[:, None], n, x, seg)
    w = np.sqrt(n)
    x0 = _design(x, None)
    coef, *_ = np.linalg.lstsq(x0 * w[:, None], y * w, rcond=None)
    fitted = x0 @ coef
    resid = y - fitted
    m = len(x)
    slope_p = math.nan
    flat = float(np.ptp(y)) <= 1e-12 * max(float(np.abs(y).max()), 1e-300)
    if m > 2 and not flat:  # a constant series has no trend to test (rounding only)
        s2 = float(np.sum(n * resid**2)) / (m - 2)
        cov = s2 * np.linalg.pinv((x0 * n[:, None]).T @ x0)
        se = math.sqrt(max(float(cov[1, 1]), 0.0))
        if se > 0:
            from scipy import stats

            slope_p = float(2 * stats.t.sf(abs(coef[1] / se), m - 2))
    return TrendBreakFit(
        k=int(k[0]),
        sup_f=float(f[0]),
        shift=float(shift[0]),
        ssr_break=float(ssr[0]),
        slope=float(coef[1]),
        slope_p=slope_p,
        fitted0=fitted,
        resid0=resid,
    )


def null_p(
    fit: TrendBreakFit, month_counts: np.ndarray, x: np.ndarray, seg: int, draws: int = NULL_DRAWS, seed: int = SEED
) -> float:
    """p of the sup-F under a linear trend without a break: a wild bootstrap of the trend
    fit's monthly residuals (Rademacher per month), (1 + #{sup-F* >= sup-F}) / (1 + B)."""
    rng = np.random.default_rng(seed + 1)
    v = rng.integers(0, 2, size=(len(x), draws)) * 2.0 - 1.0
    y_star = fit.fitted0[:, None] + fit.resid0[:, None] * v
    _, f_star, _, _ = _sup_f(y_star, month_counts, x, seg)
    return float((1 + np.sum(f_star >= fit.sup_f * (1 - 1e-12))) / (1 + draws))


def bai_half_width(fit: TrendBreakFit, month_counts: np.ndarray, level: float = LEVEL) -> int:
    """Bai (1997)'s half width in months: floor(c sigma^2 / delta^2) + 1, sigma^2 the
    broken-trend fit's residual variance of a month's mean (a month of mean n)."""
    m = len(month_counts)
    c = BAI_C if abs(level - 0.95) < 1e-9 else _bai_c(level)
    sigma2 = fit.ssr_break / (m - 3) / float(np.mean(month_counts))
    delta2 = fit.shift**2
    if not (delta2 > 0 and np.isfinite(sigma2)):
        return m
    return int(min(math.floor(c * sigma2 / delta2) + 1, m))


def _bai_c(level: float) -> float:
    """The (1 + level) / 2 quantile of argmax_s (W(s) - |s|/2): its distribution function
    for x > 0 (Bai 1997, after Yao 1987) is 1 + sqrt(x / 2 pi) exp(-x/8)
    - (x + 5)/2 Phi(-sqrt(x)/2) + 3/2 exp(x) Phi(-3 sqrt(x)/2); 11.03 at 97.5%."""
    from scipy import optimize, stats

    def cdf(x: float) -> float:
        r = math.sqrt(x)
        return float(
            1
            + math.sqrt(x / (2 * math.pi)) * math.exp(-x / 8)
            - (x + 5) / 2 * stats.norm.cdf(-r / 2)
            + 1.5 * math.exp(x + stats.norm.logcdf(-1.5 * r))
        )

    return float(optimize.brentq(lambda x: cdf(x) - (1 + level) / 2, 1e-9, 200.0))


def _month_end(m: pd.Timestamp) -> pd.Timestamp:
    return m + pd.offsets.MonthEnd(0)


def effective_cutoff_row(c: Cells, draws: int, stated_cutoff: str, level: float = LEVEL, null_draws: int = NULL_DRAWS) -> dict:
    """One measure's row of `effective_cutoff` (see the module doc). `draws` (the entity
    bootstrap's draws in `lap_by_period`) is recorded in the row; the break's interval is
    Bai's."""
    stated = pd.Timestamp(stated_cutoff)
    stated_month = stated.to_period("M").to_timestamp()
    month_sums, month_counts = c.sums.sum(axis=0), c.counts.sum(axis=0)
    n_months = len(c.months)
    row: dict = {c_: None for c_ in EFFECTIVE_CUTOFF_COLUMNS}
    row.update(
        {
            "stated_cutoff": stated.date(),
            "stated_cutoff_month": stated_month.date(),
            "interval_level": level,
            "n_months": n_months,
            "method": METHOD,
            "bootstrap_draws": draws,
            "null_draws": null_draws,
            "first_month": c.months[0].date() if n_months else None,
            "last_month": c.months[-1].date() if n_months else None,
        }
    )
    seg = min_segment(n_months)
    if n_months < 2 * seg or n_months < MIN_MONTHS:
        row["status"] = TOO_FEW
        return row
    x = np.asarray([(m.year - c.months[0].year) * 12 + m.month - c.months[0].month for m in c.months], dtype=float)
    fit = fit_trend_break(month_sums, month_counts, x, seg)
    row.update({"trend_per_month": fit.slope, "trend_p": fit.slope_p})
    declines = bool(np.isfinite(fit.slope_p) and fit.slope_p < ALPHA_FALL and fit.slope < 0)
    if fit.k < 0:
        row.update({"status": DECLINE if declines else NO_FALL, "p_fall": 1.0})
        return row
    k = fit.k
    p = null_p(fit, month_counts, x, seg, null_draws)
    before = c.values.loc[c.values["m"] <= k, "lap"].to_numpy()
    after = c.values.loc[c.values["m"] > k, "lap"].to_numpy()
    sd = float(np.std(before, ddof=1)) if len(before) > 1 else math.nan
    fall = float(before.mean() - after.mean())
    row.update(
        {
            "p_fall": p,
            "mean_before": float(before.mean()),
            "mean_after": float(after.mean()),
            "sd_before": sd,
            "fall_sd": fall / sd if sd and sd > 0 else math.nan,
            "n_before": len(before),
            "n_after": len(after),
        }
    )
    if p >= ALPHA_FALL:
        row["status"] = DECLINE if declines else NO_FALL
        return row
    h = bai_half_width(fit, month_counts, level)
    lo, hi = max(k - h, 0), min(k + h, n_months - 1)
    low_m, high_m, brk = c.months[lo], c.months[hi], c.months[k]
    row.update(
        {
            "status": BREAK,
            "break_month": brk.date(),
            "effective_cutoff": _month_end(brk).date(),
            "interval_low_month": low_m.date(),
            "interval_high_month": high_m.date(),
            "interval_half_width": h,
            "stated_in_interval": bool(low_m <= stated_month <= high_m),
        }
    )
    return row


def _measure_cells(panel: pd.DataFrame, measures: Sequence[tuple[str, str]]) -> list[tuple[str, Cells]]:
    """Each measure's cells (those with a value in some month), on one entity list, so
    the same bootstrap draws resample the same entities in every measure."""
    entities = sorted(panel["entity_id"].dropna().astype(str).unique())
    found = [(name, cells(panel, column, entities)) for name, column in measures if column in panel.columns]
    return [(name, c) for name, c in found if len(c.months)]


def lap_by_period_frame(
    panel: pd.DataFrame,
    measures: Sequence[tuple[str, str]],
    selected: str,
    stated_cutoff: str,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = SEED,
    level: float = LEVEL,
) -> pd.DataFrame:
    """`lap_by_period` for `measures` ((name, panel column) pairs) on the whole panel (pre
    and post rows: columns entity_id, target_date and the LAP columns)."""
    stated = pd.Timestamp(stated_cutoff)
    by_period = []
    found = _measure_cells(panel, measures)
    weights = entity_draws(len(found[0][1].entities) if found else 0, draws, seed)
    for name, c in found:
        t = monthly_table(c, weights, level)
        t.insert(0, "measure", name)
        t.insert(1, "is_selected_measure", name == selected)
        t["month_label"] = t["month"].dt.strftime("%Y-%m")
        t["after_stated_cutoff"] = t["month"] > stated
        t["bootstrap_draws"] = draws
        t["month"] = t["month"].dt.date
        by_period.append(t)
    lbp = pd.concat(by_period, ignore_index=True) if by_period else pd.DataFrame(columns=list(LAP_BY_PERIOD_COLUMNS))
    return lbp[list(LAP_BY_PERIOD_COLUMNS)]


def effective_cutoff_frame(
    panel: pd.DataFrame,
    measures: Sequence[tuple[str, str]],
    selected: str,
    stated_cutoff: str,
    draws: int = BOOTSTRAP_DRAWS,
    level: float = LEVEL,
) -> pd.DataFrame:
    """`effective_cutoff` for `measures` (as :func:`lap_by_period_frame`): one row each.
    `draws` (lap_by_period's entity bootstrap, which this table does not run) is recorded
    in each row; the break's p comes from its own null draws."""
    cut = []
    for name, c in _measure_cells(panel, measures):
        r = effective_cutoff_row(c, draws, stated_cutoff, level)
        r.update({"measure": name, "is_selected_measure": name == selected})
        cut.append(r)
    return _typed(pd.DataFrame(cut, columns=list(EFFECTIVE_CUTOFF_COLUMNS)))


def measure_frames(
    panel: pd.DataFrame,
    measures: Sequence[tuple[str, str]],
    selected: str,
    stated_cutoff: str,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(lap_by_period, effective_cutoff) for `measures` on the whole panel."""
    args = (panel, measures, selected, stated_cutoff)
    return (
        lap_by_period_frame(*args, draws=draws, seed=seed, level=level),
        effective_cutoff_frame(*args, draws=draws, level=level),
    )


#: The two cutoff marts, each computed by its own function, so that each dbt model
#: computes only its own table (each computed both before and kept one).
CUTOFF_FRAMES: dict[str, Callable[..., pd.DataFrame]] = {
    "lap_by_period": lap_by_period_frame,
    "effective_cutoff": effective_cutoff_frame,
}


def _typed(eff: pd.DataFrame) -> pd.DataFrame:
    """Stable column types for an all-NULL column (DuckDB needs a type per column)."""
    for col in (
        "break_month",
        "effective_cutoff",
        "interval_low_month",
        "interval_high_month",
        "stated_cutoff",
        "stated_cutoff_month",
        "first_month",
        "last_month",
    ):
        eff[col] = as_date(eff[col])
    for col in ("mean_before", "mean_after", "sd_before", "fall_sd", "p_fall", "interval_level", "trend_per_month", "trend_p"):
        eff[col] = pd.array(pd.to_numeric(eff[col], errors="coerce"), dtype="Float64")
    for col in ("n_before", "n_after", "n_months", "bootstrap_draws", "null_draws", "interval_half_width"):
        eff[col] = pd.array(pd.to_numeric(eff[col], errors="coerce"), dtype="Int64")
    eff["stated_in_interval"] = pd.array(eff["stated_in_interval"], dtype="boolean")
    eff["is_selected_measure"] = eff["is_selected_measure"].astype(bool)
    for col in ("measure", "status", "method"):
        eff[col] = eff[col].astype(str)
    return eff


def as_date(values: pd.Series) -> pd.Series:
    """A DATE column for DuckDB, typed even when every value is NULL."""
    import pyarrow as pa

    stamps = pd.to_datetime(values).astype("datetime64[us]")
    return stamps.dt.date.astype(pd.ArrowDtype(pa.date32()))


def cutoff_warning(row: pd.Series | dict, stated_cutoff: str, label: str) -> str:
    """The verdict paragraph's warning when the stated cutoff lies outside the break's
    interval under the verdict's measure (empty otherwise). A warning beside the rule:
    the decision still reads the stated cutoff (docs/cutoff.md says why)."""
    get: Callable[[str], Any] = row.get if hasattr(row, "get") else (lambda k: None)
    if str(get("status")) != BREAK or _truthy(get("stated_in_interval")):
        return ""
    brk = pd.Timestamp(get("break_month")).strftime("%Y-%m")
    lo = pd.Timestamp(get("interval_low_month")).strftime("%Y-%m")
    hi = pd.Timestamp(get("interval_high_month")).strftime("%Y-%m")
    span = brk if lo == hi else f"{lo} to {hi}"
    return (
        f"**Warning: the stated training cutoff ({stated_cutoff}) lies outside the effective "
        f"cutoff's {int(round(100 * float(get('interval_level'))))}% interval ({span}).** "
        f"{label[0].upper() + label[1:]} falls after {brk}: the data point to knowledge through "
        f"the end of {brk}. The verdict above still reads the stated cutoff; the cutoff "
        f"sensitivity table shows the tests with the cutoff at {brk} (docs/cutoff.md)."
    )


def _truthy(v: object) -> bool:
    return str(v).strip().lower() in ("true", "1")


def build_frame(panel_relation: object, settings_frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """`table` (a key of CUTOFF_FRAMES) for a dbt build: every measure the study computed,
    read from the whole panel (only the columns used)."""
    from lookahead.measures import study_measures
    from lookahead.stats.panel_io import read_columns
    from lookahead.stats.protocol import study_from_frame

    study = study_from_frame(settings_frame)
    measures = [(m.name, m.column) for m in study_measures(study)]
    panel = read_columns(panel_relation, ["entity_id", "target_date", *(col for _, col in measures)])
    return CUTOFF_FRAMES[table](panel, measures, str(study.measures.lap_measure), str(study.protocol.training_cutoff))
