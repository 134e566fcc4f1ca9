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
  * The break (mart `effective_cutoff`): a one-break mean-shift fit by least squares
    (Bai 1994, "Least Squares Estimation of a Shift in Linear Processes"; Bai and Perron
    1998), with the break restricted to month boundaries and to a fall (mean before >
    mean after). On the rows it is the row-level least-squares fit; on the monthly
    series it is the fit weighted by each month's n. We chose the one-break fit over
    PELT (Killick et al. 2012) because the question has exactly one break by design (a
    training cutoff), a one-break fit has no penalty to tune, and its estimate comes
    with a sup-F statistic that a permutation test can calibrate. Each segment keeps at
    least MIN_SEGMENT_SHARE of the months (Andrews 1993's 15% trimming), at least one.
  * Is there a fall at all: the sup of the between-segment sum of squares over the
    candidate breaks (monotone in Andrews' sup-F, since the total sum of squares is fixed),
    compared with the same statistic over random orders of the months (whole months
    permuted with their rows, so a common shock to a month stays in that month). With
    p >= ALPHA_FALL the mart says "no significant fall" and names no month.
  * Its interval: the same entity bootstrap (the same draws as `lap_by_period`), the
    break re-estimated in every draw; the 2.5% and 97.5% quantiles of the break month.
  * The size of the fall: (mean before - mean after) / sd of the rows before the break.

The break month is the LAST month of the high-LAP regime (the model's knowledge reaches
its end), so it reads like `training_cutoff`: a stated cutoff of 2021-12-31 is "inside"
when 2021-12 lies in the interval."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

#: The interval's level, the trimmed mean's share cut from each tail, the draws.
LEVEL = 0.95
TRIM = 0.10
BOOTSTRAP_DRAWS = 999
PERMUTATIONS = 999
SEED = 20240611
#: A fall is significant when the permutation p is below this.
ALPHA_FALL = 0.05
#: Each segment keeps at least this share of the months (Andrews 1993), at least one month.
MIN_SEGMENT_SHARE = 0.15

BREAK, NO_FALL, TOO_FEW = "break", "no significant fall", "too few months"
STATUSES = (BREAK, NO_FALL, TOO_FEW)
METHOD = ("one-break least-squares mean-shift fit on monthly LAP weighted by n (Bai 1994), "
          "break at a month boundary with a fall, each segment >= 15% of the months; "
          "month-permutation test of the sup-F; entity bootstrap interval")

LAP_BY_PERIOD_COLUMNS = ("measure", "is_selected_measure", "month", "month_label", "after_stated_cutoff",
                         "n", "n_entities", "mean", "trimmed_mean", "sd", "ci_low", "ci_high",
                         "bootstrap_draws")
EFFECTIVE_CUTOFF_COLUMNS = (
    "measure", "is_selected_measure", "status", "break_month", "effective_cutoff",
    "interval_low_month", "interval_high_month", "interval_level", "stated_cutoff",
    "stated_cutoff_month", "stated_in_interval", "mean_before", "mean_after", "sd_before",
    "fall_sd", "p_fall", "n_before", "n_after", "n_months", "first_month", "last_month",
    "bootstrap_draws", "bootstrap_share_break", "permutations", "method")


@dataclass(frozen=True)
class Cells:
    """One measure's rows summed by entity (rows of the arrays) and month (columns)."""

    months: pd.DatetimeIndex      # first day of each month, ascending, every month with a row
    entities: np.ndarray          # entity ids (rows)
    sums: np.ndarray              # E x M sum of LAP
    counts: np.ndarray            # E x M number of rows
    values: pd.DataFrame          # the rows: entity, month (index into months), lap


def month_start(dates: pd.Series) -> pd.Series:
    """The first day of each date's calendar month."""
    return pd.to_datetime(dates).dt.to_period("M").dt.to_timestamp()


def cells(frame: pd.DataFrame, column: str, entities: Sequence[str]) -> Cells:
    """The rows of `frame` with a value of `column`, summed by entity and month.

    `entities` fixes the row order (every measure uses the same entity list, so the same
    bootstrap draws resample the same entities)."""
    lap = pd.to_numeric(frame[column], errors="coerce").astype(float)
    ok = lap.notna() & np.isfinite(lap)
    rows = pd.DataFrame({"entity": frame.loc[ok, "entity_id"].astype(str).to_numpy(),
                         "month": month_start(frame.loc[ok, "target_date"]).to_numpy(),
                         "lap": lap[ok].to_numpy()})
    months = pd.DatetimeIndex(sorted(rows["month"].unique()))
    ent_index = {e: i for i, e in enumerate(entities)}
    e_idx = rows["entity"].map(ent_index).to_numpy(dtype=int)
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
    kept = x[k:len(x) - k]
    return float(kept.mean()) if len(kept) else math.nan


def _quantiles(x: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan
    a = (1 - level) / 2
    return float(np.quantile(x, a)), float(np.quantile(x, 1 - a))


def monthly_table(c: Cells, weights: np.ndarray, level: float = LEVEL) -> pd.DataFrame:
    """Per month: n, entities, mean, trimmed mean, sd and the entity-bootstrap interval."""
    n = c.counts.sum(axis=0)
    mean = c.sums.sum(axis=0) / np.where(n > 0, n, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (weights @ c.sums) / (weights @ c.counts)
    out = []
    for j, m in enumerate(c.months):
        x = c.values.loc[c.values["m"] == j, "lap"].to_numpy()
        lo, hi = _quantiles(boot[:, j], level)
        out.append({"month": m, "n": int(n[j]), "n_entities": int((c.counts[:, j] > 0).sum()),
                    "mean": float(mean[j]), "trimmed_mean": trimmed_mean(x),
                    "sd": float(np.std(x, ddof=1)) if len(x) > 1 else math.nan,
                    "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(out)


def min_segment(n_months: int) -> int:
    """Fewest months a segment keeps: MIN_SEGMENT_SHARE of them, at least one."""
    return max(1, int(math.ceil(MIN_SEGMENT_SHARE * n_months)))


def break_gains(sums: np.ndarray, counts: np.ndarray, seg: int) -> np.ndarray:
    """For series in the rows of `sums`/`counts` (draws x months): the between-segment sum
    of squares N1*N2/N*(m1 - m2)^2 of a break after month k (column k, k = 0..M-2), set to
    -inf where the break is not a fall or leaves a segment shorter than `seg` months."""
    sums = np.atleast_2d(sums)
    counts = np.atleast_2d(counts)
    n_months = sums.shape[1]
    s1 = np.cumsum(sums, axis=1)[:, :-1]
    n1 = np.cumsum(counts, axis=1)[:, :-1]
    s_tot = sums.sum(axis=1, keepdims=True)
    n_tot = counts.sum(axis=1, keepdims=True)
    n2 = n_tot - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        m1 = s1 / n1
        m2 = (s_tot - s1) / n2
        gain = n1 * n2 / n_tot * (m1 - m2) ** 2
    k = np.arange(n_months - 1)
    allowed = (k + 1 >= seg) & (n_months - (k + 1) >= seg)
    ok = allowed[None, :] & (n1 > 0) & (n2 > 0) & (m1 > m2) & np.isfinite(gain)
    return np.where(ok, gain, -np.inf)


def estimate_break(sums: np.ndarray, counts: np.ndarray, seg: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, sup gain) per series: the break after month k with the largest fall-gain
    (k = -1 and gain -inf where no candidate is a fall)."""
    gains = break_gains(sums, counts, seg)
    k = np.argmax(gains, axis=1)
    best = gains[np.arange(len(gains)), k]
    return np.where(np.isfinite(best), k, -1), best


def permutation_p(month_sums: np.ndarray, month_counts: np.ndarray, observed: float, seg: int,
                  permutations: int = PERMUTATIONS, seed: int = SEED) -> float:
    """Share of random month orders whose sup gain reaches the observed one ((1 + #) / (1 + P))."""
    rng = np.random.default_rng(seed + 1)
    order = np.argsort(rng.random((permutations, len(month_sums))), axis=1)
    _, best = estimate_break(month_sums[order], month_counts[order], seg)
    return float((1 + np.sum(best >= observed * (1 - 1e-12))) / (1 + permutations))


def _month_end(m: pd.Timestamp) -> pd.Timestamp:
    return m + pd.offsets.MonthEnd(0)


def effective_cutoff_row(c: Cells, weights: np.ndarray, stated_cutoff: str,
                         level: float = LEVEL, permutations: int = PERMUTATIONS) -> dict:
    """One measure's row of `effective_cutoff` (see the module doc)."""
    stated = pd.Timestamp(stated_cutoff)
    stated_month = stated.to_period("M").to_timestamp()
    month_sums, month_counts = c.sums.sum(axis=0), c.counts.sum(axis=0)
    n_months = len(c.months)
    row: dict = {c_: None for c_ in EFFECTIVE_CUTOFF_COLUMNS}
    row.update({"stated_cutoff": stated.date(), "stated_cutoff_month": stated_month.date(),
                "interval_level": level, "n_months": n_months, "method": METHOD,
                "bootstrap_draws": int(len(weights)), "permutations": permutations,
                "first_month": c.months[0].date() if n_months else None,
                "last_month": c.months[-1].date() if n_months else None})
    seg = min_segment(n_months)
    if n_months < 2 * seg or n_months < 3:
        row["status"] = TOO_FEW
        return row
    k, best = estimate_break(month_sums, month_counts, seg)
    k, best = int(k[0]), float(best[0])
    if k < 0:
        row.update({"status": NO_FALL, "p_fall": 1.0})
        return row
    p = permutation_p(month_sums, month_counts, best, seg, permutations)
    before = c.values.loc[c.values["m"] <= k, "lap"].to_numpy()
    after = c.values.loc[c.values["m"] > k, "lap"].to_numpy()
    sd = float(np.std(before, ddof=1)) if len(before) > 1 else math.nan
    fall = float(before.mean() - after.mean())
    row.update({"p_fall": p, "mean_before": float(before.mean()), "mean_after": float(after.mean()),
                "sd_before": sd, "fall_sd": fall / sd if sd and sd > 0 else math.nan,
                "n_before": int(len(before)), "n_after": int(len(after))})
    if p >= ALPHA_FALL:
        row["status"] = NO_FALL
        return row
    kb, _ = estimate_break(weights @ c.sums, weights @ c.counts, seg)
    found = kb[kb >= 0]
    row["bootstrap_share_break"] = float(len(found) / len(kb)) if len(kb) else math.nan
    a = (1 - level) / 2
    lo = int(np.quantile(found, a, method="lower")) if len(found) else k
    hi = int(np.quantile(found, 1 - a, method="higher")) if len(found) else k
    lo, hi = min(lo, k), max(hi, k)
    low_m, high_m, brk = c.months[lo], c.months[hi], c.months[k]
    row.update({"status": BREAK, "break_month": brk.date(), "effective_cutoff": _month_end(brk).date(),
                "interval_low_month": low_m.date(), "interval_high_month": high_m.date(),
                "stated_in_interval": bool(low_m <= stated_month <= high_m)})
    return row


def measure_frames(panel: pd.DataFrame, measures: Sequence[tuple[str, str]], selected: str,
                   stated_cutoff: str, draws: int = BOOTSTRAP_DRAWS, seed: int = SEED,
                   level: float = LEVEL) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(lap_by_period, effective_cutoff) for `measures` ((name, panel column) pairs) on the
    whole panel (pre and post rows: columns entity_id, target_date and the LAP columns)."""
    entities = sorted(panel["entity_id"].dropna().astype(str).unique())
    weights = entity_draws(len(entities), draws, seed)
    stated = pd.Timestamp(stated_cutoff)
    by_period, cut = [], []
    for name, column in measures:
        if column not in panel.columns:
            continue
        c = cells(panel, column, entities)
        if len(c.months) == 0:
            continue
        t = monthly_table(c, weights, level)
        t.insert(0, "measure", name)
        t.insert(1, "is_selected_measure", name == selected)
        t["month_label"] = t["month"].dt.strftime("%Y-%m")
        t["after_stated_cutoff"] = t["month"] > stated
        t["bootstrap_draws"] = draws
        t["month"] = t["month"].dt.date
        by_period.append(t)
        r = effective_cutoff_row(c, weights, stated_cutoff, level)
        r.update({"measure": name, "is_selected_measure": name == selected})
        cut.append(r)
    lbp = (pd.concat(by_period, ignore_index=True) if by_period
           else pd.DataFrame(columns=list(LAP_BY_PERIOD_COLUMNS)))
    eff = pd.DataFrame(cut, columns=list(EFFECTIVE_CUTOFF_COLUMNS))
    return lbp[list(LAP_BY_PERIOD_COLUMNS)], _typed(eff)


def _typed(eff: pd.DataFrame) -> pd.DataFrame:
    """Stable column types for an all-NULL column (DuckDB needs a type per column)."""
    for col in ("break_month", "effective_cutoff", "interval_low_month", "interval_high_month",
                "stated_cutoff", "stated_cutoff_month", "first_month", "last_month"):
        eff[col] = as_date(eff[col])
    for col in ("mean_before", "mean_after", "sd_before", "fall_sd", "p_fall", "bootstrap_share_break",
                "interval_level"):
        eff[col] = pd.array(pd.to_numeric(eff[col], errors="coerce"), dtype="Float64")
    for col in ("n_before", "n_after", "n_months", "bootstrap_draws", "permutations"):
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
    get = row.get if hasattr(row, "get") else (lambda k: None)
    if str(get("status")) != BREAK or _truthy(get("stated_in_interval")):
        return ""
    brk = pd.Timestamp(get("break_month")).strftime("%Y-%m")
    lo = pd.Timestamp(get("interval_low_month")).strftime("%Y-%m")
    hi = pd.Timestamp(get("interval_high_month")).strftime("%Y-%m")
    span = brk if lo == hi else f"{lo} to {hi}"
    return (f"**Warning: the stated training cutoff ({stated_cutoff}) lies outside the effective "
            f"cutoff's {int(round(100 * float(get('interval_level'))))}% interval ({span}).** "
            f"{label[0].upper() + label[1:]} falls after {brk}: the data point to knowledge through "
            f"the end of {brk}. The verdict above still reads the stated cutoff; the cutoff "
            f"sensitivity table shows the tests with the cutoff at {brk} (docs/cutoff.md).")


def _truthy(v: object) -> bool:
    return str(v).strip().lower() in ("true", "1")


def build_frames(panel_relation: object, settings_frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(lap_by_period, effective_cutoff) for a dbt build: every measure the study computed,
    read from the whole panel (only the columns used)."""
    from lookahead.measures import study_measures
    from lookahead.stats.panel_io import read_columns
    from lookahead.stats.protocol import study_from_frame

    study = study_from_frame(settings_frame)
    measures = [(m.name, m.column) for m in study_measures(study)]
    panel = read_columns(panel_relation, ["entity_id", "target_date", *(col for _, col in measures)])
    return measure_frames(panel, measures, str(study.measures.lap_measure),
                          str(study.protocol.training_cutoff))
