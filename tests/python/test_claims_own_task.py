"""docs/claims.md's "Your own task: a claim-only study", followed as written: the
`lookahead init --claims` line writes the study file the page shows, `lookahead check`
passes it, and `lookahead run` scores the shipped example (four instances of the
classification demo, the tiny leaky model) and prints the line the page quotes. The
figures are held against the demo's planted truth (demo/claims/truth_instances.csv),
not against the page.

The only changes to the page's commands: the study file lies in a scratch folder, and
its name, raw folder and database are the test's own, so nothing is written into the
project's outputs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml
from dbt_runner import ROOT, dbt_env

DOC = ROOT / "docs" / "claims.md"
DEMO = ROOT / "demo" / "claims"
EXAMPLE = DEMO / "example"
EXAMPLE_IDS = ("c01", "c03", "c16", "c20")
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    not (DEMO / "models" / "leaky" / "model.safetensors").exists(), reason="claim demo models not built"
)


def own_task_blocks() -> list[tuple[str, str]]:
    """(language, body) of the fenced blocks of the section "Your own task"."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Your own task: a claim-only study", 1)[1].split("\n## ", 1)[0]
    return [(lang, textwrap.dedent(body)) for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", section, flags=re.M | re.S)]


def block(lang: str, contains: str) -> str:
    [body] = [b for lg, b in own_task_blocks() if lg == lang and contains in b]
    return body


def commands(body: str, study_file: Path) -> list[str]:
    """The block's command lines, the study file's path replaced by the scratch one and
    `.venv/bin/` by this interpreter's folder (the same venv where the project's is a link)."""
    out = []
    for line in body.strip().splitlines():
        line = line.replace(".venv/bin/", f"{BIN}/").replace("my_claims.yml", shlex.quote(str(study_file)))
        out.append(line)
    return out


def run(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_example_is_the_demos_rows() -> None:
    """The example files are the demo's rows for its four instances, so the planted truth
    of the demo is the example's truth."""
    preds = pd.read_csv(DEMO / "predictions_leaky.csv", dtype=str, keep_default_na=False)
    mine = pd.read_csv(EXAMPLE / "predictions.csv", dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(mine, preds[preds["instance_id"].isin(EXAMPLE_IDS)].reset_index(drop=True))
    corpus = pd.read_csv(DEMO / "corpus.csv", dtype=str, keep_default_na=False)
    ours = pd.read_csv(EXAMPLE / "corpus.csv", dtype=str, keep_default_na=False)
    wanted = corpus[corpus["doc_id"].str.split("-").str[0].isin(EXAMPLE_IDS)].reset_index(drop=True)
    pd.testing.assert_frame_equal(ours, wanted)
    refs = [json.loads(x) for x in (DEMO / "extractions.jsonl").read_text().splitlines() if x.strip()]
    assert [json.loads(x) for x in (EXAMPLE / "extractions.jsonl").read_text().splitlines()] == [
        r for r in refs if r["instance_id"] in EXAMPLE_IDS
    ]


def test_init_claims_writes_the_file_the_page_shows(tmp_path: Path) -> None:
    """The page's init line, as written, writes the page's study file and ends with the
    claim check, passed."""
    study_file = tmp_path / "my_claims.yml"
    [line] = commands(block("bash", "lookahead init --claims"), study_file)
    proc = run(line, dbt_env(tmp_path / "db.duckdb"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "predictions.csv: 4 rows, columns instance_id, agent, entity" in proc.stdout
    assert "claim check passed" in proc.stdout and "Traceback" not in proc.stderr
    assert yaml.safe_load(study_file.read_text()) == yaml.safe_load(block("yaml", "study_kind: claims"))


def test_init_claims_on_stdin_asks_the_claim_questions(tmp_path: Path) -> None:
    """`lookahead init --claims` answered on stdin, a question a line (blank: the proposed
    answer), writes the same study the flags write."""
    answers = [
        str(EXAMPLE / "predictions.csv"),
        "",
        str(EXAMPLE / "corpus.csv"),
        str(EXAMPLE / "extractions.jsonl"),
        "",
        "",
        "Predict whether a company's stock closes up or down on the target date.",
        "contains",
        "seed",
        "stated",
        "",
        "demo-claims-leaky",
        str(DEMO / "models" / "leaky"),
        "",
        "my_claims",
        "my_claims.yml",
    ]
    proc = subprocess.run(
        [f"{BIN}/lookahead", "init", "--claims"],
        cwd=tmp_path,
        input="\n".join(answers) + "\n",
        capture_output=True,
        text=True,
        timeout=600,
        env=dbt_env(tmp_path / "db.duckdb"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for question in (
        "Predictions with rationales",
        "Dated corpus",
        "Task kind (classification/regression/ranking)",
        "The two class labels",
        "Who judges that a corpus document supports a claim",
    ):
        assert question in proc.stdout, question
    assert "Column of the entity id" not in proc.stdout  # none of the protocol's questions
    assert yaml.safe_load((tmp_path / "my_claims.yml").read_text()) == yaml.safe_load(block("yaml", "study_kind: claims"))


def test_init_claims_bad_answers_are_one_line_naming_the_flag(tmp_path: Path) -> None:
    env = dbt_env(tmp_path / "db.duckdb")
    base = [
        f"{BIN}/lookahead",
        "init",
        "--claims",
        "--no-input",
        "--model-id",
        "m",
        "--model-path",
        str(DEMO / "models" / "leaky"),
    ]
    proc = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --predictions: a claim study needs predictions with rationales (--predictions) or task instances "
        "for the agent jobs (--instances)"
    ], proc.stderr
    pd.read_csv(EXAMPLE / "predictions.csv").drop(columns=["rationale"]).to_csv(tmp_path / "p.csv", index=False)
    proc = subprocess.run([*base, "--predictions", "p.csv"], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    [line] = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("error: --predictions: column(s) rationale missing in p.csv"), line
    proc = subprocess.run(
        [*base, "--predictions", str(EXAMPLE / "predictions.csv"), "--entity", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --entity: not a question of this study kind (a protocol study: lookahead init without --claims)"
    )
    assert not list(tmp_path.glob("*.yml"))


def test_a_claim_study_check_refuses_and_run_refuses_the_same(tmp_path: Path) -> None:
    """A predictions file whose predictions are not among the labels: check refuses in one
    line naming the column and the row, and run refuses with the same line before any
    model is asked (no raw file written)."""
    preds = pd.read_csv(EXAMPLE / "predictions.csv", dtype=str, keep_default_na=False)
    preds.loc[[0, 1], "prediction"] = "sideways"
    preds.to_csv(tmp_path / "preds.csv", index=False)
    study = {
        **yaml.safe_load(block("yaml", "study_kind: claims")),
        "study_name": f"pytest_claims_refused_{os.getpid()}",
        "raw_dir": str(tmp_path / "raw"),
        "claims_predictions_path": str(tmp_path / "preds.csv"),
    }
    study_file = tmp_path / "refused.yml"
    study_file.write_text(yaml.safe_dump(study))
    env = dbt_env(tmp_path / "db.duckdb")
    check = run(f"{BIN}/lookahead check --study {shlex.quote(str(study_file))}", env)
    assert check.returncode == 2, check.stdout + check.stderr
    [refusal] = check.stderr.strip().splitlines()
    assert refusal.startswith("refused: 2 of 4 prediction rows rejected (50.0%, above check_refuse_rejected_share")
    assert "column prediction" in refusal and "first row 1" in refusal
    proc = run(f"{BIN}/lookahead run --study {shlex.quote(str(study_file))} --yes", env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [refusal], proc.stdout + proc.stderr
    assert not (tmp_path / "raw").exists()
    # a quarter rejected, under a refusal threshold raised to 0.3 (the setting the line
    # names): a warning, and check ends with 5
    preds = pd.read_csv(EXAMPLE / "predictions.csv", dtype=str, keep_default_na=False)
    preds.loc[[0], "prediction"] = "sideways"
    preds.to_csv(tmp_path / "preds.csv", index=False)
    study_file.write_text(yaml.safe_dump({**study, "check_refuse_rejected_share": 0.3}))
    check = run(f"{BIN}/lookahead check --study {shlex.quote(str(study_file))}", env)
    assert check.returncode == 5 and check.stderr.startswith("warning: 1 of 4 prediction rows rejected (25.0%"), (
        check.stdout + check.stderr
    )


def test_the_claim_only_study_runs_as_written(tmp_path: Path) -> None:
    """The page's study file, checked and run as written (a minute: 32 coalitions and 4
    re-predictions on the tiny model, then the claim models): the page's output line, and
    each instance's OLR and top-1 leakage against the planted truth."""
    study = yaml.safe_load(block("yaml", "study_kind: claims"))
    results = tmp_path / "results"
    study.update(
        study_name=f"pytest_my_claims_{os.getpid()}",
        raw_dir=str(tmp_path / "raw"),
        results_dir=str(results),
        outputs_dir=str(tmp_path / "outputs"),
    )
    study_file = tmp_path / "my_claims.yml"
    study_file.write_text(yaml.safe_dump(study, sort_keys=False))
    db = tmp_path / "db.duckdb"
    env = dbt_env(db)
    outputs = []
    for line in commands(block("bash", "lookahead run --study"), study_file):
        proc = run(line, env)
        assert proc.returncode == 0, (line, proc.stdout[-3000:], proc.stderr[-3000:])
        outputs.append(proc.stdout)
    assert "claim check passed" in outputs[0]
    quoted = block("text", "agent planted").strip()
    assert quoted in outputs[1].splitlines()
    assert "whole run" in outputs[1] and "claims_value" in outputs[1]  # the claim jobs in the one cost table
    truth = pd.read_csv(DEMO / "truth_instances.csv").set_index("instance_id")
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = (
            con.sql(
                "select instance_id, olr, top1_leakage, efficiency_gap from instance_leakage "
                "where agent = 'planted' order by instance_id"
            )
            .df()
            .set_index("instance_id")
        )
    finally:
        con.close()
    assert list(got.index) == list(EXAMPLE_IDS)
    assert (got["olr"] - truth.loc[got.index, "expected_olr"]).abs().max() < 1e-12
    # the leaky model follows the planted outcome claim (A4) where there is one: c03, c16, c20;
    # in c20 the evidence claim agrees with it, so the two tie and the earlier (evidence)
    # claim is the top one (the ties rule: claim order)
    assert got["top1_leakage"].to_dict() == {"c01": 0.0, "c03": 1.0, "c16": 1.0, "c20": 0.0}
    assert got["efficiency_gap"].abs().max() < 1e-9
    # the report: the same line at the head of REPORT.md and the page, the claim tables as
    # CSVs equal to the database's, and the run's output names where they are
    report = (results / "REPORT.md").read_text(encoding="utf-8")
    assert f"# Claim-level leakage: {study['study_name']}" in report and quoted + "." in report.splitlines()
    assert quoted in (results / "index.html").read_text(encoding="utf-8")
    assert f"Report: {results / 'REPORT.md'}" in outputs[1].splitlines()
    csv = pd.read_csv(results / "instance_leakage.csv").set_index("instance_id").loc[list(EXAMPLE_IDS)]
    assert (csv["olr"] - got["olr"]).abs().max() == 0 and (results / "figures" / "claims_shapley.png").is_file()
    assert_no_result_when_nothing_scored(tmp_path, study_file, db, results)


def assert_no_result_when_nothing_scored(tmp_path: Path, study_file: Path, db: Path, results: Path) -> None:
    """The same build with every instance rejected (as when every extraction fails): the
    report ends non-zero with one line giving the count and the first reason, writes
    nothing, and retires the report set written before."""
    con = duckdb.connect(str(db))
    try:
        # the claim models' tables under the contracted views of the same names
        con.execute("update claims_summary_py set n_scored = 0")
        con.execute("delete from claims_rejects_py")
        con.execute(
            'insert into claims_rejects_py (source, "row", "column", reason) values '
            "('instances', null, 'status', 'instance c01 (planted): extraction failed: no JSON object found')"
        )
    finally:
        con.close()
    proc = run(f"{BIN}/lookahead report --study {shlex.quote(str(study_file))}", dbt_env(db))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: no instance could be scored (4 of 4 rejected; first: instance c01 (planted): extraction failed: "
        "no JSON object found); see the table claims_rejects in the study database; no report written "
        f"(the old report moved to {results / 'stale'})"
    ], proc.stderr
    assert not (results / "REPORT.md").exists()


def test_study_kinds_one_entry_each_and_what_each_requires(tmp_path: Path) -> None:
    """Each allowed value of study_kind has one entry in the commands' table; a claim-only
    study needs none of the protocol's settings, a protocol study still needs them all."""
    from lookahead.cli import STUDY_KINDS
    from lookahead.config import SCHEMA, StudyConfigError, load_study

    assert set(STUDY_KINDS) == set(SCHEMA.settings["study_kind"].allowed)
    page = yaml.safe_load(block("yaml", "study_kind: claims"))
    study_file = tmp_path / "s.yml"
    study_file.write_text(yaml.safe_dump(page))
    study = load_study(str(study_file))
    assert study.input.data_path is None and study.protocol.training_cutoff is None
    study_file.write_text(yaml.safe_dump({k: v for k, v in page.items() if k != "study_kind"}))
    with pytest.raises(StudyConfigError, match="setting 'data_path' is missing"):
        load_study(str(study_file))


def test_a_claim_only_study_names_the_protocol_setting_it_lacks(tmp_path: Path) -> None:
    """The observations file, column map and cutoff read off a claim-only study (which has
    none of them) are one line naming the setting, not a path called 'None' or a TypeError;
    a protocol study reads its own."""
    from lookahead.config import StudyConfigError, load_study

    study_file = tmp_path / "s.yml"
    study_file.write_text(yaml.safe_dump(yaml.safe_load(block("yaml", "study_kind: claims"))))
    claims_only = load_study(str(study_file))
    reads = {
        "data_path": lambda: claims_only.data_file,
        "column_map": lambda: claims_only.column_map,
        "training_cutoff": lambda: claims_only.cutoff,
    }
    for name, read in reads.items():
        with pytest.raises(StudyConfigError, match=f"^setting '{name}' is missing"):
            read()
    protocol = load_study()
    assert protocol.data_file == protocol.root / str(protocol.input.data_path)
    assert protocol.column_map == protocol.input.column_map
    assert protocol.cutoff.isoformat() == protocol.protocol.training_cutoff


def test_a_protocol_study_with_claim_files_is_checked_on_them_too(tmp_path: Path) -> None:
    """A protocol study with claim settings (as demo/claims/demo_clean.yml): `lookahead
    check` judges its claim files as well, and refuses when they cannot be scored."""
    preds = pd.read_csv(EXAMPLE / "predictions.csv", dtype=str, keep_default_na=False)
    preds["prediction"] = "sideways"
    preds.to_csv(tmp_path / "preds.csv", index=False)
    study = yaml.safe_load((ROOT / "demo" / "studies" / "clean.yml").read_text())
    study.update(
        study_name=f"pytest_claims_protocol_{os.getpid()}",
        raw_dir=str(tmp_path / "raw"),
        claims_model_id="demo-claims-leaky",
        claims_model_path="demo/claims/models/leaky",
        claims_predictions_path=str(tmp_path / "preds.csv"),
    )
    study_file = tmp_path / "s.yml"
    study_file.write_text(yaml.safe_dump(study))
    proc = run(f"{BIN}/lookahead check --study {shlex.quote(str(study_file))}", dbt_env(tmp_path / "db.duckdb"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[0].startswith("refused: 4 of 4 prediction rows rejected"), proc.stderr
    assert lines[1].startswith("refused: no usable instance in the claim files")
