"""Compare two raw caches of the same study, key by key: the same queries answered on
two devices (or two backends) must give the same answers within a tolerance.

    python benchmarks/compare_caches.py RAW_DIR_A RAW_DIR_B [--out FILE]

Per task, over the keys both caches hold: forecasts and recall answers equal as text,
recall's top-k log-probs (matched by token id) and Min-K% prompt log-probs as the largest
absolute difference, and Min-K% LAP (lookahead.scoring.mink_lap) and recall LAP
(P(up) + P(down) by lookahead.scoring.label_probability, labels up/down) as the largest relative difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lookahead.scoring import label_probability, mink_lap  # noqa: E402


def read(raw: Path, task: str) -> dict[str, dict[str, Any]]:
    path = raw / f"{task}.jsonl"
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return {rec["key"]: rec for rec in lines}


def top(rec: dict[str, Any]) -> dict[int, float]:
    return {t["token_id"]: t["logprob"] for t in rec.get("top_logprobs") or []}


def recall_lap(rec: dict[str, Any]) -> float:
    """P(up) + P(down) by the protocol's rule (a censored label counts 0)."""
    return sum(label_probability(rec.get("top_logprobs") or [], label) or 0.0 for label in ("up", "down"))


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), 1e-300)


def compare(a: Path, b: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for task in ("forecast", "recall", "mink"):
        ra, rb = read(a, task), read(b, task)
        keys = sorted(ra.keys() & rb.keys())
        row: dict[str, Any] = {
            "keys_a": len(ra),
            "keys_b": len(rb),
            "keys_both": len(keys),
            "same_answer_text": sum(ra[k]["response_text"] == rb[k]["response_text"] for k in keys),
        }
        if task in ("forecast", "recall"):
            diffs, missing = [], 0
            for k in keys:
                ta, tb = top(ra[k]), top(rb[k])
                shared = ta.keys() & tb.keys()
                missing += len(ta) - len(shared)
                diffs += [abs(ta[t] - tb[t]) for t in shared]
            row["max_abs_top_logprob_diff"] = max(diffs, default=0.0)
            row["top_tokens_not_in_both"] = missing
        if task == "recall":
            row["max_rel_recall_lap_diff"] = max(
                (rel(recall_lap(ra[k]), recall_lap(rb[k])) for k in keys if recall_lap(ra[k]) > 0), default=0.0
            )
        if task == "mink":
            lp = lambda rec: [t["logprob"] for t in rec["prompt_logprobs"]]  # noqa: E731
            row["max_abs_prompt_logprob_diff"] = max(
                (abs(x - y) for k in keys for x, y in zip(lp(ra[k])[1:], lp(rb[k])[1:], strict=False)), default=0.0
            )
            row["max_rel_mink_lap_diff"] = max((rel(mink_lap(lp(ra[k])), mink_lap(lp(rb[k]))) for k in keys), default=0.0)
        out[task] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = {"command": " ".join(["benchmarks/compare_caches.py", *sys.argv[1:]]), **compare(args.a, args.b)}
    print(json.dumps(res, indent=1))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
