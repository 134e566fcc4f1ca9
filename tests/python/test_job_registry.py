"""The job registry (llm_jobs.registry): every LLM job is one entry, documented in
docs/CONTRACTS.md's table "LLM jobs: where a new job goes" in the registry's order, and
the entries a study needs follow from its kind and settings."""

from __future__ import annotations

import re

import pytest
from dbt_runner import ROOT

from llm_jobs.registry import JOBS, study_jobs
from lookahead.config import load_study

CONTRACTS = ROOT / "docs" / "CONTRACTS.md"
SECTION = "### LLM jobs: where a new job goes"


def documented_jobs(text: str) -> list[tuple[str, str, str, str]]:
    """The rows of the section's table: (job, module, context, needed by)."""
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| (\w+) \| ([^|]+?) \|$", section, re.M)


def test_every_job_is_documented_in_order():
    """A job added to the registry without its row (or a row for a job that is gone, or
    the rows out of the run's order) fails here."""
    rows = documented_jobs(CONTRACTS.read_text(encoding="utf-8"))
    assert rows == [(e.name, e.module, e.context, e.needs.words) for e in JOBS]


def test_a_missing_row_is_found():
    """The check can fail: the table without one entry's row no longer matches."""
    text = CONTRACTS.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `claims_value` |"))
    rows = documented_jobs(text.replace(row + "\n", ""))
    assert rows and rows != [(e.name, e.module, e.context, e.needs.words) for e in JOBS]


def test_names_are_unique_and_contexts_declared():
    assert len({e.name for e in JOBS}) == len(JOBS)
    assert {e.context for e in JOBS} == {"protocol", "claims"}
    # the protocol jobs run before the claim jobs (a claim job reads no protocol line, and
    # the run confirms the protocol's questions first)
    contexts = [e.context for e in JOBS]
    assert contexts == sorted(contexts, key=["protocol", "claims"].index)


@pytest.mark.parametrize(
    ("study", "first", "last"),
    [
        ("demo/studies/contaminated.yml", "forecast+mink", "reference"),
        ("demo/claims/regression/leaky.yml", "claims_timespec", "claims_repredict"),
    ],
)
def test_a_study_needs_the_entries_of_its_kind(study: str, first: str, last: str):
    names = [e.name for e in study_jobs(load_study(ROOT / study))]
    assert names[0] == first and names[-1] == last, names


def test_only_names_entries_whatever_the_study_needs():
    """`lookahead jobs --only`: the entries named, in the registry's order, also one the
    study's settings do not call for (an agent the study does not list); an unknown name is
    one line listing the jobs."""
    from lookahead.config import StudyConfigError

    study = load_study(ROOT / "demo/claims/regression/leaky.yml")
    assert "claims_rationale (temporal_hint)" not in [e.name for e in study_jobs(study)]
    picked = study_jobs(study, ["claims_value", "claims_rationale (temporal_hint)", "forecast"])
    assert [e.name for e in picked] == ["forecast", "claims_rationale (temporal_hint)", "claims_value"]
    with pytest.raises(StudyConfigError, match=r"--only 'claims_values': no such job; the jobs are 'forecast\+mink', "):
        study_jobs(study, ["claims_values"])
