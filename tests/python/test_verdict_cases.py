"""Each case of docs/verdict.md: the rule gives exactly the documented verdict and reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from verdict_cases import CASES, case_facts

from lookahead.stats.verdict import (
    LAP_PROBLEMS,
    PATHS,
    PLACEBO,
    UNITS_RULE,
    VALIDATION_FAILURES,
    decide,
    evaluate,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdict.md"
ROW = re.compile(r"^\| `(?P<case>[a-z0-9_]+)` \| `(?P<path>[a-z0-9_]+)` \| (?P<verdict>[^|]+?) \| "
                 r"(?P<reason>[^|]+?) \|$")


def documented() -> dict[str, tuple[str, str, str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            rows[m["case"]] = (m["path"], m["verdict"], m["reason"])
    return rows


def test_every_case_is_documented_and_every_documented_case_exists():
    assert set(documented()) == set(CASES)


@pytest.mark.parametrize("case", list(CASES))
def test_case_wording_and_verdict(case):
    path, verdict, reason = documented()[case]
    assert evaluate(case_facts(case)).path == path
    assert decide(case_facts(case)) == (verdict, reason)


def test_every_code_is_documented_with_its_wording():
    """Each decision path, LAP problem, validation failure and placebo outcome has its row
    in docs/verdict.md, and the units rule is stated there and in the README word for word."""
    doc = DOC.read_text(encoding="utf-8")
    for code in (*PATHS, *LAP_PROBLEMS, *VALIDATION_FAILURES, *PLACEBO):
        assert f"| `{code}` |" in doc, code
    readme = (DOC.parents[1] / "README.md").read_text(encoding="utf-8")
    for text in (doc, readme):
        assert " ".join(UNITS_RULE.split()) in " ".join(text.split())


def test_committed_monte_carlo_meets_the_size_requirement_and_is_what_the_docs_show():
    """docs/montecarlo/results.json: R >= 1,000 in every design and the verdict's detection
    test rejecting at most 6.5% in every null design; docs/montecarlo.md's table is the one
    the run wrote from that file."""
    import json

    import pandas as pd

    from research.montecarlo import TABLE_END, TABLE_START, to_markdown

    res = json.loads((DOC.parent / "montecarlo" / "results.json").read_text(encoding="utf-8"))
    assert all(r["reps"] >= 1000 for r in res["table"]), [(r["design"], r["reps"]) for r in res["table"]]
    nulls = [r for r in res["table"] if r["design"].startswith("null_")]
    assert len(nulls) == 4
    for r in nulls:
        assert r["verdict_detection_test"] <= 0.065, r["design"]
        assert r["verdict_contamination"] <= 0.065, r["design"]
    doc = (DOC.parent / "montecarlo.md").read_text(encoding="utf-8")
    shown = doc.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert shown == to_markdown(pd.DataFrame(res["table"])).strip()


#: The designs of the issue's size table, and the paper's cluster count (docs/montecarlo.md).
SIZE_DESIGNS = ("null_concentrated_30", "null_dominant_30", "null_concentrated_60",
                "null_unbalanced_60", "null_concentrated_100", "null_concentrated_1587")


def test_committed_detection_monte_carlo_holds_size_in_every_design_with_the_wild_p():
    """docs/montecarlo/results_detection.json: R >= 1,000 in every design, the wild p read
    at every G (never CRV1), one-sided size at most 6.5% in every null design of the size
    table, and power reported beside it; the docs show the table the run wrote."""
    import json

    import pandas as pd

    from research.montecarlo import DETECTION_END, DETECTION_START, to_markdown

    res = json.loads((DOC.parent / "montecarlo" / "results_detection.json").read_text(encoding="utf-8"))
    table = {r["design"]: r for r in res["table"]}
    assert set(SIZE_DESIGNS) <= set(table), sorted(table)
    assert "power_concentrated_30" in table  # power beside size
    for name, r in table.items():
        assert r["reps"] >= 1000, name
        assert r["wild_used_share"] == 1.0, name
    for name in SIZE_DESIGNS:
        assert table[name]["verdict_detection_test"] <= 0.065, name
    assert table["null_concentrated_1587"]["g"] == 1587
    doc = (DOC.parent / "montecarlo.md").read_text(encoding="utf-8")
    shown = doc.split(DETECTION_START, 1)[1].split(DETECTION_END, 1)[0].strip()
    assert shown == to_markdown(pd.DataFrame(res["table"])).strip()
