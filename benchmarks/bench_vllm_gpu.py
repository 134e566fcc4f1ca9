"""vLLM Min-K% and recall throughput on a GPU: tokens/s and model FLOP utilisation.

Runs the project's own VLLMBackend (lookahead/backends/vllm_backend.py), the path the
jobs take with `backend: vllm`, on synthetic headline prompts:
- Min-K%: ``prompt_logprobs`` (one prefill per prompt, log-prob of every prompt token);
  throughput = scored prompt tokens per second.
- recall: ``generate(max_tokens=1, top_logprobs=20)`` on date-only recall prompts;
  throughput = prompt tokens per second (a one-token answer is a prefill).
Model FLOP utilisation (MFU) = 2 x parameters x tokens/s over the measured dense bf16
matmul rate of the same GPU (torch.matmul, 8192^3, the compute ceiling of the protocol's
other figures) and over --peak-tflops when given (the vendor's figure).

Runs unchanged on any CUDA machine with vLLM installed (.venv-vllm or a GPU image):

    python benchmarks/bench_vllm_gpu.py --model /path/to/hf_model [--texts 4096] [--dtype bfloat16]
        [--peak-tflops 989] [--out benchmarks/results/vllm_gpu.json]

It refuses to run without a GPU (vLLM's CPU figures are in bench_backends.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("shares rose fell after the company reported record quarterly earnings revenue guidance "
         "analysts expected lower higher margins demand supply chain recall lawsuit merger "
         "acquisition dividend buyback CEO resigned regulator approved drug trial results").split()


def headlines(n: int, seed: int = 0) -> list[str]:
    """Forecast prompts of varied length (about 40-120 tokens), as in bench_mink.py."""
    rng = random.Random(seed)
    return [f"Headline about Firm {i} (F{i}) on 2021-03-{1 + i % 28:02d}: "
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
            + "\nWill the stock price go up or down on the next trading day?\n"
              "Answer with exactly one word: up or down." for i in range(n)]


def recall_prompts(n: int) -> list[str]:
    return [f"On 2021-{1 + i % 12:02d}-{1 + i % 28:02d}, did the closing stock price of Firm {i} (F{i}) "
            "go up or down compared to the previous trading day?\nAnswer based only on what you recall. "
            "If you do not recall, answer \"unknown\".\nRespond with exactly one word: up, down, or unknown."
            for i in range(n)]


def matmul_tflops(dtype: str = "bfloat16", n: int = 8192, reps: int = 20) -> float:
    """Measured dense matmul rate of GPU 0 (TFLOP/s)."""
    import torch

    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e12


def n_parameters(model_dir: str) -> int:
    """Parameter count from the safetensors headers (no weights loaded)."""
    import struct

    total = 0
    for f in Path(model_dir).glob("*.safetensors"):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        for name, meta in header.items():
            if name != "__metadata__":
                count = 1
                for d in meta["shape"]:
                    count *= d
                total += count
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="local Hugging Face model folder")
    ap.add_argument("--texts", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--peak-tflops", type=float, default=None, help="vendor dense peak (e.g. H100 SXM bf16: 989)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm_gpu.json")
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: this benchmark is for a GPU machine (CPU figures: bench_mink.py, bench_backends.py)")
    from lookahead.backends.vllm_backend import VLLMBackend

    ceiling = matmul_tflops(a.dtype)
    params = n_parameters(a.model)
    backend = VLLMBackend(Path(a.model).name, model_path=a.model, dtype=a.dtype,
                          gpu_memory_utilization=a.gpu_memory_utilization, max_model_len=2048)
    texts, recalls = headlines(a.texts), recall_prompts(a.texts)
    mink_tokens = sum(len(backend.encode(t)) - 1 for t in texts)
    recall_tokens = sum(len(backend.encode(t)) for t in recalls)
    backend.prompt_logprobs(texts[:32])      # warm-up (graphs, allocator)
    backend.generate(recalls[:32], 1, 20)
    t_mink, t_recall = [], []
    for _ in range(a.repeats):                # alternating, so load hits both alike
        t = time.perf_counter()
        backend.prompt_logprobs(texts)
        t_mink.append(time.perf_counter() - t)
        t = time.perf_counter()
        backend.generate(recalls, 1, 20)
        t_recall.append(time.perf_counter() - t)

    def figures(tokens: int, times: list[float]) -> dict:
        tps = tokens / statistics.median(times)
        out = {"tokens": tokens, "median_s": statistics.median(times), "tokens_per_s": tps,
               "mfu_vs_measured_matmul": 2 * params * tps / (ceiling * 1e12)}
        if a.peak_tflops:
            out["mfu_vs_peak"] = 2 * params * tps / (a.peak_tflops * 1e12)
        return out

    import vllm

    res = {
        "command": " ".join(["benchmarks/bench_vllm_gpu.py", *sys.argv[1:]]),
        "gpu": torch.cuda.get_device_name(0), "vllm": vllm.__version__, "torch": torch.__version__,
        "python": platform.python_version(), "model": a.model, "parameters": params, "dtype": a.dtype,
        "measured_matmul_tflops": ceiling, "peak_tflops": a.peak_tflops, "texts": a.texts,
        "load_s": backend.load_seconds, "loadavg": os.getloadavg(),
        "mink": figures(mink_tokens, t_mink), "recall": figures(recall_tokens, t_recall),
    }
    print(json.dumps(res, indent=1))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
