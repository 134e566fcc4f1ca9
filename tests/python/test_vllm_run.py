"""`lookahead run` on a study whose backend is vLLM, end to end (issue 37): the command runs
the LLM jobs in the vLLM environment (.venv-vllm, PyPI's CPU build) itself, then builds and
reports as for any backend. The contaminated demo with `backend: vllm` on the same trained
demo model: its verdict is known by construction.

Slow tier (`make test-slow` times it) and the vllm tier: skipped without .venv-vllm, which
`lookahead run` would otherwise create first (bash scripts/make_vllm_env.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dbt_runner import ROOT, DbtResult, dbt_env

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_lookahead_run_on_a_vllm_study_completes(tmp_path: Path) -> None:
    study = yaml.safe_load((ROOT / "demo" / "studies" / "contaminated.yml").read_text())
    study.update(backend="vllm", study_name="demo_contaminated_vllm", model_id="demo-contaminated",
                 raw_dir=str(tmp_path / "raw"), results_dir=str(tmp_path / "results"),
                 outputs_dir=str(tmp_path / "outputs"),
                 max_model_len=256)  # the demo model's context (max_position_embeddings); vLLM refuses more
    study_file = tmp_path / "study.yml"
    study_file.write_text(yaml.safe_dump(study))
    db = tmp_path / "db.duckdb"
    lookahead = Path(sys.executable).with_name("lookahead")
    proc = subprocess.run([str(lookahead), "run", "--study", str(study_file), "--yes"],
                          cwd=tmp_path, env=dbt_env(db), capture_output=True, text=True, timeout=3000)
    res = DbtResult(proc.returncode, proc.stdout + proc.stderr, db)
    assert proc.returncode == 0, res.output[-4000:]
    lines = [json.loads(x) for x in (tmp_path / "raw" / "forecast.jsonl").read_text().splitlines()]
    assert lines and {line["backend"] for line in lines} == {"vllm"}  # answered by vLLM, not transformers
    verdict = res.table("verdict").iloc[0]
    assert verdict["verdict"] == "Contamination detected", verdict["reason"]
    assert "Verdict: Contamination detected" in proc.stdout
    assert (tmp_path / "results" / "REPORT.md").exists()
