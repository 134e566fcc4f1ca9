"""Min-K% throughput (scored prompt tokens per second) per backend on SmolLM2-135M-Instruct.

Side by side on the same texts: transformers (the embedded default, the baseline),
vLLM offline batch (.venv-vllm, a separate process because vLLM spawns workers) and the
OpenAI route (OpenAIBackend, 8 concurrent requests, to vLLM's OpenAI server on 127.0.0.1).
Load times are reported apart from query time; every backend gets one warm-up query first.

Usage (after `bash scripts/make_vllm_env.sh` and `.venv/bin/python scripts/export_smollm2_hf.py`):
  PYTHONPATH=. .venv/bin/python benchmarks/bench_backends.py [--texts 64] [--dtype bfloat16]
      [--eager] [--skip vllm,openai] [--texts-from mink] [--out benchmarks/results/backends_cpu.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm_workload import make_texts  # noqa: E402

from lookahead.backends.vllm_serve import VLLM_PYTHON, serve_vllm, vllm_env  # noqa: E402

MODEL_DIR = ROOT / "outputs" / "models" / "smollm2-135m-instruct"
MODEL_ID = "smollm2-135m-instruct"
COMPANIES = [
    "Apple",
    "Microsoft",
    "Tesla",
    "Exxon Mobil",
    "Coca-Cola",
    "Nvidia",
    "Pfizer",
    "Boeing",
    "Walmart",
    "Intel",
    "Netflix",
    "Amazon",
]
EVENTS = [
    "reported quarterly revenue above analyst estimates",
    "cut its full-year guidance",
    "announced a $10 billion share buyback",
    "named a new chief executive officer",
    "recalled vehicles over a software fault",
    "won a large government contract",
    "settled a patent dispute with a rival",
    "raised its dividend by 8 percent",
]


def texts(n: int, seed: int = 0) -> list[str]:
    """Headline-like texts of 20-60 tokens, reproducible from the seed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.sample(COMPANIES, 2)
        out.append(
            f"{a} {rng.choice(EVENTS)} on {2018 + i % 7}-{1 + i % 12:02d}-{1 + i % 28:02d}, "
            f"and its shares moved {rng.randint(1, 9)}.{rng.randint(0, 9)}% while {b} "
            f"{rng.choice(EVENTS)}."
        )
    return out


def _query_module() -> Any:
    spec = importlib.util.spec_from_file_location("query_backend", ROOT / "scripts" / "query_backend.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def max_abs_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Largest |log-prob difference| over all scored prompt tokens of two runs."""
    worst = 0.0
    for ra, rb in zip(a["mink"]["logprobs"], b["mink"]["logprobs"], strict=False):
        for x, y in zip(ra[1:], rb[1:], strict=False):
            worst = max(worst, abs(x["logprob"] - y["logprob"]))
    return worst


def summarise(name: str, res: dict[str, Any], base: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    mink = res["mink"]
    row = {
        "backend": name,
        "load_s": round(res["load_s"], 1),
        "mink_s": round(mink["seconds"], 2),
        "tokens": mink["tokens"],
        "tokens_per_s": round(mink["tokens"] / mink["seconds"], 1),
        **extra,
    }
    if base is not None:
        row["max_abs_dlogprob_vs_transformers"] = max_abs_diff(base, res)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--eager", action="store_true", help="vLLM without torch.compile")
    ap.add_argument("--skip", default="", help="comma-separated backends to leave out")
    ap.add_argument(
        "--texts-from",
        choices=("headlines", "mink"),
        default="headlines",
        help="mink: bench_mink.py's prompts (llm_workload.make_texts), so tokens/s compare with its ceilings",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "backends_cpu.json"))
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if not (MODEL_DIR / "model.safetensors").exists():
        sys.exit("bench_backends: run scripts/export_smollm2_hf.py first")
    prompts = make_texts(args.texts) if args.texts_from == "mink" else texts(args.texts)
    queries = {"mink": prompts, "use_chat_template": False}
    run = _query_module().run
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_backends_"))

    base_res = None
    if "transformers" not in skip:  # baseline; float32 is its default on CPU
        base_res = run("transformers", MODEL_ID, {"model_path": str(MODEL_DIR), "dtype": "float32"}, queries)
        rows.append(summarise("transformers", base_res, None, dtype="float32"))
    vllm_opts = {
        "model_path": str(MODEL_DIR),
        "dtype": args.dtype,
        "enforce_eager": args.eager,
        "kv_cache_gib": 1,
        "max_model_len": 1024,
    }
    if "vllm" not in skip:
        qfile, out = tmp / "q.json", tmp / "vllm.json"
        qfile.write_text(json.dumps(queries))
        proc = subprocess.run(
            [
                str(VLLM_PYTHON),
                str(ROOT / "scripts" / "query_backend.py"),
                "--backend",
                "vllm",
                "--model-id",
                MODEL_ID,
                "--options",
                json.dumps(vllm_opts),
                "--queries",
                str(qfile),
                "--out",
                str(out),
            ],
            cwd=ROOT,
            env=vllm_env(),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            sys.exit(f"bench_backends: vLLM offline failed:\n{proc.stderr[-3000:]}")
        rows.append(summarise("vllm offline", json.loads(out.read_text()), base_res, dtype=args.dtype, eager=args.eager))
    if "openai" not in skip:
        with serve_vllm(MODEL_DIR, MODEL_ID, tmp / "serve.log", dtype=args.dtype, eager=args.eager) as (url, ready_s):
            res = run("openai", MODEL_ID, {"base_url": url, "served_model": MODEL_ID, "timeout_s": 300}, queries)
        rows.append(
            summarise(
                "openai -> vllm server",
                res,
                base_res,
                dtype=args.dtype,
                eager=args.eager,
                server_ready_s=round(ready_s, 1),
                concurrency=8,
            )
        )
    base = next((r["tokens_per_s"] for r in rows if r["backend"] == "transformers"), None)
    print(f"Min-K% on {args.texts} texts, SmolLM2-135M-Instruct, this CPU")
    print(f"{'backend':24} {'dtype':9} {'load s':>7} {'query s':>8} {'tokens':>7} {'tok/s':>8} {'x base':>7} {'max|dlp|':>9}")
    for r in rows:
        ratio = f"{r['tokens_per_s'] / base:.2f}" if base else "-"
        dlp = r.get("max_abs_dlogprob_vs_transformers")
        print(
            f"{r['backend']:24} {r['dtype']:9} {r['load_s']:7.1f} {r['mink_s']:8.2f} "
            f"{r['tokens']:7d} {r['tokens_per_s']:8.1f} {ratio:>7} "
            f"{'-' if dlp is None else f'{dlp:.1e}':>9}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "command": " ".join(["benchmarks/bench_backends.py", *sys.argv[1:]]),
                "texts": args.texts,
                "texts_from": args.texts_from,
                "rows": rows,
                "loadavg_after": os.getloadavg(),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
