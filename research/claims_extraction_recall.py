"""Recall of the demo's planted claims by a study's extractions (lookahead.claims.evaluate:
token-set F1 matching, category agreement over the recalled claims), as JSON on stdout.

    .venv/bin/python -m research.claims_extraction_recall --study FILE --truth demo/claims/truth_claims.csv

A measurement of the extraction, not a command of the tool: the study's claim tables are
built from its raw lines and compared with the planted truth.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from lookahead.claims.evaluate import DEFAULT_THRESHOLD, extraction_recall


def main(argv: list[str] | None = None) -> int:
    from lookahead.claims.tables import build
    from lookahead.config import load_study

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", required=True)
    ap.add_argument("--truth", default="demo/claims/truth_claims.csv")
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    a = ap.parse_args(argv)
    study = load_study(a.study)
    t = build(study)
    truth = pd.read_csv(a.truth)
    truth = truth[truth["instance_id"].isin(set(t["instance_leakage"]["instance_id"]))]
    res = extraction_recall(t["claims"], truth, a.threshold)
    res["instance_status"] = t["instance_leakage"]["status"].value_counts().to_dict()
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
