"""Run the same recall and Min-K% queries through one backend and write the raw answers.

Why a script: vLLM lives in .venv-vllm and spawns worker processes, so the parity tests and
the backend benchmark run it as a separate process (under the `__main__` guard vLLM needs)
and compare its JSON output with the other backends'. It is also a quick smoke check of a
backend setup before a study pays for thousands of queries.

Usage (from the repository root):
  .venv-vllm/bin/python scripts/query_backend.py --backend vllm --model-id smollm2 \
      --options '{"model_path": "outputs/models/smollm2-135m-instruct"}' \
      --queries queries.json --out answers.json
queries.json: {"recall": [user texts], "mink": [texts], "use_chat_template": true,
               "top_logprobs": 20}
answers.json: per task the rendered prompts, the answers (the base.py dataclasses as
dicts), wall seconds and, for Min-K%, the number of scored prompt tokens.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BACKENDS = {
    "transformers": ("lookahead.backends.transformers_backend", "TransformersBackend"),
    "vllm": ("lookahead.backends.vllm_backend", "VLLMBackend"),
    "openai": ("lookahead.backends.openai_backend", "OpenAIBackend"),
}


def run(backend_name: str, model_id: str, options: dict, queries: dict) -> dict:
    """Load the backend, run recall (generate) then Min-K% (prompt_logprobs), time both."""
    module, cls = BACKENDS[backend_name]
    t0 = time.perf_counter()
    backend = getattr(importlib.import_module(module), cls)(model_id, **options)
    result: dict = {"backend": backend_name, "model_id": model_id, "load_s": time.perf_counter() - t0}
    chat = bool(queries.get("use_chat_template", True))
    try:
        if queries.get("recall"):
            prompts = [backend.render_prompt(q, chat) for q in queries["recall"]]
            t0 = time.perf_counter()
            gens = backend.generate(prompts, max_tokens=1, top_logprobs=int(queries.get("top_logprobs", 20)))
            result["recall"] = {"seconds": time.perf_counter() - t0, "prompts": prompts, "generations": [asdict(g) for g in gens]}
        if queries.get("mink"):
            prompts = list(queries["mink"])
            if queries.get("mink_warmup", True):
                backend.prompt_logprobs(prompts[:1])  # first call pays one-off set-up costs
            t0 = time.perf_counter()
            lps = backend.prompt_logprobs(prompts)
            seconds = time.perf_counter() - t0
            result["mink"] = {
                "seconds": seconds,
                "prompts": prompts,
                "tokens": sum(len(r) for r in lps),
                "logprobs": [[asdict(t) for t in row] for row in lps],
            }
    finally:
        backend.close()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    ap.add_argument("--model-id", required=True)
    ap.add_argument("--options", default="{}", help="backend options as a JSON object")
    ap.add_argument("--queries", required=True, help="JSON file with recall/mink texts")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    queries = json.loads(Path(args.queries).read_text(encoding="utf-8"))
    result = run(args.backend, args.model_id, json.loads(args.options), queries)
    tmp = Path(args.out + ".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    tmp.replace(args.out)
    print(f"query_backend: {args.backend} load {result['load_s']:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
