"""`--model` runs an existing study on another model as a study of its own (name,
database, cache folder, report), its file unchanged (lookahead.model_switch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dbt_runner import ROOT

LOOKAHEAD = str(Path(sys.executable).with_name("lookahead"))
CLEAN = ROOT / "demo" / "studies" / "clean.yml"


def lookahead(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([LOOKAHEAD, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_check_on_another_model_is_its_own_study_and_the_file_is_unchanged() -> None:
    before = CLEAN.read_bytes()
    proc = lookahead("check", "--study", str(CLEAN), "--model", "demo/models/contaminated", "--training-cutoff", "2021-12-31")
    written = ROOT / "outputs" / "studies" / "demo_clean_protocol__contaminated.yml"
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "study 'demo_clean_protocol__contaminated': settings OK" in proc.stdout
        assert "preflight passed" in proc.stdout
        study = yaml.safe_load(written.read_text())
        assert study["model_path"] == str(ROOT / "demo" / "models" / "contaminated")
        assert study["model_id"] == "contaminated" and study["raw_dir"] == "demo/raw/clean/contaminated"
        assert study["results_dir"] is None and study["extends"] == str(CLEAN)
    finally:
        written.unlink(missing_ok=True)
    assert CLEAN.read_bytes() == before


def test_the_other_models_cutoff_comes_from_the_table_or_a_flag(tmp_path: Path) -> None:
    from lookahead.config import load_study
    from lookahead.model_switch import switched_study

    path = switched_study(str(CLEAN), "meta-llama/Llama-3.3-70B-Instruct", "openai", "http://127.0.0.1:9/v1")
    try:
        study = load_study(str(path))
        assert study.name == "demo_clean_protocol__Llama-3.3-70B-Instruct"
        assert str(study.protocol.training_cutoff) == "2023-12-31"
        assert study.backend.base_url == "http://127.0.0.1:9/v1" and study.backend.model_path is None
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize(
    "args, line",
    [
        (["--model", "my/own-model"], "error: --training-cutoff: no training cutoff is listed for 'my/own-model'"),
        (["--backend", "openai"], "error: --backend, --base-url and --training-cutoff go with --model"),
        (
            ["--model", "my/own-model", "--backend", "openai", "--training-cutoff", "2024-01-31"],
            "error: --base-url: backend openai needs the endpoint of 'my/own-model'",
        ),
    ],
)
def test_a_model_switch_that_cannot_work_is_one_line(args: list[str], line: str) -> None:
    proc = lookahead("check", "--study", str(CLEAN), *args)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(line), proc.stderr
