"""The verdict: the protocol's decision rule, applied to the regression results.

The protocol (seeds/000, "Final report", item 6), word for word:
  - Contamination detected: beta_3 > 0 (one-sided p < 0.05) with the validation
    pattern present and the placebo passing.
  - No evidence of contamination: beta_3 indistinguishable from zero with LAP showing
    meaningful variation (otherwise report "underpowered").
  - Mixed/invalid: validation fails or placebo fails — explain which.

Order of the checks (all on the pre-cutoff detection coefficient):
  1. No pre-cutoff rows                                   -> "Underpowered" (nothing to test).
  2. beta_3 not estimable (too few rows, LAP constant, term collinear)
                                                          -> "Underpowered", saying why.
  3. LAP without meaningful variation, beta_3 significant or not
                                                          -> "Underpowered".
  4. beta_3 one-sided p >= 0.05 otherwise                 -> "No evidence of contamination",
     worded "indistinguishable from zero" only when it is (two-sided p >= 0.05); a
     significantly negative beta_3 is called that.
  5. beta_3 one-sided p < 0.05, validation pattern present, placebo passes
                                                          -> "Contamination detected".
  6. otherwise                                            -> "Mixed/invalid", naming the
     part(s) that failed: validation, placebo, or both.
Every "No evidence" and "Underpowered" with an estimable beta_3 quotes the minimum
detectable effect (one-sided 5% test, 80% power): (t_0.95 + t_0.80) x SE(beta_3); a
passing placebo quotes its own (one-sided 10% test, the level it is read at).

The rule returns data, not prose: ``evaluate`` gives an ``Outcome`` (decision, path, LAP
problem, validation failures, placebo outcome, and each test's facts with the p it read);
``reason``, ``validation_text`` and ``placebo_text`` render words from it, and no rule
reads rendered text. Numbers print through ``fmt_num``/``fmt_t``/``fmt_p`` here and in
REPORT.md's cells alike, so a sentence quotes exactly what its cell shows; ``fmt_p`` keeps
a p on its side of every threshold and prints a bootstrap zero as < 1/(B+1).

Choices the protocol leaves open, stated here and in docs/verdict.md:
  - The LAP-variation rule: a study whose pre-cutoff LAP has no meaningful variation is
    "Underpowered" whatever beta_3's p (the protocol reads such a study as underpowered).
    A significant beta_3 on a regressor that barely varies is a large coefficient on a
    tiny spread, not evidence; the reason quotes it and says it does not decide.
  - Validation pattern: high-LAP theta > 0 with two-sided p < 0.05, and high-LAP theta
    above low-LAP theta: the difference (one regression with ud x high_lap, entity x half
    and period x half fixed effects) > 0 with one-sided p < 0.05. This is "near zero on
    the low-LAP half" as a test: with large N a little real recall in the low half no
    longer fails validation, and a large but imprecise low-LAP theta no longer passes it.
  - Placebo passes when the post-cutoff one-sided p for beta_3 > 0 exceeds 0.10
    (protocol), or when post-cutoff LAP has collapsed (no meaningful variation, so
    beta_3 is not estimable: nothing is left for LAP to proxy). With no post-cutoff rows
    the placebo is infeasible (protocol: steps 1-4 only); with post rows, varying LAP and
    no estimable beta_3 it is not estimable. Neither of those passes.
  - Meaningful LAP variation: at least two distinct values and, for recall LAP, sd >=
    0.01 (absolute: recall LAP is a probability mass on a fixed 0-1 scale); for the
    measures whose scale varies by model and tokenizer (the registry's scale-free rule,
    lookahead.measures: Min-K%, loss, zlib, Min-K%++) a coefficient of variation
    sd/mean|LAP| >= 0.01. ``lap_min_sd`` overrides the absolute threshold.
    Recall censoring >= 99% of rows is also no variation.
  - Inference: every test reads the restricted wild cluster bootstrap p of its own
    regression, at every cluster count (docs/montecarlo.md: CRV1 over-rejects when a few
    clusters carry the variation, at 30 clusters and at 100 alike); CRV1 is reported
    beside it and read only when wild_bootstrap_draws is 0. Below 20 clusters the
    verdict warns, naming G and G*. A bootstrap p still within two Monte Carlo SEs of its
    threshold after the draws were extended is called borderline, with its SE.
  - The placebo's power is reported, never decided on (seeds/000: the placebo passes when
    its one-sided p exceeds 0.10). When its minimum detectable effect (10% test, 80% power,
    by the inference it reads) exceeds the pre-cutoff beta_3, it passes as
    "passes_low_power": the reason says in one clause what it could not rule out and
    points to the fall of LAP at the cutoff (the effective-cutoff table), the evidence
    that remains. Mixed/invalid is kept for a placebo that fails (or cannot be read) and
    a validation pattern that contradicts detection.
"""

from __future__ import annotations

import math
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lookahead.measures import MEASURES, SCALE_FREE
from lookahead.stats.fe_regression import MIN_CLUSTERS
from lookahead.stats.protocol import (
    BETA3,
    DETECTION_ALPHA,
    DETECTION_SPEC,
    DIFFERENCE_SPEC,
    PLACEBO_ALPHA,
    THETA_DIFF,
    StatsSections,
    any_approximated,
    result_row,
)
from lookahead.stats.wild import WILD_THRESHOLDS, mc_se, near_threshold

CONTAMINATION = "Contamination detected"
NO_EVIDENCE = "No evidence of contamination"
MIXED = "Mixed/invalid"
UNDERPOWERED = "Underpowered"
VERDICTS = (CONTAMINATION, NO_EVIDENCE, MIXED, UNDERPOWERED)

ALPHA_DETECTION = DETECTION_ALPHA  # beta_3 one-sided
ALPHA_VALIDATION = 0.05  # high-LAP theta two-sided; high minus low one-sided
PLACEBO_PASS_P = PLACEBO_ALPHA  # post-cutoff beta_3 one-sided p must exceed this
MDE_POWER = 0.80  # minimum detectable effect: power of the one-sided test
RECALL_MIN_SD = 0.01
MINK_MIN_CV = 0.01
MAX_CENSORING = 0.99

#: The protocol's decision rule (seeds/000, "Final report", item 6) as its clauses: verdict
#: -> the condition the protocol states for it, word for word and in its order. The
#: sentence (DECISION_RULE, the verdict table's column decision_rule) and the clause each
#: verdict applies (rule_clause) are both rendered from this mapping.
DECISION_CLAUSES: dict[str, str] = {
    CONTAMINATION: "beta_3 > 0 (one-sided p < 0.05) with the validation pattern present and the placebo passing",
    NO_EVIDENCE: 'beta_3 indistinguishable from zero with LAP showing meaningful variation (otherwise report "underpowered")',
    MIXED: "validation fails or placebo fails — explain which",
}
#: The clause each verdict applies: its own, except "Underpowered", which the protocol
#: states inside the "No evidence" clause ("otherwise report underpowered").
CLAUSE_OF: dict[str, str] = {CONTAMINATION: CONTAMINATION, NO_EVIDENCE: NO_EVIDENCE, UNDERPOWERED: NO_EVIDENCE, MIXED: MIXED}
assert set(CLAUSE_OF) == set(VERDICTS) and set(CLAUSE_OF.values()) == set(DECISION_CLAUSES)


def rule_clause(verdict: str) -> str:
    """The sentence of the decision rule that `verdict` applies ("Verdict: condition.")."""
    name = CLAUSE_OF[verdict]
    return f"{name}: {DECISION_CLAUSES[name]}."


#: The whole rule as one sentence: every clause, in the protocol's order.
DECISION_RULE = " ".join(rule_clause(name) for name in DECISION_CLAUSES)
RECOMMENDATION = (
    "Restrict backtests to data after the model's training cutoff. Prompt-level fixes "
    "(masking, 'ignore future information') are not a remedy unless this test is rerun "
    "on them."
)
CRV1_LABEL = "CRV1"
WILD_LABEL = "wild bootstrap"
NEWEY_WEST_LABEL = "Newey-West"
HC1_LABEL = "HC1"


#: The metadata key of a RegressionFact field: the regression_results column it is read from.
RESULT_COLUMN = "result_column"


def _read(column: str, default: Any = math.nan) -> Any:
    """A RegressionFact field read from `column` of its regression_results row."""
    return field(default=default, metadata={RESULT_COLUMN: column})


@dataclass(frozen=True)
class RegressionFact:
    """One test's regression as the verdict stores it: the numbers of its row in
    regression_results, each field read from the column its metadata names. A test keeps
    only the facts its entry in FACT_TESTS gives a verdict column, so that the facts the
    build decides on are exactly the facts the verdict table holds and the report reads
    back (facts_from_row)."""

    estimate: float = _read("estimate")
    t: float = _read("t")
    se: float = _read("std_error")
    df: float = _read("df")  # degrees of freedom of its t test (G-1 when clustered)
    p_one_sided: float = _read("p_one_sided")
    p_two_sided: float = _read("p_two_sided")
    p_wild_one_sided: float = _read("p_wild_one_sided")
    p_wild_two_sided: float = _read("p_wild_two_sided")
    n_obs: int = _read("n_obs", 0)
    n_clusters: float = _read("n_clusters")
    # effective clusters G* (Carter, Schnepel and Steigerwald 2017) and the wild draws
    # behind its p (after any extension near a threshold)
    g_star: float = _read("n_clusters_effective")
    wild_draws: int = _read("wild_draws", 0)
    mde: float = _read("mde")  # regression_results.mde (by the inference read)
    note: str = _read("warning", "")  # why it has no estimate (empty when it has one)
    # per sd of U-D within its half, from the difference regression (the thetas are
    # compared in this unit only): read by gather_facts, not from its own row
    per_sd: float = math.nan


@dataclass(frozen=True)
class FactSource:
    """Where one test's regression is in regression_results (spec, sample, term), and the
    verdict table's column for each of its facts that the table holds (RegressionFact
    field -> column name; the names are the table's, as SQL users know them)."""

    spec: str
    sample: str
    term: str
    columns: dict[str, str]


#: Every test the verdict reads, one RegressionFact each in VerdictFacts, and the verdict
#: table's columns each one fills. A new verdict column of a test is one entry here (and
#: its declaration with its data_type in models/marts/results/_results__models.yml, which
#: tests/python/test_verdict_declaration.py holds to this).
FACT_TESTS: dict[str, FactSource] = {
    "beta3": FactSource(
        DETECTION_SPEC,
        "pre",
        BETA3,
        {
            "estimate": "beta3",
            "t": "beta3_t",
            "p_one_sided": "beta3_p_one_sided",
            "n_obs": "n_obs_pre",
            "note": "beta3_note",
            "se": "beta3_se",
            "p_two_sided": "beta3_p_two_sided",
            "p_wild_one_sided": "beta3_p_wild_one_sided",
            "df": "beta3_df",
            "n_clusters": "n_clusters_pre",
            "p_wild_two_sided": "beta3_p_wild_two_sided",
            "g_star": "beta3_g_star",
            "wild_draws": "beta3_wild_draws",
            "mde": "beta3_mde_regression",
        },
    ),
    "theta_pooled": FactSource("validation_pooled", "pre", "ud", {"estimate": "theta_pooled", "t": "theta_pooled_t"}),
    "theta_high": FactSource(
        "validation_high_lap",
        "pre",
        "ud",
        {
            "estimate": "theta_high",
            "t": "theta_high_t",
            "p_two_sided": "theta_high_p",
            "p_wild_two_sided": "theta_high_p_wild",
            "per_sd": "theta_high_sd",
            "n_clusters": "theta_high_n_clusters",
            "g_star": "theta_high_g_star",
            "wild_draws": "theta_high_wild_draws",
        },
    ),
    "theta_low": FactSource(
        "validation_low_lap",
        "pre",
        "ud",
        {
            "estimate": "theta_low",
            "t": "theta_low_t",
            "p_two_sided": "theta_low_p",
            "p_wild_two_sided": "theta_low_p_wild",
            "per_sd": "theta_low_sd",
            "n_clusters": "theta_low_n_clusters",
            "g_star": "theta_low_g_star",
            "wild_draws": "theta_low_wild_draws",
        },
    ),
    "theta_diff": FactSource(
        DIFFERENCE_SPEC,
        "pre",
        THETA_DIFF,
        {
            "estimate": "theta_diff",
            "t": "theta_diff_t",
            "p_one_sided": "theta_diff_p_one_sided",
            "p_wild_one_sided": "theta_diff_p_wild_one_sided",
            "n_clusters": "theta_diff_n_clusters",
            "g_star": "theta_diff_g_star",
            "wild_draws": "theta_diff_wild_draws",
        },
    ),
    "placebo": FactSource(
        DETECTION_SPEC,
        "post",
        BETA3,
        {
            "estimate": "placebo_beta3",
            "t": "placebo_t",
            "p_one_sided": "placebo_p_one_sided",
            "n_obs": "n_obs_post",
            "p_two_sided": "placebo_p_two_sided",
            "p_wild_one_sided": "placebo_p_wild_one_sided",
            "n_clusters": "n_clusters_post",
            "p_wild_two_sided": "placebo_p_wild_two_sided",
            "g_star": "placebo_g_star",
            "wild_draws": "placebo_wild_draws",
            "mde": "placebo_mde_regression",
            "se": "placebo_se",
            "df": "placebo_df",
        },
    ),
}


@dataclass(frozen=True)
class VerdictFacts:
    """Everything the rule looks at: one RegressionFact per test (FACT_TESTS) and the
    facts of the panels and settings. The verdict table holds them flat, one column each
    (fact_columns, columns, facts_from_row).

    The p-value each test reads is its own regression's wild cluster bootstrap p whenever
    it ran (at any cluster count), CRV1's (or Newey-West's / HC1's) otherwise (tests_of)."""

    beta3: RegressionFact
    theta_pooled: RegressionFact
    theta_high: RegressionFact
    theta_low: RegressionFact
    theta_diff: RegressionFact
    placebo: RegressionFact
    placebo_feasible: bool
    lap_n_pre: int
    lap_distinct_pre: int
    lap_sd_pre: float
    lap_mean_pre: float
    lap_mean_post: float
    lap_min_sd_used: float
    censoring_rate_pre: float
    lap_measure: str
    cluster: str
    vcov: str
    approximated: bool
    n_rows_pre: int = -1  # pre-cutoff panel rows (-1: not known)
    lap_n_post: int = 0
    lap_distinct_post: int = 0
    lap_sd_post: float = math.nan
    lap_min_sd_post: float = math.nan
    wild_draws: int = 0
    n_forecast_pre: int = -1  # pre-cutoff rows with a parsed forecast and an outcome (-1: not known)
    n_lap_values_pre: int = -1  # pre-cutoff rows with a LAP value (-1: not known)
    n_outcome_pre: int = -1  # pre-cutoff rows with an outcome (-1: not known)
    n_mu_hat_pre: int = -1  # pre-cutoff rows with a parsed forecast (-1: not known)

    def columns(self) -> dict[str, Any]:
        """The facts as the verdict table's columns, one value each."""
        return {col: getattr(getattr(self, top), attr) if attr else getattr(self, top) for col, (top, attr) in _COLUMN_AT.items()}

    @classmethod
    def from_columns(cls, **values: Any) -> VerdictFacts:
        """Facts from verdict-table columns by name; a column not given takes the value an
        empty cell reads back as (facts_from_row)."""
        _known(values)
        return facts_from_row(values)

    def with_columns(self, **values: Any) -> VerdictFacts:
        """These facts with some verdict-table columns set to new values (by column name)."""
        _known(values)
        top_level: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for col, v in values.items():
            top, attr = _COLUMN_AT[col]
            if attr:
                nested.setdefault(top, {})[attr] = v
            else:
                top_level[top] = v
        for top, changes in nested.items():
            top_level[top] = replace(getattr(self, top), **changes)
        return replace(self, **top_level)


def _known(values: dict[str, Any]) -> None:
    unknown = sorted(set(values) - set(_COLUMN_AT))
    if unknown:
        raise TypeError(f"not a verdict fact column: {', '.join(unknown)}")


def _column_at() -> dict[str, tuple[str, str]]:
    """Verdict column -> (VerdictFacts field, RegressionFact field or "" for a field of its own)."""
    assert [f.name for f in fields(VerdictFacts)][: len(FACT_TESTS)] == list(FACT_TESTS), "one RegressionFact per test"
    out: dict[str, tuple[str, str]] = {}
    for fld in fields(VerdictFacts):
        named = FACT_TESTS[fld.name].columns.items() if fld.name in FACT_TESTS else [("", fld.name)]
        for attr, col in named:
            assert col not in out, f"verdict column {col} declared twice"
            out[col] = (fld.name, attr)
    return out


#: Where each verdict fact column lives in VerdictFacts (derived from the declarations).
_COLUMN_AT: dict[str, tuple[str, str]] = _column_at()


def _kind(fld: Field[Any]) -> str:
    """A dataclass field's type as written ("float", "int", "str", "bool")."""
    return fld.type if isinstance(fld.type, str) else getattr(fld.type, "__name__", "")


def _field_of(col: str) -> Field[Any]:
    top, attr = _COLUMN_AT[col]
    owner = RegressionFact if attr else VerdictFacts
    return {f.name: f for f in fields(owner)}[attr or top]


#: The SQL type each kind of fact is declared with in the verdict table's contract.
SQL_TYPES: dict[str, str] = {"float": "double", "int": "bigint", "str": "varchar", "bool": "boolean"}


def fact_columns() -> dict[str, str]:
    """The verdict table's fact columns -> their SQL type, derived from VerdictFacts and
    FACT_TESTS (the dbt contract declares the same; tests/python/test_verdict_declaration.py)."""
    return {col: SQL_TYPES[_kind(_field_of(col))] for col in _COLUMN_AT}


# ---------------------------------------------------------------- how numbers are printed

#: Every threshold a printed p-value is read against (detection and validation 5%,
#: placebo 10%); fmt_p prints enough digits that the printed number sits on the same
#: side of each as the exact one.
P_THRESHOLDS: tuple[float, ...] = (ALPHA_DETECTION, PLACEBO_PASS_P)
assert set(P_THRESHOLDS) == set(WILD_THRESHOLDS), "the bootstrap extends draws near these"


def fmt_num(x: float, digits: int = 4) -> str:
    """An estimate, t or sd as every sentence and table cell prints it."""
    return "NA" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


def fmt_t(x: float) -> str:
    return fmt_num(x, 3)


def p_floor(draws: int) -> str:
    """The bound a bootstrap p of 0 is printed under: 1/(B+1) rounded up to two significant
    digits ("0.001" for B = 999, "0.0001" for B = 10000, never "9.999e-05"), so a p at the
    floor reads the same in every sentence, table, figure title and LaTeX cell and stays a
    true upper bound."""
    floor = 1 / (draws + 1)
    text = f"{floor:.2g}"
    if float(text) < floor:  # rounding went down: step up in the second digit
        exp = math.floor(math.log10(floor))
        text = f"{math.ceil(floor / 10 ** (exp - 1)) * 10 ** (exp - 1):.2g}"
    return np.format_float_positional(float(text), trim="-")


def fmt_p(p: float, draws: int = 0) -> str:
    """A p-value that cannot mislead: a bootstrap p of 0 is "< 1/(B+1)" with B named, and
    a p within rounding of a threshold gets the digits that show its side."""
    if p is None or not np.isfinite(p):
        return "NA"
    if draws and p == 0:
        return f"< {p_floor(draws)} (1/(B+1), B = {draws})"
    for digits in range(4, 18):
        text = f"{p:.{digits}g}"
        shown = float(text)
        if all(np.sign(shown - th) == np.sign(p - th) for th in P_THRESHOLDS):
            return text
    return repr(float(p))


def _pct(x: float) -> str:
    return "NA" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


# ---------------------------------------------------------------- the structured outcome


@dataclass(frozen=True)
class TestFact:
    """One test as the rule read it: estimate (and its unit), t, the p the rule read and
    where it came from, degrees of freedom, N and clusters used, or why it has no estimate."""

    name: str
    estimate: float
    unit: str
    t: float
    p: float
    sided: str
    source: str  # CRV1 | wild bootstrap | Newey-West | HC1
    draws: int = 0  # wild bootstrap draws behind p (0: an analytic p)
    df: float = math.nan
    n_obs: int = 0
    n_clusters: float = math.nan
    not_estimable: str = ""
    g_star: float = math.nan  # effective number of clusters of its regression
    threshold: float = ALPHA_DETECTION  # what the rule reads p against

    @property
    def estimable(self) -> bool:
        return bool(np.isfinite(self.estimate) and np.isfinite(self.p))

    @property
    def mc_se(self) -> float:
        """Monte Carlo SE of a bootstrap p (NaN for an analytic p)."""
        return mc_se(self.p, self.draws) if self.draws else math.nan

    @property
    def borderline(self) -> bool:
        """A bootstrap p still within two Monte Carlo SEs of its threshold after the draws
        were extended (lookahead/stats/wild.py): the decision could go either way."""
        return bool(self.draws and near_threshold(self.p, self.draws, (self.threshold,)))

    def p_text(self) -> str:
        return fmt_p(self.p, self.draws)

    def p_phrase(self) -> str:
        """ "one-sided p 0.002 by CRV1": the p named with its source."""
        via = self.source
        if self.draws and self.p != 0:  # a zero names B in its bound already
            via += f" ({self.draws} draws)"
        return f"{self.sided} p {self.p_text()} by {via}"


#: Decision paths: code -> (verdict, what leads there). docs/verdict.md lists each with
#: its wording; the report and the verdict table carry the code (column decision_path).
PATHS: dict[str, tuple[str, str]] = {
    "no_pre_rows": (UNDERPOWERED, "no pre-cutoff rows"),
    "beta3_not_estimable": (UNDERPOWERED, "beta_3 not estimable"),
    "null_no_variation": (UNDERPOWERED, "beta_3 not significant and LAP without meaningful variation"),
    "significant_no_variation": (
        UNDERPOWERED,
        "beta_3 significant but LAP without meaningful variation: the estimate does not decide",
    ),
    "null_negative": (NO_EVIDENCE, "beta_3 significantly negative (two-sided p < 0.05)"),
    "null_zero": (NO_EVIDENCE, "beta_3 indistinguishable from zero (two-sided p >= 0.05), LAP varies"),
    "null_not_positive": (
        NO_EVIDENCE,
        "beta_3 not significantly positive; two-sided p not available, or below 0.05 with a positive estimate",
    ),
    "contamination": (CONTAMINATION, "beta_3 significant, validation pattern present, placebo passes"),
    "mixed": (MIXED, "beta_3 significant, validation or placebo not passing"),
}
#: Why LAP cannot power the test: code -> what the code means.
LAP_PROBLEMS: dict[str, str] = {
    "no_outcomes": "no pre-cutoff row has an outcome",
    "no_forecasts": "no pre-cutoff row has a parsed forecast (mu_hat)",
    "no_lap": "no pre-cutoff row has a LAP value",
    "no_overlap": "no pre-cutoff row has both a forecast and a LAP value",
    "censored": "recall labels censored in >= 99% of rows",
    "constant": "LAP constant",
    "small_sd": "LAP sd below the variation threshold",
}
#: Placebo outcomes: code -> (passes?, label in the verdict table's placebo_status).
PLACEBO: dict[str, tuple[bool, str]] = {
    "passes": (True, "placebo passes"),
    "passes_collapsed": (True, "placebo passes"),
    "fails": (False, "placebo fails"),
    "not_estimable": (False, "placebo not estimable"),
    "passes_low_power": (True, "placebo passes (low power)"),
    "infeasible": (False, "placebo infeasible"),
}
#: Validation failures: code -> meaning.
VALIDATION_FAILURES: dict[str, str] = {
    "high_not_estimable": "high-LAP theta not estimable",
    "high_negative": "high-LAP theta significantly negative",
    "high_not_significant": "high-LAP theta not significant",
    "diff_not_estimable": "high-minus-low difference not estimable",
    "diff_not_significant": "high-LAP theta does not significantly exceed the low-LAP theta",
}
#: The one statement of how LAP's unit enters (docs/verdict.md, docs/reading.md and README
#: quote it as it is written here).
UNITS_RULE = (
    "Every regression is fitted on unit-sd columns and reported on the data's scale, so no "
    "estimate's t-statistic or p-value depends on the unit of LAP. The verdict depends on "
    "LAP's unit in one place only: the variation rule for recall LAP is absolute (sd >= "
    "0.01), because recall LAP is a probability on a fixed 0-1 scale; rescaled recall LAP is "
    'no longer that probability, and below the threshold the verdict becomes "Underpowered". '
    "Min-K% LAP's rule (sd >= 1% of mean |LAP|) is scale-free."
)


@dataclass(frozen=True)
class Outcome:
    """The decision as data: the verdict, the path taken, why LAP cannot power the test
    (if so), what failed in validation, the placebo's outcome, and every test's facts.
    Every sentence of the verdict and the report's sections is rendered from this."""

    decision: str
    path: str
    lap_problem: str
    validation_failures: tuple[str, ...]
    placebo: str
    tests: dict[str, TestFact]
    facts: VerdictFacts

    @property
    def validation_present(self) -> bool:
        return not self.validation_failures


# ---------------------------------------------------------------- which p-value


def _few(n_clusters: float) -> bool:
    """Fewer clusters than the protocol's ~20: cluster-robust inference is unreliable."""
    return bool(np.isfinite(n_clusters) and n_clusters < MIN_CLUSTERS)


def _source(f: VerdictFacts) -> str:
    vcov = (f.vcov or "").upper()
    if vcov.startswith("NW"):
        return NEWEY_WEST_LABEL
    if vcov.startswith("HC1"):
        return HC1_LABEL
    return CRV1_LABEL


def _pick(f: VerdictFacts, p_crv: float, p_wild: float) -> tuple[float, str]:
    """(p, label) the rule uses for one test: the wild bootstrap's whenever its regression
    has one (every clustered regression, at any G, unless wild_bootstrap_draws is 0),
    else the analytic p (CRV1, Newey-West or HC1)."""
    if np.isfinite(p_wild):
        return p_wild, WILD_LABEL
    return p_crv, _source(f)


def _test(
    f: VerdictFacts, name: str, fact: RegressionFact, unit: str, sided: str, threshold: float = ALPHA_DETECTION
) -> TestFact:
    """One test of `fact`'s regression, read on one side at `threshold`."""
    one = sided == "one-sided"
    p, source = _pick(f, fact.p_one_sided if one else fact.p_two_sided, fact.p_wild_one_sided if one else fact.p_wild_two_sided)
    b = (fact.wild_draws or f.wild_draws) if source == WILD_LABEL else 0
    return TestFact(
        name=name,
        estimate=fact.estimate,
        unit=unit,
        t=fact.t,
        p=p,
        sided=sided,
        source=source,
        draws=b,
        df=fact.df,
        n_obs=fact.n_obs,
        n_clusters=fact.n_clusters,
        not_estimable=fact.note,
        g_star=fact.g_star,
        threshold=threshold,
    )


def tests_of(f: VerdictFacts) -> dict[str, TestFact]:
    """Every test the rule reads, each with the p of its own regression."""
    per_mu_lap, per_ud = "per unit of mu_hat x LAP", "per unit of U-D"
    return {
        "beta3": _test(f, "beta_3", f.beta3, per_mu_lap, "one-sided"),
        "beta3_two_sided": _test(f, "beta_3", f.beta3, per_mu_lap, "two-sided"),
        "theta_high": _test(f, "high-LAP theta", f.theta_high, per_ud, "two-sided"),
        "theta_low": _test(f, "low-LAP theta", f.theta_low, per_ud, "two-sided"),
        "theta_diff": _test(f, "high- minus low-LAP theta", f.theta_diff, "per sd of U-D within its half", "one-sided"),
        "placebo": _test(f, "post-cutoff beta_3", f.placebo, per_mu_lap, "one-sided", PLACEBO_PASS_P),
        "placebo_two_sided": _test(f, "post-cutoff beta_3", f.placebo, per_mu_lap, "two-sided"),
    }


def beta3_p_used(f: VerdictFacts) -> tuple[float, str]:
    t = tests_of(f)["beta3"]
    return t.p, t.source


# ---------------------------------------------------------------- the rule itself


def _analytic_mde(se: float, df: float, alpha: float = ALPHA_DETECTION) -> float:
    """(t_{1-alpha} + t_{0.80}) x SE on the test's degrees of freedom."""
    if not (np.isfinite(se) and se > 0):
        return math.nan
    df = df if np.isfinite(df) and df > 0 else math.inf
    q = (
        (stats.t.ppf(1 - alpha, df) + stats.t.ppf(MDE_POWER, df))
        if np.isfinite(df)
        else (stats.norm.ppf(1 - alpha) + stats.norm.ppf(MDE_POWER))
    )
    return float(q * se)


def mde(f: VerdictFacts) -> float:
    """Minimum detectable beta_3 (one-sided 5% test, 80% power) by the inference the
    decision reads: regression_results.mde, which is (q*_0.95 - q*_0.20) x SE from the
    wild bootstrap's t distribution when the bootstrap ran, (t_0.95 + t_0.80) x SE on
    t(df) otherwise; the analytic one when only the SE is known."""
    return _read_mde(f.beta3.estimate, f.beta3.mde, f.beta3.se, f.beta3.df)


def placebo_mde(f: VerdictFacts) -> float:
    """Minimum detectable post-cutoff beta_3 of the one-sided 10% test the placebo is read
    at (80% power), by the inference the placebo reads (regression_results.mde of the
    post-cutoff sample is computed at that level)."""
    return _read_mde(f.placebo.estimate, f.placebo.mde, f.placebo.se, f.placebo.df, PLACEBO_PASS_P)


def _read_mde(estimate: float, from_regression: float, se: float, df: float, alpha: float = ALPHA_DETECTION) -> float:
    """No MDE without an estimate; regression_results' own when it has one; else analytic."""
    if not np.isfinite(estimate):
        return math.nan
    if np.isfinite(from_regression):
        return float(from_regression)
    return _analytic_mde(se, df, alpha)


def lap_problem(f: VerdictFacts) -> str:
    """The code (LAP_PROBLEMS) of why LAP cannot power the test, or "" when it varies."""
    if f.lap_n_pre == 0:
        if f.n_outcome_pre == 0 and f.n_rows_pre > 0:
            return "no_outcomes"
        if f.n_forecast_pre == 0:
            return "no_forecasts"
        if f.n_lap_values_pre == 0 or f.n_forecast_pre < 0:
            return "no_lap"
        return "no_overlap"
    if np.isfinite(f.censoring_rate_pre) and f.censoring_rate_pre >= MAX_CENSORING:
        return "censored"
    if f.lap_distinct_pre < 2:
        return "constant"
    if not (np.isfinite(f.lap_sd_pre) and f.lap_sd_pre >= f.lap_min_sd_used):
        return "small_sd"
    return ""


def validation_failures(f: VerdictFacts, tests: dict[str, TestFact]) -> tuple[str, ...]:
    """Codes (VALIDATION_FAILURES) of what keeps the step-3 pattern from being present."""
    high, diff = tests["theta_high"], tests["theta_diff"]
    out = []
    if not high.estimable:
        out.append("high_not_estimable")
    elif high.p < ALPHA_VALIDATION and high.estimate < 0:
        out.append("high_negative")
    elif not (high.p < ALPHA_VALIDATION and high.estimate > 0):
        out.append("high_not_significant")
    if not diff.estimable:
        out.append("diff_not_estimable")
    elif not (diff.estimate > 0 and diff.p < ALPHA_VALIDATION):
        out.append("diff_not_significant")
    return tuple(out)


def post_lap_collapse(f: VerdictFacts) -> str:
    """Why post-cutoff LAP has no meaningful variation ("" when it has, or no post rows)."""
    if f.lap_n_post == 0:
        return ""
    if f.lap_distinct_post < 2:
        return f"post-cutoff LAP collapsed: constant at {fmt_num(f.lap_mean_post)} in all {f.lap_n_post} rows"
    if np.isfinite(f.lap_sd_post) and np.isfinite(f.lap_min_sd_post) and f.lap_sd_post < f.lap_min_sd_post:
        return (
            f"post-cutoff LAP collapsed: sd {fmt_num(f.lap_sd_post)} below the variation "
            f"threshold {fmt_num(f.lap_min_sd_post)} ({_threshold_rule(f.lap_measure)})"
        )
    return ""


#: Effective clusters below which a clustered test rests on few independent units: G* under
#: 10, or under half of G (Carter, Schnepel and Steigerwald 2017: G* far below G means a few
#: clusters carry the variation). A weakness the verdict paragraph names, never a decision.
MIN_G_STAR = 10


def few_effective_clusters(f: VerdictFacts) -> bool:
    """beta_3's regression has few effective clusters (verdict column few_effective_clusters)."""
    g, g_star = f.beta3.n_clusters, f.beta3.g_star
    if not np.isfinite(g_star):
        return False
    return bool(g_star < MIN_G_STAR or (np.isfinite(g) and g_star < g / 2))


def lap_out_of_distribution(f: VerdictFacts) -> bool:
    """The prompts lie far outside the model's distribution: the measure's mean before the
    cutoff is below its registry floor (lookahead.measures, out_of_distribution_below), as
    a Min-K% of 1e-8 is (verdict column lap_out_of_distribution)."""
    m = MEASURES.get(f.lap_measure)
    floor = m.out_of_distribution_below if m is not None else None
    return bool(floor is not None and np.isfinite(f.lap_mean_pre) and f.lap_mean_pre < floor)


def not_informative(sd: float) -> str:
    """How a coefficient on a LAP without meaningful variation is printed, wherever it is
    printed: never as a test, always with the sd it rests on."""
    return f"not informative (LAP sd {fmt_num(sd)})"


def collapsed_lap(f: VerdictFacts) -> dict[str, float]:
    """Samples ("pre", "post") whose LAP has no meaningful variation -> its sd: the
    coefficients on LAP estimated there are a large number per unit of a tiny spread, and
    the report prints them as not_informative."""
    out: dict[str, float] = {}
    if lap_problem(f) in ("constant", "small_sd") and f.lap_n_pre:
        out["pre"] = f.lap_sd_pre if np.isfinite(f.lap_sd_pre) else 0.0
    if post_lap_collapse(f):
        out["post"] = f.lap_sd_post if np.isfinite(f.lap_sd_post) else 0.0
    return out


def placebo_code(f: VerdictFacts, tests: dict[str, TestFact]) -> str:
    """The placebo's outcome (PLACEBO)."""
    if not f.placebo_feasible:
        return "infeasible"
    t = tests["placebo"]
    if not t.estimable:
        return "passes_collapsed" if post_lap_collapse(f) else "not_estimable"
    if t.p <= PLACEBO_PASS_P:
        return "fails"
    if post_lap_collapse(f):
        # LAP collapsed after the cutoff (below the variation rule): the signature the
        # protocol expects; an estimate on that little variation has no power and is not
        # what the placebo reads (the reason quotes it with its MDE)
        return "passes_collapsed"
    # the protocol's rule decides (p > 0.10 passes); its power is reported, never decided
    # on: a placebo that could not have detected an effect as large as the pre-cutoff one
    # passes, and the reason says what it could not rule out
    m = placebo_mde(f)
    if np.isfinite(m) and np.isfinite(f.beta3.estimate) and m > f.beta3.estimate:
        return "passes_low_power"
    return "passes"


def evaluate(f: VerdictFacts) -> Outcome:
    """The protocol's decision rule, in the order documented above, as data."""
    tests = tests_of(f)
    problem = lap_problem(f)
    val = validation_failures(f, tests)
    plc = placebo_code(f, tests)
    b3, b3_two = tests["beta3"], tests["beta3_two_sided"]
    if f.n_rows_pre == 0:
        path = "no_pre_rows"
    elif not b3.estimable:
        path = "beta3_not_estimable"
    elif problem:
        # a regressor without meaningful variation powers no test: a significant estimate on
        # it (a huge coefficient per unit of a tiny spread) does not decide (protocol:
        # "otherwise report underpowered")
        path = "null_no_variation" if b3.p >= ALPHA_DETECTION else "significant_no_variation"
    elif b3.p >= ALPHA_DETECTION:
        if np.isfinite(b3_two.p) and b3_two.p < ALPHA_DETECTION and b3.estimate < 0:
            path = "null_negative"
        elif np.isfinite(b3_two.p) and b3_two.p >= ALPHA_DETECTION:
            path = "null_zero"
        else:
            path = "null_not_positive"
    elif not val and PLACEBO[plc][0]:
        path = "contamination"
    else:
        path = "mixed"
    return Outcome(
        decision=PATHS[path][0], path=path, lap_problem=problem, validation_failures=val, placebo=plc, tests=tests, facts=f
    )


# ---------------------------------------------------------------- words from the outcome


def _threshold_rule(measure: str) -> str:
    """The registry's variation rule of `measure` (lookahead.measures), in words."""
    m = MEASURES[measure]
    if m.variation == SCALE_FREE:
        return f"{m.short}: sd at least {MINK_MIN_CV:.0%} of mean |LAP|, a scale-free rule"
    return f"{m.short} is a probability, so the rule is absolute: sd at least {RECALL_MIN_SD:g}"


def _side(p: float, threshold: float) -> str:
    """ "below 0.05" / "not below 0.05": how the printed p relates to the rule's threshold."""
    return f"below {threshold:g}" if p < threshold else f"not below {threshold:g}"


def lap_problem_text(o: Outcome) -> str:
    f, cens = o.facts, _pct(o.facts.censoring_rate_pre)
    return {
        "no_outcomes": (
            f"no pre-cutoff row has an outcome: all {f.n_rows_pre} pre-cutoff "
            "outcomes are missing, so there is nothing to regress"
            + (f" ({f.n_mu_hat_pre} rows have a parsed forecast)" if f.n_mu_hat_pre >= 0 else "")
        ),
        "no_forecasts": (
            f"no pre-cutoff row has a parsed forecast: none of the {f.n_rows_pre} "
            "pre-cutoff answers maps to a forecast label (mu_hat missing), so there "
            "is nothing for LAP to interact with"
        ),
        "no_lap": f"no pre-cutoff row has a LAP value (censoring rate of recall labels {cens})",
        "no_overlap": (
            "no pre-cutoff row has both a parsed forecast and a LAP value "
            f"({f.n_forecast_pre} rows have a forecast, {f.n_lap_values_pre} a LAP value)"
        ),
        "censored": (f"recall labels are censored (neither 'up' nor 'down' in the top-20) in {cens} of pre-cutoff rows"),
        "constant": f"LAP is constant on the pre-cutoff sample (censoring rate {cens})",
        "small_sd": (
            f"LAP sd {fmt_num(f.lap_sd_pre)} is below the threshold "
            f"{fmt_num(f.lap_min_sd_used)} ({_threshold_rule(f.lap_measure)}; censoring "
            f"rate {cens})"
        ),
    }.get(o.lap_problem, "")


def _b3(o: Outcome) -> str:
    t = o.tests["beta3"]
    return f"beta_3 = {fmt_num(t.estimate)} (t {fmt_t(t.t)}, {t.p_phrase()}, N {o.facts.beta3.n_obs})"


def mde_sentence(o: Outcome) -> str:
    f = o.facts
    m = mde(f)
    if not np.isfinite(m):
        return " No minimum detectable effect can be stated: beta_3 is not estimable."
    per_sd = m * f.lap_sd_pre if np.isfinite(f.lap_sd_pre) else math.nan
    how = (
        "from the wild bootstrap's t distribution and its standard error"
        if o.tests["beta3"].source == WILD_LABEL and np.isfinite(f.beta3.mde)
        else "from its standard error"
    )
    return (
        f" The minimum detectable beta_3 is {fmt_num(m)} (one-sided 5% test, 80% power, "
        f"{how}), i.e. a one-sd rise in LAP raising the slope on mu_hat "
        f"by {fmt_num(per_sd)}."
    )


def _g_text(t: TestFact) -> str:
    g = "NA" if not np.isfinite(t.n_clusters) else f"{int(t.n_clusters)}"
    return f"G = {g}, G* = {fmt_num(t.g_star, 3)}"


def read_tests(o: Outcome) -> dict[str, TestFact]:
    """The tests that decided this outcome (beta_3 always; validation and placebo when
    beta_3 is significant, since only then do they move the verdict)."""
    keys = ["beta3"]
    if o.path in ("contamination", "mixed"):
        keys += ["theta_high", "theta_diff"]
        if o.facts.placebo_feasible:
            keys.append("placebo")
    elif o.path == "null_negative":
        keys.append("beta3_two_sided")
    return {k: o.tests[k] for k in keys if o.tests[k].estimable}


def few_clusters_text(o: Outcome) -> str:
    """The protocol's warning below ~20 clusters, naming G and G* of each test read."""
    few = {k: t for k, t in read_tests(o).items() if k != "beta3_two_sided" and _few(t.n_clusters)}
    if not few:
        return ""
    which = "; ".join(f"{t.name}: {_g_text(t)}" for t in few.values())
    return (
        f" Warning: fewer than {MIN_CLUSTERS} clusters ({which}; G* is the effective number "
        "of clusters, Carter, Schnepel and Steigerwald 2017): cluster-robust inference is "
        "unreliable with so few (protocol); the wild bootstrap p-values hold their size "
        "better than CRV1's, but treat the decision with caution."
    )


def borderline_text(o: Outcome) -> str:
    """Tests whose bootstrap p is still within two Monte Carlo SEs of its threshold."""
    parts = [
        f"{t.name} ({t.sided} p {t.p_text()}, Monte Carlo SE {fmt_num(t.mc_se, 2)} from "
        f"{t.draws:,} draws, against {t.threshold:g})"
        for t in read_tests(o).values()
        if t.borderline
    ]
    if not parts:
        return ""
    return (
        " Borderline: " + "; ".join(parts) + " — within two Monte Carlo SEs of the "
        "threshold even after the draws were extended, so other draws could decide it "
        "the other way."
    )


def inference_note(o: Outcome) -> str:
    """How the rule's p-values were obtained, the few-cluster warning and any borderline p."""
    f = o.facts
    b3 = o.tests["beta3"]
    extra = few_clusters_text(o) + borderline_text(o)
    if b3.source == NEWEY_WEST_LABEL:
        return (
            " One entity: a time series, so standard errors are Newey-West with t("
            f"{fmt_num(f.beta3.df)}) p-values, and power is limited (protocol)." + extra
        )
    if b3.source == CRV1_LABEL and f.wild_draws == 0 and b3.estimable:
        return (
            " No wild bootstrap was drawn (wild_bootstrap_draws = 0): the tests read CRV1 "
            "p-values, which over-reject when a few clusters carry the variation "
            "(docs/montecarlo.md)." + extra
        )
    return extra


def _per_sd(o: Outcome) -> str:
    f, d = o.facts, o.tests["theta_diff"]
    both = (
        f"{fmt_num(f.theta_high.per_sd)} against {fmt_num(f.theta_low.per_sd)}, "
        if np.isfinite(f.theta_high.per_sd) and np.isfinite(f.theta_low.per_sd)
        else ""
    )
    return f"{both}a difference of {fmt_num(d.estimate)} (t {fmt_t(d.t)}, {d.p_phrase()})"


def no_lap_rows(f: VerdictFacts) -> int:
    """Pre-cutoff rows without a LAP value: in neither half of the high/low split (0 when
    not known)."""
    if f.n_lap_values_pre < 0 or f.n_rows_pre < 0:
        return 0
    return max(f.n_rows_pre - f.n_lap_values_pre, 0)


def validation_text(o: Outcome) -> str:
    """The step-3 finding in words (present, or what failed), with the rows without LAP
    that the high/low split leaves out."""
    text = _validation_words(o)
    k = no_lap_rows(o.facts)
    if k:
        text += f" ({k} pre-cutoff row{'s' if k != 1 else ''} without LAP {'are' if k != 1 else 'is'} in neither half)"
    return text


def _validation_words(o: Outcome) -> str:
    high, low = o.tests["theta_high"], o.tests["theta_low"]
    hi = f"{fmt_num(high.estimate)} per unit of U-D, t {fmt_t(high.t)}, {high.p_phrase()}"
    if o.validation_present:
        extra = ""
        if low.estimable and low.p < ALPHA_VALIDATION:
            extra = (
                f"; the low-LAP theta is itself significant ({fmt_num(low.estimate)} per "
                f"unit of U-D, {low.p_phrase()}), but smaller per sd"
            )
        return (
            f"validation pattern present: the high-LAP theta is positive and significant "
            f"({hi}) and, per sd of U-D within each half, exceeds the low-LAP theta: "
            f"{_per_sd(o)}{extra}"
        )
    parts = []
    for code in o.validation_failures:
        if code == "high_not_estimable":
            parts.append("the high-LAP theta could not be estimated")
        elif code == "high_negative":
            parts.append(
                f"the high-LAP theta is significantly negative ({hi}): the recalled "
                "direction predicts the opposite outcome, which memorization does not produce"
            )
        elif code == "high_not_significant":
            parts.append(
                f"the high-LAP theta is not significantly positive ({hi}, "
                f"{_side(high.p, ALPHA_VALIDATION)}): no evidence of memorization, and "
                "the detection test has little power (protocol)"
            )
        elif code == "diff_not_estimable":
            parts.append("the high-minus-low-LAP theta difference could not be estimated")
        elif code == "diff_not_significant":
            d = o.tests["theta_diff"]
            parts.append(
                f"per sd of U-D within each half, the high-LAP theta does not "
                f"significantly exceed the low-LAP theta: {_per_sd(o)}, "
                f"{_side(d.p, ALPHA_VALIDATION)}; predictive power is not concentrated "
                "in the high-LAP half"
            )
    return "validation fails: " + "; ".join(parts)


def placebo_text(o: Outcome) -> str:
    """The step-5 finding in words."""
    f, t, two = o.facts, o.tests["placebo"], o.tests["placebo_two_sided"]
    if o.placebo == "infeasible":
        return "placebo infeasible: no post-cutoff rows (steps 1-4 only)"
    if o.placebo == "passes_collapsed":
        if t.estimable:
            return (
                f"placebo passes: {post_lap_collapse(f)}, so nothing is left for LAP to proxy "
                f"(the collapse the protocol expects); the post-cutoff beta_3 on that little "
                f"variation is {not_informative(collapsed_lap(f)['post'])}: it could detect "
                f"only effects above {fmt_num(placebo_mde(f))} and is not read as a test"
            )
        return (
            f"placebo passes: {post_lap_collapse(f)}, so post-cutoff beta_3 is not "
            "estimable and nothing is left for LAP to proxy (the collapse the protocol expects)"
        )
    if o.placebo == "not_estimable":
        return (
            "placebo not estimable: post-cutoff beta_3 could not be estimated while "
            f"post-cutoff LAP varies (sd {fmt_num(f.lap_sd_post)}, mean "
            f"{fmt_num(f.lap_mean_post)})"
        )
    b = f"post-cutoff beta_3 {fmt_num(t.estimate)} (t {fmt_t(t.t)}, {t.p_phrase()}"
    little = post_lap_collapse(f)
    note = (f"; {little.replace('collapsed: ', 'varies little: ')}, so the estimate rests on little variation") if little else ""
    if o.placebo == "passes_low_power":
        return (
            f"placebo passes: {b}, above {PLACEBO_PASS_P:g}){note}, though it could not rule "
            f"out a post-cutoff effect as large as the pre-cutoff one (its minimum "
            f"detectable effect, one-sided {PLACEBO_PASS_P:g} test at 80% power, is "
            f"{fmt_num(placebo_mde(f))} against beta_3 {fmt_num(f.beta3.estimate)}), so the evidence "
            "that the effect ends at the cutoff is LAP's fall there (the effective-cutoff "
            "table)"
        )
    if o.placebo == "passes":
        neg = ""
        if np.isfinite(two.p) and two.p < ALPHA_DETECTION and t.estimate < 0:
            neg = f"; it is significantly negative ({two.p_phrase()}), which is no surviving positive effect"
        return f"placebo passes: {b}, above {PLACEBO_PASS_P:g}){neg}{note}"
    return (
        f"placebo fails: {b}, not above {PLACEBO_PASS_P:g}): a post-cutoff effect survives; "
        f"the recall measure may proxy for something other than memorization{note}"
    )


def _not_estimable_reason(f: VerdictFacts) -> str:
    note = f.beta3.note.strip()
    if (f.beta3.n_obs and f.beta3.n_obs <= 3) or "singleton" in note or "no observations" in note:
        return (
            f"too few usable pre-cutoff rows ({f.n_rows_pre if f.n_rows_pre >= 0 else 'NA'} "
            f"rows, {f.beta3.n_obs} in the regression){': ' + note if note else ''}"
        )
    marker = "not estimable: "
    if marker in note:  # the fit said why this term is not estimable: quote that
        return note.split(marker, 1)[1].split("; ")[0] if "; " in note.split(marker, 1)[1] else note.split(marker, 1)[1]
    return f"regression singular or term dropped{': ' + note if note else ''}"


def reason(o: Outcome) -> str:
    """The verdict sentence, rendered from the outcome alone."""
    f = o.facts
    suffix = " Results are approximated (sampling fallback)." if f.approximated else ""
    note = inference_note(o)
    if o.path == "no_pre_rows":
        return (
            "Underpowered: there are no pre-cutoff rows (every observation realizes after "
            "the training cutoff), so the detection test cannot run; nothing can be said "
            "about contamination." + suffix
        )
    if o.path == "beta3_not_estimable":
        why = lap_problem_text(o) or _not_estimable_reason(f)
        return (
            f"Underpowered: beta_3 is not estimable — {why}. The test cannot tell "
            "contamination from its absence." + mde_sentence(o) + suffix
        )
    b3 = _b3(o)
    two = o.tests["beta3_two_sided"]
    flat = collapsed_lap(f).get("pre")
    if o.path in ("null_no_variation", "significant_no_variation") and flat is not None:
        # a coefficient per unit of a regressor that barely varies is not printed as a test
        return (
            f"Underpowered: beta_3 is {not_informative(flat)}: LAP shows no meaningful "
            f"variation — {lap_problem_text(o)}. A coefficient per unit of a regressor that "
            "barely varies is not evidence, so the estimate does not decide; the test cannot "
            "tell contamination from its absence." + mde_sentence(o) + note + suffix
        )
    if o.path == "null_no_variation":
        return (
            f"Underpowered: {b3} is not significant (not below {ALPHA_DETECTION:g}) and LAP "
            f"shows no meaningful variation — {lap_problem_text(o)}. The test cannot tell "
            "contamination from its absence." + mde_sentence(o) + note + suffix
        )
    if o.path == "null_negative":
        return (
            f"No evidence of contamination: {b3} is significantly negative ({two.p_phrase()}, "
            f"below {ALPHA_DETECTION:g}), the opposite of the sign memorization predicts; the "
            "one-sided test for beta_3 > 0 finds no evidence of contamination." + mde_sentence(o) + note + suffix
        )
    if o.path == "null_zero":
        return (
            f"No evidence of contamination: {b3} is indistinguishable from zero "
            f"({two.p_phrase()}, not below {ALPHA_DETECTION:g}) while LAP varies (sd "
            f"{fmt_num(f.lap_sd_pre)})." + mde_sentence(o) + note + suffix
        )
    if o.path == "null_not_positive":
        return (
            f"No evidence of contamination: {b3} is not significantly positive (not below "
            f"{ALPHA_DETECTION:g}) while LAP varies (sd {fmt_num(f.lap_sd_pre)})." + mde_sentence(o) + note + suffix
        )
    if o.path == "significant_no_variation":
        return (
            f"Underpowered: {b3} is significant, but LAP shows no meaningful variation — "
            f"{lap_problem_text(o)}. A coefficient per unit of a regressor that barely "
            "varies is not evidence, so the estimate does not decide; the test cannot tell "
            "contamination from its absence." + mde_sentence(o) + note + suffix
        )
    val, plc = validation_text(o), placebo_text(o)
    if o.path == "contamination":
        return f"Contamination detected: {b3} > 0; {val}; {plc}." + note + " " + RECOMMENDATION + suffix
    plc_ok = PLACEBO[o.placebo][0]
    failed = [] if o.validation_present else ["validation failed"]
    if not plc_ok:
        failed.append(
            {"infeasible": "placebo infeasible", "not_estimable": "placebo not estimable", "fails": "placebo failed"}[o.placebo]
        )
    details = "; ".join(t for t, ok in ((val, o.validation_present), (plc, plc_ok)) if not ok)
    return f"Mixed/invalid ({'; '.join(failed)}): {b3} > 0 but {details}." + note + suffix


def decide(f: VerdictFacts) -> tuple[str, str]:
    """(verdict, reason) by the protocol's decision rule."""
    o = evaluate(f)
    return o.decision, reason(o)


# ---------------------------------------------------------------- facts from tables


def _f(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


#: Every panel column the verdict reads (LAP variation, censoring, approximation); the
#: dbt model `verdict` reads only these (lookahead.stats.panel_io).
VERDICT_COLUMNS: tuple[str, ...] = ("lap", "outcome", "mu_hat", "approximated", "up_censored", "down_censored", "p_up", "p_down")


def censoring_rate(panel: pd.DataFrame) -> float:
    """Share of rows whose recall answer had neither 'up' nor 'down' in the top-20.

    Uses the panel's up_censored/down_censored flags when present; otherwise a label is
    censored when its probability is missing (NULL) or exactly zero (exp(logprob) is
    never zero). NaN when the panel has neither."""
    if len(panel) == 0:
        return math.nan
    if {"up_censored", "down_censored"} <= set(panel.columns):
        up_c = panel["up_censored"].astype("boolean").fillna(True)
        down_c = panel["down_censored"].astype("boolean").fillna(True)
        return float((up_c & down_c).mean())
    if not {"p_up", "p_down"} <= set(panel.columns):
        return math.nan
    up = pd.to_numeric(panel["p_up"], errors="coerce")
    down = pd.to_numeric(panel["p_down"], errors="coerce")
    cens = (up.isna() | (up == 0)) & (down.isna() | (down == 0))
    return float(cens.mean())


def lap_min_sd(settings: StatsSections, lap: pd.Series, reference: pd.Series | None = None) -> float:
    """The sd below which LAP has no meaningful variation (see the module doc).

    For Min-K% the threshold is 1% of mean |LAP| of `reference` (default: `lap` itself);
    the placebo passes the pre-cutoff LAP so that a post-cutoff LAP collapsed toward zero
    is judged against the scale LAP had before the cutoff."""
    if settings.protocol.lap_min_sd is not None:
        return float(settings.protocol.lap_min_sd)
    if MEASURES[settings.measures.lap_measure].variation == SCALE_FREE:
        ref = lap if reference is None else reference
        m = float(ref.abs().mean()) if len(ref) else math.nan
        return MINK_MIN_CV * m if np.isfinite(m) and m > 0 else 0.0
    return RECALL_MIN_SD


def _usable_lap(panel: pd.DataFrame | None) -> pd.Series:
    if panel is None or "lap" not in panel.columns:
        return pd.Series(dtype=float)
    usable = panel
    for c in ("outcome", "mu_hat"):
        if c in usable.columns:
            usable = usable[pd.to_numeric(usable[c], errors="coerce").notna()]
    return pd.to_numeric(usable["lap"], errors="coerce").dropna()


def _regression_fact(results: pd.DataFrame, name: str) -> RegressionFact:
    """Test `name`'s regression from its regression_results row: the facts the verdict
    table holds for it (FACT_TESTS), each from the column its field names."""
    source = FACT_TESTS[name]
    row = result_row(results, source.spec, source.sample, source.term)
    values = {}
    for fld in fields(RegressionFact):
        column = fld.metadata.get(RESULT_COLUMN)
        if column is not None and fld.name in source.columns:
            values[fld.name] = _parse(fld, row.get(column))
    fact = RegressionFact(**values)
    return fact if not np.isfinite(fact.estimate) else replace(fact, note="")  # a note says why there is none


def gather_facts(
    results: pd.DataFrame, panel_pre: pd.DataFrame, panel_post: pd.DataFrame | None, settings: StatsSections
) -> VerdictFacts:
    """Read the facts the rule uses from regression_results and the panels."""
    tests = {name: _regression_fact(results, name) for name in FACT_TESTS}
    b3 = tests["beta3"]
    if not np.isfinite(b3.df):  # results written before the df column: G-1 or N-3
        g, n = b3.n_clusters, b3.n_obs
        tests["beta3"] = replace(b3, df=g - 1 if np.isfinite(g) else (n - 3 if n > 0 else math.nan))
    # the thetas per sd of U-D within their half, from the difference regression
    low_sd = _f(result_row(results, DIFFERENCE_SPEC, "pre", "ud").get("estimate"))
    tests["theta_low"] = replace(tests["theta_low"], per_sd=low_sd)
    tests["theta_high"] = replace(tests["theta_high"], per_sd=low_sd + tests["theta_diff"].estimate)

    lap = _usable_lap(panel_pre)
    lap_post = _usable_lap(panel_post)
    feasible = panel_post is not None and len(panel_post) > 0
    approx = any_approximated(panel_pre) or any_approximated(panel_post)
    det = result_row(results, DETECTION_SPEC, "pre", BETA3)
    return VerdictFacts(
        **tests,
        placebo_feasible=feasible,
        lap_n_pre=len(lap),
        lap_distinct_pre=int(lap.nunique()),
        lap_sd_pre=float(lap.std(ddof=1)) if len(lap) > 1 else math.nan,
        lap_mean_pre=float(lap.mean()) if len(lap) else math.nan,
        lap_mean_post=float(lap_post.mean()) if len(lap_post) else math.nan,
        lap_min_sd_used=lap_min_sd(settings, lap),
        censoring_rate_pre=censoring_rate(panel_pre),
        lap_measure=settings.measures.lap_measure,
        cluster=settings.protocol.cluster,
        vcov=str(det.get("vcov") or ""),
        approximated=approx,
        n_rows_pre=len(panel_pre),
        lap_n_post=len(lap_post),
        lap_distinct_post=int(lap_post.nunique()),
        lap_sd_post=float(lap_post.std(ddof=1)) if len(lap_post) > 1 else math.nan,
        lap_min_sd_post=lap_min_sd(settings, lap_post, reference=lap),
        wild_draws=int(settings.protocol.wild_bootstrap_draws),
        n_forecast_pre=_count_present(panel_pre, ("mu_hat", "outcome")),
        n_lap_values_pre=_count_present(panel_pre, ("lap",)),
        n_outcome_pre=_count_present(panel_pre, ("outcome",)),
        n_mu_hat_pre=_count_present(panel_pre, ("mu_hat",)),
    )


def _count_present(panel: pd.DataFrame | None, columns: tuple[str, ...]) -> int:
    """Rows with every one of `columns` present (-1 when the panel lacks one)."""
    if panel is None or not set(columns) <= set(panel.columns):
        return -1
    ok = np.ones(len(panel), dtype=bool)
    for c in columns:
        ok &= pd.to_numeric(panel[c], errors="coerce").notna().to_numpy()
    return int(ok.sum())


def outcome_row(o: Outcome) -> dict[str, Any]:
    """The verdict table's row: every fact, the outcome's codes and the rendered words."""
    p_used = o.tests["beta3"]
    row: dict[str, Any] = {"verdict": o.decision, "reason": reason(o)}
    row.update(o.facts.columns())
    row.update(
        {
            "decision_path": o.path,
            "lap_problem": o.lap_problem,
            "validation_failures": ",".join(o.validation_failures),
            "placebo_outcome": o.placebo,
            "beta3_p_used": p_used.p,
            "inference_used": p_used.source,
            "beta3_mde": mde(o.facts),
            "placebo_mde": placebo_mde(o.facts),
            "beta3_p_mc_se": p_used.mc_se,
            "placebo_p_used": o.tests["placebo"].p,
            "placebo_p_mc_se": o.tests["placebo"].mc_se,
            "borderline_tests": ",".join(k for k, t in read_tests(o).items() if t.borderline),
            "n_rows_no_lap_pre": (
                o.facts.n_rows_pre - o.facts.n_lap_values_pre
                if o.facts.n_lap_values_pre >= 0 and o.facts.n_rows_pre >= 0
                else None
            ),
            "lap_varies": not o.lap_problem,
            "few_effective_clusters": few_effective_clusters(o.facts),
            "lap_out_of_distribution": lap_out_of_distribution(o.facts),
            "validation_pattern": o.validation_present,
            "placebo_passes": PLACEBO[o.placebo][0],
            "placebo_status": PLACEBO[o.placebo][1],
            "recommendation": RECOMMENDATION if o.decision == CONTAMINATION else "",
            "decision_rule": DECISION_RULE,
        }
    )
    return row


def verdict_frame(
    results: pd.DataFrame, panel_pre: pd.DataFrame, panel_post: pd.DataFrame | None, settings: StatsSections
) -> pd.DataFrame:
    """The one-row verdict table: verdict, reason, the rule's text and every fact used."""
    row = outcome_row(evaluate(gather_facts(results, panel_pre, panel_post, settings)))
    frame = pd.DataFrame([row])
    for c, v in row.items():
        if isinstance(v, float):
            frame[c] = pd.array([v if np.isfinite(v) else None], dtype="Float64")
    return frame


def _parse(fld: Field[Any], v: Any) -> Any:
    """A value read back as its field's kind (NULL or "" -> NaN, a missing count -> its
    default)."""
    kind = _kind(fld)
    if kind == "bool":
        return str(v).strip().lower() in ("true", "1")
    if kind == "int":
        x = _f(v)
        return int(x) if np.isfinite(x) else (fld.default if isinstance(fld.default, int) else 0)
    if kind == "float":
        return _f(v)
    return "" if v is None or (isinstance(v, float) and not np.isfinite(v)) else str(v)


def facts_from_row(row: pd.Series | dict[str, Any]) -> VerdictFacts:
    """The facts back from a verdict table row (a CSV read back: NULL -> NaN, "" -> NaN),
    so that the report renders from the same Outcome the build decided on."""
    nested: dict[str, dict[str, Any]] = {name: {} for name in FACT_TESTS}
    top_level: dict[str, Any] = {}
    for col, (top, attr) in _COLUMN_AT.items():
        value = _parse(_field_of(col), row.get(col) if hasattr(row, "get") else None)
        if attr:
            nested[top][attr] = value
        else:
            top_level[top] = value
    top_level.update({name: RegressionFact(**kw) for name, kw in nested.items()})
    return VerdictFacts(**top_level)
