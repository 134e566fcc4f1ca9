"""results/REPORT.md and its CSVs, read from the tables `dbt build` wrote.

The protocol requires the report to quote files, not memory: every table is first
written to a CSV in the results folder, and the Markdown is rendered from those CSVs
read back. The report also exports the panels as Stata .dta files and a do-file with
the equivalent reghdfe commands, since the estimates here come from pyfixest."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import duckdb
import pandas as pd

from lookahead.artefacts import Folders, check_output_folders, retire_study, write_artefact_set
from lookahead.config import Study
from lookahead.cutoff_report import CUTOFF_TABLES, cutoff_section, verdict_warning
from lookahead.identity import COMPLETE, StaleResultError, check_current, held_by, mark_stale
from lookahead.measures import MEASURES
from lookahead.paper.table5_reading import TABLE5_READING, table5_reading
from lookahead.stats.fe_regression import SSC_RULE
from lookahead.stats.protocol import StatsSettings
from lookahead.stats.stata import export_stata_panels, write_stata_do_file
from lookahead.stats.verdict import (
    PATHS,
    PLACEBO_PASS_P,
    UNITS_RULE,
    evaluate,
    facts_from_row,
    fmt_num,
    fmt_p,
    fmt_t,
    mde,
    placebo_text,
    reason,
    validation_text,
)

# (spec, sample) -> CSV name; the protocol's tables in report order
REGRESSIONS = (
    ("validation_pooled", "pre"), ("validation_high_lap", "pre"), ("validation_low_lap", "pre"),
    ("validation_difference", "pre"), ("detection", "pre"),
    ("validation_pooled", "post"), ("validation_high_lap", "post"), ("validation_low_lap", "post"),
    ("validation_difference", "post"), ("detection", "post"),
)
TABLES = (
    "study_settings", "sample_description", "sample_period", "rejected_rows", "lap_distribution",
    "lap_histogram", "recall_censoring", "forecast_parse_rate", "merge_row_counts",
    "gx_validation_results", "regression_results", "verdict", "query_issues", "lap_robustness",
    *CUTOFF_TABLES,
)


class ReportError(RuntimeError):
    """No current result to report: dbt build did not run, failed, or ran on other inputs."""


@dataclass
class ReportFiles:
    report: Path
    csvs: list[Path]
    stata: list[Path]
    verdict: str


def _fmt(x: object, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "NA"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e5 else f"{x:,.0f}"
    if pd.isna(x):  # type: ignore[arg-type]
        return "NA"
    return str(x)


def markdown_table(df: pd.DataFrame, columns: Iterable[str] | None = None,
                   formatters: dict[str, Callable[[object], str]] | None = None) -> str:
    cols = list(columns or df.columns)
    formatters = formatters or {}
    head = "| " + " | ".join(cols) + " |\n|" + "|".join("---" for _ in cols) + "|\n"
    body = "".join(
        "| " + " | ".join(formatters.get(c, _fmt)(row[c]) for c in cols) + " |\n"
        for _, row in df.iterrows()
    )
    return head + body


def export_tables(con: duckdb.DuckDBPyConnection, results_dir: Path) -> list[Path]:
    """One CSV per table and one per regression, each written to a temp file and renamed."""
    existing = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
    missing = [t for t in ("panel_pre", "regression_results", "verdict") if t not in existing]
    if missing:
        raise ReportError(
            f"table(s) {', '.join(missing)} not found in the study database: run `dbt build` "
            "first (a failed gate leaves the regression tables unbuilt)"
        )
    results_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def write(df: pd.DataFrame, name: str) -> None:
        path = results_dir / f"{name}.csv"
        tmp = path.with_suffix(".csv.tmp")
        df.to_csv(tmp, index=False)
        os.replace(tmp, path)
        written.append(path)

    for table in TABLES:
        if table in existing:
            write(con.sql(f"select * from {table}").df(), table)
    results = con.sql("select * from regression_results").df()
    for spec, sample in REGRESSIONS:
        part = results[(results["spec"] == spec) & (results["sample"] == sample)]
        if len(part):
            write(part, f"regression_{spec}_{sample}")
    return written


def _rows(results: pd.DataFrame, spec: str, sample: str) -> pd.DataFrame:
    return results[(results["spec"] == spec) & (results["sample"] == sample)]


def _not_estimable(row: pd.Series) -> str:
    """'not estimable (reason)' for a missing estimate, the reason from the fit's record."""
    dropped = str(row.get("dropped_terms") or "")
    if row["term"] in [x.strip() for x in dropped.split(",")]:
        return "not estimable (collinear with the fixed effects or other terms)"
    warning = str(row.get("warning") or "")
    m = warning.split("not estimable: ", 1)
    if len(m) == 2:
        return f"not estimable ({m[1].split(';')[0].strip()})"
    if "no observations" in warning:
        return "not estimable (no observations)"
    return "not estimable"


def _coef_table(results: pd.DataFrame, specs: list[tuple[str, str, str]], terms: list[str],
                one_sided: str | None = None, two_sided: bool = False, draws: int = 0) -> str:
    """Rows: (label, spec, sample); columns per term: estimate (t); then the p-values of the
    tested term (CRV1 and wild cluster bootstrap side by side). A cell is a number or
    "not estimable (reason)", never both: a tested term without an estimate has no p."""
    lines = []
    for label, spec, sample in specs:
        part = _rows(results, spec, sample)
        if part.empty:
            continue
        cells = []
        for term in terms:
            r = part[part["term"] == term]
            if r.empty:
                cells.append("NA")
            elif pd.isna(r["estimate"].iloc[0]):
                cells.append(_not_estimable(r.iloc[0]))
            else:
                cells.append(f"{fmt_num(_num_or_nan(r['estimate'].iloc[0]))} "
                             f"({fmt_t(_num_or_nan(r['t'].iloc[0]))})")
        first = part.iloc[0]
        extra = []

        def p_cells(term: str, crv: str, wild: str) -> list[str]:
            r = part[part["term"] == term]
            if r.empty or pd.isna(r["estimate"].iloc[0]):
                return ["NA", "NA"]
            return [fmt_p(_num_or_nan(r[crv].iloc[0])), fmt_p(_num_or_nan(r[wild].iloc[0]), draws)]

        if two_sided:
            extra += p_cells(one_sided or terms[0], "p_two_sided", "p_wild_two_sided")
        if one_sided:
            extra += p_cells(one_sided, "p_one_sided", "p_wild_one_sided")
        extra += [_fmt(first["n_obs"]), _fmt(first["n_clusters"]), _fmt(first["n_singletons"]),
                  _fmt(first["r2"], 3)]
        lines.append([label, *cells, *extra])
    head = ["sample", *[f"{t} (t)" for t in terms]]
    if two_sided:
        head += ["p (two-sided)", "wild bootstrap p (two-sided)"]
    if one_sided:
        head += [f"one-sided p ({one_sided} > 0)", "wild bootstrap one-sided p"]
    head += ["N", "clusters", "singletons dropped", "R2"]
    out = "| " + " | ".join(head) + " |\n|" + "|".join("---" for _ in head) + "|\n"
    return out + "".join("| " + " | ".join(map(str, line)) + " |\n" for line in lines)


def _num_or_nan(x: object) -> float:
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return v


def _wild_label(results: pd.DataFrame) -> str:
    labels = [x for x in results.get("wild_bootstrap", pd.Series(dtype=str)).dropna().unique() if str(x)]
    return str(labels[0]) if labels else "not computed: no clustered fit, or wild_bootstrap_draws = 0"


def _robustness_section(rob: pd.DataFrame, lap_measure: str) -> str:
    """beta_3 under each LAP measure the study computed (lookahead.stats.robustness)."""
    if not len(rob):
        return ""
    # a measure that scored no row has no result: never a row of numbers with N 0 (the
    # build's coverage gate, lookahead/coverage.py, stops such a build unless
    # min_measure_coverage is 0)
    unscored = pd.to_numeric(rob["n_obs"], errors="coerce").fillna(0) == 0
    rob = rob.assign(detects=rob["detects"].where(~unscored, False))
    rows = pd.DataFrame({
        "LAP measure": [f"`{m}`" + (" (verdict)" if _truthy(v) else "")
                        for m, v in zip(rob["lap_measure"], rob["is_verdict_measure"])],
        "beta_3": rob["beta3"].map(fmt_num), "t": rob["t"].map(fmt_t),
        "one-sided p": [fmt_p(p, int(d)) for p, d in zip(rob["p_one_sided"], rob["p_draws"])], "p by": rob["p_source"],
        "N": rob["n_obs"], "LAP varies": rob["lap_varies"].map(lambda x: "yes" if _truthy(x) else "no"),
        "beta_3 > 0 at 5%": rob["detects"].map(lambda x: "yes" if _truthy(x) else "no"),
    })
    for col in ("beta_3", "t", "one-sided p", "p by", "LAP varies", "beta_3 > 0 at 5%"):
        rows[col] = rows[col].astype(object).where(~unscored.to_numpy(), "no score")
    detecting = [str(m) for m, d in zip(rob["lap_measure"], rob["detects"]) if _truthy(d)]
    return ("Robustness across LAP measures (the detection regression with LAP replaced by each "
            "measure the study computed, setting `lap_measures`; docs/measures.md). The verdict "
            f"reads only `{lap_measure}`, the measure the study named in `lap_measure` before "
            "seeing results: this table does not choose a measure (no measure shopping).\n\n"
            + markdown_table(rows)
            + f"\nbeta_3 > 0 at the 5% level under {len(detecting)} of {len(rob)} measures"
            + (f" ({', '.join(detecting)})" if detecting else "") + ".\n\n")


def _read(results_dir: Path, name: str) -> pd.DataFrame:
    path = results_dir / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def _truthy(value: object) -> bool:
    """A boolean setting as read back from a CSV (True, 'True', 'true', 1)."""
    return str(value).strip().lower() in ("true", "1", "yes")


def render(results_dir: Path, extra_sections: str = "") -> tuple[str, str]:
    """(REPORT.md text, verdict) rendered from the CSVs in results_dir."""
    # the study the build recorded (its settings_json, resolved by the loader), read back typed
    study = Study.from_json(str(_read(results_dir, "study_settings").iloc[0]["settings_json"]))
    desc = _read(results_dir, "sample_description")
    period = _read(results_dir, "sample_period")
    lapd = _read(results_dir, "lap_distribution")
    hist = _read(results_dir, "lap_histogram")
    cens = _read(results_dir, "recall_censoring")
    parse = _read(results_dir, "forecast_parse_rate")
    results = _read(results_dir, "regression_results")
    verdict = _read(results_dir, "verdict").iloc[0]
    gx = _read(results_dir, "gx_validation_results")
    metric = dict(zip(desc["metric"], desc["value"])) if len(desc) else {}

    md = [f"# Lookahead-bias test: {study.output.study_name}\n\n"]
    md.append(
        f"Model `{study.backend.model_id}` (backend {study.backend.backend}), training cutoff "
        f"{study.protocol.training_cutoff}; data `{study.input.data_path}`. Every number below is "
        f"read from the CSV files in this folder, which `lookahead report` exported from the "
        f"tables `dbt build` wrote. Estimates come from pyfixest (feols), not Stata; "
        f"`reghdfe.do` beside this report runs the same specifications in Stata.\n\n"
    )
    outcome = evaluate(facts_from_row(verdict))  # the Outcome every section is rendered from
    if outcome.decision != str(verdict["verdict"]):
        raise ReportError(f"verdict.csv says {verdict['verdict']!r} but its facts give "
                          f"{outcome.decision!r}: the verdict table was built by another version; "
                          "rerun `dbt build`")
    draws = outcome.facts.wild_draws
    md.append(f"**Verdict: {outcome.decision}.** {reason(outcome)}\n\n")
    cutoff_warning = verdict_warning(results_dir, study)  # beside the rule (docs/cutoff.md)
    md.append(cutoff_warning)

    md.append("## 1. Sample\n\n")
    rows = [("input rows", metric.get("input rows")), ("rejected in validation", metric.get("rejected rows"))]
    rows += [(m.replace("rejected: ", "  rejected: "), v) for m, v in metric.items() if m.startswith("rejected: ")]
    rows += [(m, metric.get(m)) for m in ("valid rows", "pre-cutoff rows", "post-cutoff rows", "entities",
                                          "periods", "recall pairs (entity, target_date)",
                                          "rows without a forecast", "rows with an unparsed forecast")]
    md.append(markdown_table(pd.DataFrame(rows, columns=["", "count"])))
    left_out = int(metric.get("valid rows outside the subsample", 0) or 0)
    if left_out:
        md.append(
            f"\n**Subsample.** This report analyses a seeded random subsample: "
            f"{metric.get('valid rows')} of {int(metric.get('valid rows', 0)) + left_out} valid rows "
            f"(subsample_rows {_fmt(study.input.subsample_rows)}, subsample_seed "
            f"{_fmt(study.input.subsample_seed)}); the other {left_out} valid rows were not analysed.\n"
        )
    if len(period):
        md.append("\n" + markdown_table(period))
    det = _rows(results, "detection", "pre")
    if len(det):
        d = det.iloc[0]
        dropped_missing = int(metric.get("pre-cutoff rows", 0)) - int(d["n_obs"]) - int(d["n_singletons"] or 0)
        dropped = _fmt(d["dropped_terms"]) if isinstance(d["dropped_terms"], str) and d["dropped_terms"] else "none"
        md.append(
            f"\nDropped by the estimator in the pre-cutoff detection regression: "
            f"{_fmt(d['n_singletons'])} singleton observations, {max(dropped_missing, 0)} rows with a "
            f"missing value; collinear terms dropped: {dropped}. "
            f"Fixed effects: {d['fixed_effects']}; standard errors: {d['vcov']} "
            f"(small-sample correction {SSC_RULE}); realization periods at frequency "
            f"`{study.protocol.period_frequency}`.\n"
        )
    warned = results.dropna(subset=["warning"]) if "warning" in results else results.iloc[0:0]
    warnings = list(dict.fromkeys(f"{r['spec']} ({r['sample']}): {r['warning']}"
                                  for _, r in warned.iterrows() if str(r["warning"]).strip()))
    if warnings:
        md.append("Warnings from the estimator, by regression:\n\n" + "".join(f"- {w}\n" for w in warnings))
    if len(parse):
        p = parse.iloc[0]
        md.append(f"\nForecast parse rate: {_fmt(p['parse_rate'])} ({int(p['n_parsed'])} of "
                  f"{int(p['n_responses'])} answers map to a label; protocol floor 0.95).\n")
        if study.runner.accept_low_parse_rate:
            md.append(f"**Low parse rate accepted** (setting `accept_low_parse_rate: true`): the "
                      f"{int(p['n_unparsed'])} rows with an unparsed forecast have no mu_hat and are "
                      "excluded from the regressions; the prompt was kept as the object under test.\n")
    issues = _read(results_dir, "query_issues")
    if len(issues):
        md.append("\nLLM queries with an issue (a query with no answer is not a censored answer; "
                  "rerunning the jobs retries it):\n\n"
                  + markdown_table(issues, ["task", "issue", "n_queries"]))

    md.append("\n## 2. LAP distribution, pre vs post cutoff\n\n")
    md.append(f"LAP measure in the regressions: `{study.measures.lap_measure}`"
              f" ({MEASURES[study.measures.lap_measure].describe(study.measures)})"
              + f"; high-LAP rule: `{study.protocol.high_lap_rule}`.\n\n")
    if len(lapd):
        md.append(markdown_table(lapd, ["measure", "sample", "n", "mean", "sd", "min", "p25", "median", "p75", "max"]))
    if len(hist):
        wide = hist.pivot_table(index=["bin_lower", "bin_upper"], columns="sample", values="n").reset_index()
        md.append("\nHistogram counts of the selected LAP:\n\n" + markdown_table(wide))
    sel = lapd[lapd["is_selected_measure"]] if len(lapd) else lapd
    if len(sel) == 2:
        pre_m = float(sel[sel["sample"] == "pre"]["mean"].iloc[0])
        post_m = float(sel[sel["sample"] == "post"]["mean"].iloc[0])
        if post_m >= 0.75 * pre_m:
            md.append(f"\n**Warning: post-cutoff LAP stays high** (mean {_fmt(post_m)} vs {_fmt(pre_m)} "
                      "pre-cutoff): the model is guessing rather than abstaining.\n")
        else:
            md.append(f"\nMean LAP falls from {_fmt(pre_m)} before the cutoff to {_fmt(post_m)} after it.\n")
    if len(cens):
        md.append("\nRecall label censoring (label absent from the top-20 tokens; its mass is then "
                  "counted as 0, a lower bound) and residual mass 1 - P(up) - P(down) - P(unknown):\n\n")
        md.append(markdown_table(cens))
        worst = float(cens["share_up_and_down_censored"].max())
        if worst > 0.2:
            md.append(f"\n**Warning: high censoring** ({_fmt(100 * worst, 3)}% of pairs have neither "
                      "label in the top-20).\n")

    md.append("\n## 3. Validation: outcome on (U-D), entity and period fixed effects\n\n")
    md.append(_coef_table(results, [("pooled", "validation_pooled", "pre"),
                                    ("high LAP", "validation_high_lap", "pre"),
                                    ("low LAP", "validation_low_lap", "pre")], ["ud"],
                          two_sided=True, draws=draws))
    md.append("\nTheta is per unit of U-D in this table. High- minus low-LAP theta (one "
              "regression: outcome on ud and ud x high_lap with entity x half and period x half "
              "fixed effects, ud in sd units of its own half, so ud is the low-LAP theta and "
              "ud:high_lap is theta_high - theta_low, both per sd of U-D within its half; "
              "one-sided test of high > low):\n\n")
    md.append(_coef_table(results, [("pre-cutoff", "validation_difference", "pre")],
                          ["ud", "ud:high_lap"], one_sided="ud:high_lap", draws=draws))
    f = outcome.facts
    md.append("\n" + markdown_table(pd.DataFrame([
        ("high-LAP theta per sd of U-D (ud + ud:high_lap)", fmt_num(f.theta_high_sd)),
        ("low-LAP theta per sd of U-D (ud)", fmt_num(f.theta_low_sd)),
        ("difference (ud:high_lap)", fmt_num(f.theta_diff)),
    ], columns=["theta per sd of U-D within its half", "estimate"])))
    md.append("\nExpected under memorization: theta positive and significant on the high-LAP "
              "half, near zero on the low-LAP half. \"Near zero\" is tested, not assumed from "
              "p >= 0.05: the pattern is present when the high-LAP theta is positive with "
              "two-sided p < 0.05 and exceeds the low-LAP theta per sd of U-D with one-sided "
              f"p < 0.05 (docs/verdict.md). Here: {validation_text(outcome)}.\n")

    md.append("\n## 4. Detection: outcome on mu_hat, LAP and mu_hat x LAP, pre-cutoff\n\n")
    md.append(_coef_table(results, [("pre-cutoff", "detection", "pre")],
                          ["mu_hat", "lap", "mu_hat:lap"], one_sided="mu_hat:lap", draws=draws))
    b3 = outcome.tests["beta3"]
    md.append("\nbeta_3 is the coefficient on mu_hat:lap; the test is one-sided for beta_3 > 0 "
              "(p/2 when t > 0, else 1 - p/2). Beside CRV1 stands the restricted wild cluster "
              "bootstrap p (wildboottest; " + _wild_label(results) + "); the verdict reads it "
              f"when a regression has fewer than {f.wild_min_clusters} clusters "
              f"(here it read: {b3.p_phrase()}; t test on {fmt_num(f.beta3_df)} degrees of "
              f"freedom). Minimum detectable beta_3 (one-sided 5% test, 80% power): "
              f"{fmt_num(mde(f))}.\n")

    md.append("\n## 5. Placebo: post-cutoff sample\n\n")
    if f.placebo_feasible:
        md.append(_coef_table(results, [("post-cutoff", "detection", "post")],
                              ["mu_hat", "lap", "mu_hat:lap"], one_sided="mu_hat:lap", draws=draws))
        md.append("\n" + _coef_table(results, [("pooled", "validation_pooled", "post"),
                                             ("high LAP", "validation_high_lap", "post"),
                                             ("low LAP", "validation_low_lap", "post")], ["ud"],
                                      two_sided=True, draws=draws))
    md.append(f"\nPlacebo: {placebo_text(outcome)}. (It passes when the one-sided p for beta_3 "
              f"> 0 is above {PLACEBO_PASS_P:g}, or when post-cutoff LAP has collapsed so that "
              "beta_3 is not estimable: nothing is left for LAP to proxy.)\n")

    md.append("\n## 6. Verdict\n\n")
    md.append(f"**{outcome.decision}.** {reason(outcome)}\n\n")
    md.append(cutoff_warning)
    md.append(f"Decision path: `{outcome.path}` ({PATHS[outcome.path][1]}; every path and its "
              "wording: docs/verdict.md).\n\n")
    md.append(_robustness_section(_read(results_dir, "lap_robustness"), study.measures.lap_measure))
    md.append(f"Decision rule (protocol, word for word): {verdict['decision_rule']}\n\n")
    md.append("Choices where the protocol is silent (docs/verdict.md): the LAP-variation rule "
              "qualifies only a null result; meaningful variation is sd >= 0.01 for recall LAP "
              "and sd >= 1% of mean |LAP| for Min-K% LAP; the validation pattern tests "
              "high-LAP minus low-LAP theta per sd of U-D; a collapsed post-cutoff LAP passes "
              "the placebo; with few clusters the tests use the wild cluster bootstrap "
              f"p-values. Units: {UNITS_RULE}\n")
    table5 = _read(results_dir, TABLE5_READING)
    if len(table5):
        md.append("\n" + table5_reading(table5.iloc[0]) + "\n")
    if f.approximated:
        md.append("\n**All results are approximated**: recall probabilities come from the sampling "
                  "fallback (answer frequencies), not token log-probabilities.\n")

    md.append(cutoff_section(results_dir, study))
    if len(gx):
        md.append(f"\n## Data-quality gates\n\nAll {len(gx)} Great Expectations checks passed "
                  "(`gx_validation_results.csv`).\n")
    md.append(extra_sections)
    return "".join(md), outcome.decision


def refuse(study: Study, database: Path, why: str) -> None:
    """Raise ReportError after retiring the results folder's report set (every file the
    last report wrote, lookahead.artefacts) and marking the database's verdict row stale:
    a result that is not current is presented nowhere (README, "Current means current")."""
    moved = retire_study(study, why)
    marked = mark_stale(database, why)
    where = []
    if moved:
        where.append(f"the old report moved to {study.results_dir / 'stale'}")
    if marked:
        where.append("the verdict table marked stale (result_status)")
    raise ReportError(f"{why}; no report written" + (f" ({'; '.join(where)})" if where else ""))


def write_report(study: Study, database: Path | None = None,
                 extra: Callable[[duckdb.DuckDBPyConnection, Path], str] | None = None) -> ReportFiles:
    """Export CSVs, Stata files and REPORT.md for a built study, after checking that the
    database's verdict is this study's current result (lookahead.identity).

    The whole set is written into staging folders and swapped in at once
    (lookahead.artefacts.write_artefact_set): a kill or a failure leaves the old set or
    the new one, never old and new files side by side."""
    database = database or study.database
    check_output_folders(study)
    if not database.exists():
        refuse(study, database, f"study database {database} not found: run `dbt build` first")
    held = held_by(database)
    if held:
        refuse(study, database, held)
    results_dir, outputs_dir = study.results_dir, study.outputs_dir
    out: dict[str, object] = {}

    def produce(stage: Path, panels: Path) -> None:
        con = duckdb.connect(str(database), read_only=True)
        try:
            check_current(con, study)  # StaleResultError: nothing swapped, the old set retired below
            status = con.sql("select result_status from verdict").fetchone() if "result_status" in {
                r[0] for r in con.sql("describe verdict").fetchall()} else None
            export_tables(con, stage)
            panel_pre = con.sql("select * from panel_pre").df()
            panel_post = con.sql("select * from panel_post").df()
            settings = StatsSettings.from_frame(con.sql("select * from study_settings").df())
            extra_md = extra(con, stage) if extra else ""
        finally:
            con.close()
        out["status"] = status
        export_stata_panels(panel_pre, panel_post, panels)
        # the do-file names the folders the files will be in, not the staging folders
        write_stata_do_file(stage / "reghdfe.do", settings, panel_pre, panel_post,
                            panel_dir=str(outputs_dir), results_dir=str(results_dir))
        text, out["verdict"] = render(stage, extra_md)
        (stage / "REPORT.md").write_text(text, encoding="utf-8")

    try:
        files = write_artefact_set(Folders.of(study), "a new report replaced them", produce)
    except StaleResultError as exc:
        refuse(study, database, str(exc))
    except duckdb.IOException as err:  # the database was taken by another process meanwhile
        refuse(study, database, held_by(database) or f"cannot read {database}: {str(err).splitlines()[0]}")
    status = out.get("status")
    if status is not None and status[0] != COMPLETE:  # type: ignore[index] # current again (e.g. an edit undone)
        mark_stale(database, "", mark=COMPLETE)
    report = results_dir / "REPORT.md"
    csvs = [f for f in files if f.suffix == ".csv" and f.parent == results_dir]
    stata = [f for f in files if f.suffix in (".dta", ".do")]
    return ReportFiles(report=report, csvs=csvs, stata=stata, verdict=str(out["verdict"]))
