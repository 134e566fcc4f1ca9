"""Loading a GGUF model: the transformers backend against plain transformers calls (CPU).

Run (from the project root):
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_gguf_load.py --rounds 4 \
        --out benchmarks/results/gguf_load.json

What a job process loads from a GGUF file before its first answer: the tokenizer, the
config (the prompt guards read the context length) and the weights.
"plain" is what the backend did before: AutoTokenizer, AutoConfig and
AutoModelForCausalLM `from_pretrained(..., gguf_file=...)` one after the other, each of
which parses the whole file again, the weights' load also building gguf's tensor-name
map once per submodule. "once" is TransformersBackend's tokenizer, context_length and
model, which parse the file once and build the map once per architecture
(lookahead.backends.transformers_backend._gguf_parsed_once). Each is a whole child
process (imports included), on SmolLM2-135M-Instruct's Q4_1 GGUF, the two run back to
back in alternating order; the report is the median of the per-round ratios (once /
plain) of wall and CPU seconds. The check beside the timing: the same weights (sha256
over every tensor of the state dict, in name order), the same tokenizer (its vocabulary
and the ids of a test text), and how many times each path parsed the file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from llm_workload import SMOLLM2_GGUF, smollm2_dir  # this folder

TEXT = "Headline about Acme (ACME) on 2024-03-01: shares rose after record quarterly earnings."


def child(mode: str, out: Path) -> None:
    """Load the tokenizer, the config and the weights the `mode` way; write the figures."""
    import gguf
    import torch

    parses = [0]
    reader_class = gguf.GGUFReader

    class CountingReader(reader_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            parses[0] += 1
            super().__init__(*args, **kwargs)

    gguf.GGUFReader = CountingReader
    folder = str(smollm2_dir())
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    if mode == "plain":
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        seconds["imports"] = time.perf_counter() - t
        t = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
        seconds["tokenizer"], t = time.perf_counter() - t, time.perf_counter()
        config = AutoConfig.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
        context = int(config.max_position_embeddings)
        seconds["config"], t = time.perf_counter() - t, time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, gguf_file=SMOLLM2_GGUF)
        seconds["weights"] = time.perf_counter() - t
    else:
        from lookahead.backends.transformers_backend import TransformersBackend

        seconds["imports"] = time.perf_counter() - t
        t = time.perf_counter()
        backend = TransformersBackend("smollm2", model_path=folder, gguf_file=SMOLLM2_GGUF)
        tok = backend.tokenizer
        seconds["tokenizer"], t = time.perf_counter() - t, time.perf_counter()
        context = int(backend.context_length() or 0)
        seconds["config"], t = time.perf_counter() - t, time.perf_counter()
        model = backend.model
        seconds["weights"] = time.perf_counter() - t
    weights = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        weights.update(name.encode())
        weights.update(tensor.detach().contiguous().numpy().tobytes())
    vocab = hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest()
    out.write_text(
        json.dumps(
            {
                "seconds": seconds,
                "file_parses": parses[0],
                "context_length": context,
                "weights_sha256": weights.hexdigest(),
                "vocab_sha256": vocab,
                "text_ids": tok.encode(TEXT),
            }
        )
    )


def run_child(mode: str, out: Path) -> dict:
    """One child process; its wall and CPU seconds (os.wait4) beside what it wrote."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, "--child-out", str(out)], env=env, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"the {mode} child failed")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, **json.loads(out.read_text())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", choices=("plain", "once"), help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.child_out)
        return 0
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_gguf_load.{os.getpid()}.json"
    rounds = []
    load_before = os.getloadavg()
    for i in range(args.rounds):
        order = ("plain", "once") if i % 2 == 0 else ("once", "plain")
        runs = {mode: run_child(mode, tmp) for mode in order}
        rounds.append({"order": list(order), **runs})
        print(
            f"round {i + 1}: plain {runs['plain']['wall_s']:.1f} s, once {runs['once']['wall_s']:.1f} s "
            f"(file parsed {runs['plain']['file_parses']} and {runs['once']['file_parses']} times)",
            flush=True,
        )
    tmp.unlink(missing_ok=True)
    same = all(
        r["plain"][k] == r["once"][k] for r in rounds for k in ("weights_sha256", "vocab_sha256", "text_ids", "context_length")
    )
    ratio = {m: [r["once"][m] / r["plain"][m] for r in rounds] for m in ("wall_s", "cpu_s")}
    summary = {
        "command": "python benchmarks/bench_gguf_load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": f"SmolLM2-135M-Instruct ({SMOLLM2_GGUF})",
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "same_weights_and_tokenizer": same,
        "median_ratio": {m: statistics.median(v) for m, v in ratio.items()},
        "ratio_range": {m: [min(v), max(v)] for m, v in ratio.items()},
        "median_s": {
            mode: {m: statistics.median(r[mode][m] for r in rounds) for m in ("wall_s", "cpu_s")} for mode in ("plain", "once")
        },
        "rounds": rounds,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"written {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
