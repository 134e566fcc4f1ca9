"""`dbt build` on fixture studies: the happy path, the gates, and bad input.

Fixtures are written by tests/python/fixture_study.py in the raw-JSONL contract; the
real LLM jobs have their own tests."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest

from dbt_runner import run_dbt
from fixture_study import write_fixture_study


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    study = write_fixture_study(root)
    res = run_dbt(["build"], study.vars, root / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    return study, res


def test_build_passes_and_writes_every_table(built):
    _, res = built
    for table in ("panel", "panel_pre", "panel_post", "regression_results", "verdict",
                  "gx_validation_results", "lap_distribution", "sample_description"):
        assert res.has_table(table), table
    assert "ERROR=0" in res.output


def test_panel_keeps_one_row_per_valid_row_and_row_id(built):
    study, res = built
    panel = res.table("panel")
    source = pd.read_csv(study.data_path)
    assert sorted(panel["row_id"]) == sorted(source["row_id"])
    assert panel["mu_hat"].notna().all() and panel["lap"].notna().all()
    counts = res.table("merge_row_counts")
    assert (counts["n_rows"] == len(source)).all()


def test_recall_probabilities_follow_the_protocol_rule(built):
    """P(label) recomputed in Python from the raw lines equals the SQL staging result."""
    study, res = built
    recall = res.table("stg_recall_responses").set_index("key")
    with open(study.raw_dir / "recall.jsonl") as fh:
        for line in list(fh)[:200]:
            raw = json.loads(line)
            seen: dict = {}
            for tok in raw["top_logprobs"]:
                seen.setdefault(tok["token_id"], tok)
            p = {lab: sum(math.exp(t["logprob"]) for t in seen.values()
                          if t["token"].strip().lower() == lab) for lab in ("up", "down", "unknown")}
            row = recall.loc[raw["key"]]
            assert row["p_up"] == pytest.approx(p["up"], abs=1e-12)
            assert row["p_down"] == pytest.approx(p["down"], abs=1e-12)
            assert row["lap"] == pytest.approx(p["up"] + p["down"], abs=1e-12)
            assert row["ud"] == pytest.approx(p["up"] - p["down"], abs=1e-12)


def test_mink_matches_a_direct_computation(built):
    study, res = built
    mink = res.table("stg_mink_scores").set_index("key")
    with open(study.raw_dir / "mink.jsonl") as fh:
        for line in list(fh)[:100]:
            raw = json.loads(line)
            lps = sorted(t["logprob"] for t in raw["prompt_logprobs"] if t["logprob"] is not None)
            k = max(1, int(len(lps) * 0.2))
            assert mink.loc[raw["key"], "lap_mink_geometric"] == pytest.approx(math.exp(sum(lps[:k]) / k))
            assert mink.loc[raw["key"], "lap_mink_arithmetic"] == pytest.approx(
                sum(math.exp(x) for x in lps[:k]) / k)


def test_high_lap_splits_each_sample_at_its_median(built):
    _, res = built
    panel = res.table("panel")
    for _, part in panel.groupby("sample"):
        med = part["lap"].median()
        assert ((part["lap"] > med).astype(int) == part["high_lap"]).all()


def test_contaminated_fixture_is_detected(built):
    _, res = built
    assert res.table("verdict")["verdict"].iloc[0] == "Contamination detected"


def _broken_copy(tmp_path, study, mutate):
    import shutil

    target = tmp_path / "broken"
    shutil.copytree(study.root, target, ignore=shutil.ignore_patterns("*.duckdb*", "logs", "target"))
    vars_ = {**study.vars, "data_path": str(target / "observations.csv"), "raw_dir": str(target / "raw")}
    mutate(target)
    return vars_, target


def test_duplicated_recall_pair_fails_at_the_gate(built, tmp_path):
    study, _ = built

    def dup(target):
        lines = (target / "raw" / "recall.jsonl").read_text().splitlines(keepends=True)
        with open(target / "raw" / "recall.jsonl", "a") as fh:
            fh.writelines(lines[:2])

    vars_, target = _broken_copy(tmp_path, study, dup)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert "GX gate 'gate_recall_pairs' failed" in res.output
    assert "expect_compound_columns_to_be_unique" in res.output
    assert not res.has_table("regression_results") and not res.has_table("verdict")


def test_bad_logprobs_fail_at_the_gates(built, tmp_path):
    """A NaN prompt log-prob (it would sort above every number and drop out of the lowest
    K%), a +5 on a non-label recall token (P above 1 elsewhere in the line) and a NaN
    first-token probability stop the build at the gates and tests, naming the check."""
    study, _ = built

    def poison(target):
        for task, field, value, index in (("mink", "prompt_logprobs", float("nan"), 3),
                                          ("recall", "top_logprobs", 5.0, -1)):
            path = target / "raw" / f"{task}.jsonl"
            lines = [json.loads(x) for x in path.read_text().splitlines()]
            lines[7][field][index]["logprob"] = value
            path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        path = target / "raw" / "forecast.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        lines[7]["first_token_prob"] = float("nan")  # from a NaN log-prob of the first token
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))

    vars_, target = _broken_copy(tmp_path, study, poison)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert "GX gate 'gate_mink_scores' failed" in res.output
    assert "GX gate 'gate_recall_pairs' failed" in res.output
    assert "expect_column_values_to_be_between(n_invalid_logprobs)" in res.output
    assert "Failure in test expression_is_true_stg_forecast_responses_first_token_prob" in res.output
    assert not res.has_table("regression_results") and not res.has_table("verdict")


def test_dropped_forecast_line_fails_at_the_gate(built, tmp_path):
    study, _ = built

    def drop(target):
        path = target / "raw" / "forecast.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:10] + lines[11:]))

    vars_, target = _broken_copy(tmp_path, study, drop)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert "GX gate 'gate_panel' failed" in res.output
    assert "expect_column_values_to_not_be_null(forecast_key)" in res.output
    assert not res.has_table("regression_results")


def test_invalid_rows_are_rejected_with_reasons_and_counted(built, tmp_path):
    study, _ = built
    bad = {
        "target_date not after text_date": {"target_date": "2021-01-01"},
        "non-numeric outcome": {"outcome": "n/a"},
        "non-finite outcome": {"outcome": "inf"},
        "missing entity_name": {"entity_name": "\t"},
        "ambiguous text_date": {"text_date": "10/05/2021"},
        "missing outcome": {"outcome": ""},
        "empty text": {"text": "   "},
        "unparseable text_date": {"text_date": "someday"},
        "unparseable target_date": {"target_date": "2021-13-45"},
    }

    def corrupt(target):
        df = pd.read_csv(target / "observations.csv", dtype=str, keep_default_na=False)
        for i, change in enumerate(bad.values()):
            for col, value in change.items():
                df.loc[i, col] = value
        df.to_csv(target / "observations.csv", index=False)

    vars_, target = _broken_copy(tmp_path, study, corrupt)
    res = run_dbt(["run", "--select", "+rejected_rows", "+sample_description"],
                  vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    rejects = res.table("rejected_rows").sort_values("source_row_number")
    assert list(rejects["reject_reason"]) == list(bad)
    desc = dict(zip(*res.table("sample_description")[["metric", "value"]].T.values))
    assert desc["rejected rows"] == len(bad)
    for reason in bad:
        assert desc[f"rejected: {reason}"] == 1


def _one_error_line(output: str, pattern: str) -> None:
    assert re.search(pattern, output), output[-2000:]
    assert "Traceback" not in output


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"column_map": {"entity_id": "entity_id", "entity_name": "entity_name", "text": "headline",
                         "text_date": "text_date", "target_date": "target_date", "outcome": "outcome"}},
         r"setting 'column_map.text': column 'headline' not found"),
        ({"training_cutoff": "2021-02-30"}, r"setting 'training_cutoff': '2021-02-30' is not a date"),
        ({"period_frequency": "fortnight"}, r"setting 'period_frequency': 'fortnight' is not one of"),
        ({"data_path": "/nonexistent/obs.csv"}, r"setting 'data_path': file '/nonexistent/obs.csv' not found"),
    ],
)
def test_bad_settings_give_one_clear_error(built, tmp_path, change, pattern):
    study, _ = built
    res = run_dbt(["build"], {**study.vars, **change}, tmp_path / "db.duckdb")
    assert res.returncode != 0
    _one_error_line(res.output, pattern)


def test_empty_file_is_a_clear_error(built, tmp_path):
    study, _ = built
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    res = run_dbt(["build"], {**study.vars, "data_path": str(empty)}, tmp_path / "db.duckdb")
    assert res.returncode != 0
    _one_error_line(res.output, r"setting 'data_path': file '.*empty.csv' is empty")


def test_duplicate_row_id_is_an_error(built, tmp_path):
    study, _ = built

    def dup(target):
        df = pd.read_csv(target / "observations.csv", dtype=str)
        df.loc[1, "row_id"] = df.loc[0, "row_id"]
        df.to_csv(target / "observations.csv", index=False)

    vars_, target = _broken_copy(tmp_path, study, dup)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    _one_error_line(res.output, r"setting 'column_map.row_id': column 'row_id' is not unique: "
                                r"value '[^']+' appears 2 times \(data rows 1, 2\)")
    assert not res.has_table("regression_results")


def test_docs_generate(built, tmp_path):
    study, _ = built
    res = run_dbt(["docs", "generate"], study.vars, tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]


def test_derived_row_ids_agree_between_jobs_and_dbt(built, tmp_path):
    """Without a row_id column, the jobs (lookahead.rows) and staging derive the same ids,
    so raw lines merge back onto their rows."""
    from lookahead.config import load_study
    from lookahead.rows import load_rows

    study, _ = built

    def strip_ids(target):
        df = pd.read_csv(target / "observations.csv", dtype=str, keep_default_na=False)
        df = df.drop(columns=["row_id"])
        df.loc[0, "entity_id"] = " " + df.loc[0, "entity_id"]  # stray spaces are hashed as written
        df.loc[1, "text"] = df.loc[1, "text"] + "  "
        df.to_csv(target / "observations.csv", index=False)

    vars_, target = _broken_copy(tmp_path, study, strip_ids)
    vars_["column_map"] = {"row_id": None, "entity_id": "entity_id", "entity_name": "entity_name",
                           "ticker": "ticker", "text": "text", "text_date": "text_date",
                           "target_date": "target_date", "outcome": "outcome"}
    res = run_dbt(["run", "--select", "stg_observations"], vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    sql_ids = res.table("stg_observations").sort_values("source_row_number")["row_id"].tolist()
    valid, _ = load_rows(load_study(overrides=vars_))
    assert valid["row_id"].tolist() == sql_ids
    assert len(set(sql_ids)) == len(sql_ids)


def test_lines_of_an_earlier_prompt_are_ignored(built, tmp_path):
    """A changed prompt means new keys; the old lines stay in the cache but only the
    current template's lines (params.template_sha256) reach the panel."""
    study, res_ok = built

    def add_stale(target):
        path = target / "raw" / "forecast.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()[:5]]
        with open(path, "a") as fh:
            for line in lines:
                line.update(key="stale-" + line["key"], response_text="Down" if "Up" in line["response_text"] else "Up",
                            params={"temperature": 0, "template_sha256": "0" * 64})
                fh.write(json.dumps(line) + "\n")

    vars_, target = _broken_copy(tmp_path, study, add_stale)
    res = run_dbt(["run", "--select", "+panel"], vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    new = res.table("panel").set_index("row_id")["mu_hat"]
    old = res_ok.table("panel").set_index("row_id")["mu_hat"]
    assert new.sort_index().equals(old.sort_index())


def test_optional_stats_settings_reach_the_regressions(built, tmp_path):
    """nw_lag and lap_min_sd are dbt vars recorded in study_settings, which is where the
    regression and verdict models read their settings from."""
    from lookahead.stats.protocol import StatsSettings

    study, res_ok = built
    assert StatsSettings.from_frame(res_ok.table("study_settings")).nw_lag is None
    res = run_dbt(["run", "--select", "study_settings"], {**study.vars, "nw_lag": 3, "lap_min_sd": 0.02},
                  tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    settings = StatsSettings.from_frame(res.table("study_settings"))
    assert settings.nw_lag == 3 and settings.lap_min_sd == 0.02


def test_analyses_compile_and_answer_on_the_lap_tables(built):
    """analyses/ compile against the built study and give what they say: LAP by entity and
    month equals a pandas group-by of the panel; rejected rows by reason are empty here."""
    import duckdb

    study, res = built
    out = run_dbt(["compile", "--select", "resource_type:analysis"], study.vars, res.db)
    assert out.returncode == 0, out.output[-2000:]
    compiled = res.db.parent / "target" / "compiled" / "lookahead_bias" / "analyses"
    con = duckdb.connect(str(res.db), read_only=True)
    try:
        by_month = con.sql((compiled / "lap_by_entity_month.sql").read_text()).df()
        failures = con.sql((compiled / "forecast_parse_failures.sql").read_text()).df()
        rejected = con.sql((compiled / "rejected_rows_by_reason.sql").read_text()).df()
    finally:
        con.close()
    panel = res.table("panel")
    panel["target_month"] = pd.to_datetime(panel["target_date"]).dt.strftime("%Y-%m")
    expect = panel.groupby(["entity_id", "target_month", "sample"])["lap"].agg(["mean", "size"])
    got = by_month.set_index(["entity_id", "target_month", "sample"]).sort_index()
    assert len(got) == len(expect)
    assert (got["n_rows"].to_numpy() == expect["size"].to_numpy()).all()
    assert got["mean_lap"].to_numpy() == pytest.approx(expect["mean"].to_numpy(), abs=1e-12)
    assert len(failures) == int((panel["parse_status"] != "parsed").sum())
    assert rejected.empty


def test_header_only_input_stops_the_build_at_a_named_check(built, tmp_path):
    study, _ = built

    def header_only(target):
        path = target / "observations.csv"
        path.write_text(path.read_text().splitlines()[0] + "\n")

    vars_, target = _broken_copy(tmp_path, study, header_only)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert "Failure in test assert_input_has_data_rows" in res.output
    assert not res.has_table("panel") and not res.has_table("verdict")


def test_a_subsampled_study_builds_and_the_report_says_so(built, tmp_path):
    """subsample_rows/subsample_seed pick the same rows as the jobs (lookahead.rows), the
    build passes on them alone, and study_settings, sample_description and REPORT.md
    say the report describes a subsample."""
    from lookahead.config import load_study
    from lookahead.report import write_report
    from lookahead.rows import load_rows

    study, _ = built
    vars_ = {**study.vars, "subsample_rows": 300, "subsample_seed": 9,
             "results_dir": str(tmp_path / "results"), "outputs_dir": str(tmp_path / "outputs")}
    res = run_dbt(["build"], vars_, tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    job_rows, _ = load_rows(load_study(overrides=vars_))
    panel = res.table("panel")
    assert len(panel) == 300 and sorted(panel["row_id"]) == sorted(job_rows["row_id"])
    settings = res.table("study_settings").iloc[0]
    assert (settings["subsample_rows"], settings["subsample_seed"]) == (300, 9)
    desc = dict(zip(*res.table("sample_description")[["metric", "value"]].T.values))
    n_valid = len(pd.read_csv(study.data_path))
    assert desc["valid rows outside the subsample"] == n_valid - 300
    files = write_report(load_study(overrides=vars_), database=res.db)
    text = files.report.read_text()
    assert f"analyses a seeded random subsample: 300 of {n_valid} valid rows" in text
