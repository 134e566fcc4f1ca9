"""Cost of the four prompt measures from one pass against Min-K% alone (docs/measures.md).

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_measures.py --texts 48 --repeats 5

"Min-K% alone" is what the mink job asks the transformers backend for a Min-K%-only study
(the prompt-token log-probs). "All four" is what it asks when the study also computes
loss, zlib and Min-K%++: the same pass with the vocabulary mean and variance at every
position (vocab_moments) plus the zlib length of each prompt. loss and zlib read nothing
more from the model; all scores are then SQL over the stored line, outside this timing.
The two run in alternating rounds on SmolLM2-135M-Instruct (vocabulary 49,152), so
machine load hits both alike; the report is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from llm_workload import SMOLLM2_GGUF, make_texts, smollm2_dir, timed_rounds  # this folder

from lookahead.backends.transformers_backend import TransformersBackend
from lookahead.measures import zlib_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    backend = TransformersBackend(
        "SmolLM2-135M-Instruct-Q4_1", model_path=str(smollm2_dir()), gguf_file=SMOLLM2_GGUF, torch_threads=args.threads
    )
    texts = make_texts(args.texts)
    backend.prompt_logprobs(texts[:4], vocab_moments=True)  # load and warm up

    def all_four() -> list:
        out = backend.prompt_logprobs(texts, vocab_moments=True)
        return [(o, zlib_bytes(t)) for o, t in zip(out, texts, strict=False)]

    secs, last = timed_rounds({"mink_alone": lambda: backend.prompt_logprobs(texts), "all_four": all_four}, args.repeats)
    ratios = [b / a for a, b in zip(secs["mink_alone"], secs["all_four"], strict=False)]
    same = all(
        x.logprob == y.logprob
        for a, (b, _) in zip(last["mink_alone"], last["all_four"], strict=False)
        for x, y in zip(a, b, strict=False)
    )
    n_tok = sum(len(o) - 1 for o in last["mink_alone"])
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": SMOLLM2_GGUF,
        "texts": args.texts,
        "scored_tokens": n_tok,
        "repeats": args.repeats,
        "threads": args.threads,
        "load_avg_1m": os.getloadavg()[0],
        "seconds": secs,
        "median_seconds": {k: statistics.median(v) for k, v in secs.items()},
        "ratio_per_round": ratios,
        "median_ratio": statistics.median(ratios),
        "same_logprobs": same,
    }
    print(
        json.dumps(
            {
                k: result[k]
                for k in ("scored_tokens", "median_seconds", "ratio_per_round", "median_ratio", "same_logprobs", "load_avg_1m")
            },
            indent=1,
        )
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
