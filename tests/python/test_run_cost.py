"""One cost for all the jobs (llm_jobs.jobs_plan): `lookahead run`'s jobs are planned
first, their requests, tokens and price printed as one table with the sum, and the run
asks once; --max-cost refuses a run above a limit before anything is asked. Real jobs on
the demo's tiny model, a 40-row subsample."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from dbt_runner import ROOT


def study(tmp_path: Path) -> Path:
    s = yaml.safe_load((ROOT / "demo" / "studies" / "clean.yml").read_text())
    s.update(study_name="cost", raw_dir=str(tmp_path / "raw"), outputs_dir=str(tmp_path / "outputs"), price_per_1k_tokens=0.5)
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(s))
    return path


def test_run_asks_once_with_the_summed_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llm_jobs import run_all

    asked: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda q: asked.append(q) or "y")
    assert run_all.main(["--study", str(study(tmp_path)), "--subsample", "40"]) == 0
    out = capsys.readouterr().out
    assert len(asked) == 1 and re.fullmatch(r"run [\d,]+ requests for \$[\d.]+\? \[y/N\] ", asked[0]), asked
    rows = {
        m[0]: m[1:]
        for m in re.findall(
            r"^(forecast\+mink|forecast|recall|mink|whole run) +([\d,]+) +([\d,]+) +([\d,]+) +\$([\d.,]+)$", out, re.M
        )
    }
    # the forecast and Min-K% of a row from one pass (llm_jobs.fused): one request a row, counted once
    assert set(rows) == {"forecast+mink", "recall", "whole run"}, out
    jobs = [r for k, r in rows.items() if k != "whole run"]
    for col in range(3):  # requests, prompt tokens, output tokens: the sum of the jobs'
        assert int(rows["whole run"][col].replace(",", "")) == sum(int(r[col].replace(",", "")) for r in jobs)
    assert rows["forecast+mink"][0] == "40"
    assert abs(float(rows["whole run"][3]) - sum(float(r[3]) for r in jobs)) < 0.015
    # the price: 0.5 per 1k tokens of the whole run
    tokens = int(rows["whole run"][1].replace(",", "")) + int(rows["whole run"][2].replace(",", ""))
    assert abs(float(rows["whole run"][3]) - tokens / 1000 * 0.5) < 0.006
    assert out.count("yes (the whole run was confirmed above)") == 2
    assert asked[0].startswith(f"run {rows['whole run'][0]} requests for ${rows['whole run'][3]}?")


def test_max_cost_refuses_a_run_above_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from llm_jobs import run_all

    code = run_all.main(["--study", str(study(tmp_path)), "--subsample", "40", "--max-cost", "0.001", "--yes"])
    err = capsys.readouterr().err
    assert code == 2 and "--max-cost 0.001: the run's estimated cost $" in err and "is above it" in err, err
    assert not list((tmp_path / "raw").glob("*.jsonl")) or all(
        p.stat().st_size == 0 for p in (tmp_path / "raw").glob("*.jsonl")
    )  # nothing was asked


def test_the_claim_jobs_are_in_the_one_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A protocol study with claim settings (the clean demo with the claim example of
    docs/claims.md and the leaky claim model, as demo/claims/demo_clean.yml does): the
    claim jobs' requests, tokens and price are rows of the same table, summed into the
    whole run, and the run still asks once; each claim job then runs without asking.
    Each of the two models (the protocol's, the claim model) is loaded once, in the one
    process, and shared by every job that asks it (llm_jobs.context.Backends)."""
    from llm_jobs import context, run_all

    loaded: list[str] = []
    real_get_backend = context.get_backend

    def get_backend(s: Any, **kw: Any) -> Any:
        loaded.append(s.backend.model_id)
        return real_get_backend(s, **kw)

    monkeypatch.setattr(context, "get_backend", get_backend)
    path = study(tmp_path)
    s = yaml.safe_load(path.read_text())
    example = "demo/claims/example"
    s.update(
        claims_model_id="demo-claims-leaky",
        claims_model_path="demo/claims/models/leaky",
        claims_raw_dir=str(tmp_path / "claims_raw"),
        claims_predictions_path=f"{example}/predictions.csv",
        claims_corpus_path=f"{example}/corpus.csv",
        claims_extractions_path=f"{example}/extractions.jsonl",
        claims_support_judge="contains",
        # the demo's model answers the legacy coalition prompt (2^3 coalitions an instance)
        claims_coalition_prompt="legacy",
        claims_coalition_value="token",
    )
    path.write_text(yaml.safe_dump(s))
    asked: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda q: asked.append(q) or "y")
    assert run_all.main(["--study", str(path), "--subsample", "40"]) == 0
    out = capsys.readouterr().out
    assert len(asked) == 1, asked
    rows = {
        m[0]: [int(x.replace(",", "")) for x in m[1:4]] + [float(m[4])]
        for m in re.findall(
            r"^(forecast\+mink|forecast|recall|mink|claims_value|claims_repredict|whole run) +([\d,]+) +([\d,]+) +([\d,]+)"
            r" +\$([\d.,]+)$",
            out,
            re.M,
        )
    }
    # one pass a row answers the forecast and scores Min-K% (llm_jobs.fused): one row for both
    assert set(rows) == {"forecast+mink", "recall", "claims_value", "claims_repredict", "whole run"}, out
    # the example: 4 instances of 3 claims each, 2^3 coalitions each, and 4 re-predictions
    assert rows["claims_value"][0] == 32 and rows["claims_repredict"][0] == 4
    jobs = [r for k, r in rows.items() if k != "whole run"]
    for col in range(3):
        assert rows["whole run"][col] == sum(r[col] for r in jobs)
    assert asked[0].startswith(f"run {rows['whole run'][0]:,} requests for ")
    # forecast+mink and recall, then 2 claim jobs (the forecast and Min-K% jobs find nothing left)
    assert out.count("yes (the whole run was confirmed above)") == 4
    assert len((tmp_path / "claims_raw" / "claims_value.jsonl").read_text().splitlines()) == 32
    assert sorted(loaded) == sorted([s["model_id"], "demo-claims-leaky"]), loaded


def test_a_claim_job_after_one_with_queries_is_counted_from_what_there_is() -> None:
    """Without reference extractions the coalition values wait on the extraction's
    answers: the table's note says so, and under the run's confirmation a claim job is
    answered only the question the planning pass saw (the same count); another question
    is asked."""
    from llm_jobs.jobs_plan import Estimate, at_confirmation, confirmed_jobs
    from llm_jobs.run_all import _later_claim_note

    found = [Estimate("claims_extract", 4, 100, 40, 0.0, job="claims_extract")]
    note = _later_claim_note(found, ["claims_extract", "claims_value", "claims_repredict"], ["claims_value"])
    assert note == [
        "note: claims_value, claims_repredict come after claims_extract, which has queries to ask and "
        "may give them more to do: counted from the answers there are now (claims_value: nothing yet); "
        "each asks again when it runs only if it then has more to ask"
    ]
    assert (
        _later_claim_note([Estimate("claims_value", 4, 1, 1, 0.0, job="claims_value")], ["claims_extract", "claims_value"], [])
        == []
    )
    with confirmed_jobs(["score 32 coalitions?", "re-predict 4 instances?"]):
        assert at_confirmation("score 32 coalitions?")
        assert not at_confirmation("score 32 coalitions?")  # answered once
        assert not at_confirmation("score 40 coalitions?")  # more than was planned: asked
        assert at_confirmation("re-predict 4 instances?")
    assert not at_confirmation("re-predict 4 instances?")


def test_max_cost_counts_the_claim_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A claim-only study (docs/claims.md's example) under --max-cost: its claim jobs'
    price is the run's, and a run above the limit asks nothing."""
    from llm_jobs import run_all

    s = {
        "study_kind": "claims",
        "study_name": "cost_claims",
        "raw_dir": str(tmp_path / "raw"),
        "backend": "transformers",
        "model_id": "demo-claims-leaky",
        "model_path": "demo/claims/models/leaky",
        "use_chat_template": False,
        "price_per_1k_tokens": 0.5,
        "claims_support_judge": "contains",
        "claims_coalition_prompt": "legacy",  # the demo's model (2^3 coalitions an instance)
        "claims_coalition_value": "token",
        "claims_predictions_path": "demo/claims/example/predictions.csv",
        "claims_corpus_path": "demo/claims/example/corpus.csv",
        "claims_extractions_path": "demo/claims/example/extractions.jsonl",
    }
    path = tmp_path / "claims.yml"
    path.write_text(yaml.safe_dump(s))
    code = run_all.main(["--study", str(path), "--max-cost", "0.0001", "--yes"])
    captured = capsys.readouterr()
    assert code == 2 and "--max-cost 0.0001: the run's estimated cost $" in captured.err, captured.err
    assert re.search(r"^claims_value +32 ", captured.out, re.M) and re.search(r"^whole run +36 ", captured.out, re.M)
    assert (
        not (tmp_path / "raw" / "claims_value.jsonl").exists()
        or not (tmp_path / "raw" / "claims_value.jsonl").read_text().strip()
    )
