"""No silent wrong result: a build never writes over another study's database, and a LAP
measure the study asks for that scores no row stops the build naming the measure and the
setting that changed its key (lookahead/collision.py, lookahead/coverage.py).

One fixture study is built once, as `lookahead run --study demo/claims/...` builds a
demo study (its source recorded in build_log): the shared build tests/conftest.py's
fixture_build; the cases below start from copies of it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from dbt_runner import ROOT, dbt_env, run_dbt
from shared_builds import FIXTURE_SOURCE

from lookahead.collision import SOURCE_ENV, collision_line, default_source, study_source
from lookahead.config import Study, default_study_path, load_study, read_study_file, resolve

DEMO_SOURCE = FIXTURE_SOURCE  # the shared build's study file


@pytest.fixture(scope="module")
def built(fixture_build):
    """The default fixture study's build from the study file DEMO_SOURCE, shared with
    other files (tests/conftest.py SHARED_BUILDS); the cases below work on copies."""
    fixture_build.check_unchanged()
    return fixture_build.study, fixture_build.result


def _row_counts(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [
            r[0] for r in con.sql("select table_name from information_schema.tables where table_type = 'BASE TABLE'").fetchall()
        ]
        return {t: con.sql(f'select count(*) from "{t}"').fetchone()[0] for t in tables}
    finally:
        con.close()


def _copy(built, tmp_path: Path) -> tuple[dict, Path]:
    study, res = built
    target = tmp_path / "study"
    shutil.copytree(study.root, target, ignore=shutil.ignore_patterns("db.duckdb*", "target", "logs", ".mpl"))
    vars_ = {**study.vars, "data_path": str(target / "observations.csv"), "raw_dir": str(target / "raw")}
    shutil.copy(res.db, target / "db.duckdb")
    return vars_, target


# --- the default study ---------------------------------------------------------------


def _demo_study_files() -> list[Path]:
    """Every study file `make demo` runs (its recipe's --study arguments, loops expanded)."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    files = []
    for line in recipe.replace("\\\n", " ").splitlines():
        loops = dict(re.findall(r"for (\w) in ([\w ]+?);", line))
        for arg in re.findall(r"--study (\S+)", line):
            paths = [arg]
            for var, values in loops.items():
                paths = [p.replace(f"$${var}", v) for p in paths for v in values.split()]
            files += [ROOT / p for p in paths]
    return files


def test_the_default_study_has_a_database_of_its_own():
    """Plain `dbt build` builds the default study: its name, hence its database, is none
    of the studies `make demo` builds (they once shared demo_contaminated)."""
    files = _demo_study_files()
    assert len(files) >= 6 and all(f.is_file() for f in files), files
    default = load_study(default_study_path())
    demo = {load_study(f).name: f for f in files}
    assert default.name not in demo, demo.get(default.name)
    assert default.database not in {load_study(f).database for f in files}
    # and the protocol studies the claim demos extend are not the claim demos' names either
    for scen in ("clean", "contaminated"):
        assert read_study_file(ROOT / f"demo/studies/{scen}.yml")["study_name"] != f"demo_{scen}"
        assert load_study(ROOT / f"demo/claims/demo_{scen}.yml").name == f"demo_{scen}"


def test_collision_line_names_both_studies_and_lets_an_edited_study_through():
    stored, here = ("s", "a.yml", "1" * 64), ("s", "b.yml", "2" * 64)
    line = collision_line("outputs/s.duckdb", stored, here)
    assert "'s' from a.yml" in line and "'s' from b.yml" in line and "--full-refresh" in line
    assert "\n" not in line
    assert collision_line("db", stored, ("s", "a.yml", "2" * 64)) == ""  # the same file, edited
    assert collision_line("db", stored, ("s", "b.yml", "1" * 64)) == ""  # another route, same settings
    assert collision_line("db", ("", "", ""), here) == ""  # a database without a source


def test_study_source_follows_how_dbt_got_the_study(monkeypatch):
    monkeypatch.delenv("LOOKAHEAD_STUDY_SETTINGS", raising=False)
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    assert study_source({}) == default_source()
    assert study_source({"bootstrap_draws": 0}) == "dbt --vars"
    monkeypatch.setenv("LOOKAHEAD_STUDY_SETTINGS", "/tmp/x.json")
    monkeypatch.setenv(SOURCE_ENV, "my.yml")
    assert study_source({}) == "my.yml"


def test_a_build_of_another_study_stops_and_leaves_the_demo_tables_unchanged(built, tmp_path):
    """The demo's database, then a build of another study with the same name from another
    source (plain dbt with --vars, other settings): one line naming both, and every table
    keeps its rows; --full-refresh replaces them."""
    vars_, target = _copy(built, tmp_path)
    db = target / "db.duckdb"
    before = _row_counts(db)
    other = {**vars_, "lap_measures": ["recall"], "cluster": "date"}
    res = run_dbt(["build"], other, db, as_vars=True)
    assert res.returncode != 0
    lines = [ln for ln in res.output.splitlines() if "holds the results of study" in ln]
    assert len(lines) == 1, res.output[-3000:]
    assert f"study 'fixture' from {DEMO_SOURCE}" in lines[0] and "study 'fixture' from dbt --vars" in lines[0]
    assert _row_counts(db) == before
    # asked to replace them, it builds
    res = run_dbt(["run", "--select", "study_settings", "--full-refresh"], other, db, as_vars=True)
    assert res.returncode == 0, res.output[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("select cluster from study_settings").fetchone()[0] == "date"
    con.close()


def test_two_studies_through_dbt_vars_with_one_name_are_told_apart(built, tmp_path, monkeypatch):
    """Both through `dbt build --vars`, so both from the source "dbt --vars": the second
    study (another model, one of the settings that identify a study) stops in one line;
    the first, edited in a setting that does not identify it, rebuilds."""
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    vars_, target = _copy(built, tmp_path)
    db = target / "db.duckdb"
    first = run_dbt(["run", "--select", "study_settings", "--full-refresh"], vars_, db, as_vars=True)
    assert first.returncode == 0, first.output[-3000:]
    twin = run_dbt(["run", "--select", "study_settings"], {**vars_, "model_id": "another-model"}, db, as_vars=True)
    lines = [ln for ln in twin.output.splitlines() if "holds the results of study" in ln]
    assert twin.returncode != 0 and len(lines) == 1, twin.output[-3000:]
    assert "from dbt --vars with other identifying settings" in lines[0]
    edited = run_dbt(["run", "--select", "study_settings"], {**vars_, "cluster": "date"}, db, as_vars=True)
    assert edited.returncode == 0, edited.output[-3000:]


def _verdict_status(db: Path) -> str | None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.sql("select result_status from verdict_py").fetchone()[0]
    finally:
        con.close()


def test_a_refused_build_retires_no_report_and_marks_no_verdict(built, tmp_path):
    """Another study of the same name, refused by `lookahead build` and by plain
    `dbt build --vars`: the first study's REPORT.md and index.html stay where they are (no
    stale/) and its verdict's result_status is not rewritten."""
    from lookahead.artefacts import Folders, write_artefact_set

    vars_, target = _copy(built, tmp_path)
    db = target / "db.duckdb"
    vars_ = {**vars_, "results_dir": str(tmp_path / "results"), "outputs_dir": str(tmp_path / "outputs")}
    folders = Folders.of(Study(vars=resolve(vars_)))

    def produce(results: Path, outputs: Path) -> None:
        for name in ("REPORT.md", "index.html", "verdict.csv"):
            (results / name).write_text("the first study's report")

    write_artefact_set(folders, "first", produce)
    status = _verdict_status(db)
    other = {**vars_, "lap_measures": ["recall"], "cluster": "date"}
    study_file = tmp_path / "other.yml"
    study_file.write_text(json.dumps(other))
    env = {**dbt_env(db), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lookahead.cli", "build", "--study", str(study_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert (folders.results / "REPORT.md").is_file() and not (folders.results / "stale").exists(), proc.stderr
    assert _verdict_status(db) == status
    assert proc.returncode == 2 and len(errors) == 1 and "holds the results of study" in errors[0], proc.stderr
    res = run_dbt(["build"], other, db, as_vars=True)
    assert res.returncode != 0 and "holds the results of study" in res.output, res.output[-3000:]
    assert (folders.results / "REPORT.md").is_file() and not (folders.results / "stale").exists()
    assert _verdict_status(db) == status


def test_a_measure_under_another_key_fails_the_build_naming_the_setting(built, tmp_path, monkeypatch):
    """Min-K% answers cached under the key of the fp32 body; the study now scores with the
    bf16 body (setting mink_body_dtype joins the Min-K% key: another answer): no Min-K%
    line is the study's, and the build stops naming the measure and the setting (it used
    to pass with lap_mink null in every row)."""
    from lookahead.keys import task_params

    vars_, target = _copy(built, tmp_path)
    old = Study(vars=resolve(vars_))
    mink = target / "raw" / "mink.jsonl"
    lines = [json.loads(x) for x in mink.read_text().splitlines()]
    for line in lines:  # as the jobs wrote them: the query's parameters in the line
        line["params"] = task_params(old, "mink")
    mink.write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv(SOURCE_ENV, DEMO_SOURCE)  # the same study file, edited
    res = run_dbt(["build", "--select", "+gate_panel"], {**vars_, "mink_body_dtype": "bfloat16"}, target / "db.duckdb")
    assert res.returncode != 0
    assert re.search(r"LAP measure 'mink' \(Min-K%\) has a score on 0 of \d+ panel rows", res.output), res.output[-3000:]
    assert "setting 'mink_body_dtype' changed the key" in res.output


def test_a_measure_whose_lines_lack_what_it_reads_fails_the_build_naming_it(built, tmp_path, monkeypatch):
    """Adding zlib to lap_measures keeps the Min-K% key (the same forward pass): the lines
    are the study's, Min-K% scores every row, and where they lack zlib_bytes (written by a
    backend that did not add it) the build stops naming the measure and what the lines
    lack, not a setting that changed no key."""
    vars_, target = _copy(built, tmp_path)
    mink = target / "raw" / "mink.jsonl"
    lines = [json.loads(x) for x in mink.read_text().splitlines()]
    for line in lines:
        line.pop("zlib_bytes", None)
    mink.write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setenv(SOURCE_ENV, DEMO_SOURCE)
    res = run_dbt(
        ["build", "--select", "+gate_panel"], {**vars_, "lap_measures": ["recall", "mink", "zlib"]}, target / "db.duckdb"
    )
    assert res.returncode != 0
    assert re.search(
        r"LAP measure 'zlib' \(zlib LAP\) has a score on 0 of (\d+) panel rows.*: \1 of the rows "
        r"have their mink line, but it lacks zlib_bytes",
        res.output,
    ), res.output[-3000:]
    assert "LAP measure 'mink'" not in res.output and "changed the key" not in res.output


def test_the_robustness_table_never_prints_a_measure_without_scores_as_a_result(tmp_path):
    import pandas as pd

    from lookahead.pages.blocks import Para, Table
    from lookahead.pages.sections import Context, _robustness

    pd.DataFrame(
        {
            "lap_measure": ["recall", "mink"],
            "is_verdict_measure": [True, False],
            "beta3": [0.5, float("nan")],
            "t": [3.0, float("nan")],
            "p_one_sided": [0.001, float("nan")],
            "p_draws": [0, 0],
            "p_source": ["CRV1", "CRV1"],
            "n_obs": [500, 0],
            "lap_varies": [True, False],
            "detects": [True, True],
        }
    ).to_csv(tmp_path / "lap_robustness.csv", index=False)
    ctx = Context(tmp_path, load_study(default_study_path()), outcome=None, verdict=pd.Series(dtype=object))
    items = _robustness(ctx)
    frame = next(i for i in items if isinstance(i, Table)).frame
    mink = frame[frame["LAP measure"] == "`mink`"].iloc[0]
    assert list(mink).count("no score") == 6 and "nan" not in " ".join(map(str, mink)).lower()
    assert any(isinstance(i, Para) and "under 1 of 2 measures (recall)" in i.text for i in items)


# --- partial builds keep the verdict's status true -----------------------------------


def _verdict_state(db: Path) -> tuple[str, str, str]:
    """(the verdict's invocation id, its result_status, the last build's invocation id)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        inv, status = con.sql("select invocation_id, result_status from verdict").fetchone()
        last = con.sql("select invocation_id from build_log order by finished_at desc limit 1").fetchone()[0]
        return inv, status, last
    finally:
        con.close()


@pytest.mark.parametrize(
    "selection, verdict_rebuilt",
    [
        (["--select", "panel+"], True),
        (["--select", "stg_forecast_responses"], False),
        (["--select", "state:modified+", "--state", "{state}"], False),
    ],
)
def test_a_selected_build_keeps_the_verdicts_status_true(built, tmp_path, monkeypatch, selection, verdict_rebuilt):
    """`--select panel+` rebuilds the verdict: it records this build's id and is complete,
    the nodes it did not rebuild being current by fingerprint (and `lookahead report`'s
    check accepts it); a selection without the verdict (one staging model; state:modified+
    with nothing modified) leaves the verdict's row as it was."""
    from lookahead.identity import COMPLETE, check_current

    study, res = built
    db = tmp_path / "db.duckdb"
    shutil.copy(res.db, db)
    before = _verdict_state(db)
    assert before[1] == COMPLETE and before[0] == before[2]
    monkeypatch.setenv(SOURCE_ENV, DEMO_SOURCE)
    args = [a.replace("{state}", str(study.root / "target")) for a in selection]
    out = run_dbt(["build", *args], study.vars, db)
    assert out.returncode == 0, out.output[-3000:]
    inv, status, last = _verdict_state(db)
    assert status == COMPLETE, status
    if verdict_rebuilt:
        assert inv == last != before[0]  # this build's id
        con = duckdb.connect(str(db), read_only=True)
        try:
            assert check_current(con, Study(vars=resolve(study.vars))).invocation_id == inv
        finally:
            con.close()
    else:
        assert inv == before[0]


# --- `lookahead check` is the preflight ----------------------------------------------


def _check(tmp_path: Path, name: str, **settings) -> subprocess.CompletedProcess:
    import os
    import sys

    import yaml

    path = tmp_path / f"{name}.yml"
    path.write_text(
        yaml.safe_dump({"extends": str(ROOT / "demo/studies/contaminated.yml"), "raw_dir": str(tmp_path / "raw"), **settings})
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "lookahead.cli", "check", "--study", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_check_refuses_what_run_refuses_before_its_first_query(tmp_path):
    """The four errors `lookahead run` caught before querying and `lookahead check` did not:
    each is now a non-zero exit and one line naming it, with nothing queried."""
    import pandas as pd

    data = pd.read_csv(ROOT / "demo/data/observations.csv", dtype=str)
    one = tmp_path / "one_entity.csv"
    data[data["entity_id"] == data["entity_id"].iloc[0]].to_csv(one, index=False)
    template = (ROOT / "demo/studies/contaminated.yml").read_text()
    forecast_prompt = yaml_value(template, "forecast_prompt")
    cases = {
        "placeholder": ({"forecast_prompt": forecast_prompt + " Sector: {sector}."}, r"sector"),
        "context": ({"context_length": 24}, r"exceed the model's context length \(24 tokens"),
        "no_pre": ({"training_cutoff": "2001-01-01"}, r"no pre-cutoff row"),
        "one_cluster": (
            {"data_path": str(one), "min_panel_rows": 1},
            r"form 1 cluster\(s\) \(cluster: entity\).*set cluster: none",
        ),
    }
    for name, (settings, says) in cases.items():
        proc = _check(tmp_path, name, **settings)
        assert proc.returncode != 0, (name, proc.stdout, proc.stderr)
        assert re.search(says, proc.stderr), (name, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (name, proc.stderr)
    assert not (tmp_path / "raw").exists()  # nothing queried, nothing written


def yaml_value(text: str, key: str) -> str:
    import yaml

    return str(yaml.safe_load(text)[key])


from test_openai_backend import server_factory, write_openai_study  # noqa: E402,F401 - fixture


def test_labels_that_match_nothing_stop_the_forecasts_after_the_first_answers(server_factory, tmp_path):
    """The server answers 'up'; the study's labels are rise/fall. The job stops after the
    first EARLY_PARSE_ANSWERS answers (plus those in flight), not after all 120 were paid
    for; the answers it got are cached."""
    import os
    import sys

    from llm_jobs.forecast import EARLY_PARSE_ANSWERS

    url, state = server_factory()
    study = write_openai_study(
        tmp_path,
        url,
        "labels",
        120,
        tokenizer_path=None,
        model_path=None,
        forecast_labels={"rise": 1, "fall": -1},
        forecast_prompt="Headline about {entity_name}: {text}\nrise or fall?",
        backend_options={"backoff_s": 0.01, "timeout_s": 5, "concurrency": 2},
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 3, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert re.search(r"0 of the first \d+ answers match a label of forecast_labels \((rise, fall|fall, rise)\)", proc.stderr)
    assert state.requests == EARLY_PARSE_ANSWERS, state.requests
    lines = (tmp_path / "labels/raw/forecast.jsonl").read_text().splitlines()
    assert len(lines) == state.requests  # every answer paid for is kept


# --- ids -----------------------------------------------------------------------------

ID_CMAP = {
    "row_id": None,
    "entity_id": "permno",
    "entity_name": "name",
    "ticker": None,
    "text": "text",
    "text_date": "text_date",
    "target_date": "target_date",
    "outcome": "ret",
}


def _frame(ids: list[str]):
    import pandas as pd

    return pd.DataFrame(
        {
            "permno": ids,
            "name": [f"Firm {i}" for i in ids],
            "text": [f"news {i}" for i in range(len(ids))],
            "text_date": "2021-03-01",
            "target_date": "2021-03-02",
            "ret": "0.1",
        }
    )


def test_the_derived_row_id_comes_from_the_validated_entity_id():
    """A file re-saved with spaces around its ids keeps its row ids (and so its cached
    answers): the row id hashes the entity id the validation keeps."""
    from lookahead.rows import stage_rows
    from lookahead.settings_sections import InputSettings

    settings = InputSettings.with_defaults(column_map=ID_CMAP)
    plain = stage_rows(_frame(["14593", "2001"]), settings)
    padded = stage_rows(_frame([" 14593", "2001\t"]), settings)
    assert list(plain["row_id"]) == list(padded["row_id"])
    assert list(padded["entity_id"]) == ["14593", "2001"]


def test_zero_padded_ids_are_one_entity_under_strip_zeros_and_a_warning_in_check():
    from lookahead.rows import stage_rows, zero_padding_warning
    from lookahead.settings_sections import InputSettings

    ids = ["014593", "14593", "2001", "000"]
    as_written = stage_rows(_frame(ids), InputSettings.with_defaults(column_map=ID_CMAP))
    stripped = stage_rows(_frame(ids), InputSettings.with_defaults(column_map=ID_CMAP, id_normalization="strip_zeros"))
    assert as_written["entity_id"].nunique() == 4
    assert list(stripped["entity_id"]) == ["14593", "14593", "2001", "0"]
    line = zero_padding_warning(as_written["entity_id"], "permno")
    assert line is not None and "'014593' and '14593'" in line and "strip_zeros" in line and "permno" in line
    assert zero_padding_warning(stripped["entity_id"], "permno") is None
    assert zero_padding_warning(as_written["entity_id"].iloc[2:3], "permno") is None  # one value: nothing mixed
    assert zero_padding_warning(pd_series(["A01", "01"]), "x") is None  # not an all-digit column


def pd_series(values):
    import pandas as pd

    return pd.Series(values, dtype=object)
