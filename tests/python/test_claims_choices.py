"""The choices where seed 002 is silent or the tool departs from it: docs/claims.md's
table and the registry lookahead.claims.choices name the same choices, and a report's
claim section lists those its study used, with the rule its settings made."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import yaml

from lookahead.claims.choices import CHOICES
from lookahead.claims.tables import build
from lookahead.config import default_study_path, load_study, read_study_file
from lookahead.pages.claims_report import ClaimTables
from lookahead.pages.markdown import render
from lookahead.pages.sections import claims_section

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Choices where the seed is silent or the tool departs from it"


def _doc_rows() -> list[list[str]]:
    """The cells of every row of docs/claims.md's table of choices (a cell may hold an
    escaped pipe, as in "P(up \\| S)")."""
    text = (ROOT / "docs" / "claims.md").read_text()
    body = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| choice |")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])] for line in rows]


def test_docs_table_and_registry_name_the_same_choices():
    rows = _doc_rows()
    assert [r[0] for r in rows] == [c.name for c in CHOICES]  # the same choices, in the same order
    for cells in rows:  # each gives the seed's words, the tool's rule and why: four non-empty cells
        assert len(cells) == 4 and all(cells), cells[0]


def _study(tmp: Path, kind: str, agents: list[str], **kw) -> Path:
    """A claim study of one instance per agent (prediction 'up' or 12 and two claims: an
    outcome claim and a background one), built without any model call: the coalition
    values stay pending, which the claim section reports as it is."""
    pred = {"classification": "up", "regression": "12"}[kind]
    rows = [
        {
            "instance_id": "i1",
            "agent": a,
            "entity": "Omega",
            "task": "t",
            "t_ref": "2024-07-01",
            "task_input": "Predict Omega.",
            "prediction": pred,
            "rationale": "Omega won on 2024-09-01. Omega plays guard.",
            "outcome": pred,
        }
        for a in agents
    ]
    pd.DataFrame(rows).to_csv(tmp / "p.csv", index=False)
    claims = [("Omega won on 2024-09-01.", "A4"), ("Omega plays guard.", "B1")]
    with open(tmp / "ext.jsonl", "w") as fh:
        for a in agents:
            obj = {
                "instance_id": "i1",
                "agent": a,
                "claims": [
                    {
                        "claim_id": k,
                        "claim_text": t,
                        "original_text": t,
                        "temporal_reference": None,
                        "claim_category": c,
                        "category_reasoning": "test",
                    }
                    for k, (t, c) in enumerate(claims, 1)
                ],
            }
            fh.write(json.dumps(obj) + "\n")
    demo = {k: x for k, x in read_study_file(default_study_path()).items() if k != "model_path"}
    v = {
        **demo,
        "study_name": f"choices_{kind}",
        "raw_dir": str(tmp / "raw"),
        "results_dir": str(tmp / "results"),
        "model_id": "choices-test",
        "claims_predictions_path": str(tmp / "p.csv"),
        "claims_extractions_path": str(tmp / "ext.jsonl"),
        "claims_task_kind": kind,
        "claims_support_judge": "contains",
        "backend": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "api_mode": "completions",
        **kw,
    }
    path = tmp / "s.yml"
    path.write_text(yaml.safe_dump(v))
    return path


def _section_rows(tmp: Path, study_path: Path) -> dict[str, str]:
    """The claim section's table of choices, as REPORT.md shows it: choice -> rule."""
    study = load_study(study_path)
    folder = tmp / "csv"
    folder.mkdir()
    for name, df in build(study).items():
        df.to_csv(folder / f"{name}.csv", index=False)
    section = claims_section(ClaimTables(folder, study))
    assert section is not None
    md = render([section])
    part = md.split("| choice |", 1)[1].split("\n\n", 1)[0]
    out = {}
    for line in part.splitlines()[2:]:
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        out[cells[0]] = cells[1]
    return out


def test_claim_section_lists_the_choices_its_study_used(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    rows = _section_rows(
        a,
        _study(
            a,
            "classification",
            ["planted", "timespec"],
            claims_exact_max=5,
            claims_mc_permutations=64,
            claims_topk_denominator="available",
            claims_timespec_draft="predictions",
            claims_bm25_k=3,
            claims_vague_period="start",
        ),
    )
    names = [c.name for c in CHOICES]
    # no re-prediction was run: Eq. 12's choice played no part; nor, in a classification,
    # the regression's default; every other one did
    unused = {"Eq. 12 on the predicted class", "Regression's insufficient-claims default"}
    assert list(rows) == [n for n in names if n not in unused]
    assert "up to 5 claims" in rows["Exact where free"] and "64 permutations" in rows["Exact where free"]
    assert "min(K, number of claims)" in rows["Top-5"]
    assert "validated claims' text" in rows["TimeSPEC scoring"]
    assert "3 best BM25 documents" in rows["Search"] and "claims_support_judge: contains" in rows["Search"]
    assert "period's start" in rows["Vague periods"]
    assert re.search(r"claims_class_value: target_class \(P\(up \| S\)", rows["The coalition's value"])
    assert "claims_coalition_value: stated" in rows["The coalition's value"]
    assert "seed's Shapley Prediction prompt" in rows["Coalition prompt"]
    assert "never queried" in rows["v(empty set)"]
    assert "one coalition a request" in rows["Batched coalitions"]

    b = tmp_path / "b"
    b.mkdir()
    rows = _section_rows(b, _study(b, "regression", ["planted"], claims_default_value=18.0, claims_coalition_batch=256))
    assert "up to 256 coalitions" in rows["Batched coalitions"] and "claims_coalition_batch: 256" in rows["Batched coalitions"]
    assert "TimeSPEC scoring" not in rows  # no TimeSPEC in this study
    assert "up to 10 claims" in rows["Exact where free"] and "divided by K " in rows["Top-5"]
    assert "claims_class_value" not in rows["The coalition's value"]
    assert "the constant 18.0" in rows["Regression's insufficient-claims default"]
    assert "period's end" in rows["Vague periods"]
