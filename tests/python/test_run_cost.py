"""One cost for the whole run (llm_jobs.run_plan): `lookahead run`'s jobs are planned
first, their requests, tokens and price printed as one table with the sum, and the run
asks once; --max-cost refuses a run above a limit before anything is asked. Real jobs on
the demo's tiny model, a 40-row subsample."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from dbt_runner import ROOT


def study(tmp_path: Path) -> Path:
    s = yaml.safe_load((ROOT / "demo" / "studies" / "clean.yml").read_text())
    s.update(study_name="cost", raw_dir=str(tmp_path / "raw"), outputs_dir=str(tmp_path / "outputs"),
             price_per_1k_tokens=0.5)
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(s))
    return path


def test_run_asks_once_with_the_summed_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from llm_jobs import run_all

    asked: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda q: asked.append(q) or "y")
    assert run_all.main(["--study", str(study(tmp_path)), "--subsample", "40"]) == 0
    out = capsys.readouterr().out
    assert len(asked) == 1 and re.fullmatch(r"run [\d,]+ requests for \$[\d.]+\? \[y/N\] ", asked[0]), asked
    rows = {m[0]: m[1:] for m in re.findall(
        r"^(forecast\+mink|forecast|recall|mink|whole run) +([\d,]+) +([\d,]+) +([\d,]+) +\$([\d.,]+)$", out, re.M)}
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
        p.stat().st_size == 0 for p in (tmp_path / "raw").glob("*.jsonl"))  # nothing was asked
