"""`lookahead run` / `lookahead jobs` on a backend whose library lives in an environment of
its own (vLLM, .venv-vllm): the jobs run with that environment's interpreter, which is
created first when missing, after a confirmation that says so and what it costs.

These tests check the dispatch only: which interpreter the jobs get, when the environment
is created, what a refusal or a failed creation says. The interpreter here is a small
script standing in for .venv-vllm's python that records how it was called; vLLM itself
runs in the slow tier (test_vllm_run.py)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from lookahead import backends, children
from lookahead.children import JobEnvironmentError, job_python
from lookahead.config import PROJECT_ROOT, load_study

DEMO = PROJECT_ROOT / "demo" / "studies" / "contaminated.yml"

RECORDER = """#!/bin/sh
# stands in for the environment's interpreter: records its arguments, exits 0
printf '%s\\n' "$@" > "{log}"
"""


def _vllm_study(tmp_path: Path) -> Path:
    study = yaml.safe_load(DEMO.read_text())
    study.update(backend="vllm", raw_dir=str(tmp_path / "raw"))
    path = tmp_path / "vllm_study.yml"
    path.write_text(yaml.safe_dump(study))
    return path


def _fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: tuple[str, ...] | None = None):
    """The vllm entry of the registry pointed at a folder under tmp_path; ``make`` creates
    it there (the default: a script writing the recording interpreter)."""
    folder = tmp_path / "venv-vllm"
    log = tmp_path / "argv.txt"
    recorder = tmp_path / "recorder.sh"
    recorder.write_text(RECORDER.format(log=log))
    if make is None:
        make = ("sh", "-c", f'mkdir -p "{folder}/bin" && cp "{recorder}" "{folder}/bin/python" && chmod +x "{folder}/bin/python"')
    env = replace(backends.JOB_ENVIRONMENTS["vllm"], folder=folder, make=make)
    monkeypatch.setitem(backends.JOB_ENVIRONMENTS, "vllm", env)
    return env, log


def test_a_backend_without_an_environment_of_its_own_runs_here() -> None:
    assert job_python(load_study(DEMO), yes=False, ask=lambda _: pytest.fail("asked")) == sys.executable


def test_vllm_is_registered_with_its_script() -> None:
    env = backends.JOB_ENVIRONMENTS["vllm"]
    assert env.python == PROJECT_ROOT / ".venv-vllm" / "bin" / "python"
    assert env.make == ("bash", "scripts/make_vllm_env.sh")
    assert (PROJECT_ROOT / env.make[1]).is_file()
    assert set(backends.JOB_ENVIRONMENTS) <= set(backends.BACKENDS)


def test_a_missing_environment_is_created_after_the_confirmation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    env, _ = _fake_env(tmp_path, monkeypatch)
    study = load_study(_vllm_study(tmp_path))
    asked: list[str] = []
    with pytest.raises(JobEnvironmentError, match=r"backend 'vllm' needs .*venv-vllm: create it with `sh -c"):
        job_python(study, yes=False, ask=lambda q: asked.append(q) or "n")
    out = capsys.readouterr().out
    assert "does not exist yet; creating it" in out and env.cost in out
    assert asked and not env.python.exists()  # declined: nothing made
    assert job_python(study, yes=False, ask=lambda q: "y") == str(env.python)
    assert env.python.exists()
    assert job_python(study, yes=False, ask=lambda q: pytest.fail("asked again")) == str(env.python)


def test_with_yes_it_says_what_it_creates_and_does_not_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    env, _ = _fake_env(tmp_path, monkeypatch)
    study = load_study(_vllm_study(tmp_path))
    assert job_python(study, yes=True, ask=lambda q: pytest.fail("asked")) == str(env.python)
    assert env.cost in capsys.readouterr().out


def test_a_failed_creation_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch, make=("sh", "-c", "exit 3"))
    with pytest.raises(JobEnvironmentError, match=r"`sh -c exit 3` failed \(exit 3\) and .* is not usable"):
        job_python(load_study(_vllm_study(tmp_path)), yes=True)


def test_lookahead_jobs_runs_the_jobs_with_the_environments_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`lookahead jobs --study <vllm study> --yes`: the environment is created, then the
    jobs' entry point runs under its interpreter with the study and --yes."""
    from lookahead.cli import main

    env, log = _fake_env(tmp_path, monkeypatch)
    study_file = _vllm_study(tmp_path)
    monkeypatch.chdir(tmp_path)  # the command moves to the project folder; restored after
    assert main(["jobs", "--study", str(study_file), "--yes"]) == 0
    argv = log.read_text().split()
    # the command's resolved settings (read by every job), then the user's file to name
    assert argv[:3] == ["-m", "llm_jobs.run_all", "--settings"] and argv[3].endswith(".json")
    assert argv[4:] == ["--study", str(study_file), "--yes"]
    assert os.access(env.python, os.X_OK)


def test_lookahead_run_stops_in_one_line_when_the_environment_is_declined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from lookahead.cli import main

    env, log = _fake_env(tmp_path, monkeypatch)
    monkeypatch.setattr("builtins.input", lambda q: "n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--study", str(_vllm_study(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: backend 'vllm' needs ")
    assert not log.exists() and not env.python.exists()
    assert children.JobEnvironmentError.__doc__
