"""The whole pipeline on the shipped demo: real LLM jobs (transformers on the two
trained demo models), `dbt build`, report. The truth is known by construction: the
contaminated model memorized 40% of pre-cutoff outcomes, the clean control answers the
recall probe as confidently but with coin-flip directions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml
from dbt_runner import ROOT, DbtResult, dbt_env
from report_checker import check


def run_study(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, DbtResult]:
    study = yaml.safe_load((ROOT / "demo" / "studies" / f"{name}.yml").read_text())
    study.update(raw_dir=str(tmp_path / "raw"), results_dir=str(tmp_path / "results"), outputs_dir=str(tmp_path / "outputs"))
    study_file = tmp_path / "study.yml"
    study_file.write_text(yaml.safe_dump(study))
    db = tmp_path / "db.duckdb"
    lookahead = Path(sys.executable).with_name("lookahead")
    proc = subprocess.run(
        [str(lookahead), "run", "--study", str(study_file), "--yes"],
        cwd=ROOT,
        env=dbt_env(db),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    return proc, DbtResult(proc.returncode, proc.stdout + proc.stderr, db)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("contaminated", "Contamination detected"),
        # the clean control takes the same path through jobs, dbt and the report (about 85 s);
        # in the slow tier (make test-slow) to keep `make test` under ten minutes on 2 cores
        pytest.param("clean", "No evidence of contamination", marks=pytest.mark.slow),
    ],
)
def test_demo_verdict(name, expected, tmp_path):
    proc, res = run_study(name, tmp_path)
    assert proc.returncode == 0, res.output[-4000:]
    verdict = res.table("verdict").iloc[0]
    assert verdict["verdict"] == expected, verdict["reason"]
    assert f"Verdict: {expected}" in proc.stdout
    report = (tmp_path / "results" / "REPORT.md").read_text()
    assert f"**Verdict: {expected}.**" in report
    assert check(report, tmp_path / "results") == []  # the consistency checker on the demo's report
    assert (tmp_path / "results" / "index.html").stat().st_size > 100_000  # the page beside it
    if name == "contaminated":
        assert bool(verdict["validation_pattern"]) and bool(verdict["placebo_passes"])
    else:
        assert bool(verdict["lap_varies"])  # a real null, not "underpowered"
    # the raw JSONL is the cache: a second run queries nothing and reproduces the tables
    before = {p.name: p.read_bytes() for p in (tmp_path / "raw").glob("*.jsonl")}
    proc2, res2 = run_study(name, tmp_path)
    assert proc2.returncode == 0
    assert "build up to date: dbt invocation" in proc2.stdout  # nothing changed: no dbt build
    assert "dbt build: no database yet" in proc.stdout
    # the build left dbt's unit tests out (lookahead.identity.UNIT_TESTS_LEFT_OUT), ran every
    # data test, recorded so, and the second run counted it as complete (above)
    finished = next(line for line in proc.stdout.splitlines() if "Finished running" in line)
    assert " data tests" in finished and "unit test" not in finished, finished
    con = duckdb.connect(str(res.db), read_only=True)
    try:
        selection = con.sql("select selection from build_log where status = 'success' order by finished_at").fetchall()
    finally:
        con.close()
    assert selection and selection[0][0].endswith("--exclude-resource-type unit_test"), selection
    assert {p.name: p.read_bytes() for p in (tmp_path / "raw").glob("*.jsonl")} == before
    assert res2.table("verdict")["reason"].iloc[0] == verdict["reason"]
