"""A study reaches dbt without a full re-parse (docs/CONTRACTS.md, "How a study reaches dbt").

dbt re-parses the whole project when the profile, the `--vars` or the project's env vars
change. The `lookahead` command passes a study through $LOOKAHEAD_STUDY_SETTINGS and the
profile names no study, so after one full parse the same study again, an edited study and
a different study all parse partially, and each still builds its own settings into its own
database. Run through lookahead.cli.run_dbt, the function `lookahead build` and `lookahead
run` call, with `dbt run --select study_settings` (the parse is the same for every dbt
command; the run-start checks run too). dbt's log says which parse it did."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import yaml
from fixture_study import write_fixture_study

from lookahead.children import run_dbt
from lookahead.config import PROJECT_ROOT

FULL_PARSE = "Unable to do partial parsing"
PARTIAL_PARSE = "Partial parsing enabled"


def _run(study_file: Path, log: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """One dbt invocation through the lookahead command's path; its part of dbt's log."""
    before = log.read_text(encoding="utf-8") if log.exists() else ""
    rc = run_dbt(["run", "--select", "study_settings"], str(study_file))
    out = capsys.readouterr().out
    assert rc == 0, out[-2000:]
    return log.read_text(encoding="utf-8")[len(before) :]


@pytest.mark.slow  # four dbt invocations: about half a minute
def test_a_second_an_edited_and_another_study_parse_partially(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = write_fixture_study(tmp_path / "fixture", n_entities=6, n_dates=12, cutoff_index=6)
    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path / "target"))  # this test's own parse
    monkeypatch.setenv("DBT_LOG_PATH", str(tmp_path / "logs"))
    monkeypatch.delenv("LOOKAHEAD_DUCKDB", raising=False)  # each study's own outputs/<name>.duckdb
    log = tmp_path / "logs" / "dbt.log"
    names = [f"pytest_{tmp_path.name}_a", f"pytest_{tmp_path.name}_b"]

    def study_file(name: str, **change: object) -> Path:
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump({**fixture.vars, "study_name": name, **change}), encoding="utf-8")
        return path

    def recorded(name: str) -> tuple:
        with duckdb.connect(str(PROJECT_ROOT / "outputs" / f"{name}.duckdb"), read_only=True) as con:
            return con.sql("select study_name, cluster from study_settings").fetchone()

    try:
        first = _run(study_file(names[0], cluster="entity"), log, capsys)
        assert FULL_PARSE in first or "saved manifest not found" in first  # nothing to reuse yet
        runs = {  # what: (study name, its cluster setting), each written just before its run
            "the same study again": (names[0], "entity"),
            "the study edited": (names[0], "date"),
            "another study": (names[1], "period"),
        }
        for what, (name, cluster) in runs.items():
            text = _run(study_file(name, cluster=cluster), log, capsys)
            assert PARTIAL_PARSE in text and FULL_PARSE not in text, f"{what}: {text[:3000]}"
            assert recorded(name) == (name, cluster), what
        assert recorded(names[0]) == (names[0], "date")  # the other study left it alone
    finally:
        for name in names:
            (PROJECT_ROOT / "outputs" / f"{name}.duckdb").unlink(missing_ok=True)
