"""Min-K% at torch's float32 matmul precision 'highest' (the default) against 'medium', on
this machine's CPU: how far 'medium' moves the LAP, and what it buys.

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_cpu_precision.py --texts 32 --rounds 4 \
        --out benchmarks/results/cpu_precision.json

Why this exists: 'medium' lets torch run float32 matmuls on bf16 kernels where the CPU has
them (AMX or AVX512-BF16, e.g. Intel Sapphire Rapids); on a CPU without them it changes
nothing. The backend once defaulted to 'medium' on the CPU, measured on a CPU of the
second kind; on one of the first the same study gave another LAP. The result records the
CPU's flags beside the figures, so a reader knows which kind of machine it was.

Both run the transformers backend (packed fp32 body) on SmolLM2-135M-Instruct over
headline prompts in its chat template, each round both precisions in alternating order;
the time ratio is the median of per-round ratios (medium / highest). The LAP is Min-K%
(k 0.2, geometric), its relative difference per prompt against 'highest'.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from llm_workload import SMOLLM2_GGUF, alternating_rounds, make_texts, smollm2_dir  # this folder

from lookahead.backends.transformers_backend import TransformersBackend
from lookahead.scoring import mink_lap

PRECISIONS = ("highest", "medium")


def cpu_flags() -> list[str]:
    """The CPU's matrix and bf16 flags (/proc/cpuinfo), the ones 'medium' can use."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith("amx") or "bf16" in f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    backends = {
        p: TransformersBackend(
            "SmolLM2-135M-Instruct-Q4_1",
            model_path=str(smollm2_dir()),
            gguf_file=SMOLLM2_GGUF,
            torch_threads=args.threads,
            matmul_precision=p,
        )
        for p in PRECISIONS
    }
    prompts = [backends["highest"].render_prompt(t, True) for t in make_texts(args.texts)]
    for b in backends.values():
        b.prompt_logprobs(prompts[:2])  # load the weights and build the packed body outside the timing
    secs, last, loads = alternating_rounds(
        {p: (lambda b=b: b.prompt_logprobs(prompts)) for p, b in backends.items()}, args.rounds
    )
    logprobs = {p: [[e.logprob for e in row[1:]] for row in last[p]] for p in PRECISIONS}
    laps = {p: [mink_lap([e.logprob for e in row], 0.2, "geometric") for row in last[p]] for p in PRECISIONS}
    rel = [abs(m - h) / abs(h) for h, m in zip(laps["highest"], laps["medium"], strict=True) if h]
    token_diff = max(
        abs(a - b) for h, m in zip(logprobs["highest"], logprobs["medium"], strict=True) for a, b in zip(h, m, strict=True)
    )
    out = {
        "cpu_flags": cpu_flags(),
        "prompts": len(prompts),
        "prompt_tokens": sum(len(row) for row in last["highest"]),
        "rounds": args.rounds,
        "threads": args.threads,
        "seconds": secs,
        "loads": loads,
        "medium_over_highest": statistics.median(m / h for h, m in zip(secs["highest"], secs["medium"], strict=True)),
        "lap_rel_diff_max": max(rel),
        "lap_rel_diff_median": statistics.median(rel),
        "token_logprob_diff_max": token_diff,
    }
    print(json.dumps({k: v for k, v in out.items() if k not in ("seconds", "loads")}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
