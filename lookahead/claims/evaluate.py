"""Recall of planted claims by an extractor (the demo's truth against stored extractions).

A planted claim counts as recalled when some extracted claim of the same instance
matches it: token-set F1 >= ``threshold`` on lower-cased alphanumeric tokens (dates
and numbers included, so "opened a factory" without its date does not match a claim
that carries one). Category agreement is reported over the recalled claims.

    .venv/bin/python -m research.claims_extraction_recall --study FILE --truth demo/claims/truth_claims.csv
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

DEFAULT_THRESHOLD = 0.7


def tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", str(text).lower()))


def token_f1(a: str, b: str) -> float:
    ta, tb = tokens(a), tokens(b)
    if not ta or not tb:
        return 0.0
    inter = len(ta & tb)
    if inter == 0:
        return 0.0
    p, r = inter / len(tb), inter / len(ta)
    return 2 * p * r / (p + r)


def extraction_recall(extracted: pd.DataFrame, truth: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD) -> dict[str, Any]:
    """extracted: instance_id, claim_text, category; truth: instance_id, claim_text, category."""
    rows = []
    by_inst = {k: g for k, g in extracted.groupby("instance_id")} if len(extracted) else {}
    for t in truth.itertuples():
        g = by_inst.get(t.instance_id)
        best, cat = 0.0, None
        if g is not None:
            for e in g.itertuples():
                f = token_f1(t.claim_text, e.claim_text)
                if f > best:
                    best, cat = f, e.category
        rows.append(
            {
                "instance_id": t.instance_id,
                "planted": t.claim_text,
                "category": t.category,
                "best_f1": best,
                "recalled": best >= threshold,
                "category_agrees": best >= threshold and cat == t.category,
            }
        )
    df = pd.DataFrame(rows)
    n = len(df)
    rec = int(df["recalled"].sum()) if n else 0
    return {
        "n_planted": n,
        "n_recalled": rec,
        "recall": rec / n if n else None,
        "category_agreement": float(df.loc[df["recalled"], "category_agrees"].mean()) if rec else None,
        "n_extracted": len(extracted),
        "threshold": threshold,
        "by_category": df.groupby("category")["recalled"].mean().round(3).to_dict() if n else {},
        "by_category_counts": {c: {"planted": len(g), "recalled": int(g["recalled"].sum())} for c, g in df.groupby("category")}
        if n
        else {},
    }
