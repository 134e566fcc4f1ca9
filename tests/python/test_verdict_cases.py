"""Each case of docs/verdict.md: the rule gives exactly the documented verdict and reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from verdict_cases import CASES, case_facts

from lookahead.stats.verdict import decide

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdict.md"
ROW = re.compile(r"^\| `(?P<case>[a-z0-9_]+)` \| (?P<verdict>[^|]+?) \| (?P<reason>[^|]+?) \|$")


def documented() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            rows[m["case"]] = (m["verdict"], m["reason"])
    return rows


def test_every_case_is_documented_and_every_documented_case_exists():
    assert set(documented()) == set(CASES)


@pytest.mark.parametrize("case", list(CASES))
def test_case_wording_and_verdict(case):
    verdict, reason = documented()[case]
    assert decide(case_facts(case)) == (verdict, reason)
