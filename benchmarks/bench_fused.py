"""The forecast and every prompt measure from one pass against today's two passes (CPU).

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_fused.py --texts 16 --rounds 4 \
        --out benchmarks/results/fused_cpu.json

"two_passes" is what the forecast job and the Min-K% job ask the transformers backend for
the same rows, one after the other: the greedy forecast answer with the top-20 log-probs
at its first position (``generate``), then every prompt token's log-prob with the
vocabulary moments (``prompt_logprobs(vocab_moments=True)``: Min-K%, loss, Min-K%++) and
the zlib length (zlib). "fused" is ``generate_scored``: one pass over the prompt gives
the same Min-K% line and the distribution after it, and the answer continues from that
pass's keys and values (llm_jobs.fused); the answer's part of the fused time (its greedy
decode) is reported beside the ratio. Both run on SmolLM2-135M-Instruct (the Q4_1
GGUF, de-quantised to float32) over headline prompts in its chat template, with the
study's default forecast_max_tokens.

The machine is shared, so each round runs the two back to back, in alternating order,
and the report is the median of the per-round ratios (fused / two passes); prompt
tokens per second is the prompts' tokens over each path's seconds, and the share of the
matmul ceiling is the prefill's FLOPs (2 x parameters x prompt tokens) per second over
the measured rate of float32 matmuls at Min-K%'s precision (llm_workload.matmul_rate).
The check beside the timing: the same answers, the same Min-K% lines, and how far the
first answer token's top log-probs moved (the prompt pass runs at Min-K%'s precision).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from llm_workload import SMOLLM2_GGUF, alternating_rounds, make_texts, matmul_rate, smollm2_dir  # this folder

from lookahead.backends.transformers_backend import TransformersBackend
from lookahead.config import load_study
from lookahead.measures import zlib_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    max_tokens = int(load_study().prompts.forecast_max_tokens)
    backend = TransformersBackend(
        "SmolLM2-135M-Instruct-Q4_1",
        model_path=str(smollm2_dir()),
        gguf_file=SMOLLM2_GGUF,
        torch_threads=args.threads,
        batch_size=args.batch_size,
    )
    prompts = [backend.render_prompt(t, True) for t in make_texts(args.texts)]
    backend.generate_scored(prompts[:2], max_tokens, 20, vocab_moments=True)  # load and warm up
    backend.generate(prompts[:2], max_tokens, 20)

    def two_passes() -> tuple[list, list]:
        gens = backend.generate(prompts, max_tokens, 20)
        lines = backend.prompt_logprobs(prompts, vocab_moments=True)
        [zlib_bytes(p) for p in prompts]
        return gens, lines

    # the fused time's answer part: the greedy decode after the prompt pass, timed inside it
    answer_secs: list[float] = []
    greedy = backend._continue_greedy

    def timed_greedy(*args: object) -> list:
        t = time.perf_counter()
        out = greedy(*args)
        answer_secs[-1] += time.perf_counter() - t
        return out

    backend._continue_greedy = timed_greedy

    def fused() -> tuple[list, list]:
        answer_secs.append(0.0)
        out = backend.generate_scored(prompts, max_tokens, 20, vocab_moments=True)
        [zlib_bytes(p) for p in prompts]
        return [g for g, _ in out], [e for _, e in out]

    methods = {"two_passes": two_passes, "fused": fused}
    secs, last, loads = alternating_rounds(methods, args.rounds)
    ratios = [f / t for t, f in zip(secs["two_passes"], secs["fused"], strict=False)]
    (g2, l2), (g1, l1) = last["two_passes"], last["fused"]
    n_prompt = sum(len(e) for e in l1)
    same_lines = all(
        (a.token_id, a.logprob, a.vocab_mean, a.vocab_var) == (b.token_id, b.logprob, b.vocab_mean, b.vocab_var)
        for x, y in zip(l2, l1, strict=False)
        for a, b in zip(x, y, strict=False)
    )
    same_answers = sum(a.response_text == b.response_text for a, b in zip(g2, g1, strict=False))
    top_moved = max(
        abs(a.logprob - b.logprob)
        for x, y in zip(g2, g1, strict=False)
        for a, b in zip(x.top_logprobs, y.top_logprobs, strict=False)
    )
    params = sum(p.numel() for p in backend.model.parameters())
    head = backend.model.get_output_embeddings().weight.numel()
    tied = backend.model.get_output_embeddings().weight is backend.model.get_input_embeddings().weight
    # every weight but the input embedding is a matmul at every prompt position (the head
    # too: Min-K% reads every position's distribution); a tied head is counted once in params
    flops_per_token = 2 * (params - backend.model.get_input_embeddings().weight.numel() + (head if tied else 0))
    ceiling = matmul_rate(torch.float32, backend.matmul_precision)
    median = {k: statistics.median(v) for k, v in secs.items()}
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": SMOLLM2_GGUF,
        "texts": args.texts,
        "prompt_tokens": n_prompt,
        "max_tokens": max_tokens,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "threads": args.threads,
        "load_avg_1m": loads,
        "seconds": secs,
        "median_seconds": median,
        "ratio_per_round": ratios,
        "median_ratio": statistics.median(ratios),
        "fused_answer_seconds": answer_secs,
        "median_fused_answer_seconds": statistics.median(answer_secs),
        "prompt_tokens_per_s": {k: n_prompt / v for k, v in median.items()},
        "prefill_flops_per_token": flops_per_token,
        "matmul_ceiling_flops": ceiling,
        "matmul_precision": backend.matmul_precision,
        "share_of_matmul_ceiling": {k: n_prompt * flops_per_token / v / ceiling for k, v in median.items()},
        "same_min_k_lines": same_lines,
        "same_answers": f"{same_answers}/{len(g1)}",
        "max_top_logprob_moved": top_moved,
    }
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "prompt_tokens",
                    "median_seconds",
                    "ratio_per_round",
                    "median_ratio",
                    "median_fused_answer_seconds",
                    "prompt_tokens_per_s",
                    "share_of_matmul_ceiling",
                    "same_min_k_lines",
                    "same_answers",
                    "max_top_logprob_moved",
                )
            },
            indent=1,
        )
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
