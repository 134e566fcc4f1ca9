"""The seed's two cost devices of the claim pipeline, counted on a loopback
OpenAI-compatible server (the real `openai` client and backend, every request counted
where it arrives):

* coalition values (llm_jobs.claims_value) one coalition a request (claims_coalition_batch:
  1) against the seed's Claim ID Reference System at its batch size (256): requests,
  prompt characters, and prompt tokens by the demo claim model's tokenizer (and the
  answers' characters and tokens: a batched answer spells out each SET's object)
  (demo/claims/models/prudent: a word-level tokenizer, one token a word or punctuation
  mark), for each shipped claim demo (classification, regression, ranking: their
  extractions, predictions and plans), under the seed prompt and stated values. The
  server answers a coalition by a fixed function of its claims' texts, alone or as a
  SET, so the two runs must store the same value for every coalition: checked, and the
  count of differing values is in the result;
* the category shortcuts (A4/A5 leaked, B1/B2 not leaked, with no search): support
  judgments (llm_jobs.claims_support, claims_support_judge: llm) sent with the shortcut
  (counted at the server) against the BM25 candidates every claim would get without it
  (the same retrieval over every claim, the same prompt), for the same demos.

Nothing of the demos is changed: each run is a study extending the demo's, in a
temporary folder. Writes benchmarks/results/claims_batch.json.

    python benchmarks/bench_claims_batch.py [--batch 256] [--out benchmarks/results/claims_batch.json]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEMOS = {
    "classification": "demo/claims/prudent.yml",
    "regression": "demo/claims/regression/prudent.yml",
    "ranking": "demo/claims/ranking/prudent.yml",
}
TOKENIZER = ROOT / "demo" / "claims" / "models" / "prudent"


def _h(texts: list[str]) -> int:
    return int(hashlib.sha256("\n".join(sorted(texts)).encode()).hexdigest(), 16)


def _items(prompt: str) -> list[str]:
    m = re.search(r"BEST to WORST: (.*?)(?:\. Answer|\.\n|\.$)", prompt, re.DOTALL)
    return m.group(1).split(", ") if m else []


def _value(prompt: str, claims: list[str]) -> Any:
    """The model's answer for a coalition: a fixed function of its claims' texts."""
    h = _h(claims)
    if "BEST to WORST" in prompt:
        items = _items(prompt)
        k = h % len(items)
        return items[k:] + items[:k]
    if "probability" in prompt:
        return (h % 9 + 1) / 10
    return 10 + h % 20


def answer(prompt: str) -> tuple[str, dict[str, float] | None]:
    if "Does the document state or directly support the claim?" in prompt:
        yes = _h([prompt]) % 2 == 0
        return ("yes" if yes else "no"), {"yes": -0.1 if yes else -2.3, "no": -2.3 if yes else -0.1}
    if "CLAIMS (reference by ID):" in prompt:
        listed = prompt.split("CLAIMS (reference by ID):\n", 1)[1].split("\n\n", 1)[0]
        claims = [re.sub(r"^\[\d+\] ", "", x) for x in listed.splitlines()]
        sets = [json.loads(s) for s in re.findall(r"^SET \d+: (\[[\d, ]*\])$", prompt, re.MULTILINE)]
        field = "ranking" if "BEST to WORST" in prompt else ("p" if "probability" in prompt else "value")
        out = [{"set": j, field: _value(prompt, [claims[i - 1] for i in s])} for j, s in enumerate(sets, 1)]
        return json.dumps(out), None
    listed = prompt.split("CLAIMS:\n", 1)[1].split("\n\nOUTPUT:", 1)[0]
    claims = [] if listed == "(none)" else [re.sub(r"^\d+\. ", "", x) for x in listed.splitlines()]
    v = _value(prompt, claims)
    return (" > ".join(v) if isinstance(v, list) else str(v)), None


class Server:
    """A loopback completions server that counts every request it answers."""

    def __init__(self) -> None:
        self.prompts: list[tuple[str, str]] = []  # (prompt, answer) of every request
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text, top = answer(body["prompt"])
                with outer.lock:
                    outer.prompts.append((body["prompt"], text))
                lp = {"tokens": [text], "token_logprobs": [-0.1], "top_logprobs": [top], "text_offset": [0]} if top else None
                out = {
                    "id": "x",
                    "object": "text_completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": lp}],
                }
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def take(self) -> list[tuple[str, str]]:
        with self.lock:
            out, self.prompts = self.prompts, []
        return out


def study(tmp: Path, demo: str, url: str, name: str, **kw: Any) -> Path:
    import yaml

    v = {
        "extends": demo,
        "study_name": f"bench_{name}",
        "raw_dir": str(tmp / name),
        "claims_raw_dir": str(tmp / name),
        "backend": "openai",
        "base_url": url,
        "api_mode": "completions",
        "use_chat_template": False,
        "concurrency": 8,
        "claims_coalition_prompt": "seed",
        "claims_coalition_value": "stated",
        **kw,
    }
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(v))
    return path


def run_job(module: Any, path: Path) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = module.main(["--study", str(path), "--yes"])
    if code:
        raise SystemExit(f"{module.__name__} on {path} exited {code}:\n{out.getvalue()[-2000:]}")


def sizes(sent: list[tuple[str, str]], count: Any) -> dict[str, int]:
    """Requests, prompt characters and tokens, and the answers' characters and tokens."""
    return {
        "requests": len(sent),
        "prompt_chars": sum(len(p) for p, _ in sent),
        "prompt_tokens": sum(count(p) for p, _ in sent),
        "answer_chars": sum(len(a) for _, a in sent),
        "answer_tokens": sum(count(a) for _, a in sent),
    }


def values(path: Path) -> dict[str, Any]:
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out[r["key"]] = r.get("label_probs") or r.get("value") if r.get("ranking") is None else r["ranking"]
    return out


def support_counts(path: Path, count: Any) -> dict[str, Any]:
    """Support judgments without the shortcut: the BM25 candidates of every claim (not
    only A1-A3), each one support prompt, as the job would send them."""
    from llm_jobs.claims_common import make_claim_context, predictions
    from llm_jobs.cli import arg_parser
    from lookahead.claims.inputs import load_corpus
    from lookahead.claims.prompts import support_prompt
    from lookahead.claims.retrieval import bm25
    from lookahead.claims.schema import CATEGORY_RULE
    from lookahead.claims.tables import candidate_queries, instance_agent_id, instance_claims, sha

    ctx = make_claim_context(arg_parser("x").parse_args(["--study", str(path), "--yes"]))
    st = ctx.settings
    corpus, _ = load_corpus(st)
    with contextlib.redirect_stdout(io.StringIO()):
        items = [
            (instance_agent_id(r["instance_id"], r["agent"]), c)
            for r, ex in instance_claims(ctx.study, st, predictions(ctx))
            for c in ex.claims
        ]
    docs = corpus.set_index("doc_id")
    every = {sha(c.claim_text): c.claim_text for _, c in items}
    qdf = candidate_queries(items)
    import pandas as pd

    qall = pd.DataFrame({"query_id": list(every), "query_text": list(every.values())})
    out: dict[str, Any] = {
        "claims": len(items),
        "by_rule": {
            rule: sum(CATEGORY_RULE[c.category] == rule for _, c in items) for rule in sorted(set(CATEGORY_RULE.values()))
        },
        "distinct_claims_searched": len(qdf),
        "distinct_claims": len(qall),
    }
    for label, q in (("with_shortcut_computed", qdf), ("without_shortcut", qall)):
        cands = bm25(q, corpus, st.claims.claims_bm25_k)
        texts = dict(zip(q["query_id"], q["query_text"], strict=False))
        prompts = [
            support_prompt(
                texts[c.query_id],
                docs.loc[c.doc_id]["title"],
                docs.loc[c.doc_id]["body"],
                str(docs.loc[c.doc_id]["published_at"]),
            )
            for c in cands.itertuples()
        ]
        out[label] = sizes([(p, "yes") for p in prompts], count)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "claims_batch.json"))
    args = ap.parse_args()
    os.chdir(ROOT)
    from llm_jobs import claims_support, claims_value
    from lookahead.backends.token_count import FileTokenCounter, file_tokenizer

    tok = file_tokenizer(TOKENIZER)
    if tok is None:
        raise SystemExit(f"no tokenizer in {TOKENIZER}")
    count = FileTokenCounter(tok)
    srv = Server()
    result: dict[str, Any] = {
        "command": f"python benchmarks/bench_claims_batch.py --batch {args.batch}",
        "tokenizer": str(TOKENIZER.relative_to(ROOT)) + " (word-level)",
        "batch": args.batch,
        "code": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "demos": {},
    }
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for kind, demo in DEMOS.items():
                t0 = time.perf_counter()
                one = study(tmp, demo, srv.url, f"{kind}_single", claims_coalition_batch=1)
                run_job(claims_value, one)
                single = sizes(srv.take(), count)
                many = study(tmp, demo, srv.url, f"{kind}_batched", claims_coalition_batch=args.batch)
                run_job(claims_value, many)
                batched = sizes(srv.take(), count)
                va, vb = (
                    values(tmp / f"{kind}_single" / "claims_value.jsonl"),
                    values(tmp / f"{kind}_batched" / "claims_value.jsonl"),
                )
                run_job(claims_value, many)  # a second run: everything cached
                rerun = len(srv.take())
                sup = study(tmp, demo, srv.url, f"{kind}_support", claims_support_judge="llm")
                run_job(claims_support, sup)
                sent = sizes(srv.take(), count)
                support = support_counts(sup, count)
                support["with_shortcut_sent"] = sent
                row = {
                    "study": demo,
                    "coalitions": len(va),
                    "single": single,
                    "batched": batched,
                    "request_ratio": single["requests"] / batched["requests"],
                    "char_ratio": single["prompt_chars"] / batched["prompt_chars"],
                    "token_ratio": single["prompt_tokens"] / batched["prompt_tokens"],
                    "values_differing": sum(va[k] != vb.get(k) for k in va) + len(set(vb) - set(va)),
                    "rerun_requests": rerun,
                    "support": support,
                    "support_requests_saved": support["without_shortcut"]["requests"] - sent["requests"],
                    "seconds": round(time.perf_counter() - t0, 1),
                }
                result["demos"][kind] = row
                print(
                    f"{kind:14s} coalitions {row['coalitions']:5d}: requests {single['requests']:5d} -> {batched['requests']:3d} "
                    f"({row['request_ratio']:.1f}x), prompt chars {single['prompt_chars']:9,d} -> {batched['prompt_chars']:7,d} "
                    f"({row['char_ratio']:.1f}x), tokens {single['prompt_tokens']:8,d} -> {batched['prompt_tokens']:6,d} "
                    f"({row['token_ratio']:.1f}x); answer tokens {single['answer_tokens']:,d} -> "
                    f"{batched['answer_tokens']:,d}; values differing {row['values_differing']}; rerun requests {rerun}"
                )
                print(
                    f"{'':14s} support judgments: {support['without_shortcut']['requests']} without the shortcut, "
                    f"{sent['requests']} with it ({support['distinct_claims_searched']} of {support['distinct_claims']} "
                    f"distinct claims searched; prompt tokens {support['without_shortcut']['prompt_tokens']:,d} -> "
                    f"{sent['prompt_tokens']:,d})"
                )
                if support["with_shortcut_computed"]["requests"] != sent["requests"]:
                    raise SystemExit("the support requests counted at the server differ from the candidates computed")
    finally:
        srv.srv.shutdown()
    fields = ("requests", "prompt_chars", "prompt_tokens", "answer_chars", "answer_tokens")
    tot = {side: {k: sum(r[side][k] for r in result["demos"].values()) for k in fields} for side in ("single", "batched")}
    result["total"] = {**tot, **{f"{k}_ratio": tot["single"][k] / tot["batched"][k] for k in fields}}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
