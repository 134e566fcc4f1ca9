"""Min-K% and recall throughput on one GPU: tokens/s and model FLOP utilisation (MFU).

Two engines, each the path the jobs take:
- ``--engine transformers``: TransformersBackend with ``device: cuda`` (study settings
  ``backend: transformers``, ``device: cuda``). Timed side by side, in alternating rounds,
  against the reference per-text Min-K% loop on the same GPU (benchmarks/llm_workload.py),
  at the default batch size and larger ones, with each Min-K% body and matmul precision
  the settings allow. Every path's Min-K% LAP is compared with the fp32 per-text loop.
- ``--engine vllm``: VLLMBackend (``backend: vllm``): ``prompt_logprobs`` for Min-K% and
  ``generate(max_tokens=1, top_logprobs=20)`` for recall.

Min-K% throughput is scored prompt tokens per second; recall throughput is prompt tokens
per second (a one-token answer is one prefill). MFU = 2 x parameters x tokens/s over the
measured dense matmul rate of the same GPU (8192^3 products) at the precision the path
runs its matmuls: fp32, TF32 (torch matmul precision 'high') or bf16; and over
--peak-tflops when given (the vendor's figure).

    python benchmarks/bench_gpu.py --engine transformers --model DIR [--gguf-file F]
    python benchmarks/bench_gpu.py --engine transformers --random-llama smollm2-1.7b --tokenizer DIR
    python benchmarks/bench_gpu.py --engine vllm --model DIR [--dtype bfloat16]
        [--texts 4096] [--peak-tflops 989] [--out benchmarks/results/gpu_<engine>.json]

``--random-llama`` builds a Llama of a named shape with random weights: throughput does not
depend on the weights' values, and it times model sizes no file here holds (their LAP
deltas are reported but are not a real model's). It refuses to run without a CUDA GPU
(the CPU figures are bench_mink.py and bench_backends.py), except with --cpu-check, which
runs the same code on the CPU with small matmuls to check the script, not to measure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_workload import diff_vs_loop, make_texts, matmul_rate, recall_prompts, reference_loop, timed_rounds  # noqa: E402

DEVICE = "cuda"  # "cpu" with --cpu-check
MATMUL_N = 8192  # ceiling matmuls: n x n x n (1024 with --cpu-check)

# Llama shapes for --random-llama: hidden, intermediate, layers, heads, kv heads, vocab, tied head
SHAPES = {
    "smollm2-135m": (576, 1536, 30, 9, 3, 49152, True),
    "smollm2-1.7b": (2048, 8192, 24, 32, 32, 49152, True),
    "llama-3-8b": (4096, 14336, 32, 32, 8, 128256, False),
}


def ceilings() -> dict[str, float]:
    """Measured dense matmul rates (TFLOP/s) at each precision a path can run."""
    import torch

    rate = lambda dt, prec: matmul_rate(dt, prec, n=MATMUL_N, reps=20, device=DEVICE) / 1e12  # noqa: E731
    return {"fp32": rate(torch.float32, "highest"), "tf32": rate(torch.float32, "high"), "bf16": rate(torch.bfloat16, "highest")}


def random_llama(shape: str) -> Any:
    import torch
    import transformers

    h, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    cfg = transformers.LlamaConfig(
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    with torch.device(DEVICE):
        return transformers.LlamaForCausalLM(cfg).eval()


def warm_then_time(methods: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """One warm-up call of each method (kernels, allocator, lazily built bodies), then
    llm_workload.timed_rounds on DEVICE."""
    import torch

    for fn in methods.values():
        fn()
    return timed_rounds(methods, repeats, torch.cuda.synchronize if DEVICE == "cuda" else lambda: None)


def transformers_engine(a: argparse.Namespace) -> dict[str, Any]:
    import copy

    import torch

    from lookahead.backends.transformers_backend import TransformersBackend

    t0 = time.perf_counter()
    if a.random_llama:
        from transformers import AutoTokenizer

        model, tok = random_llama(a.random_llama), AutoTokenizer.from_pretrained(a.tokenizer)
    else:
        probe = TransformersBackend(Path(a.model).name, model_path=a.model, gguf_file=a.gguf_file, device=DEVICE)
        model, tok = probe.model, probe.tokenizer
    load_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    texts, recalls = make_texts(a.texts), recall_prompts(a.texts)
    loop_texts = texts[: a.loop_texts]

    def backend(**kw: Any) -> TransformersBackend:
        return TransformersBackend("bench", model=model, tokenizer=tok, device=DEVICE, **kw)

    def mink(be: TransformersBackend, tx: list[str]) -> Callable[[], list[list[float]]]:
        return lambda: [[x.logprob for x in lp[1:]] for lp in be.prompt_logprobs(tx)]

    bf16_model = copy.deepcopy(model).to(torch.bfloat16)
    default = backend()
    contenders: dict[str, TransformersBackend] = {f"default path (bs={default.batch_size}, fp32 packed body)": default}
    for bs in a.batch_sizes:
        contenders[f"bs={bs} fp32 packed body"] = backend(batch_size=bs)
        contenders[f"bs={bs} fp32 packed body, TF32 matmuls"] = backend(batch_size=bs, matmul_precision="high")
        contenders[f"bs={bs} bf16 body (mink_body_dtype)"] = backend(batch_size=bs, mink_body_dtype="bfloat16")
        contenders[f"bs={bs} bf16 weights (dtype)"] = TransformersBackend(
            "bench", model=bf16_model, tokenizer=tok, device=DEVICE, dtype="bfloat16", batch_size=bs
        )
    precision = {"TF32": "tf32", "bf16": "bf16"}

    def ceiling_of(name: str) -> str:
        return next((v for k, v in precision.items() if k in name), "fp32")

    # Min-K%: the per-text loop and each contender on the loop's texts (the LAP check and
    # the ratio), then each contender on all texts (its throughput at a GPU-sized batch).
    methods: dict[str, Callable[[], Any]] = {"reference loop (per text)": lambda: reference_loop(model, tok, loop_texts, DEVICE)}
    methods |= {f"{k} [loop texts]": mink(be, loop_texts) for k, be in contenders.items()}
    methods |= {k: mink(be, texts) for k, be in contenders.items()}
    recall_default = {
        f"recall, default path (bs={default.batch_size})": default,
        **{f"recall, bs={bs}": backend(batch_size=bs) for bs in a.batch_sizes},
    }
    methods |= {k: (lambda be=be: be.generate(recalls, 1, 20)) for k, be in recall_default.items()}
    ceil = ceilings()
    times, out = warm_then_time(methods, a.repeats)
    ceil_after = ceilings()
    ceil = {k: max(ceil[k], ceil_after[k]) for k in ceil}

    loop_tokens = sum(len(tok.encode(t)) - 1 for t in loop_texts)
    all_tokens = sum(len(tok.encode(t)) - 1 for t in texts)
    recall_tokens = sum(len(tok.encode(t)) for t in recalls)
    ref = out["reference loop (per text)"]
    loop_tps = loop_tokens / statistics.median(times["reference loop (per text)"])

    def figures(name: str, tokens: int, kind: str) -> dict[str, Any]:
        tps = tokens / statistics.median(times[name])
        res = {
            "median_s": statistics.median(times[name]),
            "tokens": tokens,
            "tokens_per_s": tps,
            "mfu_vs_measured_matmul": 2 * params * tps / (ceil[kind] * 1e12),
            "matmul_ceiling": kind,
        }
        if a.peak_tflops:
            res["mfu_vs_peak"] = 2 * params * tps / (a.peak_tflops * 1e12)
        return res

    mink_rows: dict[str, Any] = {
        "reference loop (per text)": {**figures("reference loop (per text)", loop_tokens, "fp32"), "ratio_vs_loop": 1.0}
    }
    for name in contenders:
        row = figures(name, all_tokens, ceiling_of(name))
        row["loop_texts_tokens_per_s"] = loop_tokens / statistics.median(times[f"{name} [loop texts]"])
        row["ratio_vs_loop"] = row["tokens_per_s"] / loop_tps
        row["ratio_vs_loop_same_texts"] = row["loop_texts_tokens_per_s"] / loop_tps
        row["max_abs_logprob_diff_vs_fp32_loop"], row["max_rel_lap_diff_vs_fp32_loop"] = diff_vs_loop(
            out[f"{name} [loop texts]"], ref
        )
        mink_rows[name] = row
    recall_rows = {k: figures(k, recall_tokens, "fp32") for k in recall_default}
    print(f"{'Min-K% method':52s} {'tok/s':>10s} {'x loop':>7s} {'MFU':>7s} {'max rel dLAP':>12s}")
    for name, r in mink_rows.items():
        print(
            f"{name:52s} {r['tokens_per_s']:10.0f} {r['ratio_vs_loop']:7.1f} {r['mfu_vs_measured_matmul']:7.3f}"
            f" {r.get('max_rel_lap_diff_vs_fp32_loop', 0.0):12.2e}"
        )
    for name, r in recall_rows.items():
        print(f"{name:52s} {r['tokens_per_s']:10.0f} {'':7s} {r['mfu_vs_measured_matmul']:7.3f}")
    return {
        "engine": "transformers",
        "model": a.random_llama or a.model,
        "gguf_file": a.gguf_file,
        "random_weights": bool(a.random_llama),
        "parameters": params,
        "load_s": load_s,
        "loop_texts": len(loop_texts),
        "measured_matmul_tflops": ceil,
        "mink": mink_rows,
        "recall": recall_rows,
    }


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


def vllm_engine(a: argparse.Namespace) -> dict[str, Any]:
    import vllm

    from lookahead.backends.vllm_backend import VLLMBackend

    ceil = ceilings()
    check = {"kv_cache_gib": 1, "enforce_eager": True} if DEVICE == "cpu" else {}  # a quick start on a CPU
    backend = VLLMBackend(
        Path(a.model).name,
        model_path=a.model,
        dtype=a.dtype,
        gpu_memory_utilization=a.gpu_memory_utilization,
        max_model_len=2048,
        **check,
    )
    params = n_parameters(a.model)
    texts, recalls = make_texts(a.texts), recall_prompts(a.texts)
    mink_tokens = sum(len(backend.encode(t)) - 1 for t in texts)
    recall_tokens = sum(len(backend.encode(t)) for t in recalls)
    methods = {"mink": lambda: backend.prompt_logprobs(texts), "recall": lambda: backend.generate(recalls, 1, 20)}
    times, _ = warm_then_time(methods, a.repeats)
    kind = "bf16" if a.dtype in ("bfloat16", "float16") else "fp32"

    def figures(tokens: int, t: list[float]) -> dict[str, Any]:
        tps = tokens / statistics.median(t)
        return {
            "tokens": tokens,
            "median_s": statistics.median(t),
            "tokens_per_s": tps,
            "matmul_ceiling": kind,
            "mfu_vs_measured_matmul": 2 * params * tps / (ceil[kind] * 1e12),
        }

    return {
        "engine": "vllm",
        "vllm": vllm.__version__,
        "model": a.model,
        "parameters": params,
        "dtype": a.dtype,
        "load_s": backend.load_seconds,
        "measured_matmul_tflops": ceil,
        "mink": figures(mink_tokens, times["mink"]),
        "recall": figures(recall_tokens, times["recall"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("transformers", "vllm"), default="transformers")
    ap.add_argument("--model", help="local Hugging Face model folder (or the folder of --gguf-file)")
    ap.add_argument("--gguf-file", default=None)
    ap.add_argument("--random-llama", choices=sorted(SHAPES), default=None)
    ap.add_argument("--tokenizer", help="tokenizer folder for --random-llama")
    ap.add_argument("--texts", type=int, default=4096)
    ap.add_argument("--loop-texts", type=int, default=256, help="texts the per-text loop (and the LAP check) runs")
    ap.add_argument("--batch-sizes", default="128", help="contender batch sizes beside the default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16", help="vllm engine: weights' dtype")
    ap.add_argument("--peak-tflops", type=float, default=None, help="vendor dense peak (e.g. H100 SXM bf16: 989)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cpu-check", action="store_true", help="run on the CPU to check the script (no figures)")
    a = ap.parse_args()
    a.batch_sizes = [int(x) for x in a.batch_sizes.split(",") if x]
    if not (a.model or (a.random_llama and a.tokenizer)):
        ap.error("give --model, or --random-llama with --tokenizer")

    import torch

    global DEVICE, MATMUL_N
    if a.cpu_check:
        DEVICE, MATMUL_N = "cpu", 1024
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: this benchmark is for a GPU machine (CPU figures: bench_mink.py, bench_backends.py)")
    res = transformers_engine(a) if a.engine == "transformers" else vllm_engine(a)
    gpu = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "none (--cpu-check)"
    res = {
        "command": " ".join(["benchmarks/bench_gpu.py", *sys.argv[1:]]),
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "texts": a.texts,
        "repeats": a.repeats,
        "peak_tflops": a.peak_tflops,
        "loadavg": os.getloadavg(),
        **res,
    }
    out = a.out or ROOT / "benchmarks" / "results" / f"gpu_{a.engine}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
