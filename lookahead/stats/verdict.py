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
  3. beta_3 one-sided p >= 0.05 and LAP without meaningful variation
                                                          -> "Underpowered".
  4. beta_3 one-sided p >= 0.05 otherwise                 -> "No evidence of contamination",
     worded "indistinguishable from zero" only when it is (two-sided p >= 0.05); a
     significantly negative beta_3 is called that.
  5. beta_3 one-sided p < 0.05, validation pattern present, placebo passes
                                                          -> "Contamination detected".
  6. otherwise                                            -> "Mixed/invalid", naming the
     part(s) that failed: validation, placebo, or both.
Every "No evidence" and "Underpowered" with an estimable beta_3 quotes the minimum
detectable effect (one-sided 5% test, 80% power): (t_0.95 + t_0.80) x SE(beta_3).

Choices the protocol leaves open, stated here and in docs/verdict.md:
  - The LAP-variation rule qualifies a null only (the protocol attaches "otherwise report
    underpowered" to "No evidence"): a significant beta_3 on little LAP variation is
    judged by validation and placebo, with the little variation said in the reason.
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
    0.01 (absolute: recall LAP is a probability mass on a fixed 0-1 scale); for Min-K%
    LAP (its scale varies by model and tokenizer) a coefficient of variation sd/mean|LAP|
    >= 0.01, which is scale-free. ``lap_min_sd`` overrides the absolute threshold.
    Recall censoring >= 99% of rows is also no variation.
  - Few clusters: a regression with fewer clusters than ``wild_bootstrap_min_clusters``
    (default 50; docs/montecarlo.md) is judged by its wild cluster bootstrap p-value
    instead of CRV1's; both are reported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lookahead.stats.protocol import (
    BETA3,
    DETECTION_SPEC,
    DIFFERENCE_SPEC,
    THETA_DIFF,
    StatsSettings,
    any_approximated,
    result_row,
)

CONTAMINATION = "Contamination detected"
NO_EVIDENCE = "No evidence of contamination"
MIXED = "Mixed/invalid"
UNDERPOWERED = "Underpowered"
VERDICTS = (CONTAMINATION, NO_EVIDENCE, MIXED, UNDERPOWERED)

ALPHA_DETECTION = 0.05   # beta_3 one-sided
ALPHA_VALIDATION = 0.05  # high-LAP theta two-sided; high minus low one-sided
PLACEBO_PASS_P = 0.10    # post-cutoff beta_3 one-sided p must exceed this
MDE_POWER = 0.80         # minimum detectable effect: power of the one-sided 5% test
RECALL_MIN_SD = 0.01
MINK_MIN_CV = 0.01
MAX_CENSORING = 0.99

DECISION_RULE = (
    "Contamination detected: beta_3 > 0 (one-sided p < 0.05) with the validation pattern "
    "present and the placebo passing. No evidence of contamination: beta_3 indistinguishable "
    "from zero with LAP showing meaningful variation (otherwise report \"underpowered\"). "
    "Mixed/invalid: validation fails or placebo fails — explain which."
)
RECOMMENDATION = (
    "Restrict backtests to data after the model's training cutoff. Prompt-level fixes "
    "(masking, 'ignore future information') are not a remedy unless this test is rerun "
    "on them."
)
CRV1_LABEL = "CRV1"
WILD_LABEL = "wild bootstrap"


@dataclass(frozen=True)
class VerdictFacts:
    """Everything the rule looks at; also the columns of the verdict table.

    p-values named ``*_used`` are the ones the rule reads: the wild cluster bootstrap's
    when that regression has fewer clusters than ``wild_min_clusters`` and the bootstrap
    ran, CRV1's (or Newey-West's / HC1's) otherwise."""

    beta3: float
    beta3_t: float
    beta3_p_one_sided: float
    n_obs_pre: int
    theta_pooled: float
    theta_pooled_t: float
    theta_high: float
    theta_high_t: float
    theta_high_p: float
    theta_low: float
    theta_low_t: float
    theta_low_p: float
    placebo_feasible: bool
    placebo_beta3: float
    placebo_t: float
    placebo_p_one_sided: float
    n_obs_post: int
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
    beta3_note: str = ""
    n_rows_pre: int = -1            # pre-cutoff panel rows (-1: not known)
    beta3_se: float = math.nan
    beta3_p_two_sided: float = math.nan
    beta3_p_wild_one_sided: float = math.nan
    beta3_df: float = math.nan      # degrees of freedom of its t test (G-1 when clustered)
    n_clusters_pre: float = math.nan
    theta_high_p_wild: float = math.nan
    theta_low_p_wild: float = math.nan
    theta_diff: float = math.nan
    theta_diff_t: float = math.nan
    theta_diff_p_one_sided: float = math.nan
    theta_diff_p_wild_one_sided: float = math.nan
    placebo_p_two_sided: float = math.nan
    placebo_p_wild_one_sided: float = math.nan
    n_clusters_post: float = math.nan
    lap_n_post: int = 0
    lap_distinct_post: int = 0
    lap_sd_post: float = math.nan
    lap_min_sd_post: float = math.nan
    wild_min_clusters: int = 0


# ---------------------------------------------------------------- which p-value

def _few(f: VerdictFacts, n_clusters: float) -> bool:
    return bool(np.isfinite(n_clusters) and n_clusters < f.wild_min_clusters)


def _pick(f: VerdictFacts, p_crv: float, p_wild: float, n_clusters: float) -> tuple[float, str]:
    """(p, label) the rule uses for one test."""
    if _few(f, n_clusters) and np.isfinite(p_wild):
        return p_wild, WILD_LABEL
    return p_crv, CRV1_LABEL


def beta3_p_used(f: VerdictFacts) -> tuple[float, str]:
    return _pick(f, f.beta3_p_one_sided, f.beta3_p_wild_one_sided, f.n_clusters_pre)


def inference_note(f: VerdictFacts) -> str:
    """How the rule's p-values were obtained, when that is not plain CRV1."""
    if not _few(f, f.n_clusters_pre):
        return ""
    g = int(f.n_clusters_pre)
    if np.isfinite(f.beta3_p_wild_one_sided):
        return (f" With {g} clusters (< {f.wild_min_clusters}) the tests use wild cluster "
                f"bootstrap p-values (CRV1 one-sided p for beta_3: {_num(f.beta3_p_one_sided)}).")
    return (f" With {g} clusters (< {f.wild_min_clusters}) CRV1 inference is unreliable and no "
            "wild bootstrap p-value is available (setting wild_bootstrap_draws); CRV1 p-values used.")


# ---------------------------------------------------------------- the rule itself

def mde(f: VerdictFacts) -> float:
    """Minimum detectable beta_3: (t_{1-0.05} + t_{0.80}) x SE on the test's degrees of freedom."""
    if not (np.isfinite(f.beta3_se) and f.beta3_se > 0):
        return math.nan
    df = f.beta3_df if np.isfinite(f.beta3_df) and f.beta3_df > 0 else math.inf
    q = (stats.t.ppf(1 - ALPHA_DETECTION, df) + stats.t.ppf(MDE_POWER, df)) if np.isfinite(df) else (
        stats.norm.ppf(1 - ALPHA_DETECTION) + stats.norm.ppf(MDE_POWER))
    return float(q * f.beta3_se)


def mde_sentence(f: VerdictFacts) -> str:
    m = mde(f)
    if not np.isfinite(m):
        return " No minimum detectable effect can be stated: beta_3 is not estimable."
    per_sd = m * f.lap_sd_pre if np.isfinite(f.lap_sd_pre) else math.nan
    return (f" The test rules out effects larger than beta_3 = {_num(m)}, i.e. a one-sd rise in "
            f"LAP raising the slope on mu_hat by more than {_num(per_sd)} (minimum detectable "
            f"effect from the standard error: one-sided 5% test, 80% power).")


def lap_variation_problem(f: VerdictFacts) -> str | None:
    """Why LAP cannot power the test, or None when it varies meaningfully."""
    cens = _pct(f.censoring_rate_pre)
    if f.lap_n_pre == 0:
        return f"no pre-cutoff row has a LAP value (censoring rate of recall labels {cens})"
    if np.isfinite(f.censoring_rate_pre) and f.censoring_rate_pre >= MAX_CENSORING:
        return (f"recall labels are censored (neither 'up' nor 'down' in the top-20) in "
                f"{cens} of pre-cutoff rows")
    if f.lap_distinct_pre < 2:
        return f"LAP is constant on the pre-cutoff sample (censoring rate {cens})"
    if not (np.isfinite(f.lap_sd_pre) and f.lap_sd_pre >= f.lap_min_sd_used):
        return (f"LAP sd {f.lap_sd_pre:.3g} is below the threshold {f.lap_min_sd_used:.3g} "
                f"({_threshold_rule(f.lap_measure)}; censoring rate {cens})")
    return None


def _threshold_rule(measure: str) -> str:
    if measure == "mink":
        return "Min-K%: sd at least 1% of mean |LAP|, a scale-free rule"
    return "recall LAP is a probability, so the rule is absolute: sd at least 0.01"


def validation_pattern(f: VerdictFacts) -> tuple[bool, str]:
    """(present?, explanation) for the step-3 pattern."""
    p_high, _ = _pick(f, f.theta_high_p, f.theta_high_p_wild, f.n_clusters_pre)
    p_low, _ = _pick(f, f.theta_low_p, f.theta_low_p_wild, f.n_clusters_pre)
    p_diff, _ = _pick(f, f.theta_diff_p_one_sided, f.theta_diff_p_wild_one_sided, f.n_clusters_pre)
    high = (f"high-LAP theta {_num(f.theta_high)} (t {_num(f.theta_high_t)}, p {_num(p_high)})")
    low = (f"low-LAP theta {_num(f.theta_low)} (t {_num(f.theta_low_t)}, p {_num(p_low)})")
    diff = f"{_num(f.theta_diff)} (t {_num(f.theta_diff_t)}, one-sided p {_num(p_diff)})"
    high_sig = np.isfinite(f.theta_high) and np.isfinite(p_high) and p_high < ALPHA_VALIDATION
    high_ok = high_sig and f.theta_high > 0
    diff_ok = (np.isfinite(f.theta_diff) and f.theta_diff > 0 and np.isfinite(p_diff)
               and p_diff < ALPHA_VALIDATION)
    parts = []
    if not np.isfinite(f.theta_high):
        parts.append("high-LAP theta could not be estimated")
    elif high_sig and f.theta_high < 0:
        parts.append(f"{high} is significantly negative: the recalled direction predicts the "
                     "opposite outcome, which memorization does not produce")
    elif not high_ok:
        parts.append(f"{high} is not significant: no evidence of memorization, and the "
                     "detection test has little power (protocol)")
    if not np.isfinite(f.theta_diff):
        parts.append("the high-minus-low-LAP theta difference could not be estimated")
    elif not diff_ok:
        parts.append(f"the high-LAP theta does not significantly exceed the {low}: the "
                     f"difference is {diff}, so the low-LAP half is not near zero by comparison")
    if high_ok and diff_ok:
        extra = ("; the low-LAP theta is itself significant, but smaller"
                 if np.isfinite(p_low) and p_low < ALPHA_VALIDATION else "")
        return True, (f"validation pattern present: {high} exceeds {low} by {diff}{extra}")
    return False, "validation fails: " + "; ".join(parts)


def post_lap_collapsed(f: VerdictFacts) -> str | None:
    """Why post-cutoff LAP has no meaningful variation, or None."""
    if f.lap_n_post == 0:
        return None
    if f.lap_distinct_post < 2:
        return (f"post-cutoff LAP collapsed: constant at {_num(f.lap_mean_post)} in all "
                f"{f.lap_n_post} rows")
    if np.isfinite(f.lap_sd_post) and np.isfinite(f.lap_min_sd_post) and f.lap_sd_post < f.lap_min_sd_post:
        return (f"post-cutoff LAP collapsed: sd {f.lap_sd_post:.3g} below the variation threshold "
                f"{f.lap_min_sd_post:.3g} ({_threshold_rule(f.lap_measure)})")
    return None


def placebo_status(f: VerdictFacts) -> tuple[bool, str]:
    """(passes?, explanation) for step 5."""
    if not f.placebo_feasible:
        return False, "placebo infeasible: no post-cutoff rows (steps 1-4 only)"
    p_post, label = _pick(f, f.placebo_p_one_sided, f.placebo_p_wild_one_sided, f.n_clusters_post)
    if not (np.isfinite(f.placebo_beta3) and np.isfinite(p_post)):
        collapsed = post_lap_collapsed(f)
        if collapsed:
            return True, (f"placebo passes: {collapsed}, so post-cutoff beta_3 is not estimable and "
                          "nothing is left for LAP to proxy (the collapse the protocol expects)")
        return False, ("placebo not estimable: post-cutoff beta_3 could not be estimated "
                       f"(post-cutoff mean LAP {_num(f.lap_mean_post)})")
    via = f", {label}" if label == WILD_LABEL else ""
    if p_post > PLACEBO_PASS_P:
        neg = ""
        if np.isfinite(f.placebo_p_two_sided) and f.placebo_p_two_sided < 0.05 and f.placebo_beta3 < 0:
            neg = (f"; it is significantly negative (two-sided p {_num(f.placebo_p_two_sided)}), "
                   "which is no surviving positive effect")
        return True, (f"placebo passes: post-cutoff beta_3 {_num(f.placebo_beta3)}, "
                      f"one-sided p {_num(p_post)} > {PLACEBO_PASS_P}{via}{neg}")
    return False, (f"placebo fails: post-cutoff beta_3 {_num(f.placebo_beta3)} survives "
                   f"(one-sided p {_num(p_post)} <= {PLACEBO_PASS_P}{via}); the "
                   "recall measure may proxy for something other than memorization")


def decide(f: VerdictFacts) -> tuple[str, str]:
    """(verdict, reason) by the protocol's decision rule, in the order documented above."""
    suffix = " Results are approximated (sampling fallback)." if f.approximated else ""
    if f.n_rows_pre == 0:
        return UNDERPOWERED, ("Underpowered: there are no pre-cutoff rows (every observation "
                              "realizes after the training cutoff), so the detection test cannot "
                              "run; nothing can be said about contamination." + suffix)
    p_used, p_label = beta3_p_used(f)
    problem = lap_variation_problem(f)
    if not (np.isfinite(f.beta3) and np.isfinite(p_used)):
        why = problem or _not_estimable_reason(f)
        return UNDERPOWERED, (f"Underpowered: beta_3 is not estimable — {why}. The test cannot "
                              "tell contamination from its absence." + mde_sentence(f) + suffix)
    via = f", {p_label}" if p_label == WILD_LABEL else ""
    b3 = (f"beta_3 = {_num(f.beta3)} (t {_num(f.beta3_t)}, one-sided p {_num(p_used)}{via}, "
          f"N {f.n_obs_pre})")
    if p_used >= ALPHA_DETECTION:
        if problem is not None:
            return UNDERPOWERED, (f"Underpowered: {b3} is not significant and LAP shows no "
                                  f"meaningful variation — {problem}. The test cannot tell "
                                  "contamination from its absence." + mde_sentence(f)
                                  + inference_note(f) + suffix)
        if (np.isfinite(f.beta3_p_two_sided) and f.beta3_p_two_sided < ALPHA_DETECTION
                and f.beta3 < 0):
            return NO_EVIDENCE, (f"No evidence of contamination: {b3} is significantly negative "
                                 f"(two-sided p {_num(f.beta3_p_two_sided)}), the opposite of the "
                                 "sign memorization predicts; the one-sided test for beta_3 > 0 "
                                 "finds no evidence of contamination." + mde_sentence(f)
                                 + inference_note(f) + suffix)
        return NO_EVIDENCE, (f"No evidence of contamination: {b3} is indistinguishable from "
                             f"zero while LAP varies (sd {_num(f.lap_sd_pre)})." + mde_sentence(f)
                             + inference_note(f) + suffix)
    little = ""
    if problem is not None:
        little = (f" Note: {problem}; the variation rule qualifies only a null result, so the "
                  "significant estimate is judged by validation and placebo.")
    val_ok, val_text = validation_pattern(f)
    plc_ok, plc_text = placebo_status(f)
    if val_ok and plc_ok:
        return CONTAMINATION, (f"Contamination detected: {b3} > 0; {val_text}; {plc_text}."
                               + little + inference_note(f) + " " + RECOMMENDATION + suffix)
    plc_word = ("infeasible" if not f.placebo_feasible
                else "not estimable" if plc_text.startswith("placebo not estimable") else "failed")
    failed = [label for label, ok in (("validation failed", val_ok),
                                      (f"placebo {plc_word}", plc_ok)) if not ok]
    which = "; ".join(failed)
    details = "; ".join(t for t, ok in ((val_text, val_ok), (plc_text, plc_ok)) if not ok)
    return MIXED, (f"Mixed/invalid ({which}): {b3} > 0 but {details}." + little
                   + inference_note(f) + suffix)


def _not_estimable_reason(f: VerdictFacts) -> str:
    note = f.beta3_note.strip()
    if f.n_obs_pre and f.n_obs_pre <= 3 or "singleton" in note or "no observations" in note:
        return (f"too few usable pre-cutoff rows ({f.n_rows_pre if f.n_rows_pre >= 0 else 'NA'} "
                f"rows, {f.n_obs_pre} in the regression){': ' + note if note else ''}")
    return f"regression singular or term dropped{': ' + note if note else ''}"


# ---------------------------------------------------------------- facts from tables

def _num(x: float) -> str:
    return "NA" if x is None or not np.isfinite(x) else f"{x:.4g}"


def _pct(x: float) -> str:
    return "NA" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def _f(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


#: Every panel column the verdict reads (LAP variation, censoring, approximation); the
#: dbt model `verdict` reads only these (lookahead.stats.panel_io).
VERDICT_COLUMNS: tuple[str, ...] = ("lap", "outcome", "mu_hat", "approximated", "up_censored",
                                    "down_censored", "p_up", "p_down")


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


def lap_min_sd(settings: StatsSettings, lap: pd.Series, reference: pd.Series | None = None) -> float:
    """The sd below which LAP has no meaningful variation (see the module doc).

    For Min-K% the threshold is 1% of mean |LAP| of `reference` (default: `lap` itself);
    the placebo passes the pre-cutoff LAP so that a post-cutoff LAP collapsed toward zero
    is judged against the scale LAP had before the cutoff."""
    if settings.lap_min_sd is not None:
        return float(settings.lap_min_sd)
    if settings.lap_measure == "mink":
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


def gather_facts(results: pd.DataFrame, panel_pre: pd.DataFrame,
                 panel_post: pd.DataFrame | None, settings: StatsSettings) -> VerdictFacts:
    """Read the facts the rule uses from regression_results and the panels."""
    det = result_row(results, DETECTION_SPEC, "pre", BETA3)
    pooled = result_row(results, "validation_pooled", "pre", "ud")
    high = result_row(results, "validation_high_lap", "pre", "ud")
    low = result_row(results, "validation_low_lap", "pre", "ud")
    diff = result_row(results, DIFFERENCE_SPEC, "pre", THETA_DIFF)
    post = result_row(results, DETECTION_SPEC, "post", BETA3)

    lap = _usable_lap(panel_pre)
    lap_post = _usable_lap(panel_post)
    feasible = panel_post is not None and len(panel_post) > 0
    approx = any_approximated(panel_pre) or any_approximated(panel_post)
    note = str(det.get("warning") or "") if not np.isfinite(_f(det.get("estimate"))) else ""
    n_obs = _f(det.get("n_obs"))
    g_pre, g_post = _f(det.get("n_clusters")), _f(post.get("n_clusters"))
    df = g_pre - 1 if np.isfinite(g_pre) else (n_obs - 3 if np.isfinite(n_obs) else math.nan)
    return VerdictFacts(
        beta3=_f(det.get("estimate")), beta3_t=_f(det.get("t")),
        beta3_p_one_sided=_f(det.get("p_one_sided")),
        n_obs_pre=int(n_obs) if np.isfinite(n_obs) else 0,
        theta_pooled=_f(pooled.get("estimate")), theta_pooled_t=_f(pooled.get("t")),
        theta_high=_f(high.get("estimate")), theta_high_t=_f(high.get("t")),
        theta_high_p=_f(high.get("p_two_sided")),
        theta_low=_f(low.get("estimate")), theta_low_t=_f(low.get("t")),
        theta_low_p=_f(low.get("p_two_sided")),
        placebo_feasible=feasible,
        placebo_beta3=_f(post.get("estimate")), placebo_t=_f(post.get("t")),
        placebo_p_one_sided=_f(post.get("p_one_sided")),
        n_obs_post=int(_f(post.get("n_obs"))) if np.isfinite(_f(post.get("n_obs"))) else 0,
        lap_n_pre=int(len(lap)), lap_distinct_pre=int(lap.nunique()),
        lap_sd_pre=float(lap.std(ddof=1)) if len(lap) > 1 else math.nan,
        lap_mean_pre=float(lap.mean()) if len(lap) else math.nan,
        lap_mean_post=float(lap_post.mean()) if len(lap_post) else math.nan,
        lap_min_sd_used=lap_min_sd(settings, lap),
        censoring_rate_pre=censoring_rate(panel_pre),
        lap_measure=settings.lap_measure, cluster=settings.cluster,
        vcov=str(det.get("vcov") or ""), approximated=approx, beta3_note=note,
        n_rows_pre=int(len(panel_pre)),
        beta3_se=_f(det.get("std_error")), beta3_p_two_sided=_f(det.get("p_two_sided")),
        beta3_p_wild_one_sided=_f(det.get("p_wild_one_sided")), beta3_df=df,
        n_clusters_pre=g_pre,
        theta_high_p_wild=_f(high.get("p_wild_two_sided")),
        theta_low_p_wild=_f(low.get("p_wild_two_sided")),
        theta_diff=_f(diff.get("estimate")), theta_diff_t=_f(diff.get("t")),
        theta_diff_p_one_sided=_f(diff.get("p_one_sided")),
        theta_diff_p_wild_one_sided=_f(diff.get("p_wild_one_sided")),
        placebo_p_two_sided=_f(post.get("p_two_sided")),
        placebo_p_wild_one_sided=_f(post.get("p_wild_one_sided")),
        n_clusters_post=g_post,
        lap_n_post=int(len(lap_post)), lap_distinct_post=int(lap_post.nunique()),
        lap_sd_post=float(lap_post.std(ddof=1)) if len(lap_post) > 1 else math.nan,
        lap_min_sd_post=lap_min_sd(settings, lap_post, reference=lap),
        wild_min_clusters=int(settings.wild.min_clusters),
    )


def verdict_frame(results: pd.DataFrame, panel_pre: pd.DataFrame,
                  panel_post: pd.DataFrame | None, settings: StatsSettings) -> pd.DataFrame:
    """The one-row verdict table: verdict, reason, the rule's text and every fact used."""
    facts = gather_facts(results, panel_pre, panel_post, settings)
    verdict, reason = decide(facts)
    val_ok, _ = validation_pattern(facts)
    plc_ok, plc_text = placebo_status(facts)
    p_used, p_label = beta3_p_used(facts)
    row: dict[str, Any] = {"verdict": verdict, "reason": reason}
    row.update(asdict(facts))
    row.update({
        "beta3_p_used": p_used,
        "inference_used": p_label,
        "beta3_mde": mde(facts),
        "lap_varies": lap_variation_problem(facts) is None,
        "validation_pattern": val_ok,
        "placebo_passes": plc_ok,
        "placebo_status": plc_text.split(":")[0],
        "recommendation": RECOMMENDATION if verdict == CONTAMINATION else "",
        "decision_rule": DECISION_RULE,
    })
    frame = pd.DataFrame([row])
    for c, v in row.items():
        if isinstance(v, float):
            frame[c] = pd.array([v if np.isfinite(v) else None], dtype="Float64")
    return frame
