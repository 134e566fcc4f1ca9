"""The report's sections, in order: the one list both REPORT.md and index.html are drawn
from. Each entry turns the result tables (CSVs the tool wrote, read back) into a
structured Section (lookahead.pages.blocks); the renderers only draw.

Row orders are fixed and documented: measures in the registry's order
(lookahead.measures.MEASURES), pre before post; regressions in protocol order; a table
longer than MAX_ROWS shows its summary and top rows, and names the CSV with every row."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import pandas as pd

from lookahead.config import PROJECT_ROOT, Study
from lookahead.measures import MEASURES
from lookahead.pages import charts, cutoff, paper
from lookahead.pages.blocks import Bullets, Figure, Links, Para, Raw, Section, Table
from lookahead.pages.cells import (
    PROTOCOL_TABLES,
    PUBLICATION_NOTE,
    coef_frame,
    fmt,
    num_or_nan,
    publication_frame,
    rows_of,
    strings,
)
from lookahead.pages.summary import REFUSED_METRIC, caveats, checklist, checklist_frame, verdict_line
from lookahead.pages.text import code
from lookahead.paper.figures import DECILE_RULE
from lookahead.paper.table5_reading import table5_reading
from lookahead.report_names import TABLE5_READING
from lookahead.stats.cutoff import EXPOSURE_NOTE
from lookahead.stats.fe_regression import SSC_RULE
from lookahead.stats.verdict import (
    PATHS,
    PLACEBO_PASS_P,
    VALIDATION_FAILURES,
    VERDICTS,
    Outcome,
    collapsed_lap,
    fmt_num,
    fmt_p,
    fmt_t,
    mde,
    mde_sentence,
    placebo_text,
    rule_clause,
    validation_text,
)

MAX_ROWS = 25
#: where every term the report uses is defined, once (README, "Glossary")
GLOSSARY = PROJECT_ROOT / "docs" / "glossary.md"
#: what every report shares (the order of its sections, how its figures are drawn, the
#: choices where the protocol is silent, the claim method), written once and linked from
#: each report instead of repeated in it
READING = PROJECT_ROOT / "docs" / "reading.md"
SAMPLE_ORDER = {"pre": 0, "post": 1}
#: The clause of the protocol's decision rule each verdict applies (verdict.DECISION_CLAUSES)
RULE_CLAUSE = {verdict: rule_clause(verdict) for verdict in VERDICTS}


@dataclass
class ResultTables:
    """A results folder's exported CSVs, each read once, by name (an empty frame for a
    table the folder lacks), and the study they are of: what a report's sections read."""

    results_dir: Path
    study: Study
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, init=False, repr=False)

    def table(self, name: str) -> pd.DataFrame:
        if name not in self._cache:
            path = self.results_dir / f"{name}.csv"
            self._cache[name] = pd.read_csv(path) if path.exists() else pd.DataFrame()
        return self._cache[name]


@dataclass
class Context(ResultTables):
    """What every section of a protocol report reads: the results folder's CSVs and the
    recorded study (ResultTables), and the Outcome the verdict table was decided from;
    `database` holds the study database's tables a section needs beyond the CSVs (the
    paper's: lookahead.pages.paper.DATABASE_TABLES), read while the report's read-only
    connection was open."""

    outcome: Outcome
    verdict: pd.Series
    database: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def metric(self) -> dict[str, Any]:  # the sample_description values: counts, and text for some
        desc = self.table("sample_description")
        return dict(zip(desc["metric"], desc["value"], strict=False)) if len(desc) else {}

    @property
    def draws(self) -> int:
        return self.outcome.facts.wild_draws


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _by_sample(df: pd.DataFrame, *first: str) -> pd.DataFrame:
    """Rows in the documented order: `first` keys, then pre before post."""
    if df.empty or "sample" not in df.columns:
        return df
    keys = [*first, "_s"]
    return df.assign(_s=df["sample"].map(SAMPLE_ORDER).fillna(9)).sort_values(keys, kind="stable").drop(columns="_s")


def doc_link(doc: Path, folder: Path) -> str:
    """A document's address as read from `folder`, where the page is opened: relative
    (results/<study>/ -> ../../docs/glossary.md), so the link works in a checkout, a copy
    of it or a browser on the file; percent-encoded, so a space or a parenthesis in a
    folder name does not end the Markdown link. A file URL where no relative path exists
    (another drive)."""
    try:
        rel = os.path.relpath(doc, Path(folder).resolve())
    except ValueError:
        return doc.as_uri()
    return quote(Path(rel).as_posix(), safe="/._-~")


def glossary_link(folder: Path) -> str:
    """The glossary's address as read from `folder` (doc_link)."""
    return doc_link(GLOSSARY, folder)


def reading_link(folder: Path) -> str:
    """How to read this report (docs/reading.md), as read from `folder` (doc_link)."""
    return doc_link(READING, folder)


def glossary_para(folder: Path) -> Para:
    """The line that links the glossary and How to read this report, for a page that will
    be read in `folder`."""
    return Para(
        "Every term this report uses (LAP, U-D, beta_3, theta, CRV1, WCR, G\\*, placebo, ...) "
        f"is defined once in the [glossary]({glossary_link(folder)}); what every report shares "
        "(the order of its sections, how its figures are drawn, the choices where the protocol "
        f"is silent) is written once in [How to read this report]({reading_link(folder)})."
    )


# ---------------------------------------------------------------- the answer


def answer(ctx: Context) -> Section:
    o, s = ctx.outcome, ctx.study
    found = caveats(o, ctx.metric, ctx.table("recall_censoring"), cutoff_facts(ctx))
    return Section(
        "answer",
        f"Lookahead-bias test: {s.output.study_name}",
        "",
        [
            Para(verdict_line(o, found)),
            Para(
                f"Model {code(s.backend.model_id)} (backend {s.backend.backend}), stated training cutoff "
                f"{s.protocol.training_cutoff}, data {code(s.input.data_path)}. Every number is read from the "
                "CSV files in this folder; estimates come from pyfixest (`reghdfe.do` runs them in Stata)."
            ),
            glossary_para(s.results_dir),  # the folder the report is read in, not the staging one
        ],
        level=1,
    )


def _selected(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "is_selected_measure" not in df.columns:
        return df
    return df[df["is_selected_measure"].map(_truthy)]


def _day(x: object) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)[:10]


def cutoff_facts(ctx: Context) -> dict[str, object]:
    """The effective cutoff (table effective_cutoff, the verdict's measure) against the
    stated one; only the stated cutoff when the build did not compute it."""
    stated = str(ctx.study.protocol.training_cutoff)
    eff = _selected(ctx.table("effective_cutoff"))
    if eff.empty:
        return {"stated_cutoff": stated}
    r = eff.iloc[0]
    status = str(r.get("status", ""))
    if status != "break":
        p = num_or_nan(r.get("p_fall"))
        return {
            "stated_cutoff": stated,
            "effective_cutoff": f"no month named: {status}" + (f" (p {fmt_p(p)})" if math.isfinite(p) else ""),
            "result": status,
            "status": status,
        }
    inside = _truthy(r.get("stated_in_interval"))
    return {
        "stated_cutoff": stated,
        "break_month": _day(r.get("break_month")),
        "inside": inside,
        "status": status,
        "rerun_at": _day(r.get("effective_cutoff")),
        "interval": f"{_day(r.get('interval_low_month'))[:7]} to {_day(r.get('interval_high_month'))[:7]}",
        "effective_cutoff": f"{_day(r.get('effective_cutoff'))} (95% interval "
        f"{_day(r.get('interval_low_month'))[:7]} to {_day(r.get('interval_high_month'))[:7]}, "
        f"p {fmt_p(num_or_nan(r.get('p_fall')))})",
        "result": "stated cutoff inside the interval" if inside else "stated cutoff outside the interval",
    }


def _lap_month_frame(ctx: Context) -> tuple[pd.DataFrame, str]:
    """(sample, month, n, mean_lap, low, high) of the verdict's measure, and what the band
    is: table lap_by_period (entity-bootstrap 95% interval of the month's mean) when the
    build made it, else the report's own lap_by_month (interquartile range)."""
    per = _selected(ctx.table("lap_by_period"))
    if len(per):
        frame = pd.DataFrame(
            {
                "sample": ["post" if _truthy(a) else "pre" for a in per["after_stated_cutoff"]],
                "month": per["month"].astype(str).str[:10],
                "n": per["n"],
                "mean_lap": per["mean"],
                "p25": per["ci_low"],
                "p75": per["ci_high"],
            }
        )
        return frame, "band: 95% entity-bootstrap interval of the month's mean; data `lap_by_period.csv`"
    return _by_sample(ctx.table("lap_by_month")), "band: interquartile range; data `lap_by_month.csv`"


def checklist_section(ctx: Context) -> Section:
    rows = checklist(ctx.outcome, ctx.verdict.to_dict(), ctx.metric, cutoff_facts(ctx))
    return Section(
        "checklist",
        "Checklist",
        "One row per protocol step: what was tested, the estimate with its t, the p the rule read, the rule, and the result.",
        [Table(checklist_frame(rows), "checklist")],
    )


def figures_section(ctx: Context) -> Section:
    items: list = []
    month, band = _lap_month_frame(ctx)
    label = MEASURES[ctx.study.measures.lap_measure].label  # every caption names its measure
    if len(month):
        cut = cutoff_facts(ctx)
        items.append(
            Figure(
                "lap_by_month",
                f"{label} by realization month, stated training cutoff marked ({band})",
                charts.lap_by_month(
                    _by_sample(month),
                    str(ctx.study.protocol.training_cutoff),
                    ctx.study.measures.lap_measure,
                    str(cut.get("break_month", "")),
                    label,
                ),
                "figures/lap_by_month.png",
            )
        )
    else:
        items.append(Para("No LAP-by-month figure: no row has both a realization date and a LAP value."))
    acc = ctx.table("accuracy_by_lap_decile")
    if len(acc):
        items.append(
            Figure(
                "accuracy_by_lap_decile",
                f"Accuracy by LAP decile ({label}; {DECILE_RULE}), before and after the cutoff",
                charts.accuracy_by_decile(_by_sample(acc), label),
                "figures/accuracy_by_lap_decile_prepost.png",
            )
        )
    else:
        items.append(
            Para(
                "No accuracy-by-decile figure: fewer than 10 rows with a parsed non-zero forecast, "
                "an outcome and a LAP value in either sample."
            )
        )
    return Section(
        "figures",
        "Key figures",
        "LAP falling at the cutoff dates the model's reading of the "
        "texts; memorization shows as accuracy rising with LAP before the cutoff but not after "
        "(data: `accuracy_by_lap_decile.csv` and the LAP-by-month table named in the figure).",
        items,
    )


def hit_rate_section(ctx: Context) -> Section | None:
    hr = ctx.table("hit_rates")
    if hr.empty:
        return None
    hr = _by_sample(hr)
    show = pd.DataFrame(
        {
            "sample": hr["sample"],
            "LAP half": hr["lap_half"],
            "n": hr["n"].map(fmt),
            "hits": hr["hits"].map(fmt),
            "hit rate": [f"{100 * a:.1f}%" if math.isfinite(num_or_nan(a)) else "NA" for a in hr["accuracy"]],
            "95% CI (Wilson)": [
                f"[{100 * lo:.1f}%, {100 * hi:.1f}%]" if math.isfinite(num_or_nan(lo)) else "NA"
                for lo, hi in zip(hr["ci_low"], hr["ci_high"], strict=False)
            ],
        }
    )
    return Section(
        "hit_rates",
        "Hit rates by LAP",
        "Directional accuracy (forecast sign equals outcome "
        f"sign) on the high- and low-LAP halves (rule {code(ctx.study.protocol.high_lap_rule)}), "
        "before and after the cutoff: memorization makes high-LAP forecasts more accurate "
        "before the cutoff only.",
        [Table(show, "hit_rates", csv="hit_rates.csv")],
    )


# ---------------------------------------------------------------- protocol steps


def sample_section(ctx: Context) -> Section:
    s, metric, results = ctx.study, ctx.metric, ctx.table("regression_results")
    items: list = []
    rows = [("input rows", metric.get("input rows")), ("rejected in validation", metric.get("rejected rows"))]
    rows += [(m.replace("rejected: ", "  rejected: "), v) for m, v in metric.items() if str(m).startswith("rejected: ")]
    rows += [
        (m, metric.get(m))
        for m in (
            "valid rows",
            "pre-cutoff rows",
            "post-cutoff rows",
            "entities",
            "periods",
            "recall pairs (entity, target_date)",
            "rows without a forecast",
            "rows with an unparsed forecast",
        )
    ]
    if int(metric.get(REFUSED_METRIC, 0) or 0):  # rows out of the panel: a query refused for good
        rows.append((REFUSED_METRIC, metric.get(REFUSED_METRIC)))
    items.append(Table(strings(pd.DataFrame(rows, columns=["", "count"])), "sample"))
    left_out = int(metric.get("valid rows outside the subsample", 0) or 0)
    if left_out:
        items.append(
            Para(
                f"**Subsample.** This report analyses a seeded random subsample: "
                f"{metric.get('valid rows')} of {int(metric.get('valid rows', 0)) + left_out} valid rows "
                f"(subsample_rows {fmt(s.input.subsample_rows)}, subsample_seed "
                f"{fmt(s.input.subsample_seed)}); the other {left_out} valid rows were not analysed."
            )
        )
    period = _by_sample(ctx.table("sample_period"))
    if len(period):
        items.append(Table(strings(period), "sample_period"))
    det = rows_of(results, "detection", "pre") if len(results) else results
    if len(det):
        d = det.iloc[0]
        dropped_missing = int(metric.get("pre-cutoff rows", 0)) - int(d["n_obs"]) - int(d["n_singletons"] or 0)
        dropped = fmt(d["dropped_terms"]) if isinstance(d["dropped_terms"], str) and d["dropped_terms"] else "none"
        items.append(
            Para(
                f"Dropped by the estimator in the pre-cutoff detection regression: "
                f"{fmt(d['n_singletons'])} singleton observations, {max(dropped_missing, 0)} rows with a "
                f"missing value; collinear terms dropped: {dropped}. "
                f"Fixed effects: {d['fixed_effects']}; standard errors: {d['vcov']} "
                f"(small-sample correction {SSC_RULE}); realization periods at frequency "
                f"{code(s.protocol.period_frequency)}."
            )
        )
    if len(results) and "warning" in results:
        warned = results.dropna(subset=["warning"])
        warnings = list(
            dict.fromkeys(
                f"{r['spec']} ({r['sample']}): {r['warning']}" for _, r in warned.iterrows() if str(r["warning"]).strip()
            )
        )
        if warnings:
            items += [Para("Warnings from the estimator, by regression:"), Bullets(tuple(warnings))]
    parse = ctx.table("forecast_parse_rate")
    if len(parse):
        p = parse.iloc[0]
        items.append(
            Para(
                f"Forecast parse rate: {fmt(p['parse_rate'])} ({int(p['n_parsed'])} of "
                f"{int(p['n_responses'])} answers map to a label; protocol floor 0.95)."
            )
        )
        if s.runner.accept_low_parse_rate:
            items.append(
                Para(
                    f"**Low parse rate accepted** (setting `accept_low_parse_rate: true`): the "
                    f"{int(p['n_unparsed'])} rows with an unparsed forecast have no mu_hat and are "
                    "excluded from the regressions; the prompt was kept as the object under test."
                )
            )
    issues = ctx.table("query_issues")
    if len(issues):
        items += [
            Para("LLM queries with an issue (a query with no answer is not a censored answer; rerunning the jobs retries it):"),
            Table(strings(issues, ["task", "issue", "n_queries"]), "query_issues"),
        ]
    return Section(
        "sample",
        "1. Sample",
        "How many rows the study had, how many were excluded and why, and what the estimator dropped.",
        items,
    )


def _rising_measures(lapd: pd.DataFrame) -> list:
    """A sentence per measure whose mean rises after the cutoff while the registry says why
    it may (Measure.cutoff_note): a rise beside falling measures otherwise reads as a bug."""
    out: list = []
    if lapd.empty or not {"measure", "sample", "mean"} <= set(lapd.columns):
        return out
    for name, rows in lapd.groupby("measure", sort=False):
        m = MEASURES.get(str(name))
        means = {str(s): num_or_nan(v) for s, v in zip(rows["sample"], rows["mean"], strict=False)}
        pre_m, post_m = means.get("pre", math.nan), means.get("post", math.nan)
        if m is not None and m.cutoff_note and math.isfinite(pre_m) and math.isfinite(post_m) and post_m > pre_m:
            out.append(
                Para(f"Mean {m.short} rises from {fmt(pre_m)} before the cutoff to {fmt(post_m)} after it: {m.cutoff_note}.")
            )
    return out


def lap_section(ctx: Context) -> Section:
    s = ctx.study
    items: list = [
        Para(
            f"LAP measure in the regressions: `{s.measures.lap_measure}`"
            f" ({MEASURES[s.measures.lap_measure].describe(s.measures)})"
            f"; high-LAP rule: {code(s.protocol.high_lap_rule)}."
        )
    ]
    lapd = ctx.table("lap_distribution")
    if len(lapd):
        order = {m: i for i, m in enumerate(MEASURES)}
        lapd = _by_sample(lapd.assign(_m=lapd["measure"].map(order).fillna(len(order))), "_m").drop(columns="_m")
        items.append(
            Table(
                strings(lapd, ["measure", "sample", "n", "mean", "sd", "min", "p25", "median", "p75", "max"]),
                "lap_distribution",
                caption="Rows: measures in registry order (docs/measures.md), pre before post.",
            )
        )
    hist = ctx.table("lap_histogram")
    if len(hist):
        wide = hist.pivot_table(index=["bin_lower", "bin_upper"], columns="sample", values="n").reset_index()
        wide = wide[[c for c in ("bin_lower", "bin_upper", "pre", "post") if c in wide.columns]]
        wide.columns.name = None
        items.append(Para("Histogram counts of the selected LAP (bins in increasing order):"))
        items.append(_capped(strings(wide), "lap_histogram", "lap_histogram.csv", "first bins"))
        items.append(
            Figure(
                "lap_histogram",
                f"{MEASURES[s.measures.lap_measure].label} histogram, pre vs post",
                charts.lap_histogram(_by_sample(hist), s.measures.lap_measure, MEASURES[s.measures.lap_measure].label),
                in_markdown=False,
            )
        )
    sel = lapd[lapd["is_selected_measure"].map(_truthy)] if len(lapd) and "is_selected_measure" in lapd else lapd.iloc[0:0]
    if len(sel) == 2:
        pre_m = float(sel[sel["sample"] == "pre"]["mean"].iloc[0])
        post_m = float(sel[sel["sample"] == "post"]["mean"].iloc[0])
        if post_m >= 0.75 * pre_m:
            items.append(
                Para(
                    f"**Warning: post-cutoff LAP stays high** (mean {fmt(post_m)} vs {fmt(pre_m)} "
                    "pre-cutoff): the model is guessing rather than abstaining."
                )
            )
        else:
            items.append(Para(f"Mean LAP falls from {fmt(pre_m)} before the cutoff to {fmt(post_m)} after it. " + EXPOSURE_NOTE))
    items += _rising_measures(lapd)
    cens = _by_sample(ctx.table("recall_censoring"))
    if len(cens):
        items.append(
            Para(
                "Recall label censoring (label absent from the top-20 tokens; its mass is then "
                "counted as 0, a lower bound) and residual mass 1 - P(up) - P(down) - P(unknown):"
            )
        )
        items.append(Table(strings(cens), "recall_censoring"))
        if "probability_method" in cens and (cens["probability_method"].astype(str) == "exact").all():
            items.append(
                Para(
                    "exact: no censoring (every label probability was read from the model's full "
                    "next-token distribution, setting `recall_probabilities`; docs/cutoff.md)."
                )
            )
        worst = float(cens["share_up_and_down_censored"].max())
        if worst > 0.2:
            items.append(Para(f"**Warning: high censoring** ({fmt(100 * worst, 3)}% of pairs have neither label in the top-20)."))
    return Section(
        "lap",
        "2. LAP distribution, pre vs post cutoff",
        "How LAP is distributed before and after the stated cutoff, for every measure the study computed.",
        items,
    )


def _capped(frame: pd.DataFrame, name: str, csv: str, what: str) -> Table:
    if len(frame) <= MAX_ROWS:
        return Table(frame, name, csv=csv)
    return Table(
        frame.head(MAX_ROWS), name, csv=csv, caption=f"{len(frame)} rows; the {what} {MAX_ROWS} shown, every row in `{csv}`."
    )


def _on_path(o: Outcome) -> bool:
    return o.path in ("contamination", "mixed")


def validation_findings(o: Outcome) -> str:
    """Validation in words for a verdict that did not read it (a null or underpowered path):
    the estimates, with no pass/fail wording of the Mixed/invalid rule."""
    hi, d = o.tests["theta_high"], o.tests["theta_diff"]
    parts = []
    if hi.estimable:
        parts.append(f"the high-LAP theta is {fmt_num(hi.estimate)} per unit of U-D (t {fmt_t(hi.t)}, {hi.p_phrase()})")
    else:
        parts.append("the high-LAP theta is not estimable")
    if d.estimable:
        parts.append(f"high minus low per sd of U-D {fmt_num(d.estimate)} (t {fmt_t(d.t)}, {d.p_phrase()})")
    codes = ", ".join(VALIDATION_FAILURES[c] for c in o.validation_failures)
    return "; ".join(parts) + (f" ({codes})" if codes else " (the pattern memorization predicts)")


def validation_section(ctx: Context) -> Section:
    o, results, draws = ctx.outcome, ctx.table("regression_results"), ctx.draws
    f = o.facts
    items: list = [
        Table(
            coef_frame(
                results,
                [
                    ("pooled", "validation_pooled", "pre"),
                    ("high LAP", "validation_high_lap", "pre"),
                    ("low LAP", "validation_low_lap", "pre"),
                ],
                ["ud"],
                two_sided=True,
                draws=draws,
            ),
            "validation_pre",
        ),
        Para(
            "Theta is per unit of U-D in this table. High- minus low-LAP theta (one "
            "regression: outcome on ud and ud x high_lap with entity x half and period x half "
            "fixed effects, ud in sd units of its own half, so ud is the low-LAP theta and "
            "ud:high_lap is theta_high - theta_low, both per sd of U-D within its half; "
            "one-sided test of high > low):"
        ),
        Table(
            coef_frame(
                results,
                [("pre-cutoff", "validation_difference", "pre")],
                ["ud", "ud:high_lap"],
                one_sided="ud:high_lap",
                draws=draws,
            ),
            "validation_difference",
        ),
        Table(
            pd.DataFrame(
                [
                    ("high-LAP theta per sd of U-D (ud + ud:high_lap)", fmt_num(f.theta_high.per_sd)),
                    ("low-LAP theta per sd of U-D (ud)", fmt_num(f.theta_low.per_sd)),
                    ("difference (ud:high_lap)", fmt_num(f.theta_diff.estimate)),
                ],
                columns=["theta per sd of U-D within its half", "estimate"],
            ),
            "theta_per_sd",
        ),
    ]
    rule = (
        "Expected under memorization: theta positive and significant on the high-LAP half, near "
        'zero on the low-LAP half. "Near zero" is tested, not assumed from p >= 0.05: the pattern '
        "is present when the high-LAP theta is positive with two-sided p < 0.05 and exceeds the "
        "low-LAP theta per sd of U-D with one-sided p < 0.05 (docs/verdict.md)."
    )
    if _on_path(o):
        items.append(Para(f"{rule} Here: {validation_text(o)}."))
    else:
        items.append(
            Para(
                f"{rule} The verdict's decision path (`{o.path}`) stops at the detection test, "
                f"so validation is descriptive here and decides nothing: {validation_findings(o)}."
            )
        )
    return Section(
        "validation",
        "3. Validation: outcome on (U-D), entity and period fixed effects",
        "Does the recalled direction predict the outcome on high-LAP rows, more than on low-LAP rows?",
        items,
    )


def _wild_label(results: pd.DataFrame) -> str:
    labels = [x for x in results.get("wild_bootstrap", pd.Series(dtype=str)).dropna().unique() if str(x)]
    return str(labels[0]) if labels else "not computed: no clustered fit, or wild_bootstrap_draws = 0"


def detection_section(ctx: Context) -> Section:
    o, results = ctx.outcome, ctx.table("regression_results")
    f, b3 = o.facts, o.tests["beta3"]
    items: list = [
        Table(
            coef_frame(
                results,
                [("pre-cutoff", "detection", "pre")],
                ["mu_hat", "lap", "mu_hat:lap"],
                flat=collapsed_lap(o.facts),
                one_sided="mu_hat:lap",
                draws=ctx.draws,
            ),
            "detection_pre",
        ),
        Para(
            "beta_3 is the coefficient on mu_hat:lap; the test is one-sided for beta_3 > 0 "
            "(p/2 when t > 0, else 1 - p/2). Beside CRV1 stands the restricted wild cluster "
            "bootstrap p (" + _wild_label(results) + "); the verdict reads it at every cluster count "
            f"(here it read: {b3.p_phrase()}; t test on {fmt_num(f.beta3.df)} degrees of "
            f"freedom). Minimum detectable beta_3 (one-sided 5% test, 80% power): "
            f"{fmt_num(mde(f))}.{mde_sentence(o) if math.isfinite(mde(f)) else ''}"
        ),
    ]
    return Section(
        "detection",
        "4. Detection: outcome on mu_hat, LAP and mu_hat x LAP, pre-cutoff",
        "Is the forecast more accurate where LAP is high, before the cutoff (beta_3 > 0)?",
        items,
    )


def placebo_section(ctx: Context) -> Section:
    o, results = ctx.outcome, ctx.table("regression_results")
    items: list = []
    if o.facts.placebo_feasible:
        items.append(
            Table(
                coef_frame(
                    results,
                    [("post-cutoff", "detection", "post")],
                    ["mu_hat", "lap", "mu_hat:lap"],
                    one_sided="mu_hat:lap",
                    draws=ctx.draws,
                    flat=collapsed_lap(o.facts),
                ),
                "detection_post",
            )
        )
        items.append(
            Table(
                coef_frame(
                    results,
                    [
                        ("pooled", "validation_pooled", "post"),
                        ("high LAP", "validation_high_lap", "post"),
                        ("low LAP", "validation_low_lap", "post"),
                    ],
                    ["ud"],
                    two_sided=True,
                    draws=ctx.draws,
                ),
                "validation_post",
            )
        )
    read = (
        ""
        if _on_path(o)
        else (f" The verdict's decision path (`{o.path}`) does not read the placebo: it is reported for completeness.")
    )
    items.append(
        Para(
            f"Placebo: {placebo_text(o)}. (It passes when the one-sided p for beta_3 "
            f"> 0 is above {PLACEBO_PASS_P:g}, or when post-cutoff LAP has collapsed so that "
            f"beta_3 is not estimable: nothing is left for LAP to proxy.){read}"
        )
    )
    return Section(
        "placebo",
        "5. Placebo: post-cutoff sample",
        "The same tests after the cutoff, where memorization is impossible: an effect that survives there is not memorization.",
        items,
    )


def _robustness(ctx: Context) -> list:
    rob = ctx.table("lap_robustness")
    if not len(rob):
        return []
    order = {m: i for i, m in enumerate(MEASURES)}
    rob = rob.assign(_m=rob["lap_measure"].map(order).fillna(len(order))).sort_values("_m", kind="stable")
    # a measure that scored no row has no result: never a row of numbers with N 0 (the
    # build's coverage gate, lookahead/coverage.py, stops such a build unless
    # min_measure_coverage is 0)
    unscored = pd.to_numeric(rob["n_obs"], errors="coerce").fillna(0) == 0
    rob = rob.assign(detects=rob["detects"].where(~unscored, False))
    rows = pd.DataFrame(
        {
            "LAP measure": [
                f"`{m}`" + (" (verdict)" if _truthy(v) else "")
                for m, v in zip(rob["lap_measure"], rob["is_verdict_measure"], strict=False)
            ],
            "beta_3": rob["beta3"].map(fmt_num),
            "t": rob["t"].map(fmt_t),
            "one-sided p": [fmt_p(p, int(d)) for p, d in zip(rob["p_one_sided"], rob["p_draws"], strict=False)],
            "p by": rob["p_source"].astype(str),
            "N": rob["n_obs"].map(fmt),
            "LAP varies": rob["lap_varies"].map(lambda x: "yes" if _truthy(x) else "no"),
            "beta_3 > 0 at 5%": rob["detects"].map(lambda x: "yes" if _truthy(x) else "no"),
        }
    )
    for col in ("beta_3", "t", "one-sided p", "p by", "LAP varies", "beta_3 > 0 at 5%"):
        rows[col] = rows[col].astype(object).where(~unscored.to_numpy(), "no score")
    detecting = [str(m) for m, d in zip(rob["lap_measure"], rob["detects"], strict=False) if _truthy(d)]
    lm = ctx.study.measures.lap_measure
    return [
        Para(
            "Robustness across LAP measures (the detection regression under each measure the study "
            f"computed, `lap_measures`, registry order). The verdict reads only `{lm}`, named in "
            f"`lap_measure` before the results: this table does not choose a measure ([How to read this "
            f"report]({reading_link(ctx.study.results_dir)}) says why)."
        ),
        Table(rows, "lap_robustness", csv="lap_robustness.csv"),
        Para(
            f"beta_3 > 0 at the 5% level under {len(detecting)} of {len(rob)} measures"
            + (f" ({', '.join(detecting)})" if detecting else "")
            + "."
        ),
    ]


def verdict_section(ctx: Context) -> Section:
    o = ctx.outcome
    items: list = [
        Para(
            f"Decision path: `{o.path}` ({PATHS[o.path][1]}; every path and its "
            "wording: docs/verdict.md). The verdict paragraph at the top states the finding."
        )
    ]
    items += _robustness(ctx)
    items.append(Para(f"Rule applied (protocol, word for word): {RULE_CLAUSE[o.decision]} The full rule: docs/verdict.md."))
    items.append(
        Para(
            "Choices where the protocol is silent, and how LAP's unit enters the verdict: "
            f"[How to read this report]({reading_link(ctx.study.results_dir)}) (each with its reason: docs/verdict.md)."
        )
    )
    t5 = ctx.table(TABLE5_READING)
    if len(t5):
        items.append(Para(table5_reading(t5.iloc[0])))
    if o.facts.approximated:
        items.append(
            Para(
                "**All results are approximated**: recall probabilities come from the sampling "
                "fallback (answer frequencies), not token log-probabilities."
            )
        )
    return Section(
        "verdict",
        "6. Verdict",
        "How the decision rule reached the verdict, and how beta_3 reads under the other LAP measures.",
        items,
    )


def cutoff_section(ctx: Context) -> Section | None:
    """The effective-cutoff section (lookahead.pages.cutoff): the break per measure, LAP
    by month and the cutoff sensitivity table, with the warning when the stated cutoff
    lies outside the break's interval."""
    md = cutoff.cutoff_section(ctx.results_dir, ctx.study)
    sec = raw_section(
        "cutoff",
        md,
        lead="Where the model's knowledge ends, read from the study's own "
        "LAP by month, and whether the verdict holds with the cutoff moved.",
    )
    warning = cutoff.verdict_warning(ctx.results_dir, ctx.study)
    if sec is not None and warning:
        sec.items.insert(0, Para(warning.strip()))
    return sec


def gates_section(ctx: Context) -> Section | None:
    gx = ctx.table("gx_validation_results")
    if not len(gx):
        return None
    return Section(
        "gates",
        "Data-quality gates",
        "The Great Expectations checks the build ran on the inputs.",
        [Para(f"All {len(gx)} Great Expectations checks passed (`gx_validation_results.csv`).")],
    )


def protocol_tables_section(ctx: Context) -> Section | None:
    results = ctx.table("regression_results")
    if results.empty:
        return None
    items: list = []
    for name, (title, _, _) in PROTOCOL_TABLES.items():
        frame = publication_frame(results, name, ctx.draws, collapsed_lap(ctx.outcome.facts))
        if frame.shape[1] > 1:
            items.append(Table(frame, f"protocol_{name}", caption=title, publication=True, csv=f"tables/protocol_{name}.tex"))
    items.append(Para(PUBLICATION_NOTE))
    return Section(
        "protocol_tables",
        "Regression tables",
        "The protocol's regressions as a journal prints them (LaTeX in `tables/protocol_*.tex`).",
        items,
    )


def paper_section(ctx: Context) -> Section | None:
    """The paper's Tables I-VI and Figure III on this study's data (lookahead.pages.paper),
    from the database tables in `ctx.database`; None when the paper's models were not
    built."""
    sec = raw_section(
        "paper",
        paper.paper_markdown(ctx.database, ctx.results_dir),
        lead="The paper's Tables I-VI that this study's data allow (the heading names them, the "
        "first line says why any is absent) and Figure III; Table V is not the contamination test "
        "(section 6 says why).",
    )
    figure = paper.bootstrap_figure(ctx.results_dir, paper.measure_label(ctx.database)) if sec is not None else None
    if sec is not None and figure is not None:
        sec.items.append(figure)
    return sec


# ---------------------------------------------------------------- claims (from the exported CSVs)


class TableSource(Protocol):
    """What the claims section reads: a results folder's CSVs by name and the study. A
    protocol report's Context is one; so is a claim-only study's (lookahead.pages.
    claims_report)."""

    study: Study

    def table(self, name: str) -> pd.DataFrame: ...


def choices_table(ctx: TableSource, summ: pd.DataFrame) -> Table:
    """The choices where seed 002 is silent or the tool departs from it that this study's
    figures rest on, each with the rule as its settings made it (lookahead.claims.choices;
    the seed's words and the reasons in docs/claims.md)."""
    from lookahead.claims.choices import Used, used_choices

    used = Used(frozenset(summ["agent"].astype(str)), len(ctx.table("claims_repredict")) > 0)
    rows = used_choices(ctx.study, used)
    return Table(
        pd.DataFrame({"choice": [n for n, _ in rows], "this study's rule": [r for _, r in rows]}),
        "claims_choices",
        caption="Choices where seed 002 is silent or the tool departs from it, as this study applied them; "
        "the seed's words and why: docs/claims.md, table of choices.",
    )


def claims_section(ctx: TableSource) -> Section | None:
    inst, claims, summ = ctx.table("instance_leakage"), ctx.table("claims"), ctx.table("claims_summary")
    if inst.empty or claims.empty:
        return None

    def f3(x: object) -> str:
        v = num_or_nan(x)
        return f"{v:.3f}" if math.isfinite(v) else ""

    summ = summ.sort_values(["agent", "task"], kind="stable")

    def col(name: str) -> pd.Series:  # a column a table of an older build lacks reads as empty
        return summ[name] if name in summ else pd.Series([None] * len(summ), index=summ.index)

    def ci(name: str) -> list[str]:
        lo, hi = col(f"{name}_ci_low").map(f3), col(f"{name}_ci_high").map(f3)
        return [f"[{a}, {b}]" if a and b else "" for a, b in zip(lo, hi, strict=True)]

    table = pd.DataFrame(
        {
            "agent": summ["agent"],
            "task": summ["task"],
            "instances": summ["n_instances"].map(fmt),
            "scored": summ["n_scored"].map(fmt),
            "claims": summ["n_claims"].map(fmt),
            "OLR": summ["olr"].map(f3),
            "OLR 95% CI": ci("olr"),
            "OLR (unverif. leaked)": summ["olr_unverifiable_leaked"].map(f3),
            "Shapley-DCLR": summ["shapley_dclr"].map(f3),
            "DCLR 95% CI": ci("shapley_dclr"),
            "DCLR (unverif. leaked)": summ["shapley_dclr_unverifiable_leaked"].map(f3),
            "top-1": summ["top1_leakage"].map(f3),
            "top-3": summ["top3_leakage"].map(f3),
            "top-5": col("top5_leakage").map(f3),
            "task metric": [f"{n} {f3(v)}" for n, v in zip(summ["task_metric_name"], summ["task_metric"], strict=False)],
            "accuracy": summ["accuracy"].map(f3),
        }
    )
    by_k = "K" if ctx.study.claims.claims_topk_denominator == "k" else "min(K, number of claims)"
    items: list = [
        Para(
            "Unverifiable claims counted as not leaked (the `_unverifiable_leaked` columns count them as "
            "leaked). Top-K ranks an instance's claims by |Shapley value|, largest first, ties broken by claim "
            f"order (the earlier claim first), and divides the leaked claims among the first K by {by_k}. The 95% "
            "intervals are of the mean over the scored instances (t interval); each instance's Shapley-DCLR "
            "carries its own standard error and interval in `instance_leakage` (0 where its Shapley values are "
            f"exact). The method and its tables: [How to read this report]({reading_link(ctx.study.results_dir)})."
        ),
        Table(table, "claims_summary", csv="claims_summary.csv"),
    ]
    items.append(choices_table(ctx, summ))
    status = inst["status"].value_counts().to_dict()
    items.append(Para("Instance status: " + ", ".join(f"{k}: {v}" for k, v in sorted(status.items())) + "."))
    if "shapley_method" in inst:
        methods = inst.loc[inst["status"] == "ok", "shapley_method"].value_counts().to_dict()
        if methods:
            items.append(Para("Shapley values: " + ", ".join(f"{k}: {v}" for k, v in sorted(methods.items())) + " instances."))
    gap = pd.to_numeric(inst["efficiency_gap"], errors="coerce").abs().max()
    if pd.notna(gap):
        items.append(Para(f"Efficiency check: max |sum of Shapley values - (v_all - v_empty)| = {gap:.2e}."))
    scored = inst[inst["status"] == "ok"].copy()
    if len(scored):
        scored["order"] = pd.to_numeric(scored["shapley_dclr"], errors="coerce").fillna(-1)
        top = scored.sort_values(["order", "instance_id"], ascending=[False, True]).head(6)
        # the browser first: its filters on the screen the section opens on (the figure is tall)
        items.append(
            Figure(
                "claim_browser",
                "Claim browser: every claim with its dates, leaked or not, and "
                "its Shapley weight (filter by agent, leaked status, instance)",
                charts.claim_browser(claims),
                in_markdown=False,
                list_view=True,
            )
        )
        items.append(
            Figure(
                "claims_shapley",
                "Shapley value per claim, leaked claims red and hatched (claim text on hover in the page)",
                charts.shapley_per_claim(claims.merge(top[["instance_id", "agent"]]), list(top["instance_id"])),
                "figures/claims_shapley.png",
            )
        )
    rp = ctx.table("claims_repredict")
    if len(rp):
        name = str(rp["repred_metric_name"].iloc[0])
        items.append(
            Para(
                "**Re-prediction check** (does the prediction follow from its rationale?). The claim "
                "model predicts again from the task input and the rationale cleaned of its explicit "
                f"prediction (docs/claims.md). Error: {name} (seed 002 Table 5; 0 = the same "
                "prediction)."
            )
        )
        items.append(
            Table(
                pd.DataFrame(
                    {
                        "agent": summ["agent"],
                        "task": summ["task"],
                        "re-predicted": summ["n_repredicted"].map(fmt),
                        "mean error": summ["repred_error"].map(f3),
                    }
                ),
                "repredict_summary",
            )
        )
        rp = rp.assign(_e=pd.to_numeric(rp["repred_error"], errors="coerce")).sort_values(
            ["_e", "agent", "instance_id"], ascending=[False, True, True], kind="stable"
        )
        worst = pd.DataFrame(
            {
                "instance": rp["instance_id"],
                "agent": rp["agent"],
                "prediction": rp["prediction"].map(fmt),
                "re-prediction": rp["repredicted"].map(fmt),
                "error": rp["repred_error"].map(f3),
            }
        )
        n = min(10, len(worst))
        items.append(
            Table(
                worst.head(n).reset_index(drop=True),
                "repredict_worst",
                csv="claims_repredict.csv",
                caption=f"The {n} instances with the largest error, of {len(worst)}; every instance in `claims_repredict.csv`.",
            )
        )
    return Section(
        "claims",
        "Claim-level leakage (OLR, Shapley-DCLR, TimeSPEC)",
        "Which claims in each rationale were knowable only after the reference date, and how "
        "much each weighed in the prediction.",
        items,
    )


def files_section(ctx: Context) -> Section:
    d = ctx.results_dir
    csvs = tuple(sorted(p.relative_to(d).as_posix() for p in d.glob("*.csv")))
    tex = sorted(
        {*(p.relative_to(d).as_posix() for p in d.glob("tables/*.tex")), *(f"tables/protocol_{n}.tex" for n in PROTOCOL_TABLES)}
    )
    return Section(
        "files",
        "Files",
        "Every table of this report as a CSV, and the LaTeX tables.",
        [Links((("CSV", csvs), ("LaTeX", tuple(tex)), ("Stata", ("reghdfe.do",))))],
    )


#: The report, in order. An entry returns a Section, or None when its tables are absent.
#: A new section is one function and one entry here.
SECTIONS: tuple[tuple[str, Callable[[Context], Section | None]], ...] = (
    ("answer", answer),
    ("checklist", checklist_section),
    ("figures", figures_section),
    ("hit_rates", hit_rate_section),
    ("sample", sample_section),
    ("lap", lap_section),
    ("validation", validation_section),
    ("detection", detection_section),
    ("placebo", placebo_section),
    ("verdict", verdict_section),
    ("cutoff", cutoff_section),
    ("gates", gates_section),
    ("protocol_tables", protocol_tables_section),
    ("paper", paper_section),
    ("claims", claims_section),
    ("files", files_section),
)


def build(ctx: Context) -> list[Section]:
    """Every section of SECTIONS that has its tables, in order."""
    return [sec for _, make in SECTIONS if (sec := make(ctx)) is not None]


def raw_section(key: str, markdown: str, lead: str = "") -> Section | None:
    """A section written as Markdown (the cutoff and paper sections) as a Section: its
    first "## " line the title; `lead` the line that says what it shows (default: the
    Markdown's first paragraph)."""
    text = markdown.strip("\n")
    if not text:
        return None
    lines = text.splitlines()
    title = lines[0][3:].strip() if lines[0].startswith("## ") else key
    body = "\n".join(lines[1:] if lines[0].startswith("## ") else lines).strip("\n")
    if not lead:
        first, _, body = body.partition("\n\n")
        lead = first.replace("\n", " ")
    return Section(key, title, lead, [Raw(body)])
