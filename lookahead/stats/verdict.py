"""The verdict: the protocol's decision rule, applied to the regression results.

The protocol (seeds/000, "Final report", item 6), word for word:
  - Contamination detected: beta_3 > 0 (one-sided p < 0.05) with the validation
    pattern present and the placebo passing.
  - No evidence of contamination: beta_3 indistinguishable from zero with LAP showing
    meaningful variation (otherwise report "underpowered").
  - Mixed/invalid: validation fails or placebo fails — explain which.

Order of the checks (all on the pre-cutoff detection coefficient):
  1. LAP has no meaningful variation (constant, sd below the threshold, recall labels
     censored in ~all rows, or beta_3 not estimable: singular/collinear) -> "Underpowered",
     quoting the censoring rate. A test that cannot see LAP cannot clear a model.
  2. beta_3 one-sided p >= 0.05 (LAP varies)           -> "No evidence of contamination".
  3. beta_3 one-sided p < 0.05 and validation pattern present and placebo passes
                                                          -> "Contamination detected".
  4. otherwise                                            -> "Mixed/invalid", naming the
     part(s) that failed: validation, placebo, or both.

Choices the protocol leaves open, stated here:
  - Validation pattern: high-LAP theta > 0 with two-sided p < 0.05 (the conventional
    5% test of "significant"; stricter than one-sided), and low-LAP theta not
    significant (two-sided p >= 0.05: "near zero"). A low-LAP regression that cannot
    be estimated does not establish the pattern.
  - Placebo passes when the post-cutoff one-sided p for beta_3 > 0 exceeds 0.10. With no
    post-cutoff rows the placebo is infeasible (protocol: steps 1-4 only); with post
    rows but no estimable beta_3 it is not estimable. Neither is "passing", so a
    significant beta_3 then gives "Mixed/invalid: placebo infeasible/not estimable",
    never "Contamination detected".
  - Meaningful LAP variation: at least two distinct values and, for recall LAP (a
    probability mass), sd >= 0.01; for Min-K% LAP (scale varies by model) a coefficient
    of variation sd/mean >= 0.01. ``lap_min_sd`` in the settings overrides the absolute
    threshold. Recall censoring >= 99% of rows (neither "up" nor "down" in the top-20,
    i.e. p_up and p_down both missing or zero) is also no variation.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from lookahead.stats.protocol import (
    BETA3,
    DETECTION_SPEC,
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
ALPHA_VALIDATION = 0.05  # high-LAP theta two-sided; low-LAP "not significant"
PLACEBO_PASS_P = 0.10    # post-cutoff beta_3 one-sided p must exceed this
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


@dataclass(frozen=True)
class VerdictFacts:
    """Everything the rule looks at; also the columns of the verdict table."""

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


# ---------------------------------------------------------------- the rule itself

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
                f"(censoring rate {cens})")
    if not (np.isfinite(f.beta3) and np.isfinite(f.beta3_p_one_sided)):
        note = f": {f.beta3_note}" if f.beta3_note else ""
        return f"beta_3 is not estimable (regression singular or term dropped{note}; censoring rate {cens})"
    return None


def validation_pattern(f: VerdictFacts) -> tuple[bool, str]:
    """(present?, explanation) for the step-3 pattern."""
    high_ok = (np.isfinite(f.theta_high) and f.theta_high > 0
               and np.isfinite(f.theta_high_p) and f.theta_high_p < ALPHA_VALIDATION)
    low_ok = np.isfinite(f.theta_low_p) and f.theta_low_p >= ALPHA_VALIDATION
    parts = []
    if not high_ok:
        parts.append(f"high-LAP theta is not positive and significant "
                     f"(theta {_num(f.theta_high)}, t {_num(f.theta_high_t)}, p {_num(f.theta_high_p)})")
    if not low_ok:
        if np.isfinite(f.theta_low_p):
            parts.append(f"low-LAP theta is significant (theta {_num(f.theta_low)}, "
                         f"t {_num(f.theta_low_t)}, p {_num(f.theta_low_p)})")
        else:
            parts.append("low-LAP theta could not be estimated")
    if high_ok and low_ok:
        return True, (f"validation pattern present: high-LAP theta {_num(f.theta_high)} "
                      f"(t {_num(f.theta_high_t)}), low-LAP theta {_num(f.theta_low)} "
                      f"(t {_num(f.theta_low_t)})")
    return False, "validation fails: " + "; ".join(parts)


def placebo_status(f: VerdictFacts) -> tuple[bool, str]:
    """(passes?, explanation) for step 5."""
    if not f.placebo_feasible:
        return False, "placebo infeasible: no post-cutoff rows (steps 1-4 only)"
    if not np.isfinite(f.placebo_p_one_sided):
        return False, ("placebo not estimable: post-cutoff beta_3 could not be estimated "
                       f"(post-cutoff mean LAP {_num(f.lap_mean_post)})")
    if f.placebo_p_one_sided > PLACEBO_PASS_P:
        return True, (f"placebo passes: post-cutoff beta_3 {_num(f.placebo_beta3)}, "
                      f"one-sided p {_num(f.placebo_p_one_sided)} > {PLACEBO_PASS_P}")
    return False, (f"placebo fails: post-cutoff beta_3 {_num(f.placebo_beta3)} survives "
                   f"(one-sided p {_num(f.placebo_p_one_sided)} <= {PLACEBO_PASS_P}); the "
                   "recall measure may proxy for something other than memorization")


def decide(f: VerdictFacts) -> tuple[str, str]:
    """(verdict, reason) by the protocol's decision rule, in the order documented above."""
    suffix = " Results are approximated (sampling fallback)." if f.approximated else ""
    problem = lap_variation_problem(f)
    if problem is not None:
        return UNDERPOWERED, (f"Underpowered: LAP shows no meaningful variation — {problem}. "
                              "The test cannot tell contamination from its absence." + suffix)
    b3 = (f"beta_3 = {_num(f.beta3)} (t {_num(f.beta3_t)}, one-sided p "
          f"{_num(f.beta3_p_one_sided)}, N {f.n_obs_pre})")
    if f.beta3_p_one_sided >= ALPHA_DETECTION:
        return NO_EVIDENCE, (f"No evidence of contamination: {b3} is indistinguishable from "
                             f"zero while LAP varies (sd {_num(f.lap_sd_pre)})." + suffix)
    val_ok, val_text = validation_pattern(f)
    plc_ok, plc_text = placebo_status(f)
    if val_ok and plc_ok:
        return CONTAMINATION, (f"Contamination detected: {b3} > 0; {val_text}; {plc_text}. "
                               + RECOMMENDATION + suffix)
    plc_word = ("infeasible" if not f.placebo_feasible
                else "not estimable" if not np.isfinite(f.placebo_p_one_sided) else "failed")
    failed = [label for label, ok in (("validation failed", val_ok),
                                      (f"placebo {plc_word}", plc_ok)) if not ok]
    which = "; ".join(failed)
    details = "; ".join(t for t, ok in ((val_text, val_ok), (plc_text, plc_ok)) if not ok)
    return MIXED, (f"Mixed/invalid ({which}): {b3} > 0 but {details}." + suffix)


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


def lap_min_sd(settings: StatsSettings, lap: pd.Series) -> float:
    if settings.lap_min_sd is not None:
        return float(settings.lap_min_sd)
    if settings.lap_measure == "mink":
        m = float(lap.abs().mean()) if len(lap) else math.nan
        return MINK_MIN_CV * m if np.isfinite(m) and m > 0 else 1e-12
    return RECALL_MIN_SD


def gather_facts(results: pd.DataFrame, panel_pre: pd.DataFrame,
                 panel_post: pd.DataFrame | None, settings: StatsSettings) -> VerdictFacts:
    """Read the facts the rule uses from regression_results and the panels."""
    det = result_row(results, DETECTION_SPEC, "pre", BETA3)
    pooled = result_row(results, "validation_pooled", "pre", "ud")
    high = result_row(results, "validation_high_lap", "pre", "ud")
    low = result_row(results, "validation_low_lap", "pre", "ud")
    post = result_row(results, DETECTION_SPEC, "post", BETA3)

    usable = panel_pre
    for c in ("outcome", "mu_hat"):
        if c in usable.columns:
            usable = usable[pd.to_numeric(usable[c], errors="coerce").notna()]
    lap = pd.to_numeric(usable["lap"], errors="coerce").dropna() if "lap" in usable else pd.Series(dtype=float)
    lap_post = (pd.to_numeric(panel_post["lap"], errors="coerce").dropna()
                if panel_post is not None and "lap" in panel_post else pd.Series(dtype=float))
    feasible = panel_post is not None and len(panel_post) > 0
    approx = any_approximated(panel_pre) or any_approximated(panel_post)
    note = str(det.get("warning") or "") if not np.isfinite(_f(det.get("estimate"))) else ""
    return VerdictFacts(
        beta3=_f(det.get("estimate")), beta3_t=_f(det.get("t")),
        beta3_p_one_sided=_f(det.get("p_one_sided")),
        n_obs_pre=int(_f(det.get("n_obs"))) if np.isfinite(_f(det.get("n_obs"))) else 0,
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
    )


def verdict_frame(results: pd.DataFrame, panel_pre: pd.DataFrame,
                  panel_post: pd.DataFrame | None, settings: StatsSettings) -> pd.DataFrame:
    """The one-row verdict table: verdict, reason, the rule's text and every fact used."""
    facts = gather_facts(results, panel_pre, panel_post, settings)
    verdict, reason = decide(facts)
    val_ok, _ = validation_pattern(facts)
    plc_ok, plc_text = placebo_status(facts)
    row: dict[str, Any] = {"verdict": verdict, "reason": reason}
    row.update(asdict(facts))
    row.update({
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
