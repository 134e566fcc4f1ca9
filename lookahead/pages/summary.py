"""The answer at a glance, rendered from the structured outcome (lookahead.stats.verdict):
the verdict paragraph (at most ``MAX_WORDS`` words, the caveats that change what a reader
may conclude inside it) and the checklist, one row per protocol step.

Caveats (each stated where it applies, with its number), ranked: first what weakens the
design (``weaknesses``; docs/verdict.md, "What weakens the design"):
  - the stated training cutoff outside the 95% interval of the effective cutoff, with the
    month to re-run at; or no LAP break at the stated cutoff;
  - few effective clusters: G* of beta_3's regression under 10 or under half of G;
  - a prompt measure out of the model's distribution (the registry's floor);
  - a placebo without power (passes_low_power), unless the detection's finding says it;
then:
  - recall labels censored in more than ``CENSORING_CAVEAT`` of pre-cutoff pairs (any of
    up, down, unknown, or both directions);
  - fewer than ``FEW_CLUSTERS`` clusters in the pre-cutoff detection regression;
  - more than ``EXCLUDED_CAVEAT`` of input rows excluded (rejected in validation, no
    forecast, or an unparsed forecast);
  - more than ``REFUSED_CAVEAT`` of valid rows excluded because an LLM query was refused
    for good (int_refused_rows): the build lets them go under min_measure_coverage, and
    the reader learns the share from the paragraph, not only from the sample table."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lookahead.measures import MEASURES
from lookahead.stats import verdict as verdict_rule
from lookahead.stats.verdict import (
    ALPHA_DETECTION,
    ALPHA_VALIDATION,
    LAP_PROBLEMS,
    PLACEBO,
    PLACEBO_PASS_P,
    RECOMMENDATION,
    VALIDATION_FAILURES,
    Outcome,
    TestFact,
    fmt_num,
    fmt_t,
    mde,
)

MAX_WORDS = 80
CENSORING_CAVEAT = 0.50
FEW_CLUSTERS = 20
EXCLUDED_CAVEAT = 0.05
REFUSED_CAVEAT = 0.01
REFUSED_METRIC = "rows excluded: an LLM query refused for good"  # sample_description
PASSED, FAILED, NOT_ESTIMABLE, NOT_COMPUTED, READ = (
    "passed",
    "failed",
    "not estimable",
    "not computed",
    "not read by the verdict",
)


@dataclass(frozen=True)
class Caveat:
    code: str
    text: str


def _n(x: Any) -> float:  # any cell: float() decides
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def weaknesses(o: Outcome, cutoff: dict[str, object] | None = None) -> list[Caveat]:
    """What makes the design weak, ranked (WEAKNESSES): each from a verdict column or the
    effective_cutoff table, each in a few words with its number."""
    f, out = o.facts, []
    cutoff = cutoff or {}
    if cutoff.get("inside") is False:
        out.append(
            Caveat(
                "cutoff",
                f"the stated cutoff {cutoff['stated_cutoff']} lies outside the effective "
                f"cutoff's 95% interval ({cutoff['interval']}): re-run with "
                f"training_cutoff {cutoff.get('rerun_at') or cutoff.get('break_month')}",
            )
        )
    elif cutoff.get("status") and cutoff.get("status") != "break":
        out.append(Caveat("no_break", f"no LAP break at the stated cutoff ({cutoff['status']})"))
    if verdict_rule.few_effective_clusters(f):
        g = f.beta3.n_clusters
        out.append(
            Caveat("g_star", f"only G* {fmt_num(f.beta3.g_star, 3)} effective clusters of G {int(g) if np.isfinite(g) else 'NA'}")
        )
    if verdict_rule.lap_out_of_distribution(f):
        m = MEASURES[f.lap_measure]
        out.append(
            Caveat(
                "out_of_distribution",
                f"mean {m.short} {fmt_num(f.lap_mean_pre, 2)}: prompts far outside the model's distribution",
            )
        )
    if o.placebo == "passes_low_power" and o.path != "contamination":  # a detection says it in its finding
        out.append(
            Caveat(
                "placebo_power",
                f"the placebo lacks power (its minimum detectable effect {fmt_num(verdict_rule.placebo_mde(f))} exceeds beta_3)",
            )
        )
    return out


def caveats(
    o: Outcome, metric: dict[str, object], censoring: pd.DataFrame, cutoff: dict[str, object] | None = None
) -> list[Caveat]:
    """What changes what a reader may conclude, from the tables the report reads, ranked:
    the design's weaknesses first (``weaknesses``: the cutoff, G*, an out-of-distribution
    measure, a placebo without power), then refusals, censoring, few clusters and
    exclusions. The paragraph drops them from the last when it runs over MAX_WORDS."""
    out: list[Caveat] = weaknesses(o, cutoff)
    refused, kept = _n(metric.get(REFUSED_METRIC)), _n(metric.get("valid rows"))
    if np.isfinite(refused) and np.isfinite(kept) and refused > 0 and refused / (kept + refused) > REFUSED_CAVEAT:
        out.append(
            Caveat(
                "refused",
                f"{int(refused)} of {int(kept + refused)} valid rows "
                f"({100 * refused / (kept + refused):.1f}%) excluded: an LLM query was "
                "refused for good",
            )
        )
    if len(censoring) and "sample" in censoring.columns:
        pre = censoring[censoring["sample"] == "pre"]
        shares = {
            c: _n(pre[c].iloc[0])
            for c in ("share_up_and_down_censored", "share_unknown_censored", "share_up_censored", "share_down_censored")
            if c in pre.columns and len(pre)
        }
        worst = max(((v, c) for c, v in shares.items() if np.isfinite(v)), default=(math.nan, ""))
        if np.isfinite(worst[0]) and worst[0] > CENSORING_CAVEAT:
            label = worst[1].removeprefix("share_").removesuffix("_censored").replace("_", " ")
            out.append(Caveat("censoring", f"recall label '{label}' censored in {100 * worst[0]:.0f}% of pre-cutoff pairs"))
    g = o.facts.beta3.n_clusters
    if np.isfinite(g) and g < FEW_CLUSTERS and o.tests["beta3"].source != "Newey-West":
        out.append(Caveat("clusters", f"only {int(g)} clusters (fewer than {FEW_CLUSTERS})"))
    total = _n(metric.get("input rows"))
    excluded = sum(
        v
        for v in (
            _n(metric.get("rejected rows")),
            _n(metric.get("rows without a forecast")),
            _n(metric.get("rows with an unparsed forecast")),
        )
        if np.isfinite(v)
    )
    if np.isfinite(total) and total > 0 and excluded / total > EXCLUDED_CAVEAT:
        out.append(Caveat("excluded", f"{int(excluded)} of {int(total)} input rows ({100 * excluded / total:.0f}%) excluded"))
    return out


def _b3(o: Outcome) -> str:
    t = o.tests["beta3"]
    return f"beta_3 = {fmt_num(t.estimate)} (t {fmt_t(t.t)}, {t.p_phrase()}, N {o.facts.beta3.n_obs})"


def _placebo_short(o: Outcome) -> str:
    t = o.tests["placebo"]
    if o.placebo == "infeasible":
        return "placebo infeasible (no post-cutoff rows)"
    if o.placebo == "passes_collapsed":
        if t.estimable:  # an estimate exists, on a LAP that barely varies: not a test
            return (
                f"placebo passes (post-cutoff LAP collapsed; post-cutoff beta_3 "
                f"{verdict_rule.not_informative(o.facts.lap_sd_post)})"
            )
        return "placebo passes (post-cutoff LAP collapsed, beta_3 not estimable)"
    if o.placebo == "not_estimable":
        return "placebo not estimable"
    if o.placebo == "passes_low_power":
        return (
            f"placebo passes (post-cutoff beta_3 {fmt_num(t.estimate)}, {t.p_phrase()}, "
            f"above {PLACEBO_PASS_P:g}), though its minimum detectable effect "
            f"{fmt_num(verdict_rule.placebo_mde(o.facts))} exceeds the pre-cutoff beta_3, so "
            "the evidence that the effect ends at the cutoff is LAP's fall there (effective "
            "cutoff)"
        )
    side = "above" if o.placebo == "passes" else "not above"
    return f"{PLACEBO[o.placebo][1]} (post-cutoff beta_3 {fmt_num(t.estimate)}, {t.p_phrase()}, {side} {PLACEBO_PASS_P:g})"


def _mde(o: Outcome) -> str:
    m = mde(o.facts)
    return f"; the minimum detectable beta_3 is {fmt_num(m)}" if np.isfinite(m) else ""


def paragraph_parts(o: Outcome) -> tuple[str, list[str]]:
    """(the finding, optional additions in the order they are dropped last-first); the
    few-clusters warning (G and G*) and a borderline p come first among the additions."""
    finding, extra = _paragraph_parts(o)
    warn = [w.strip() for w in (verdict_rule.few_clusters_text(o), verdict_rule.borderline_text(o)) if w]
    return finding, warn + extra


def _paragraph_parts(o: Outcome) -> tuple[str, list[str]]:
    f, two = o.facts, o.tests["beta3_two_sided"]
    if o.path == "no_pre_rows":
        return ("Underpowered: there are no pre-cutoff rows, so the detection test cannot run.", [])
    if o.path == "beta3_not_estimable":
        why = LAP_PROBLEMS.get(o.lap_problem, "") or "too few usable rows or a singular regression"
        return (f"Underpowered: beta_3 is not estimable ({why}); the test cannot tell contamination from its absence.", [])
    b3 = _b3(o)
    if o.path in ("null_no_variation", "significant_no_variation"):
        flat = verdict_rule.collapsed_lap(f).get("pre")
        if flat is not None:  # a coefficient on a LAP that barely varies is not printed as a test
            return (
                f"Underpowered: beta_3 is {verdict_rule.not_informative(flat)}: LAP shows no "
                f"meaningful variation ({LAP_PROBLEMS[o.lap_problem]}).",
                [],
            )
    if o.path == "null_no_variation":
        return (
            f"Underpowered: {b3} is not significant and LAP shows no meaningful variation "
            f"({LAP_PROBLEMS[o.lap_problem]}){_mde(o)}.",
            [],
        )
    if o.path == "significant_no_variation":
        return (
            f"Underpowered: {b3} is significant, but LAP shows no meaningful variation "
            f"({LAP_PROBLEMS[o.lap_problem]}), so the estimate does not decide{_mde(o)}.",
            [],
        )
    if o.path == "null_negative":
        return (
            f"No evidence of contamination: {b3} is significantly negative ({two.p_phrase()}, "
            f"below {ALPHA_DETECTION:g}){_mde(o)}.",
            [],
        )
    if o.path == "null_zero":
        return (
            f"No evidence of contamination: {b3} is indistinguishable from zero ({two.p_phrase()}, "
            f"not below {ALPHA_DETECTION:g}) while LAP varies (sd {fmt_num(f.lap_sd_pre)}){_mde(o)}.",
            [],
        )
    if o.path == "null_not_positive":
        return (
            f"No evidence of contamination: {b3} is not significantly positive while LAP varies "
            f"(sd {fmt_num(f.lap_sd_pre)}){_mde(o)}.",
            [],
        )
    if o.path == "contamination":
        return (f"Contamination detected: {b3} > 0; validation pattern present; {_placebo_short(o)}.", [RECOMMENDATION])
    failed = [] if o.validation_present else ["validation failed"]
    if not PLACEBO[o.placebo][0]:
        failed.append(
            {"infeasible": "placebo infeasible", "not_estimable": "placebo not estimable", "fails": "placebo failed"}[o.placebo]
        )
    reasons = [VALIDATION_FAILURES[c] for c in o.validation_failures]
    if not PLACEBO[o.placebo][0]:
        reasons.append(_placebo_short(o))
    return (f"Mixed/invalid ({'; '.join(failed)}): {b3} > 0 but {'; '.join(reasons)}.", [])


def paragraph(o: Outcome, found: list[Caveat]) -> str:
    """The verdict paragraph: the finding, the caveats, then what to do, cut to at most
    MAX_WORDS words by dropping the recommendation first, then caveats from the last."""
    finding, extra = paragraph_parts(o)
    if o.facts.approximated:
        finding += " Approximated: sampling fallback."
    cav = [c.text for c in found]

    def text(cv: list[str], ex: list[str]) -> str:
        parts = [finding]
        if cv:
            parts.append("Caveats: " + "; ".join(cv) + ".")
        return " ".join(parts + ex)

    ex = list(extra)
    while len(text(cav, ex).split()) > MAX_WORDS and (ex or cav):
        if ex:
            ex.pop()
        else:
            cav.pop()
    return text(cav, ex)


def verdict_line(o: Outcome, found: list[Caveat]) -> str:
    """The report's first line: the decision in bold (with what failed, for Mixed/invalid),
    then the paragraph without its decision said a second time ("**Verdict: X.** X: ..."
    read the label twice)."""
    text = paragraph(o, found)
    label, sep, rest = text.partition(": ")
    if not sep or not label.startswith(o.decision):
        return f"**Verdict: {o.decision}.** {text}"
    if not rest.startswith("beta_3"):  # a sentence, unless it opens with the coefficient's name
        rest = rest[:1].upper() + rest[1:]
    return f"**Verdict: {label}.** {rest}"


# ---------------------------------------------------------------- checklist


@dataclass(frozen=True)
class ChecklistRow:
    """One checklist row: the protocol step, what it tests, the estimate with its t, the p
    the rule read, the rule, and the result."""

    step: str
    tested: str
    estimate: str
    p: str
    rule: str
    result: str


def _est(t: TestFact) -> str:
    return f"{fmt_num(t.estimate)} (t {fmt_t(t.t)})" if t.estimable else "not estimable"


def _p(t: TestFact) -> str:
    return t.p_phrase() if t.estimable else "NA"


def _opt(verdict: dict[str, object], *names: str) -> float:
    for n in names:
        v = _n(verdict.get(n))
        if np.isfinite(v):
            return v
    return math.nan


def checklist(o: Outcome, verdict: dict[str, object], metric: dict[str, object], cutoff: dict[str, object]) -> list[ChecklistRow]:
    """Rows in protocol order. Facts a build did not compute (the effective number of
    clusters, the placebo's minimum detectable effect, the effective cutoff) get a row
    that says so; they are never filled in here."""
    f, t = o.facts, o.tests
    on_path = o.path in ("contamination", "mixed")
    rows = []
    pre_rows = f.n_rows_pre if f.n_rows_pre >= 0 else _n(metric.get("pre-cutoff rows"))
    rows.append(
        ChecklistRow(
            "1. Sample",
            "pre-cutoff rows to test",
            f"{_fmt_int(pre_rows)} pre, {_fmt_int(_n(metric.get('post-cutoff rows')))} post",
            "",
            "at least one pre-cutoff row",
            PASSED if o.path != "no_pre_rows" else FAILED,
        )
    )
    eff = cutoff.get("effective_cutoff")
    rows.append(
        ChecklistRow(
            "1. Cutoff",
            "effective cutoff against the stated one",
            f"{eff} vs stated {cutoff.get('stated_cutoff', '')}"
            if eff
            else f"{NOT_COMPUTED} by this build (stated {cutoff.get('stated_cutoff', '')})",
            "",
            "descriptive",
            str(cutoff.get("result", NOT_COMPUTED)) if eff else NOT_COMPUTED,
        )
    )
    lap_ok = not o.lap_problem
    rows.append(
        ChecklistRow(
            "2. LAP varies",
            f"sd of pre-cutoff LAP ({f.lap_measure})",
            f"sd {fmt_num(f.lap_sd_pre)}",
            "",
            f"sd >= {fmt_num(f.lap_min_sd_used)}, not >= 99% censored",
            PASSED if lap_ok else FAILED,
        )
    )
    hi, diff = t["theta_high"], t["theta_diff"]
    vres = (
        PASSED if hi.estimable and hi.estimate > 0 and hi.p < ALPHA_VALIDATION else NOT_ESTIMABLE if not hi.estimable else FAILED
    )
    note = "" if on_path else f" ({READ})"
    rows.append(
        ChecklistRow(
            "3. Validation",
            "high-LAP theta > 0 (outcome on U-D)",
            _est(hi),
            _p(hi),
            f"two-sided p < {ALPHA_VALIDATION:g}, theta > 0",
            vres + note,
        )
    )
    dres = (
        PASSED
        if diff.estimable and diff.estimate > 0 and diff.p < ALPHA_VALIDATION
        else NOT_ESTIMABLE
        if not diff.estimable
        else FAILED
    )
    rows.append(
        ChecklistRow(
            "3. Validation",
            "high-LAP theta exceeds low-LAP theta (per sd)",
            _est(diff),
            _p(diff),
            f"one-sided p < {ALPHA_VALIDATION:g}",
            dres + note,
        )
    )
    b3 = t["beta3"]
    flat = verdict_rule.collapsed_lap(f)
    bres = NOT_ESTIMABLE if not b3.estimable else (PASSED if b3.p < ALPHA_DETECTION else FAILED)
    if b3.estimable and "pre" in flat:  # on a LAP that barely varies: not a test
        rows.append(
            ChecklistRow(
                "4. Detection",
                "beta_3 > 0 (forecast x LAP)",
                verdict_rule.not_informative(flat["pre"]),
                "",
                f"one-sided p < {ALPHA_DETECTION:g}",
                "not informative",
            )
        )
    else:
        rows.append(
            ChecklistRow(
                "4. Detection", "beta_3 > 0 (forecast x LAP)", _est(b3), _p(b3), f"one-sided p < {ALPHA_DETECTION:g}", bres
            )
        )
    m = mde(f)
    rows.append(
        ChecklistRow(
            "4. Power",
            "minimum detectable beta_3 (80% power)",
            fmt_num(m) if np.isfinite(m) else "not estimable",
            "",
            "descriptive",
            "computed" if np.isfinite(m) else NOT_ESTIMABLE,
        )
    )
    # G* and the borderline flag come with the wild-bootstrap facts when the build computed
    # them (TestFact.g_star / .borderline, or verdict columns); never filled in here
    g_star = getattr(b3, "g_star", math.nan)
    if not (isinstance(g_star, float) and np.isfinite(g_star)):
        g_star = _opt(verdict, "beta3_g_star", "g_star")
    g = b3.n_clusters if np.isfinite(getattr(b3, "n_clusters", math.nan)) else f.beta3.n_clusters
    rows.append(
        ChecklistRow(
            "4. Clusters",
            "clusters G (effective G*)",
            f"G {_fmt_int(g)}" + (f", G* {fmt_num(g_star, 3)}" if np.isfinite(g_star) else f", G* {NOT_COMPUTED}"),
            "",
            "wild bootstrap p at every cluster count",
            f"p read by {b3.source}",
        )
    )
    border = getattr(b3, "borderline", None)
    if border is None and "borderline" in verdict:
        border = verdict.get("borderline")
    known = border is not None and not (isinstance(border, float) and math.isnan(border))
    rows.append(
        ChecklistRow(
            "4. Borderline p",
            "is the rule's p within simulation error of its threshold",
            ("yes" if _truthy(border) else "no") if known else NOT_COMPUTED,
            "",
            "descriptive",
            ("borderline" if _truthy(border) else "clear of the threshold") if known else NOT_COMPUTED,
        )
    )
    plc = t["placebo"]
    pres = {
        "passes": PASSED,
        "passes_collapsed": PASSED + " (LAP collapsed)",
        "fails": FAILED,
        "passes_low_power": PASSED + " (low power: its minimum detectable effect exceeds the pre-cutoff beta_3)",
        "not_estimable": NOT_ESTIMABLE,
        "infeasible": "infeasible (no post-cutoff rows)",
    }[o.placebo]
    post_flat = plc.estimable and "post" in flat
    rows.append(
        ChecklistRow(
            "5. Placebo",
            "post-cutoff beta_3 not > 0",
            "NA" if o.placebo == "infeasible" else verdict_rule.not_informative(flat["post"]) if post_flat else _est(plc),
            "NA" if o.placebo == "infeasible" else "" if post_flat else _p(plc),
            f"one-sided p > {PLACEBO_PASS_P:g}, or post LAP collapsed",
            pres + note,
        )
    )
    pm = _opt(verdict, "placebo_mde", "placebo_mde_regression", "placebo_beta3_mde")
    if not np.isfinite(pm) and hasattr(verdict_rule, "placebo_mde"):
        pm = verdict_rule.placebo_mde(f)
    rows.append(
        ChecklistRow(
            "5. Placebo power",
            "minimum detectable post-cutoff beta_3",
            fmt_num(pm) if np.isfinite(pm) else f"{NOT_COMPUTED} by this build",
            "",
            "descriptive",
            "computed" if np.isfinite(pm) else NOT_COMPUTED,
        )
    )
    rows.append(ChecklistRow("6. Verdict", f"decision path `{o.path}`", "", "", "protocol decision rule", o.decision))
    return rows


def _truthy(v: object) -> bool:
    return str(v).strip().lower() in ("true", "1", "yes")


def _fmt_int(x: float) -> str:
    return str(int(x)) if x is not None and np.isfinite(x) else "NA"


def checklist_frame(rows: list[ChecklistRow]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "step": r.step,
                "tested": r.tested,
                "estimate (t)": r.estimate,
                "p the rule read": r.p or "",
                "rule": r.rule,
                "result": r.result,
            }
            for r in rows
        ]
    )
