"""The paper's Tables I-V (and VI, which is Table II on five-level forecasts) as functions.

Each table function takes a panel (CONTRACTS.md columns) and `PaperSections` and returns a
`PaperTable`: the fitted columns in the paper's order. Specifications follow the paper
("A Test of Lookahead Bias in LLM Forecasts", Tables I-VI):

- Table II, eq. (7): outcome ~ LLM (col 1); outcome ~ LLM + LAP + LLM x LAP (col 2).
- Table III, eq. (8): col 1 LLM, M, LLM x M; col 2 adds LAP, LLM x LAP, LAP x M, LLM x LAP x M.
- Table IV: LLM, p(first token), LLM x p (col 1); + LAP, LLM x LAP (col 2); the same
  with stated confidence (cols 3, 4).
- Table V: every variable standardized within the in-sample and within the
  out-of-sample period; cols 1-2 in-sample (baseline, interaction), 3-4 out-of-sample.

All with entity and date (realization-period) fixed effects. The paper clusters Tables
II-V by date and Table VI (quarterly CapEx on five-level forecasts) by firm; the protocol
clusters by entity. So Tables II-V cluster by the setting `paper_cluster` (default date)
and Table VI by entity, as the paper (TABLE_CLUSTERS).

The LAP measure: the paper's tables are Min-K% LAP (eq. 1). They run on Min-K% whenever
the study computed it (``paper_measure``), and on the verdict's measure otherwise; every
caption names the measure it used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, cast

import numpy as np
import pandas as pd

from lookahead.config import Study, check_section_names
from lookahead.measures import MEASURES
from lookahead.paper.fit import FitResult, fit_column
from lookahead.settings_sections import MeasuresSettings, PaperSettings
from lookahead.stats.fe_regression import CLUSTER_COLUMNS as STATS_CLUSTER_COLUMNS
from lookahead.stats.fe_regression import (
    FitRequest,
    NotEstimable,
    RegressionInputError,
    Term,
    not_estimable,
)
from lookahead.stats.verdict import fmt_p

#: Every registered measure's panel column (lookahead.measures), and the configured one.
LAP_COLUMNS = {**{m.name: m.column for m in MEASURES.values()}, "configured": "lap"}
#: The measure of the paper's tables (eq. 1), used whenever the study computed it.
PAPER_MEASURE = "mink"
#: Tables whose clustering the paper fixes apart from the others: Table VI, by firm.
TABLE_CLUSTERS: dict[str, str] = {"table6": "entity"}
#: Five-level forecast values (paper Table VI): a study whose mu_hat takes +-0.5 has them.
FIVE_LEVEL_VALUES = (-1.0, -0.5, 0.0, 0.5, 1.0)

LLM, LAP = "LLM", "LAP"
X = " x "  # how interaction names are written in result tables (ASCII for CSV/SQL users)


@dataclass(frozen=True)
class PaperSections:
    """The two generated sections the paper's tables read: the paper's (paper_cluster,
    moderator_column, paper_oos_start) and the measures' (lap_measure; mink_mean only
    labels results, the Min-K% mean being computed upstream in SQL, so a reader sees
    whether the geometric (paper eq. 1) or arithmetic mean was used), with the panel
    columns every table reads (docs/CONTRACTS.md, Panel) and what the tables derive from
    the sections (the LAP column and its printed label).

    Why the sections and not a copy of their fields: each setting keeps the one name,
    type and default lookahead/study_settings.yml declares."""

    paper: PaperSettings = field(default_factory=PaperSettings.with_defaults)
    measures: MeasuresSettings = field(default_factory=MeasuresSettings.with_defaults)

    #: panel columns (docs/CONTRACTS.md, Panel): the outcome, the LLM's signal, the
    #: fixed effects and Table IV's confidence measures
    outcome: ClassVar[str] = "outcome"
    llm: ClassVar[str] = "mu_hat"
    fixed_effects: ClassVar[tuple[str, ...]] = ("entity_num", "period_num")
    first_token_prob: ClassVar[str] = "first_token_prob"
    stated_confidence: ClassVar[str] = "stated_confidence"

    @property
    def lap(self) -> str:
        """The panel column of the tables' LAP measure."""
        measure = self.measures.lap_measure
        if measure not in LAP_COLUMNS:
            raise RegressionInputError(f"setting 'lap_measure': '{measure}' is not one of {', '.join(LAP_COLUMNS)}")
        return LAP_COLUMNS[measure]

    @property
    def lap_label(self) -> str:
        """The LAP measure as printed (the registry's label): e.g. 'Min-K% LAP (geometric mean)'."""
        measure = self.measures.lap_measure
        if measure not in MEASURES:
            return "configured LAP"
        return MEASURES[measure].label + (f" ({self.measures.mink_mean} mean)" if self._uses_mink_mean else "")

    @property
    def _uses_mink_mean(self) -> bool:
        return self.measures.lap_measure in MEASURES and "mink_mean" in MEASURES[self.measures.lap_measure].settings

    def with_measure(self, lap_measure: str) -> PaperSections:
        """The same settings with the tables' measure set to ``lap_measure`` (a name of
        the measures registry, whose names are the setting's allowed values)."""
        return replace(self, measures=replace(self.measures, lap_measure=cast(Any, lap_measure)))

    @classmethod
    def with_defaults(cls, **given: Any) -> PaperSections:
        """The sections from the settings given by their study names (e.g. ``paper_cluster``,
        ``lap_measure``), declared defaults for the rest; for code outside a study (tests,
        benchmarks). A name neither section declares raises TypeError."""
        check_section_names(given, PaperSettings, MeasuresSettings)
        return cls(PaperSettings.with_defaults(**given), MeasuresSettings.with_defaults(**given))

    @classmethod
    def from_study(cls, study: Study) -> PaperSections:
        """From the one study object (its values checked by lookahead.config)."""
        return cls(study.paper, study.measures)


def paper_columns(s: PaperSections) -> list[str]:
    """Every panel column the paper tables and the bootstrap read under settings `s`: both
    LAP measures (Table I), outcome, LLM, the confidence measures, the moderator, the fixed
    effects, the cluster and target_date (Table V's out-of-sample start). The dbt models
    read only these (lookahead.stats.panel_io)."""
    cl_col = STATS_CLUSTER_COLUMNS.get(s.paper.paper_cluster or "none")
    cols = [
        *LAP_COLUMNS.values(),
        s.outcome,
        s.llm,
        s.first_token_prob,
        s.stated_confidence,
        *([s.paper.moderator_column] if s.paper.moderator_column else []),
        *s.fixed_effects,
        *([cl_col] if cl_col else []),
        "target_date",
    ]
    return list(dict.fromkeys(cols))


def paper_measure(pre: pd.DataFrame | None, s: PaperSections) -> tuple[PaperSections, str]:
    """The settings the paper's tables run under, and a note saying which measure and why:
    Min-K% LAP (the paper's) when the study computed it (its panel column has values),
    else the verdict's measure."""
    col = LAP_COLUMNS[PAPER_MEASURE]
    has = pre is not None and col in pre.columns and int(pd.to_numeric(pre[col], errors="coerce").notna().sum()) > 0
    if has and s.measures.lap_measure != PAPER_MEASURE:
        out = s.with_measure(PAPER_MEASURE)
        return out, (
            f"The paper's tables run on {out.lap_label}, as the paper's do; the verdict reads {s.lap_label} (var lap_measure)."
        )
    if has:
        return s, f"The paper's tables run on {s.lap_label}, as the paper's do."
    return s, (
        f"Min-K% LAP was not computed by this study, so the paper's tables run on the "
        f"verdict's measure, {s.lap_label}; the paper's own tables use Min-K% LAP."
    )


def is_five_level(df: pd.DataFrame, s: PaperSections) -> bool:
    """True when the forecast is five-level (paper Table VI): mu_hat in FIVE_LEVEL_VALUES
    with a +-0.5 level used."""
    if s.llm not in df.columns:
        return False
    v = pd.to_numeric(df[s.llm], errors="coerce").dropna().unique()
    return bool(len(v)) and set(np.round(v, 9)) <= set(FIVE_LEVEL_VALUES) and bool(np.isin(np.round(v, 9), (-0.5, 0.5)).any())


def cluster_of(s: PaperSections, table: str) -> str:
    """The cluster of one table: the paper's own for Table VI (by firm), `paper_cluster`
    for the others."""
    return TABLE_CLUSTERS.get(table, s.paper.paper_cluster)


def column(
    df: pd.DataFrame,
    s: PaperSections,
    spec: str,
    terms: Sequence[Term],
    sample: str = "pre",
    outcome: str | None = None,
    fixed_effects: Sequence[str] | None = None,
) -> FitResult:
    """One table column: the specification declared as a FitRequest (the package's one
    way to declare a regression) with the study's outcome, fixed effects and the table's
    cluster (``cluster_of``; the table is the spec's prefix) unless given, fitted by the
    one fit (lookahead.paper.fit.fit_column)."""
    return fit_column(
        df,
        FitRequest(
            spec=spec,
            sample=sample,
            outcome=outcome or s.outcome,
            regressors=tuple(terms),
            fixed_effects=tuple(s.fixed_effects if fixed_effects is None else fixed_effects),
            cluster=cluster_of(s, spec.split("_", 1)[0]),
        ),
    )


@dataclass
class PaperTable:
    """A paper table: its fitted columns, plus notes and extra rows (e.g. bootstrap p)."""

    name: str
    title: str
    sample: str
    columns: list[FitResult]
    column_samples: list[str]
    notes: list[str] = field(default_factory=list)
    extra_rows: dict[str, list[str]] = field(default_factory=dict)
    magnitudes: dict[str, float] = field(default_factory=dict)

    def long(self, settings: PaperSections) -> pd.DataFrame:
        """One row per (column, term): the long format of `paper_tables`."""
        rows = []
        for j, (fit, sample) in enumerate(zip(self.columns, self.column_samples, strict=False), start=1):
            for r in fit.rows():
                r.update(
                    paper_table=self.name,
                    table_column=j,
                    sample=sample,
                    lap_measure=settings.measures.lap_measure,
                    mink_mean=settings.measures.mink_mean if settings._uses_mink_mean else None,
                )
                rows.append(r)
        return pd.DataFrame(rows)


def dropped_notes(fits: Sequence[FitResult]) -> list[str]:
    """Notes naming terms pyfixest dropped as collinear (e.g. a constant confidence score)."""
    return [
        f"{f.spec}: dropped as collinear with the fixed effects or other terms: {', '.join(f.dropped_terms)}."
        for f in fits
        if f.dropped_terms
    ]


def _require(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise RegressionInputError(f"{what}: panel has no column(s) {missing}; available: {', '.join(map(str, df.columns))}")
    for c in cols:
        if df[c].notna().sum() == 0:
            raise NotEstimable(f"{what}: " + not_estimable(f"column '{c}' is entirely missing"))


# ----------------------------------------------------------------------------- Table I
def descriptives(df: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    """Mean, SD (ddof=1), P10, P25, median, P75, P90 and N of each column (non-missing rows).

    Percentiles use numpy's linear interpolation; Stata's `summarize, detail` uses a
    different rule, so percentiles can differ from a Stata table in the last digits."""
    rows = []
    for label, col in columns.items():
        if col not in df.columns:
            continue
        x = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
        x = x[np.isfinite(x)]
        if len(x) == 0:
            rows.append({"variable": label, "column": col, "n": 0})
            continue
        q = np.percentile(x, [10, 25, 50, 75, 90])
        rows.append(
            {
                "variable": label,
                "column": col,
                "mean": x.mean(),
                "sd": x.std(ddof=1) if len(x) > 1 else np.nan,
                "p10": q[0],
                "p25": q[1],
                "median": q[2],
                "p75": q[3],
                "p90": q[4],
                "n": len(x),
            }
        )
    return pd.DataFrame(rows)


def table1(df: pd.DataFrame, s: PaperSections) -> pd.DataFrame:
    """Table I: descriptives of LAP (both measures when present), outcome, LLM, p(first token), confidence."""
    cols = {
        "LAP (Min-K%)": "lap_mink",
        "LAP (recall)": "lap_recall",
        "Outcome": s.outcome,
        "LLM": s.llm,
        "p(first token)": s.first_token_prob,
        "Confidence": s.stated_confidence,
    }
    return descriptives(df, cols)


# ---------------------------------------------------------------------------- Table II
def table2(df: pd.DataFrame, s: PaperSections, sample: str = "pre", name: str = "table2") -> PaperTable:
    """Table II (eq. 7) and the economic magnitudes the paper quotes.

    Magnitudes use the SDs of LLM and LAP on the rows column (2) uses:
    one SD of LLM times gamma from column (1) (paper: 0.197%), one SD of LAP times delta
    from column (2) (paper: 0.077%), and the ratio of the latter to gamma, the standalone
    marginal effect of LLM (paper: 0.077 / 0.210, "about 37%")."""
    _require(df, [s.outcome, s.llm, s.lap], name)
    llm, lap = Term(LLM, (s.llm,)), Term(LAP, (s.lap,))
    inter = Term(LLM + X + LAP, (s.llm, s.lap))
    c1 = column(df, s, f"{name}_col1", [llm], sample)
    c2 = column(df, s, f"{name}_col2", [llm, lap, inter], sample)
    used = df[[s.outcome, s.llm, s.lap]].apply(pd.to_numeric, errors="coerce").dropna()
    sd_llm, sd_lap = float(used[s.llm].std(ddof=1)), float(used[s.lap].std(ddof=1))
    gamma = c1.estimate.get(LLM, np.nan)
    delta = c2.estimate.get(inter.name, np.nan)
    mags = {
        "sd_llm": sd_llm,
        "sd_lap": sd_lap,
        "gamma_baseline": gamma,
        "delta_interaction": delta,
        "effect_of_1sd_llm": gamma * sd_llm,
        "effect_of_1sd_lap_on_llm_slope": delta * sd_lap,
    }
    # The paper: one SD of LAP "increases the marginal effect of LLM ... by 0.077%, which
    # is about 37% of the standalone LLM effect shown in Column (1)": 0.077 / gamma (0.210),
    # a ratio of two marginal effects of LLM, not of 0.077 / (gamma x SD(LLM)) = 0.197.
    mags["ratio"] = mags["effect_of_1sd_lap_on_llm_slope"] / gamma if gamma else np.nan
    note = (
        f"One SD of LLM ({sd_llm:.4g}) moves the outcome by {mags['effect_of_1sd_llm']:.4g} (col. 1); "
        f"one SD of LAP ({sd_lap:.4g}) changes the marginal effect of LLM by "
        f"{mags['effect_of_1sd_lap_on_llm_slope']:.4g}, {100 * mags['ratio']:.1f}% of the standalone "
        f"marginal effect of LLM (gamma = {gamma:.4g}, col. 1; the paper's ratio: 0.077 / 0.210 = 37%)."
    )
    return PaperTable(
        name=name,
        title=f"Outcome on LLM prediction and LAP ({s.lap_label})",
        sample=sample,
        columns=[c1, c2],
        column_samples=[sample, sample],
        notes=[note, *dropped_notes([c1, c2])],
        magnitudes=mags,
    )


# --------------------------------------------------------------------------- Table III
def table3(df: pd.DataFrame, s: PaperSections, sample: str = "pre") -> PaperTable | None:
    """Table III (eq. 8): a binary moderator with its double and triple interactions.

    Returns None when no `moderator_column` is set (the report says Table III was skipped)."""
    m = s.paper.moderator_column
    if not m:
        return None
    _require(df, [s.outcome, s.llm, s.lap, m], "table3")
    vals = pd.to_numeric(df[m], errors="coerce")
    bad = vals.notna() & ~vals.isin([0, 1])
    if bad.any():
        first = df.index[bad.to_numpy()][0]
        raise RegressionInputError(
            f"setting 'moderator_column': column '{m}' must be binary 0/1; row {first} has {df.loc[first, m]!r}"
        )
    if vals.nunique() < 2:
        raise RegressionInputError(f"setting 'moderator_column': column '{m}' takes a single value")
    work = df.copy()
    work[m] = vals
    llm, lap, mod = Term(LLM, (s.llm,)), Term(LAP, (s.lap,)), Term(m, (m,))
    t_lm = Term(LLM + X + m, (s.llm, m))
    t_ll = Term(LLM + X + LAP, (s.llm, s.lap))
    t_am = Term(LAP + X + m, (s.lap, m))
    t_3 = Term(LLM + X + LAP + X + m, (s.llm, s.lap, m))
    c1 = column(work, s, "table3_col1", [llm, mod, t_lm], sample)
    c2 = column(work, s, "table3_col2", [llm, mod, t_lm, lap, t_ll, t_am, t_3], sample)
    notes = dropped_notes([c1, c2])
    if notes:
        notes.append("A moderator constant within entity is absorbed by the entity fixed effects.")
    return PaperTable(
        name="table3",
        title=f"Outcome on LLM, LAP and {m} ({s.lap_label})",
        sample=sample,
        columns=[c1, c2],
        column_samples=[sample, sample],
        notes=notes,
    )


# ---------------------------------------------------------------------------- Table IV
#: A confidence measure (a probability on a fixed 0-1 scale) with a smaller sd than this
#: cannot carry Table IV's horse race: its coefficient would be noise divided by ~0.
#: An absolute rule, as for recall LAP, because the scale is fixed.
CONFIDENCE_MIN_SD = 0.001


def table4(df: pd.DataFrame, s: PaperSections, sample: str = "pre") -> PaperTable:
    """Table IV: horse race of LAP against first-token probability and stated confidence.

    A confidence measure that is entirely missing (e.g. the prompt asks for none) skips
    its two columns with a note instead of failing the whole analysis."""
    _require(df, [s.outcome, s.llm, s.lap], "table4")
    llm, lap = Term(LLM, (s.llm,)), Term(LAP, (s.lap,))
    t_ll = Term(LLM + X + LAP, (s.llm, s.lap))
    cols: list[FitResult] = []
    samples: list[str] = []
    notes: list[str] = []
    for label, col in (("p(first token)", s.first_token_prob), ("Confidence", s.stated_confidence)):
        if col not in df.columns:
            notes.append(f"{label} ('{col}') is not in the panel: its columns are skipped.")
            continue
        vals = pd.to_numeric(df[col], errors="coerce").dropna()
        if len(vals) == 0:
            notes.append(f"{label} ('{col}') is in the panel but missing in every row: its columns are skipped.")
            continue
        if vals.nunique() == 1:
            notes.append(
                f"{label} ('{col}') is in the panel but constant at {vals.iloc[0]:.6g} "
                f"in all {len(vals)} rows with a value: it cannot enter a regression "
                "with fixed effects, so its columns are skipped."
            )
            continue
        sd = float(vals.std(ddof=1))
        if not (np.isfinite(sd) and sd >= CONFIDENCE_MIN_SD):
            notes.append(
                f"{label} not estimable (its sd {sd:.2g} is below {CONFIDENCE_MIN_SD}: a "
                "probability that barely varies; its coefficients would be noise scaled "
                "up): its columns are skipped."
            )
            continue
        c, t_lc = Term(label, (col,)), Term(LLM + X + label, (s.llm, col))
        k = len(cols) + 1
        cols.append(column(df, s, f"table4_col{k}", [llm, c, t_lc], sample))
        cols.append(column(df, s, f"table4_col{k + 1}", [llm, lap, t_ll, c, t_lc], sample))
        samples += [sample, sample]
    for fitted in cols:
        if fitted.n_missing:
            notes.append(f"{fitted.spec}: {fitted.n_missing} rows with a missing value dropped.")
    notes += dropped_notes(cols)
    return PaperTable(
        name="table4",
        title=f"LAP versus first-token probability and stated confidence ({s.lap_label})",
        sample=sample,
        columns=cols,
        column_samples=samples,
        notes=notes,
    )


# ----------------------------------------------------------------------------- Table V
STD_SUFFIX = "_std"


def standardize(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """z-scores (ddof=1) of `cols`, computed on the rows where all of them are present.

    Standardizing on the common rows means every regression in Table V sees mean-zero,
    unit-SD variables on exactly the sample it is estimated on (before singleton drops).
    The result shares the input's columns (copy-on-write: nothing here changes them), so
    only the standardized columns are new memory."""
    work = df.copy(deep=False)
    vals = work[list(cols)].apply(pd.to_numeric, errors="coerce")
    ok = vals.notna().all(axis=1)
    for c in cols:
        x = vals.loc[ok, c]
        sd = x.std(ddof=1)
        if not np.isfinite(sd) or sd == 0:
            raise NotEstimable("table5: " + not_estimable(f"column '{c}' has no variation in this period; cannot standardize"))
        work[c + STD_SUFFIX] = np.where(ok, (vals[c] - x.mean()) / sd, np.nan)
    return work


def table5_inputs(df: pd.DataFrame, s: PaperSections) -> pd.DataFrame:
    """The standardized frame one period's Table V regressions (and the bootstrap) use."""
    _require(df, [s.outcome, s.llm, s.lap], "table5")
    return standardize(df, [s.outcome, s.llm, s.lap])


def table5_terms(s: PaperSections) -> tuple[str, list[Term], list[Term]]:
    """Outcome column and the baseline / interaction terms of Table V (standardized)."""
    y, a, b = (c + STD_SUFFIX for c in (s.outcome, s.llm, s.lap))
    base = [Term(LLM + "_std", (a,))]
    full = [Term(LLM + "_std", (a,)), Term(LAP + "_std", (b,)), Term(f"{LLM}_std{X}{LAP}_std", (a, b))]
    return y, base, full


INTERACTION_STD = f"{LLM}_std{X}{LAP}_std"
DIFFERENCE_TERM = f"{LLM}_std{X}{LAP}_std{X}out-of-sample"


def out_of_sample(post: pd.DataFrame | None, s: PaperSections) -> tuple[pd.DataFrame | None, str]:
    """Table V's out-of-sample rows: post-cutoff rows from `paper_oos_start` on (default: all).

    The paper starts its out-of-sample period at the model's release, not at the claimed
    knowledge cutoff ("to be conservative"); `paper_oos_start` sets that date. Returns the
    rows and a note saying which period was used."""
    start = s.paper.paper_oos_start
    if post is None or start is None:
        return post, "Out-of-sample period: every post-cutoff row (var paper_oos_start not set)."
    if "target_date" not in post.columns:
        raise RegressionInputError("setting 'paper_oos_start': the panel has no target_date column")
    dates = pd.to_datetime(post["target_date"], errors="coerce")
    keep = dates >= pd.Timestamp(start)
    return post.loc[keep], (
        f"Out-of-sample period starts {start} (var paper_oos_start): {int(keep.sum())} of {len(post)} post-cutoff rows."
    )


def table5_difference(pre: pd.DataFrame, post: pd.DataFrame, s: PaperSections) -> dict[str, float]:
    """Clustered test of in-sample minus out-of-sample LLM_std x LAP_std.

    One regression on both periods stacked (each standardized within its own period, as
    Table V), every slope interacted with an out-of-sample dummy and the fixed effects
    interacted with the period, so the two periods' slopes are exactly Table V's columns
    (2) and (4) and the interaction's coefficient is their difference; its standard error
    is clustered by `paper_cluster` (CRV1), which counts any cluster both periods share.
    One-sided p for H1: in-sample > out-of-sample. Unlike the paper's bootstrap p, this
    counts the in-sample estimate's own sampling error."""
    y, _, full = table5_terms(s)
    # only the columns the stacked regression reads are stacked (at 1,000,000 rows the
    # other panel columns would be ~100 MiB more at the analysis' peak)
    cl_col = STATS_CLUSTER_COLUMNS.get(s.paper.paper_cluster or "none")
    used = [y, *(c for t in full for c in t.columns), *s.fixed_effects, *([cl_col] if cl_col else [])]
    parts = []
    for flag, df in ((0.0, pre), (1.0, post)):
        z = table5_inputs(df, s)
        z = z[[c for c in dict.fromkeys(used) if c in z.columns]]
        z["_oos"] = flag
        parts.append(z)
    stacked = pd.concat(parts, ignore_index=True)
    del parts, z
    fes = []
    for fe in s.fixed_effects:
        col = f"_{fe}_x_period"
        # (level, period) as one integer code: the same groups, in the same order of first
        # appearance, as a "level|period" string, without a string per row
        codes = pd.factorize(stacked[fe], use_na_sentinel=True)[0].astype(np.float64)
        codes[codes < 0] = np.nan
        stacked[col] = codes * 2 + stacked["_oos"].to_numpy(np.float64)
        fes.append(col)
    terms = list(full) + [Term(t.name + X + "out-of-sample", (*t.columns, "_oos")) for t in full]
    fit = column(stacked, s, "table5_difference", terms, "pre+post", outcome=y, fixed_effects=fes)
    b = fit.estimate.get(DIFFERENCE_TERM, np.nan)
    se = fit.std_error.get(DIFFERENCE_TERM, np.nan)
    t = -b / se if np.isfinite(b) and np.isfinite(se) and se > 0 else np.nan
    p2 = fit.p.get(DIFFERENCE_TERM, np.nan)
    p1 = (p2 / 2 if t > 0 else 1 - p2 / 2) if np.isfinite(t) and np.isfinite(p2) else np.nan
    return {
        "difference": -b,
        "std_error": se,
        "t": t,
        "p_one_sided": p1,
        "p_two_sided": p2,
        "n_obs": fit.n_obs,
        "n_clusters": fit.n_clusters if fit.n_clusters is not None else np.nan,
    }


def table5(pre: pd.DataFrame, post: pd.DataFrame, s: PaperSections, bootstrap_p: float | None = None) -> PaperTable:
    """Table V: in-sample (cols 1-2) and out-of-sample (cols 3-4), each period standardized alone."""
    y, base, full = table5_terms(s)
    cols: list[FitResult] = []
    samples: list[str] = []
    for sample, df in (("pre", pre), ("post", post)):
        z = table5_inputs(df, s)
        k = len(cols) + 1
        cols.append(column(z, s, f"table5_col{k}", base, sample, outcome=y))
        cols.append(column(z, s, f"table5_col{k + 1}", full, sample, outcome=y))
        samples += [sample, sample]
    extra = {"Sample period": ["In-sample", "In-sample", "Out-of-sample", "Out-of-sample"]}
    if bootstrap_p is not None:
        extra = {BOOTSTRAP_ROW: ["", "", "", f"[{fmt_p(bootstrap_p)}]"], **extra}
    notes = ["All variables standardized (z-scores) separately within the in-sample and within the out-of-sample period."]
    diff: dict[str, float] = {}
    try:
        diff = table5_difference(pre, post, s)
    except NotEstimable as exc:
        notes.append(f"In-sample minus out-of-sample test: {exc}.")
    if diff:
        extra = {**extra, DIFFERENCE_ROW: ["", f"{diff['difference']:.3f}", "", f"[{fmt_p(diff['p_one_sided'])}]"]}
        notes.append(
            f"In-sample minus out-of-sample interaction: {diff['difference']:.4g} (SE "
            f"{diff['std_error']:.4g}, clustered by {cluster_of(s, 'table5')}; one-sided p "
            f"{fmt_p(diff['p_one_sided'])}), from one stacked regression with period-specific "
            "slopes and fixed effects; unlike the paper's bootstrap p it counts the in-sample "
            "estimate's sampling error and the clustering."
        )
    tab = PaperTable(
        name="table5",
        title=f"In-sample and out-of-sample, standardized within period ({s.lap_label})",
        sample="pre+post",
        columns=cols,
        column_samples=samples,
        extra_rows=extra,
        notes=notes + dropped_notes(cols),
    )
    tab.magnitudes = {f"diff_{k}": float(v) for k, v in diff.items()}
    return tab


#: Table V's extra rows: the paper's bootstrap p (its procedure), and the clustered test.
BOOTSTRAP_ROW = "OOS bootstrap p-value (paper's procedure)"
DIFFERENCE_ROW = "In - out difference [clustered one-sided p]"


# --------------------------------------------------------------------------- Table VI
FIVE_LEVEL_LABELS = {
    "significantly decrease": -1.0,
    "decrease": -0.5,
    "neutral": 0.0,
    "increase": 0.5,
    "significantly increase": 1.0,
}


def map_forecast_labels(labels: pd.Series, mapping: Mapping[str, float]) -> pd.Series:
    """mu_hat from parsed labels with the study's `forecast_labels` (stripped, lowercased).

    The panel's mu_hat comes from SQL staging with the same rule; this exists for Python
    users and tests of the five-level (Table VI) path. Unmapped labels become NaN."""
    norm = {str(k).strip().lower(): float(v) for k, v in mapping.items()}
    return labels.astype("string").str.strip().str.lower().map(norm).astype(float)


def table6(df: pd.DataFrame, s: PaperSections, sample: str = "pre") -> PaperTable:
    """Table VI is Table II run on a five-level forecast (mu_hat in {-1,-0.5,0,0.5,1}),
    clustered by firm as the paper's Table VI (``cluster_of``), whatever `paper_cluster`."""
    t = table2(df, s, sample=sample, name="table6")
    t.title = (
        f"Outcome on five-level LLM prediction and LAP ({s.lap_label}; standard errors "
        f"clustered by {cluster_of(s, 'table6')}, as the paper's Table VI)"
    )
    return t
