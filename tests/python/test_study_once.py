"""`lookahead jobs/run` resolves the study once and hands the same resolved settings file
to every job and to dbt: the command's overrides (--accept-low-parse-rate, --subsample)
reach the protocol jobs and the claim jobs alike, and no process reads the study file
again (lookahead.children.resolved_settings, llm_jobs.context.job_study).

The jobs' subprocess is run in this process (lookahead.children.run_child replaced by a call
of its entry point with the same arguments), so what each job's context holds and how
often the study file is read can be seen; the jobs are the real ones on the demo's tiny
models, stopped by --max-cost after their planning pass, before anything is asked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from dbt_runner import ROOT

from llm_jobs import run_all
from lookahead import children, config
from lookahead.config import Study

CLAIMS = {
    "study_kind": "claims",
    "study_name": "once_claims",
    "backend": "transformers",
    "model_id": "demo-claims-leaky",
    "model_path": "demo/claims/models/leaky",
    "use_chat_template": False,
    "price_per_1k_tokens": 0.5,
    "claims_support_judge": "contains",
    "claims_predictions_path": "demo/claims/example/predictions.csv",
    "claims_corpus_path": "demo/claims/example/corpus.csv",
    "claims_extractions_path": "demo/claims/example/extractions.jsonl",
}


def _write(tmp_path: Path, settings: dict[str, Any], name: str) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({**settings, "raw_dir": str(tmp_path / "raw"), "outputs_dir": str(tmp_path / "outputs")}))
    return path


def _protocol(tmp_path: Path) -> Path:
    s = yaml.safe_load((ROOT / "demo" / "studies" / "clean.yml").read_text())
    s.update(study_name="once_protocol", price_per_1k_tokens=0.5)
    return _write(tmp_path, s, "protocol")


class Recorded:
    """What the in-process jobs saw: their command lines, the studies their contexts were
    made on, and every read of a study file (lookahead.config.read_study_file)."""

    def __init__(self) -> None:
        self.argv: list[list[str]] = []
        self.studies: dict[str, list[Study]] = {"protocol": [], "claims": []}
        self.reads: list[str] = []


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    rec = Recorded()
    real_read = config.read_study_file

    def read(path: Any, *a: Any) -> dict[str, Any]:
        rec.reads.append(str(path))
        return real_read(path, *a)

    monkeypatch.setattr(config, "read_study_file", read)

    def recording(name: str, make: Callable[..., Any]) -> Callable[..., Any]:
        def made(*a: Any, **kw: Any) -> Any:
            ctx = make(*a, **kw)
            rec.studies[name].append(ctx.study)
            return ctx

        return made

    monkeypatch.setattr(run_all, "make_context", recording("protocol", run_all.make_context))
    monkeypatch.setattr(run_all, "make_claim_context", recording("claims", run_all.make_claim_context))

    def child(cmd: list[str], env: dict[str, str] | None = None, **_: Any) -> int:
        assert cmd[1:3] == ["-m", "llm_jobs.run_all"], cmd
        rec.argv.append(cmd[3:])
        return run_all.main(cmd[3:])

    monkeypatch.setattr(children, "run_child", child)
    return rec


def test_accept_low_parse_rate_reaches_the_claim_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A claim-only study: `lookahead jobs --accept-low-parse-rate` gives every claim job a
    context whose study has the override; the jobs get the resolved settings file (and the
    user's file to name), not the override as a flag; the study file is read once, by the
    command, and by no job."""
    from lookahead.cli import main

    study_file = _write(tmp_path, CLAIMS, "claims")
    monkeypatch.chdir(tmp_path)
    code = main(["jobs", "--study", str(study_file), "--accept-low-parse-rate", "--yes", "--max-cost", "0.0001"])
    out = capsys.readouterr()
    assert code == 2 and "--max-cost 0.0001" in out.err, out.out[-2000:] + out.err  # stopped after planning
    [argv] = recorded.argv
    assert argv[:1] == ["--settings"] and argv[2:4] == ["--study", str(study_file)], argv
    assert "--accept-low-parse-rate" not in argv
    # one context for every claim job (llm_jobs.run_all), and none for the protocol's
    assert len(recorded.studies["claims"]) == 1 and not recorded.studies["protocol"]
    assert all(s.runner.accept_low_parse_rate for s in recorded.studies["claims"])
    assert recorded.reads == [str(study_file)]  # the command's one read; the jobs read the settings file
    assert not Path(argv[1]).exists()  # the temporary settings file is gone with the command


def test_without_the_flag_the_claim_jobs_keep_the_study_file_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same run without --accept-low-parse-rate: the claim jobs' study has the file's
    own value (false): the override, not the settings file, decides it."""
    from lookahead.cli import main

    study_file = _write(tmp_path, CLAIMS, "claims")
    monkeypatch.chdir(tmp_path)
    assert main(["jobs", "--study", str(study_file), "--yes", "--max-cost", "0.0001"]) == 2
    assert recorded.studies["claims"] and not any(s.runner.accept_low_parse_rate for s in recorded.studies["claims"])


def test_subsample_and_acceptance_reach_the_protocol_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """A protocol study: `lookahead jobs --subsample 40 --seed 3 --accept-low-parse-rate`
    gives the protocol jobs' context the three settings, the rows are the 40 of seed 3, and
    no note says dbt follows another subsample (dbt gets this same file)."""
    from lookahead.cli import main

    study_file = _protocol(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["jobs", "--study", str(study_file), "--subsample", "40", "--seed", "3", "--accept-low-parse-rate", "--yes"]
    code = main([*args, "--max-cost", "0.000001"])
    out = capsys.readouterr()
    assert code == 2, out.out[-2000:] + out.err
    [study] = recorded.studies["protocol"]
    assert (study.input.subsample_rows, study.input.subsample_seed, study.runner.accept_low_parse_rate) == (40, 3, True)
    assert "subsample: 40 rows (subsample_rows 40, seed 3)" in out.out
    assert "dbt build and the report follow the study file" not in out.out
    assert recorded.reads == [str(study_file)]


def test_run_hands_the_jobs_and_dbt_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lookahead run --subsample 40 --accept-low-parse-rate`: the jobs' --settings and
    dbt's $LOOKAHEAD_STUDY_SETTINGS are one file, holding the study with the overrides.
    (The jobs and dbt are recorded, not run: dbt's exit 3 ends the command.)"""
    from lookahead import cli

    s = yaml.safe_load(_protocol(tmp_path).read_text())
    s.update(results_dir=str(tmp_path / "results"))
    study_file = _write(tmp_path, s, "run")
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))
    monkeypatch.chdir(tmp_path)
    handed: dict[str, Any] = {}

    def jobs(cmd: list[str], env: dict[str, str] | None = None, **_: Any) -> int:
        handed["jobs"] = cmd[cmd.index("--settings") + 1]
        return 0

    def dbt(args: list[str], study_file: str | None, overrides: Any = None, settings: Path | None = None) -> int:
        with children.study_env(study_file, overrides, settings) as env:
            handed["dbt"] = env[config.STUDY_SETTINGS_ENV]
            handed["settings"] = json.loads(Path(handed["dbt"]).read_text())
        return 3

    monkeypatch.setattr(children, "run_child", jobs)
    monkeypatch.setattr(cli, "run_dbt", dbt)
    code = cli.main(["run", "--study", str(study_file), "--subsample", "40", "--accept-low-parse-rate", "--yes", "--rebuild"])
    out = capsys.readouterr()
    assert code == 3, out.out[-2000:] + out.err
    assert handed["jobs"] == handed["dbt"]
    got = handed["settings"]
    assert (got["subsample_rows"], got["subsample_seed"], got["accept_low_parse_rate"]) == (40, 0, True)
    assert got["study_name"] == "once_protocol" and got["data_path"] == s["data_path"]


def test_a_missing_settings_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "gone.json"
    assert run_all.main(["--settings", str(missing), "--yes"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --settings: no study settings file '{missing}'"], err
