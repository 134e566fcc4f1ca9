"""The forecast and Min-K% of a row in one vLLM request against the two requests the
forecast and Min-K% jobs send alone (vLLM offline, CPU build, in .venv-vllm).

Run (from the project root; the model is the HF export the backend parity tests use,
made by scripts/export_smollm2_hf.py):
    PYTHONPATH=. .venv-vllm/bin/python benchmarks/bench_fused_vllm.py --texts 32 --rounds 4 \
        --out benchmarks/results/fused_vllm_cpu.json

"two_requests" is ``generate`` (greedy answer, top-20 at its first position) then
``prompt_logprobs`` (every prompt token's log-prob) over the same prompts, each one batched
``LLM.generate`` call, as the two jobs ask; "fused" is ``generate_scored``: one call whose
``SamplingParams`` ask ``prompt_logprobs=0`` beside ``logprobs`` (llm_jobs.fused). Both
run SmolLM2-135M-Instruct in float32 on headline prompts in its chat template, with the
study's default forecast_max_tokens. Each round runs the two back to back in alternating
order (the machine is shared); the report is the median of the per-round ratios (fused /
two requests), the prompt tokens per second of each, and beside the timing the same
answers and how far a prompt token's log-prob moved between the two ways.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from llm_workload import alternating_rounds, make_texts  # this folder

from lookahead.backends.vllm_backend import VLLMBackend
from lookahead.config import load_study

MODEL_DIR = Path(__file__).resolve().parents[1] / "outputs" / "models" / "smollm2-135m-instruct"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--model", type=Path, default=MODEL_DIR)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    max_tokens = int(load_study().prompts.forecast_max_tokens)
    backend = VLLMBackend(
        "smollm2-135m-instruct",
        model_path=str(args.model),
        dtype="float32",
        enforce_eager=True,
        kv_cache_gib=1,
        max_model_len=1024,
    )
    prompts = [backend.render_prompt(t, True) for t in make_texts(args.texts)]
    backend.generate_scored(prompts[:2], max_tokens, 20)  # warm up both paths
    backend.prompt_logprobs(prompts[:2])

    def two_requests() -> tuple[list, list]:
        return backend.generate(prompts, max_tokens, 20), backend.prompt_logprobs(prompts)

    def fused() -> tuple[list, list]:
        out = backend.generate_scored(prompts, max_tokens, 20)
        return [g for g, _ in out], [e for _, e in out]

    methods = {"two_requests": two_requests, "fused": fused}
    secs, last, loads = alternating_rounds(methods, args.rounds)
    ratios = [f / t for t, f in zip(secs["two_requests"], secs["fused"], strict=True)]
    (g2, l2), (g1, l1) = last["two_requests"], last["fused"]
    n_prompt = sum(len(e) for e in l1)
    moved = max(
        abs(a.logprob - b.logprob)
        for x, y in zip(l2, l1, strict=True)
        for a, b in zip(x, y, strict=True)
        if a.logprob is not None and b.logprob is not None
    )
    median = {k: statistics.median(v) for k, v in secs.items()}
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "backend": "vllm (CPU build, float32, enforce_eager)",
        "model": "smollm2-135m-instruct",
        "texts": args.texts,
        "prompt_tokens": n_prompt,
        "max_tokens": max_tokens,
        "rounds": args.rounds,
        "load_avg_1m": loads,
        "seconds": secs,
        "median_seconds": median,
        "ratio_per_round": ratios,
        "median_ratio": statistics.median(ratios),
        "prompt_tokens_per_s": {k: n_prompt / v for k, v in median.items()},
        "same_token_ids": all([t.token_id for t in x] == [t.token_id for t in y] for x, y in zip(l2, l1, strict=True)),
        "same_answers": f"{sum(a.response_text == b.response_text for a, b in zip(g2, g1, strict=True))}/{len(g1)}",
        "max_prompt_logprob_moved": moved,
    }
    print(json.dumps({k: result[k] for k in ("median_ratio", "ratio_per_round", "prompt_tokens_per_s", "same_answers")}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
