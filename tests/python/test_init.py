"""`lookahead init` on a researcher's own CSV (columns permno, dt, headline, ret_1d; no
entity name, no target date): asked on stdin and given as flags, the study it writes
passes `lookahead check` (the jobs' preflight on the demo's tiny model, its exact
tokenizer) and, in the slow tier, `lookahead run`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dbt_runner import ROOT, dbt_env

LOOKAHEAD = str(Path(sys.executable).with_name("lookahead"))
MODEL = str(ROOT / "demo" / "models" / "clean")


def own_csv(tmp_path: Path, rows: int = 400) -> Path:
    """The demo's observations as a researcher's file: renamed columns, numeric permnos,
    no entity name, ticker or target date."""
    demo = pd.read_csv(ROOT / "demo" / "data" / "observations.csv", dtype=str).iloc[:rows]
    mine = pd.DataFrame(
        {
            "permno": demo["entity_id"].str[1:].astype(int) + 10000,
            "dt": demo["text_date"],
            "headline": demo["text"],
            "ret_1d": demo["outcome"],
        }
    )
    path = tmp_path / "mine.csv"
    mine.to_csv(path, index=False)
    return path


FLAGS = [
    "--data",
    "mine.csv",
    "--entity",
    "permno",
    "--text",
    "headline",
    "--text-date",
    "dt",
    "--outcome",
    "ret_1d",
    "--model-id",
    "demo-clean",
    "--model-path",
    MODEL,
    "--training-cutoff",
    "2021-12-31",
]


def init(tmp_path: Path, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LOOKAHEAD, "init", *args], cwd=tmp_path, input=stdin or "", capture_output=True, text=True, timeout=600
    )


def test_init_from_flags_writes_a_study_that_passes_check(tmp_path: Path) -> None:
    own_csv(tmp_path)
    proc = init(tmp_path, [*FLAGS, "--no-input"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mine.csv: columns permno, dt, headline, ret_1d" in proc.stdout
    assert "preflight passed" in proc.stdout and "Traceback" not in proc.stderr
    study = yaml.safe_load((tmp_path / "mine.yml").read_text())
    assert study["column_map"]["entity_name"] == "permno" and study["column_map"]["target_date"] == "target_date"
    derived = pd.read_csv(tmp_path / "mine.with_target_date.csv", dtype=str)
    assert list(derived.columns) == ["permno", "dt", "headline", "ret_1d", "target_date"]
    # next business day: a Friday's target is the Monday after it
    friday = derived[pd.to_datetime(derived["dt"]).dt.day_of_week == 4].iloc[0]
    assert (pd.Timestamp(friday["target_date"]) - pd.Timestamp(friday["dt"])).days == 3
    assert "400 valid rows, 0 rejected" in proc.stdout


def test_init_on_stdin_asks_every_question_and_passes_check(tmp_path: Path) -> None:
    own_csv(tmp_path)
    answers = [
        "mine.csv",
        "permno",
        "",
        "",
        "headline",
        "dt",
        "",
        "next_row",
        "ret_1d",
        "",
        "transformers",
        "demo-clean",
        MODEL,
        "2021-12-31",
        "no",
        "month",
        "",
        "up=1,down=-1",
        "the stock's return",
        "zero",
        "my_study",
        "studies/my_study.yml",
    ]
    proc = init(tmp_path, [], stdin="\n".join(answers) + "\n")
    # the entities' last rows have no next row: 21 of 400 rejected is above the 5% that warns
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "warning: 21 of 400 rows rejected (5.2%, above check_warn_rejected_share 0.05)" in proc.stderr
    assert "Column of the entity id" in proc.stdout and "Derive the target date as" in proc.stdout
    study = yaml.safe_load((tmp_path / "studies" / "my_study.yml").read_text())
    assert study["study_name"] == "my_study" and study["period_frequency"] == "month"
    assert study["outcome_description"] == "the stock's return"
    derived = pd.read_csv(tmp_path / "mine.with_target_date.csv", dtype=str)
    # next_row: the rows on an entity's last date have no target date
    last = derived[derived["dt"] == derived.groupby("permno")["dt"].transform("max")]
    assert last["target_date"].isna().all() and derived["target_date"].notna().sum() == 400 - len(last)
    assert f"{400 - len(last)} valid rows, {len(last)} rejected" in proc.stdout
    assert "preflight passed" in proc.stdout


def test_a_missing_answer_without_input_is_one_line_naming_its_flag(tmp_path: Path) -> None:
    own_csv(tmp_path)
    proc = init(tmp_path, [*FLAGS[:-2], "--model-id", "my-own-model", "--no-input"])
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --training-cutoff: required (Training cutoff of that model (YYYY-MM-DD, from its model card))"
    ]
    proc = init(tmp_path, [*FLAGS, "--entity", "PERMNO", "--no-input"])
    assert proc.returncode == 2 and "--entity: column 'PERMNO' is not in the data" in proc.stderr


def test_the_cutoff_is_proposed_from_the_model_table() -> None:
    from lookahead.init import proposed_cutoff

    assert proposed_cutoff("meta-llama/Llama-3.3-70B-Instruct") == ("2023-12-31", "Llama 3.3")
    assert proposed_cutoff("meta-llama/Meta-Llama-3-8B-Instruct")[0] == "2023-03-31"
    assert proposed_cutoff("demo-clean") is None


@pytest.mark.slow
def test_the_study_init_writes_runs(tmp_path: Path) -> None:
    own_csv(tmp_path)
    assert init(tmp_path, [*FLAGS, "--no-input", "--no-check"]).returncode == 0
    study_file = tmp_path / "mine.yml"
    study = yaml.safe_load(study_file.read_text())
    study.update(raw_dir=str(tmp_path / "raw"), results_dir=str(tmp_path / "results"), outputs_dir=str(tmp_path / "outputs"))
    study_file.write_text(yaml.safe_dump(study))
    proc = subprocess.run(
        [LOOKAHEAD, "run", "--study", str(study_file), "--yes"],
        cwd=ROOT,
        env=dbt_env(tmp_path / "db.duckdb"),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "Verdict: " in proc.stdout and (tmp_path / "results" / "REPORT.md").exists()
