"""`dbt build` on fixture studies: the happy path, the gates, and bad input.

Fixtures are written by tests/python/fixture_study.py in the raw-JSONL contract; the
real LLM jobs have their own tests."""

from __future__ import annotations

import json
import math
import re
import shutil

import duckdb
import pandas as pd
import pytest
from dbt_runner import ROOT, declared_unit_tests, run_dbt

from lookahead.children import failed_column_rules
from lookahead.cli import say_build_failed


@pytest.fixture(scope="module")
def built(fixture_build):
    """The default fixture study's build, shared with other files (tests/conftest.py)."""
    fixture_build.check_unchanged()
    return fixture_build.study, fixture_build.result


def test_build_passes_and_writes_every_table(built):
    _, res = built
    for table in (
        "panel",
        "panel_pre",
        "panel_post",
        "regression_results",
        "verdict",
        "gx_validation_results",
        "lap_distribution",
        "sample_description",
    ):
        assert res.has_table(table), table
    assert "ERROR=0" in res.output


def test_the_shared_build_runs_every_unit_test_of_the_project(built):
    """The suite's other builds leave dbt's unit tests out (dbt_runner.run_dbt's
    ``unit_tests``); this build runs each one the project declares on a model it builds
    (the claim models' are left out with them: a study without claim settings; the
    README's plain `dbt build` runs those, test_readme_data_team.py), and each passes."""
    _, res = built
    results = json.loads((res.db.parent / "target" / "run_results.json").read_text())["results"]
    ran = {r["unique_id"].rsplit(".", 1)[1]: r["status"] for r in results if r["unique_id"].startswith("unit_test.")}
    built_models = {r["unique_id"].rsplit(".", 1)[1] for r in results if r["unique_id"].startswith("model.")}
    declared = {name for model, name in declared_unit_tests() if model in built_models}
    assert len(declared) >= 8 and set(ran) == declared
    assert set(ran.values()) == {"pass"}


def test_report_tables_list_pre_before_post(built):
    """The report prints these tables as stored: pre first on every build."""
    _, res = built
    for table in ("sample_period", "recall_censoring"):
        assert list(res.table(table)["sample"]) == ["pre", "post"], table


def assert_build_keys_are_the_jobs(res, vars_) -> None:
    """The build's int_expected_keys (keyed from stg_observations) is the key table the
    jobs compute from the input file (lookahead.rows.load_rows)."""
    from lookahead.config import load_study
    from lookahead.keys import expected_keys
    from lookahead.rows import load_rows

    study = load_study(overrides=vars_)
    jobs = expected_keys(study, load_rows(study)[0]).to_pandas()
    cols = list(jobs.columns)
    build = res.table("int_expected_keys")[cols]
    assert len(jobs) > 0
    assert (
        build.fillna("").sort_values(cols).reset_index(drop=True).equals(jobs.fillna("").sort_values(cols).reset_index(drop=True))
    )


def test_build_keys_are_the_keys_the_jobs_compute(built):
    study, res = built
    assert_build_keys_are_the_jobs(res, study.vars)


def test_panel_keeps_one_row_per_valid_row_and_row_id(built):
    study, res = built
    panel = res.table("panel")
    source = pd.read_csv(study.data_path)
    assert sorted(panel["row_id"]) == sorted(source["row_id"])
    assert panel["mu_hat"].notna().all() and panel["lap"].notna().all()
    counts = res.table("merge_row_counts")
    assert (counts["n_rows"] == len(source)).all()


def test_relationships_test_still_catches_an_unknown_parent_value(built, tmp_path):
    """The project's relationships test (macros/generic_tests.sql) compares with each
    parent value once: on the built panel it passes, and a panel entity that no valid row
    has makes it fail, naming the one offending row."""
    study, res = built
    db = tmp_path / "db.duckdb"
    shutil.copy(res.db, db)
    select = ["test", "--select", "test_name:relationships,panel"]
    ok = run_dbt(select, study.vars, db)
    assert ok.returncode == 0 and "1 of 1 PASS relationships_panel_entity_id" in ok.output, ok.output[-2000:]
    con = duckdb.connect(str(db))
    con.execute("update panel set entity_id = 'no such entity' where row_id = (select min(row_id) from panel)")
    con.close()
    broken = run_dbt(select, study.vars, db)
    assert broken.returncode != 0
    assert re.search(r"Got 1 result, configured to fail if != 0", broken.output), broken.output[-2000:]


def test_column_rules_name_each_rule_and_column_that_fails(built, tmp_path):
    """The project's column_rules test (macros/generic_tests.sql: a model's not_null,
    unique and accepted_values rules, one query) passes on the built panel, and fails with
    one result per rule and column that breaks, with how many rows break it: two listed
    columns get a null, a third (not listed) a null too, one row_id is repeated, one
    sample is neither pre nor post, and a high_lap turns null (which accepted_values
    lets pass, as dbt's own test does). Each count is checked against the edit."""
    study, res = built
    db = tmp_path / "db.duckdb"
    shutil.copy(res.db, db)
    select = ["test", "--select", "test_name:column_rules,panel", "--store-failures"]
    ok = run_dbt(select, study.vars, db)
    assert ok.returncode == 0 and re.search(r"1 of 1 PASS column_rules_panel\b", ok.output), ok.output[-2000:]
    con = duckdb.connect(str(db))
    rows = [r[0] for r in con.execute("select row_id from panel order by row_id limit 4").fetchall()]
    con.execute("update panel set outcome = null where row_id = ?", [rows[0]])
    con.execute("update panel set period = null, entity_name = null where row_id = ?", [rows[1]])
    con.execute("update panel set row_id = ? where row_id = ?", [rows[3], rows[2]])
    con.execute("update panel set sample = 'neither', high_lap = null where row_id = ?", [rows[0]])
    con.close()
    broken = run_dbt(select, study.vars, db)
    assert broken.returncode != 0
    assert re.search(r"Got 4 results, configured to fail if != 0", broken.output), broken.output[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    try:
        (table,) = con.execute(
            "select table_schema || '.' || table_name from information_schema.tables where table_name like 'column_rules_panel%'"
        ).fetchone()
        failed = {(r, c): n for r, c, n in con.execute(f"select rule, column_name, failing_rows from {table}").fetchall()}
    finally:
        con.close()
    assert failed == {
        ("not_null", "outcome"): 1,
        ("not_null", "period"): 1,
        ("unique", "row_id"): 1,
        ("accepted_values", "sample"): 1,
    }


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
            p = {
                lab: sum(math.exp(t["logprob"]) for t in seen.values() if t["token"].strip().lower() == lab)
                for lab in ("up", "down", "unknown")
            }
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
            assert mink.loc[raw["key"], "lap_mink_arithmetic"] == pytest.approx(sum(math.exp(x) for x in lps[:k]) / k)


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


def test_dropped_forecast_line_fails_at_the_gate_and_leaves_no_verdict(built, tmp_path):
    """A forecast answer missing from the cache stops the build at gate_panel; a failed
    build over a database that held a verdict leaves no verdict behind, logs the failure,
    and the report refuses with one line naming it. (A duplicated raw line no longer
    fails a gate: the cache may hold one answer in several shards, and staging reads it
    once; tests/python/test_cache_shards.py.)"""
    from lookahead.config import Study, resolve
    from lookahead.pages.report import ReportError, write_report

    study, res_ok = built

    def drop(target):
        path = target / "raw" / "forecast.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:10] + lines[11:]))

    vars_, target = _broken_copy(tmp_path, study, drop)
    shutil.copy(res_ok.db, target / "db.duckdb")  # the previous, good build's tables
    # the copy reads another data file, which identifies another study (lookahead/collision.py):
    # --full-refresh asks to replace the good build's results
    res = run_dbt(["build", "--full-refresh"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert "GX gate 'gate_panel' failed" in res.output
    assert "expect_column_values_to_not_be_null(forecast_key)" in res.output
    for table in ("regression_results", "verdict", "paper_tables", "gx_validation_results"):
        assert not res.has_table(table), table
    log = res.table("build_log").sort_values("finished_at")
    assert list(log["status"]) == ["started", "success", "started", "failed"]  # on-run-start, on-run-end
    assert "gate_panel" in log["failed_nodes"].iloc[-1]
    with pytest.raises(ReportError, match=r"the last dbt build of study 'fixture' .* failed at .*gate_panel"):
        write_report(Study(vars=resolve({**vars_, "results_dir": str(target / "results")})), database=target / "db.duckdb")
    # and `lookahead run` rebuilds: a failed last build is never "up to date"
    from lookahead.identity import build_up_to_date

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOOKAHEAD_DUCKDB", str(target / "db.duckdb"))
        assert build_up_to_date(Study(vars=resolve(vars_))) == (None, "the last build failed")


def test_report_refuses_a_verdict_built_from_other_inputs(built, tmp_path):
    """The verdict records its build (invocation id, settings hash, file fingerprints);
    an edited input, new answers or another setting make it stale for the report."""
    from lookahead.config import Study, resolve
    from lookahead.pages.report import ReportError, write_report

    study, res_ok = built
    verdict = res_ok.table("verdict").iloc[0]
    assert verdict["invocation_id"] == res_ok.table("build_identity")["invocation_id"].iloc[0]
    here = Study(vars=resolve(study.vars))
    assert verdict["settings_hash"] == here.settings_hash
    assert verdict["data_fingerprint"].startswith("sha256:")

    db = tmp_path / "db.duckdb"
    shutil.copy(res_ok.db, db)
    here = Study(vars=resolve({**study.vars, "results_dir": str(tmp_path / "results")}))
    assert write_report(here, database=db).verdict == verdict["verdict"]  # current: written
    saved = {p: p.read_bytes() for p in (study.data_path, study.raw_dir / "mink.jsonl")}
    try:
        with open(study.raw_dir / "mink.jsonl", "a") as fh:  # answers added since the build
            fh.write(saved[study.raw_dir / "mink.jsonl"].decode().splitlines(keepends=True)[0])
        with pytest.raises(
            ReportError,
            match=r"other inputs: the mink answers \(1 new line in mink.jsonl "
            r"for keys this study reads\) changed since dbt build",
        ):
            write_report(here, database=db)
        study.data_path.write_bytes(saved[study.data_path].replace(b"Entity 0 news 0", b"Entity 0 news 0!"))
        with pytest.raises(ReportError, match=r"other inputs: the input file, the mink answers \(1 new line"):
            write_report(here, database=db)
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
    with pytest.raises(ReportError, match="other inputs: the study settings changed"):
        write_report(Study(vars=resolve({**here.vars, "cluster": "date"})), database=db)


def test_bad_logprobs_fail_at_the_gates(built, tmp_path, monkeypatch, capsys):
    """A NaN prompt log-prob (it would sort above every number and drop out of the lowest
    K%), a +5 on a non-label recall token (P above 1 elsewhere in the line) and a NaN
    first-token probability stop the build at the gates and tests, naming the check."""
    study, _ = built

    def poison(target):
        for task, field, value, index in (("mink", "prompt_logprobs", float("nan"), 3), ("recall", "top_logprobs", 5.0, -1)):
            path = target / "raw" / f"{task}.jsonl"
            lines = [json.loads(x) for x in path.read_text().splitlines()]
            lines[7][field][index]["logprob"] = value
            path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        path = target / "raw" / "forecast.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        lines[7]["first_token_prob"] = float("nan")  # from a NaN log-prob of the first token
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))

    vars_, target = _broken_copy(tmp_path, study, poison)
    res = run_dbt(["build"], vars_, target / "db.duckdb", artifacts=True)  # run_results.json: read below
    assert res.returncode != 0
    assert "GX gate 'gate_mink_scores' failed" in res.output
    assert "GX gate 'gate_recall_pairs' failed" in res.output
    assert "expect_column_values_to_be_between(n_invalid_logprobs)" in res.output
    # the staging model's column rules fail, and their query, which `lookahead run` reads
    # back after a failed build (lookahead.children.failed_column_rules), names the rule
    # and the column: the NaN first-token probability, one row outside [0, 1]
    assert re.search(r"Failure in test column_rules_stg_forecast_responses\b", res.output), res.output[-3000:]
    # what `lookahead run` and `lookahead build` print after it (dbt's target folder found
    # as theirs is, by $DBT_TARGET_PATH)
    target_dir = res.db.parent / "target"
    monkeypatch.setenv("DBT_TARGET_PATH", str(target_dir))
    say_build_failed(res.db, since=0.0)
    assert capsys.readouterr().err.splitlines()[1:] == ["  stg_forecast_responses.first_token_prob: 1 row breaks accepted_range"]
    # results older than the command (one that failed before writing its own) are not read
    assert failed_column_rules(res.db, target_dir, since=(target_dir / "run_results.json").stat().st_mtime + 1) == []
    assert not res.has_table("regression_results") and not res.has_table("verdict")


def test_a_failed_rules_query_read_back_can_only_read_the_database(tmp_path):
    """failed_column_rules runs a query read from run_results.json: one planted there that
    would write a file (or read one) is refused and prints nothing; a plain select of the
    database's tables is read."""
    db = tmp_path / "db.duckdb"
    con = duckdb.connect(str(db))
    con.execute("create table panel as select 1 as row_id")
    con.close()
    acted = tmp_path / "acted.csv"
    queries = {
        "column_rules_panel.a": "select 'unique' as rule, 'row_id' as column_name, count(*) as n from panel",
        "column_rules_copy.b": f"copy (select 'unique', 'x', 1) to '{acted}'",
        "column_rules_read.c": f"select 'unique', 'x', count(*) from read_csv('{db}')",
    }
    (tmp_path / "run_results.json").write_text(
        json.dumps({"results": [{"unique_id": f"test.p.{k}", "status": "fail", "compiled_code": q} for k, q in queries.items()]})
    )
    assert failed_column_rules(db, tmp_path) == ["panel.row_id: 1 row breaks unique"]
    assert not acted.exists()


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
        "text too long": {"text": "a long line " * 10_000},
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
    res = run_dbt(["run", "--select", "+rejected_rows", "+sample_description"], vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    rejects = res.table("rejected_rows").sort_values("source_row_number")
    assert list(rejects["reject_reason"]) == list(bad)
    desc = dict(zip(*res.table("sample_description")[["metric", "value"]].T.values, strict=False))
    assert desc["rejected rows"] == len(bad)
    for reason in bad:
        assert desc[f"rejected: {reason}"] == 1
    # the build log records the command and the selection: a `dbt run` of a part is no
    # complete build, so `lookahead run` does not skip the next one
    from lookahead.config import Study, resolve
    from lookahead.identity import build_up_to_date

    last = res.table("build_log").iloc[-1]
    assert (last["command"], last["selection"]) == ("run", "--select +rejected_rows +sample_description")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOOKAHEAD_DUCKDB", str(target / "db.duckdb"))
        assert build_up_to_date(Study(vars=resolve(vars_)))[1] == (
            "the last build was `dbt run` --select +rejected_rows +sample_description, not a full dbt build"
        )


def _one_error_line(output: str, pattern: str) -> None:
    assert re.search(pattern, output), output[-2000:]
    assert "Traceback" not in output


@pytest.mark.slow  # four failing dbt starts; the same checks run in Python in test_settings.py
@pytest.mark.parametrize(
    "change, pattern",
    [
        (
            {
                "column_map": {
                    "entity_id": "entity_id",
                    "entity_name": "entity_name",
                    "text": "headline",
                    "text_date": "text_date",
                    "target_date": "target_date",
                    "outcome": "outcome",
                }
            },
            r"setting 'column_map.text': column 'headline' not found",
        ),
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


@pytest.mark.slow  # a dbt start; the reader's 0-byte error is tested in test_rows.py
def test_empty_file_is_a_clear_error(built, tmp_path):
    study, _ = built
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    res = run_dbt(["build"], {**study.vars, "data_path": str(empty)}, tmp_path / "db.duckdb")
    assert res.returncode != 0
    _one_error_line(res.output, r"setting 'data_path': file '.*empty.csv' is empty")


@pytest.mark.slow  # a failing dbt start (~10 s)
def test_duplicate_row_id_is_an_error(built, tmp_path):
    study, _ = built

    def dup(target):
        df = pd.read_csv(target / "observations.csv", dtype=str)
        df.loc[1, "row_id"] = df.loc[0, "row_id"]
        df.to_csv(target / "observations.csv", index=False)

    vars_, target = _broken_copy(tmp_path, study, dup)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    _one_error_line(
        res.output,
        r"setting 'column_map.row_id': column 'row_id' is not unique: "
        r"value '[^']+' appears 2 times \(data rows 1, 2\)",
    )
    assert not res.has_table("regression_results")


@pytest.mark.slow  # a dbt parse and catalog: 10-15 s, and nothing here changes docs
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
    vars_["column_map"] = {
        "row_id": None,
        "entity_id": "entity_id",
        "entity_name": "entity_name",
        "ticker": "ticker",
        "text": "text",
        "text_date": "text_date",
        "target_date": "target_date",
        "outcome": "outcome",
    }
    res = run_dbt(["run", "--select", "+stg_observations"], vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    sql_ids = res.table("stg_observations").sort_values("source_row_number")["row_id"].tolist()
    valid, _ = load_rows(load_study(overrides=vars_))
    assert valid["row_id"].tolist() == sql_ids
    assert len(set(sql_ids)) == len(sql_ids)


def test_answers_are_selected_by_key(built, tmp_path):
    """Only lines whose key the study computes reach the panel: an earlier prompt's lines
    (other keys) stay cached but unused, and a line whose fields disagree with its key is
    rejected (raw_line_rejects), not trusted: one under another row, and one whose key and
    row_id were both rewritten (its query text does not hash to the key)."""
    from lookahead.keys import query_key
    from lookahead.tasks import LOGPROB_TOLERANCE

    study, res_ok = built

    def add_lines(target):
        path = target / "raw" / "forecast.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()[:6]]
        # two answers whose server rounded a log-prob to just above 0 (the job wrote 0):
        # counted in query_issues, which the report prints
        everything = path.read_text().splitlines()
        everything[10:12] = [json.dumps({**json.loads(x), "clamped_logprobs": 1}) for x in everything[10:12]]
        path.write_text("\n".join(everything) + "\n")
        with open(path, "a") as fh:
            for line in lines[:5]:  # answers to an earlier prompt: other keys
                flipped = "Down." if "Up" in line["response_text"] else "Up."
                old_key = query_key("forecast", "fixture-model", line["row_id"], "Earlier prompt", {})
                fh.write(json.dumps({**line, "key": old_key, "response_text": flipped}) + "\n")
            # the current key of row 5 written under another row: fields disagree with the key
            fh.write(json.dumps({**lines[5], "row_id": lines[0]["row_id"], "response_text": "Down."}) + "\n")
            # row 1's answer copied under row 2's key AND row_id, written before row 2's own
            # line: its query text (row 1's) does not hash to the key, so it is not used
            flipped = "Down." if "Up" in lines[2]["response_text"] else "Up."
            fh.write(
                json.dumps(
                    {
                        **lines[1],
                        "key": lines[2]["key"],
                        "row_id": lines[2]["row_id"],
                        "response_text": flipped,
                        "finished_at": "2000-01-01T00:00:00Z",
                    }
                )
                + "\n"
            )

    vars_, target = _broken_copy(tmp_path, study, add_lines)
    res = run_dbt(["run", "--select", "+panel", "+raw_line_rejects", "+query_issues"], vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    issues = res.table("query_issues").set_index(["task", "issue"])["n_queries"].to_dict()
    assert LOGPROB_TOLERANCE == 1e-4  # the bound the issue names
    assert issues == {("forecast", "log-probs in (0, 1e-4] read as 0 (server rounding)"): 2}
    new = res.table("panel").set_index("row_id")["mu_hat"]
    old = res_ok.table("panel").set_index("row_id")["mu_hat"]
    assert new.sort_index().equals(old.sort_index())
    rejects = res.table("raw_line_rejects").sort_values("reject_reason")
    assert rejects["reject_reason"].tolist() == [
        "query text or params do not hash to the key",
        "row or (entity, date) differs from the key",
    ]


def test_each_study_builds_into_its_own_database(built, tmp_path):
    """Two studies one after the other: outputs/<study_name>.duckdb each, each with its
    own settings (the plugin attaches the database named after the study); the first
    reaches dbt as `--vars` (the documented `dbt build --vars`), the second as the
    settings file the lookahead command writes."""
    study, _ = built
    names = [f"pytest_{tmp_path.name}_{i}" for i in range(2)]
    try:
        for i, name in enumerate(names):
            res = run_dbt(
                ["run", "--select", "study_settings"],
                {**study.vars, "study_name": name, "cluster": ["entity", "date"][i]},
                None,
                as_vars=i == 0,
            )
            assert res.returncode == 0, res.output[-2000:]
        for i, name in enumerate(names):
            con = duckdb.connect(str(ROOT / "outputs" / f"{name}.duckdb"), read_only=True)
            got = con.sql("select study_name, cluster from study_settings").fetchall()
            con.close()
            assert got == [(name, ["entity", "date"][i])]
    finally:
        for name in names:
            (ROOT / "outputs" / f"{name}.duckdb").unlink(missing_ok=True)


@pytest.mark.parametrize(
    "case, pattern",
    [
        pytest.param("too few rows", r"too little data: fewer panel rows than min_panel_rows", marks=pytest.mark.slow),
        ("no pre-cutoff rows", r"no pre-cutoff rows: check training_cutoff"),
    ],
)
def test_too_little_data_stops_at_the_gate(built, tmp_path, case, pattern):
    study, _ = built

    vars_, target = _broken_copy(tmp_path, study, lambda target: None)  # header-only input: its own test
    if case == "no pre-cutoff rows":
        vars_["training_cutoff"] = "2000-01-01"
    if case == "too few rows":
        vars_["min_panel_rows"] = 5000
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert re.search(pattern, res.output), res.output[-3000:]
    assert not res.has_table("verdict")


@pytest.mark.slow  # the statistics read settings_json: test_verdict.py checks it without dbt
def test_optional_stats_settings_reach_the_regressions(built, tmp_path):
    """nw_lag and lap_min_sd are dbt vars recorded in study_settings, which is where the
    regression and verdict models read their settings from."""
    from lookahead.stats.protocol import StatsSections

    study, res_ok = built
    assert StatsSections.from_frame(res_ok.table("study_settings")).protocol.nw_lag is None
    res = run_dbt(["run", "--select", "study_settings"], {**study.vars, "nw_lag": 3, "lap_min_sd": 0.02}, tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-2000:]
    settings = StatsSections.from_frame(res.table("study_settings"))
    assert settings.protocol.nw_lag == 3 and settings.protocol.lap_min_sd == 0.02


def test_queries_without_an_answer_stop_at_the_panel_gate(built, tmp_path):
    """A recall key the job could not answer (failures file, no raw line) is reported as
    'no answer (reason)' and stops the build at gate_panel; it is never read as a
    censored answer."""
    study, _ = built

    def fail_one(target):
        path = target / "raw" / "recall.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        gone = json.loads(lines[5])
        path.write_text("".join(lines[:5] + lines[6:]))
        failure = {k: gone[k] for k in ("key", "task", "model_id", "entity_id", "target_date", "params")}
        failure.update(row_id=None, reason="HTTP 500 (after 7 attempts)", attempts=7, failed_at="2026-01-02T00:00:00+00:00")
        answered = dict(failure, key=json.loads(lines[6])["key"], reason="HTTP 429")
        with open(target / "raw" / "recall.failures.jsonl", "w") as fh:
            fh.write(json.dumps(failure) + "\n" + json.dumps(answered) + "\n")
        fpath = target / "raw" / "forecast.jsonl"  # and one prompt cut to fit the context
        recs = [json.loads(x) for x in fpath.read_text().splitlines()]
        recs[3]["params"]["text_truncated_to_chars"] = 120
        fpath.write_text("".join(json.dumps(r) + "\n" for r in recs))

    vars_, target = _broken_copy(tmp_path, study, fail_one)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0
    assert "LLM queries have no answer (recall: 1 x no answer (HTTP 500))" in res.output
    issues = res.table("query_issues").sort_values("task")
    assert issues.to_dict("records") == [
        {"task": "forecast", "issue": "prompt text truncated to fit the context length", "n_queries": 1},
        {"task": "recall", "issue": "no answer (HTTP 500)", "n_queries": 1},
    ]
    assert not res.has_table("regression_results")


@pytest.mark.slow  # two builds and a report: minutes on a loaded machine
def test_an_accepted_low_parse_rate_reaches_the_report(built, tmp_path):
    """12% unparsed forecasts: the gate stops the build, unless the study accepted the
    rate; then the rows are excluded from the regressions and the report says so."""
    from lookahead.config import load_study
    from lookahead.pages.report import write_report

    study, _ = built

    def unparse(target):
        path = target / "raw" / "forecast.jsonl"
        recs = [json.loads(x) for x in path.read_text().splitlines()]
        for r in recs[::8]:
            r["response_text"] = "I cannot say."
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))

    vars_, target = _broken_copy(tmp_path, study, unparse)
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode != 0 and "expect_column_values_to_not_be_null(mu_hat)" in res.output
    accepted = {
        **vars_,
        "accept_low_parse_rate": True,
        "results_dir": str(target / "results"),
        "outputs_dir": str(target / "outputs"),
    }
    res = run_dbt(["build"], accepted, target / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    assert bool(res.table("study_settings")["accept_low_parse_rate"].iloc[0]) is True
    n_unparsed = int(res.table("forecast_parse_rate")["n_unparsed"].iloc[0])
    assert n_unparsed == 150  # every 8th of 1200 rows
    det = res.table("regression_results").query("spec == 'detection' and sample == 'pre'")
    pre = res.table("panel_pre")
    assert int(det["n_obs"].iloc[0]) + int(det["n_singletons"].fillna(0).iloc[0]) == int(pre["mu_hat"].notna().sum())
    files = write_report(load_study(overrides=accepted), database=target / "db.duckdb")
    text = files.report.read_text()
    assert "Low parse rate accepted" in text and f"the {n_unparsed} rows with an unparsed forecast" in text


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


@pytest.mark.slow  # a full build and a report (~30 s)
def test_a_subsampled_study_builds_and_the_report_says_so(built, tmp_path):
    """subsample_rows/subsample_seed pick the same rows as the jobs (lookahead.rows), the
    build passes on them alone, and study_settings, sample_description and REPORT.md
    say the report describes a subsample."""
    from lookahead.config import load_study
    from lookahead.pages.report import write_report
    from lookahead.rows import load_rows

    study, _ = built
    vars_ = {
        **study.vars,
        "subsample_rows": 300,
        "subsample_seed": 9,
        "results_dir": str(tmp_path / "results"),
        "outputs_dir": str(tmp_path / "outputs"),
    }
    res = run_dbt(["build"], vars_, tmp_path / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    job_rows, _ = load_rows(load_study(overrides=vars_))
    panel = res.table("panel")
    assert len(panel) == 300 and sorted(panel["row_id"]) == sorted(job_rows["row_id"])
    assert_build_keys_are_the_jobs(res, vars_)
    settings = res.table("study_settings").iloc[0]
    assert (settings["subsample_rows"], settings["subsample_seed"]) == (300, 9)
    desc = dict(zip(*res.table("sample_description")[["metric", "value"]].T.values, strict=False))
    n_valid = len(pd.read_csv(study.data_path))
    assert desc["valid rows outside the subsample"] == n_valid - 300
    files = write_report(load_study(overrides=vars_), database=res.db)
    text = files.report.read_text()
    assert f"analyses a seeded random subsample: 300 of {n_valid} valid rows" in text


def test_build_is_skipped_only_while_settings_inputs_and_code_are_unchanged(built, tmp_path, monkeypatch):
    """`lookahead run` skips dbt build when the last complete build passed and nothing it
    reads changed (lookahead.identity.build_up_to_date). Each state a user is in after an
    edit must rebuild: an edited input row, a new raw failure line, a changed setting, a
    changed model file; an operational setting (where the report goes) does not."""
    from functools import partial

    from lookahead.claims.inputs import protocol_build_selection
    from lookahead.config import Study, resolve
    from lookahead.identity import build_up_to_date as up_to_date
    from lookahead.identity import copy_code

    study, res_ok = built
    # the selection the fixture was built with, as `lookahead run` builds a study without claims
    build_up_to_date = partial(up_to_date, selection=" ".join(protocol_build_selection(Study(vars=resolve(study.vars)))))
    db = tmp_path / "db.duckdb"
    shutil.copy(res_ok.db, db)
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(db))
    code = copy_code(tmp_path / "code")  # a copy of the project's code, to edit a model safely
    here = Study(vars=resolve(study.vars))
    invocation = res_ok.table("build_identity")["invocation_id"].iloc[0]
    assert build_up_to_date(here, root=code) == (invocation, "")
    assert build_up_to_date(Study(vars=resolve({**study.vars, "results_dir": str(tmp_path / "r")})), root=code) == (
        invocation,
        "",
    )

    saved = study.data_path.read_bytes()
    try:  # an edited input row
        study.data_path.write_bytes(saved.replace(b"Entity 0 news 0", b"Entity 0 news 0!", 1))
        assert build_up_to_date(here, root=code)[1].startswith(
            "the verdict in the database was built from other inputs: the input file changed"
        )
    finally:
        study.data_path.write_bytes(saved)
    assert build_up_to_date(here, root=code) == (invocation, "")

    failures = study.raw_dir / "recall.failures.jsonl"  # read by the build, not in the verdict
    before = failures.read_bytes() if failures.exists() else None
    recall_key = json.loads((study.raw_dir / "recall.jsonl").read_text().splitlines()[0])["key"]
    try:
        with open(failures, "a", encoding="utf-8") as fh:  # another study's key: still current
            fh.write(json.dumps({"key": "k", "task": "recall", "reason": "timeout"}) + "\n")
        assert build_up_to_date(here, root=code) == (invocation, "")
        with open(failures, "a", encoding="utf-8") as fh:  # a key this study reads
            fh.write(json.dumps({"key": recall_key, "task": "recall", "reason": "timeout"}) + "\n")
        assert build_up_to_date(here, root=code)[1].startswith(  # the report's check covers every input
            "the verdict in the database was built from other inputs: the recall failure lines (1 new "
            "line in recall.failures.jsonl for keys this study reads) changed"
        )
    finally:
        if before is None:
            failures.unlink()
        else:
            failures.write_bytes(before)

    changed = Study(vars=resolve({**study.vars, "cluster": "date"}))  # a changed setting
    assert build_up_to_date(changed, root=code)[1].endswith(
        f"other inputs: the study settings changed since dbt build (invocation {invocation}); rerun dbt build"
    )

    model = code / "models" / "marts" / "build" / "build_identity.sql"  # a changed model file
    model.write_text(model.read_text() + "\n-- edited\n")
    assert build_up_to_date(here, root=code) == (
        None,
        "the code changed (models, macros, seeds, tests, suites, package or libraries)",
    )


def test_a_row_refused_for_good_is_an_exclusion_not_a_block(built, tmp_path):
    """Forecasts the server refused for good (permanent lines in forecast.failures.jsonl,
    as the jobs write for an HTTP 400): no rerun changes them, so their rows leave the
    panel with the reason in rejected_rows and the count in sample_description; the
    build holds the share left against min_measure_coverage: under it, one line naming
    the count and the setting; at or above it the build passes, and the verdict
    paragraph names the share excluded once it is over 1%."""
    from lookahead.pages.summary import caveats, paragraph
    from lookahead.stats.verdict import evaluate, facts_from_row

    study, _ = built
    refused_at = list(range(10, 250, 16))  # 15 rows: 1.25% of the fixture's 1,200

    def refuse(target):
        path = target / "raw" / "forecast.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        with open(target / "raw" / "forecast.failures.jsonl", "w") as fh:
            for i in refused_at:
                gone = json.loads(lines[i])
                failure = {k: gone.get(k) for k in ("key", "task", "model_id", "row_id", "entity_id", "target_date", "params")}
                failure.update(
                    reason="HTTP 400: content policy", attempts=1, permanent=True, failed_at="2026-01-02T00:00:00+00:00"
                )
                fh.write(json.dumps(failure) + "\n")
        path.write_text("".join(line for i, line in enumerate(lines) if i not in refused_at))

    vars_, target = _broken_copy(tmp_path, study, refuse)
    gone_rows = {json.loads(line)["row_id"] for line in (target / "raw" / "forecast.failures.jsonl").read_text().splitlines()}
    # the floor is held by gate_panel: what the build runs beside and after it (the claim
    # models, the statistics the failed gate skips) has no part in this refusal
    res = run_dbt(["build", "--select", "+gate_panel"], {**vars_, "min_measure_coverage": 0.99}, target / "db.duckdb")
    assert res.returncode != 0
    assert (
        "15 of 1200 valid rows are excluded because an LLM query was refused for good (15 x forecast "
        "query refused for good (HTTP 400: content policy)); the 98.75% left is under the floor "
        "min_measure_coverage = 0.99"
    ) in res.output, res.output[-3000:]
    assert "LLM queries have no answer" not in res.output

    # the default floor (0.95) lets them go
    res = run_dbt(["build"], vars_, target / "db.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    panel = res.table("panel")
    assert len(panel) == 1200 - 15 and not gone_rows & set(panel["row_id"])
    rejected = res.table("rejected_rows")
    refused = rejected[rejected["reject_reason"].str.contains("refused for good")]
    assert set(refused["row_id"]) == gone_rows
    assert set(refused["reject_reason"]) == {"forecast query refused for good (HTTP 400: content policy)"}
    metric = dict(zip(res.table("sample_description")["metric"], res.table("sample_description")["value"], strict=False))
    assert metric["rows excluded: an LLM query refused for good"] == 15 and metric["valid rows"] == 1185
    issues = res.table("query_issues")
    assert issues.to_dict("records") == [
        {"task": "forecast", "issue": "refused for good, row excluded (HTTP 400: content policy)", "n_queries": 15}
    ]
    o = evaluate(facts_from_row(res.table("verdict").iloc[0]))
    found = caveats(o, metric, pd.DataFrame())
    assert "15 of 1200 valid rows (1.2%) excluded: an LLM query was refused for good" in paragraph(o, found)
