"""The reference job (llm_jobs/reference.py) on the transformers backend with the shipped
demo models: it asks the reference model, not the target, under the keys the build
expects, and a study that does not compute the reference-model LAP asks nothing.

The log-probs are checked against the reference model's own forward pass (the
transformers backend loaded here from reference_model_path, one prompt at a time) and
must differ from the target's on the same prompt."""

from __future__ import annotations

import json

import pytest
import yaml
from dbt_runner import ROOT

from llm_jobs import run_all
from lookahead.backends.transformers_backend import TransformersBackend
from lookahead.config import load_study
from lookahead.keys import expected_keys
from lookahead.measures import REFERENCE_TASK
from lookahead.rows import load_rows

N = 40


def _study_file(tmp_path, measures):
    path = tmp_path / "study.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "extends": "demo/studies/contaminated.yml",
                "raw_dir": str(tmp_path / "raw"),
                "outputs_dir": str(tmp_path / "out"),
                "lap_measures": measures,
                "subsample_rows": N,
                "reference_model_id": "demo-clean",
                "reference_model_path": "demo/models/clean",
            }
        )
    )
    return path


def test_the_reference_job_asks_the_reference_model_under_the_expected_keys(tmp_path, capsys):
    path = _study_file(tmp_path, ["recall", "mink", "reference"])
    assert run_all.main(["--only", "reference", "--study", str(path), "--yes"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "raw" / f"{REFERENCE_TASK}.jsonl").read_text().splitlines()]
    study = load_study(path)
    keys = expected_keys(study, load_rows(study)[0]).to_pandas()
    assert {x["key"] for x in lines} == set(keys.loc[keys["task"] == REFERENCE_TASK, "key"])
    assert len(lines) == N
    assert {(x["task"], x["model_id"]) for x in lines} == {(REFERENCE_TASK, study.measures.reference_model_id)}

    ref = TransformersBackend("ref", model_path=str(ROOT / study.measures.reference_model_path))
    target = TransformersBackend("target", model_path=str(ROOT / study.backend.model_path))
    for line in lines[:3]:
        want = [t.logprob for t in ref.prompt_logprobs([line["prompt"]])[0]][1:]
        got = [t["logprob"] for t in line["prompt_logprobs"]][1:]
        assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
        other = [t.logprob for t in target.prompt_logprobs([line["prompt"]])[0]][1:]
        assert max(abs(a - b) for a, b in zip(got, other, strict=False)) > 1e-2

    capsys.readouterr()
    assert run_all.main(["--only", "reference", "--study", str(path), "--yes"]) == 0  # cached: nothing asked again
    assert f"cached (identical key): {N}; to query: 0" in capsys.readouterr().out


def test_a_study_not_computing_the_reference_lap_asks_nothing(tmp_path, capsys):
    path = _study_file(tmp_path, ["recall", "mink"])
    assert run_all.main(["--only", "reference", "--study", str(path), "--yes"]) == 0
    assert "not computed by this study" in capsys.readouterr().out
    assert not (tmp_path / "raw" / f"{REFERENCE_TASK}.jsonl").exists()
