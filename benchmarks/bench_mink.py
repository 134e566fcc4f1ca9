"""Min-K% throughput: the batched backend against the reference's per-text loop.

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_mink.py --texts 64 --repeats 3

Baseline 1 ("reference loop") does what swj0419/detect-pretrain-code src/run.py does per
text: encode, one forward pass, log_softmax over the full [len, vocab] logits, gather the
next-token log-probs one ``.item()`` at a time. Baseline 2 ("plain batch") pads batches of
32 in input order and takes log_softmax over the full logits. The contender is
``TransformersBackend.prompt_logprobs`` (length-sorted batches; for Llama models the packed
fp32 body of lookahead/backends/fused_llama.py; head and log-softmax only at real
positions, in chunks), also with each other ``mink_body_dtype``. Methods run interleaved, ``--repeats``
rounds, and the median round is reported, so machine load affects all alike. Scores are
checked against the reference loop (max |delta logprob|, max relative delta of Min-K% LAP).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from llm_workload import (  # this folder (the script's own)
    SMOLLM2_GGUF,
    diff_vs_loop,
    make_texts,
    matmul_rate,
    reference_loop,
    smollm2_dir,
    timed_rounds,
)

from lookahead.backends.transformers_backend import TransformersBackend

ROOT = Path(__file__).resolve().parents[1]
GGUF_DIR, GGUF_FILE = smollm2_dir(), SMOLLM2_GGUF


def plain_batch(model, tok, texts: list[str], bs: int = 32) -> list[list[float]]:
    res = []
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    with torch.no_grad():
        for a in range(0, len(texts), bs):
            seqs = [tok.encode(t) for t in texts[a : a + bs]]
            width = max(map(len, seqs))
            ids = torch.full((len(seqs), width), pad)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for i, s in enumerate(seqs):
                ids[i, : len(s)] = torch.tensor(s)
                mask[i, : len(s)] = 1
            lp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits, -1)
            got = lp[:, :-1].gather(2, ids[:, 1:, None]).squeeze(2)
            res += [got[i, : len(s) - 1].tolist() for i, s in enumerate(seqs)]
    return res


class Bf16Linear(torch.nn.Module):
    """An nn.Linear run as bf16 x bf16 (weight converted once), output cast to fp32."""

    def __init__(self, lin: torch.nn.Linear) -> None:
        super().__init__()
        self.weight = lin.weight.detach().to(torch.bfloat16)
        self.bias = None if lin.bias is None else lin.bias.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x.to(torch.bfloat16), self.weight).float()
        return y if self.bias is None else y + self.bias


def bf16_linears(base: torch.nn.Module) -> torch.nn.Module:
    """A copy of a decoder body with every nn.Linear replaced by Bf16Linear."""
    body = __import__("copy").deepcopy(base)
    for module in list(body.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Bf16Linear(child))
    return body.eval()


def matmul_gflops(dtype: torch.dtype, precision: str = "highest") -> float:
    """Measured dense matmul rate (GFLOP/s) at the model's shapes' order of magnitude."""
    return matmul_rate(dtype, precision) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-sizes", default="32", help="contender batch sizes")
    ap.add_argument(
        "--bodies",
        default="float32,float32_transformers,bfloat16",
        help="mink_body_dtype values timed at each contender batch size",
    )
    ap.add_argument(
        "--bf16-linears", action="store_true", help="also time bf16 matmuls with an fp32 residual stream, norms, softmax and head"
    )
    ap.add_argument("--bf16", action="store_true", help="also time a bfloat16 copy of the model")
    ap.add_argument(
        "--medium", action="store_true", help="also time fp32 weights with torch matmul precision 'medium' (bf16 kernels)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mink.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    t0 = time.time()
    backend = TransformersBackend("smollm2", model_path=str(GGUF_DIR), gguf_file=GGUF_FILE)
    model, tok = backend.model, backend.tokenizer
    print(f"model loaded in {time.time() - t0:.1f} s; torch threads {torch.get_num_threads()}")
    texts = make_texts(args.texts)
    n_tok = sum(len(tok.encode(t)) - 1 for t in texts)
    print(
        f"{len(texts)} texts, {n_tok} scored tokens "
        f"(lengths {min(len(tok.encode(t)) for t in texts)}-{max(len(tok.encode(t)) for t in texts)})"
    )

    def contender(
        bs: int, be: TransformersBackend, precision: str = "medium", body: str | None = None
    ) -> Callable[[list[str]], list[list[float]]]:
        def run(tx: list[str]) -> list[list[float]]:
            be.batch_size = bs
            be.matmul_precision = precision
            if body:
                be.mink_body_dtype = body
            return [[x.logprob for x in lp[1:]] for lp in be.prompt_logprobs(tx)]

        return run

    default = TransformersBackend("smollm2", model=model, tokenizer=tok)  # the shipped defaults
    methods: dict[str, Callable[[list[str]], list[list[float]]]] = {
        "reference loop (per text)": lambda tx: reference_loop(model, tok, tx),
        "plain batch 32 (full logits)": lambda tx: plain_batch(model, tok, tx),
        f"default path (bs={default.batch_size}, {default.mink_body_dtype} body)": lambda tx: [
            [x.logprob for x in lp[1:]] for lp in default.prompt_logprobs(tx)
        ],
    }
    for bs in (int(x) for x in args.batch_sizes.split(",")):
        for body in args.bodies.split(","):
            methods[f"batched bs={bs} {body} body"] = contender(bs, backend, body=body)
    if args.bf16_linears:
        # Every nn.Linear of the body as bf16 x bf16 (weights converted once), its output
        # cast back to fp32; residual stream, RMSNorm, rotary, softmax and head stay fp32.
        lin_be = TransformersBackend("smollm2", model=model, tokenizer=tok, mink_body_dtype="float32_transformers")
        lin_be._mink_bodies["float32_transformers"] = bf16_linears(model.model)
        methods["bf16 linears, fp32 residual/norms/softmax/head"] = contender(default.batch_size, lin_be)
    if args.medium:
        big = max(int(x) for x in args.batch_sizes.split(","))
        methods[f"batched bs={big} fp32 matmul=highest"] = contender(big, backend, "highest", "float32")
    if args.bf16:
        bf = TransformersBackend(
            "smollm2-bf16", model=__import__("copy").deepcopy(model).to(torch.bfloat16), tokenizer=tok, dtype="bfloat16"
        )
        methods["batched bs=32 bf16 weights (head too)"] = contender(32, bf)

    for fn in methods.values():  # warm-up on a few texts (allocator, kernels, lazily built bodies)
        fn(texts[:4])
    ceilings0 = {
        "fp32": matmul_gflops(torch.float32),
        "fp32_medium": matmul_gflops(torch.float32, "medium"),
        "bf16": matmul_gflops(torch.bfloat16),
    }
    load0 = os.getloadavg()
    times, results = timed_rounds({name: (lambda fn=fn: fn(texts)) for name, fn in methods.items()}, args.repeats)
    load1 = os.getloadavg()
    ceilings1 = {
        "fp32": matmul_gflops(torch.float32),
        "fp32_medium": matmul_gflops(torch.float32, "medium"),
        "bf16": matmul_gflops(torch.bfloat16),
    }
    ceilings = {k: max(ceilings0[k], ceilings1[k]) for k in ceilings0}
    n_params = sum(p.numel() for p in model.parameters())
    flop_per_token = 2 * n_params

    ref_name = "reference loop (per text)"
    ref = results[ref_name]
    print(
        f"\n{'method':34s} {'median s':>9s} {'tok/s':>8s} {'x loop':>7s} {'max|dlp|':>9s} {'max rel dLAP':>12s}"
        f" {'of bf16 ceiling':>15s}"
    )
    rows = {}
    for name in methods:
        med = statistics.median(times[name])
        per_round = [b / t for b, t in zip(times[ref_name], times[name], strict=False)]
        dlp, dlap = diff_vs_loop(results[name], ref)
        tps = n_tok / med
        rows[name] = {
            "median_s": med,
            "tokens_per_s": tps,
            "ratio_vs_loop_median_of_rounds": statistics.median(per_round),
            "ratio_vs_loop_range": [min(per_round), max(per_round)],
            "max_abs_logprob_diff_vs_fp32_loop": dlp,
            "max_rel_lap_diff_vs_fp32_loop": dlap,
            "fraction_of_ceiling": {k: flop_per_token * tps / (c * 1e9) for k, c in ceilings.items()},
        }
        print(
            f"{name:34s} {med:9.2f} {tps:8.0f} {statistics.median(per_round):7.2f} {dlp:9.2e} {dlap:12.2e}"
            f" {rows[name]['fraction_of_ceiling']['bf16']:15.2f}"
        )
    res = {
        "command": " ".join(["benchmarks/bench_mink.py", *sys.argv[1:]]),
        "model": GGUF_FILE,
        "parameters": n_params,
        "flop_per_token": flop_per_token,
        "texts": len(texts),
        "scored_tokens": n_tok,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "matmul_gflops_ceiling": ceilings,
        "ceiling_tokens_per_s": {k: c * 1e9 / flop_per_token for k, c in ceilings.items()},
        "methods": rows,
        "loadavg_before": load0,
        "loadavg_after": load1,
        "cpus": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
