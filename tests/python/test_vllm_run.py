"""`lookahead run` on a study whose backend is vLLM, end to end (issue 37): the command runs
the LLM jobs in the vLLM environment (.venv-vllm, PyPI's CPU build) itself, then builds and
reports as for any backend.

The model is the real SmolLM2-135M-Instruct, exported to Hugging Face format as the backend
parity tests do (scripts/export_smollm2_hf.py). The trained demo models cannot run here: vLLM's
CPU attention refuses their head size ("Unsupported CPU attention configuration: head_dim=24").
SmolLM2 cannot have memorized the demo's fictional firms, so the test asserts that the run
completes through vLLM and reaches a verdict, not which verdict.

Slow tier (`make test-slow` times it) and the vllm tier: skipped without .venv-vllm, which
`lookahead run` would otherwise create first (bash scripts/make_vllm_env.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dbt_runner import ROOT, DbtResult, dbt_env

from lookahead.backends.vllm_serve import vllm_env
from lookahead.stats.verdict import VERDICTS

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

MODEL_DIR = ROOT / "outputs" / "models" / "smollm2-135m-instruct"  # shared with test_backend_parity


def test_lookahead_run_on_a_vllm_study_completes(tmp_path: Path) -> None:
    if not (MODEL_DIR / "model.safetensors").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "export_smollm2_hf.py"), str(MODEL_DIR)],
            check=True,
            env=vllm_env(),
            cwd=ROOT,
            timeout=600,
        )
    study = yaml.safe_load((ROOT / "demo" / "studies" / "smollm2.yml").read_text())
    # three rows per entity on each side of the cutoff: every entity a cluster in both samples
    obs = pd.read_csv(ROOT / study["data_path"], dtype=str)
    pre = obs["target_date"] <= study["training_cutoff"]
    small = pd.concat([obs[pre].groupby("entity_id").head(3), obs[~pre].groupby("entity_id").head(3)])
    small.to_csv(tmp_path / "observations.csv", index=False)
    study.pop("gguf_file", None)
    study.update(
        backend="vllm",
        study_name="demo_smollm2_vllm",
        model_id="smollm2-135m-instruct",
        model_path=str(MODEL_DIR),
        data_path=str(tmp_path / "observations.csv"),
        raw_dir=str(tmp_path / "raw"),
        results_dir=str(tmp_path / "results"),
        outputs_dir=str(tmp_path / "outputs"),
        accept_low_parse_rate=True,
        bootstrap_draws=0,
    )
    study_file = tmp_path / "study.yml"
    study_file.write_text(yaml.safe_dump(study))
    db = tmp_path / "db.duckdb"
    lookahead = Path(sys.executable).with_name("lookahead")
    proc = subprocess.run(
        [str(lookahead), "run", "--study", str(study_file), "--yes"],
        cwd=tmp_path,
        env=dbt_env(db),
        capture_output=True,
        text=True,
        timeout=3000,
    )
    res = DbtResult(proc.returncode, proc.stdout + proc.stderr, db)
    assert proc.returncode == 0, res.output[-4000:]
    lines = [json.loads(x) for x in (tmp_path / "raw" / "forecast.jsonl").read_text().splitlines()]
    assert len(lines) == len(small) and {line["backend"] for line in lines} == {"vllm"}  # vLLM answered
    verdict = res.table("verdict").iloc[0]
    assert verdict["verdict"] in VERDICTS, verdict["reason"]
    assert f"Verdict: {verdict['verdict']}" in proc.stdout
    assert (tmp_path / "results" / "REPORT.md").exists()
