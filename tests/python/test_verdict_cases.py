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
ROW = re.compile(
    r"^\| `(?P<case>[a-z0-9_]+)` \| `(?P<path>[a-z0-9_]+)` \| (?P<verdict>[^|]+?) \| "
    r"(?P<reason>[^|]+?) \|$"
)


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


#: The designs the full-verdict Monte Carlo must cover (docs/montecarlo.md), and the R it
#: reached: strong_memorization_30 at 400, every other design at MIN_REPS or more.
MC_DESIGNS = (
    "null_concentrated_30",
    "null_10_clusters",
    "null_20_clusters",
    "null_iid_50",
    "null_dominant_30",
    "null_concentrated_60",
    "null_unbalanced_60",
    "null_concentrated_100",
    "null_thin_periods_15",
    "power_concentrated_30",
    "paper_like_50",
    "strong_memorization_30",
    "strong_null_post_large_30",
    "strong_thin_periods_15",
)
MIN_REPS = 50


def test_committed_monte_carlo_finds_memorization_holds_size_and_is_what_the_docs_show():
    """docs/montecarlo/results.json (the whole verdict: detection, validation, placebo):
    strong_memorization_30 reads "Contamination detected" in at least 85% of R >= 400
    replications; every null design's false "Contamination detected" rate is at most
    6.5%; every design of the issue is there; docs/montecarlo.md's table is the one the
    run wrote from that file."""
    import json

    import pandas as pd

    from research.montecarlo import TABLE_END, TABLE_START, to_markdown

    res = json.loads((DOC.parent / "montecarlo" / "results.json").read_text(encoding="utf-8"))
    table = {r["design"]: r for r in res["table"]}
    assert set(MC_DESIGNS) <= set(table), sorted(set(MC_DESIGNS) - set(table))
    assert all(r["reps"] >= MIN_REPS for r in table.values()), [(n, r["reps"]) for n, r in table.items()]
    strong = table["strong_memorization_30"]
    assert strong["reps"] >= 400 and strong["verdict_contamination"] >= 0.85
    for name, r in table.items():
        if name.startswith("null_"):
            assert r["verdict_contamination"] <= 0.065, name
            assert r["wild_used_share"] == 1.0, name
    doc = (DOC.parent / "montecarlo.md").read_text(encoding="utf-8")
    shown = doc.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert shown == to_markdown(pd.DataFrame(res["table"])).strip()


def test_the_marts_accept_exactly_the_placebo_outcomes_the_registry_declares() -> None:
    """The dbt data tests on placebo_outcome and placebo_status list the values of
    lookahead.stats.verdict.PLACEBO, every one of them and nothing else: an outcome added
    to the registry and not to the marts' accepted values (their column_rules tests) failed
    the demo's build."""
    from pathlib import Path

    import yaml

    from lookahead.stats.verdict import PLACEBO

    root = Path(__file__).resolve().parents[2]
    want = {"placebo_outcome": set(PLACEBO), "placebo_status": {label for _, label in PLACEBO.values()}}
    seen: dict[str, int] = {}
    for path in (root / "models").rglob("*.yml"):
        for model in (yaml.safe_load(path.read_text()) or {}).get("models", []):
            for test in model.get("data_tests", []):
                if isinstance(test, dict) and "column_rules" in test:
                    accepted = test["column_rules"]["arguments"].get("accepted_values", {})
                    for column in accepted.keys() & want.keys():
                        assert set(accepted[column]) == want[column], (path.name, model["name"], column)
                        seen[column] = seen.get(column, 0) + 1
    assert seen.get("placebo_outcome", 0) >= 2 and seen.get("placebo_status", 0) >= 1, seen
