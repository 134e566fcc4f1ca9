"""Every command block of the README runs in a test: a README whose commands do not work
as written misleads the newcomer it is for.

Each fenced block is matched to one check below (:data:`BLOCKS`); a block no check
covers fails :func:`test_every_readme_block_is_checked`, so a new block comes with its
test. The short checks run in the default suite; running a study end to end (the
"Run it" block: the demo model queried for a few hundred rows, a dbt build and a report)
is in the slow tier."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
import yaml
from dbt_runner import ROOT

README = ROOT / "README.md"


def readme_blocks(text: str | None = None) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, its indentation (a block in a list) removed."""
    text = README.read_text(encoding="utf-8") if text is None else text
    blocks = re.findall(r"^([ \t]*)```(\w*)\n(.*?)^\1```", text, flags=re.M | re.S)
    return [(lang, textwrap.dedent(body)) for _, lang, body in blocks]


def _is_make(lang: str, body: str) -> bool:
    return lang in ("bash", "sh") and all(ln.startswith("make ") for ln in body.strip().splitlines())


def _is_study(lang: str, body: str) -> bool:
    return lang == "yaml" and "study_name:" in body


def _is_run(lang: str, body: str) -> bool:
    return lang in ("bash", "sh") and "lookahead run --study" in body and not _is_quick_start(lang, body)


def _is_quick_start(lang: str, body: str) -> bool:
    return lang in ("bash", "sh") and "lookahead init --data" in body


def _is_compare(lang: str, body: str) -> bool:
    return lang in ("bash", "sh") and body.strip().startswith(".venv/bin/lookahead compare ")


def _is_sql(lang: str, body: str) -> bool:
    return lang in ("bash", "sh") and all(".venv/bin/duckdb -readonly" in ln for ln in body.strip().splitlines())


def _is_data_team(lang: str, body: str) -> bool:
    return lang in ("bash", "sh") and "dbt source freshness --project-dir" in body


def _is_demo_output(lang: str, body: str) -> bool:
    return lang == "text" and "== Demo verdicts (from the reports) ==" in body


#: block kind -> (matches a block, the test that runs it)
BLOCKS: dict[str, tuple[Callable[[str, str], bool], str]] = {
    "make targets": (_is_make, "test_make_targets_resolve"),
    "study essentials": (_is_study, "test_the_essential_study_settings_are_declared_and_valid"),
    "run a study": (_is_run, "test_running_a_study_step_by_step_as_written (slow)"),
    "quick start": (_is_quick_start, "test_the_quick_start_as_written (its run line: slow)"),
    "compare the demo studies": (_is_compare, "test_comparing_the_demo_studies_as_written (slow)"),
    "SQL examples": (_is_sql, "tests/python/test_current_state.py::test_readme_sql_examples_run_as_written"),
    "plain dbt from any folder": (_is_data_team, "tests/python/test_readme_data_team.py (the block, from a temporary folder)"),
    "the lines make demo ends with": (
        _is_demo_output,
        "scripts/check_demo_output.py on a fresh `make demo` in .ci/run; test_the_demo_lines_are_checked_on_ci",
    ),
}


def test_the_demo_lines_are_checked_on_ci() -> None:
    """The README's quotation of `make demo`'s last lines is the block CI checks a fresh
    run's output against (.ci/run), and the check fails on a run that lacks one of them
    or prints them out of order."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_demo_output", ROOT / "scripts" / "check_demo_output.py")
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    [(_, body)] = [(lang, b) for lang, b in readme_blocks() if _is_demo_output(lang, b)]
    quoted = check.quoted_lines(README.read_text(encoding="utf-8"))
    assert quoted == [ln.rstrip() for ln in body.splitlines() if ln.strip()]
    assert len(quoted) >= 6 and any(ln.startswith("demo_contaminated: ") for ln in quoted)
    log = "\n".join(["install ...", *[f"\x1b[0m{q}" if i == 1 else q for i, q in enumerate(quoted)], ""])
    assert check.missing(quoted, log) is None
    assert check.missing(quoted, log.replace(quoted[2], "something else")) == quoted[2]
    assert check.missing(quoted, "\n".join(reversed(quoted))) is not None
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make demo" in ci and "scripts/check_demo_output.py" in ci and "make test" in ci
    assert ci.index("make demo") < ci.index("make test")


def test_every_readme_block_is_checked():
    blocks = readme_blocks()
    assert len(blocks) >= 4
    for lang, body in blocks:
        kinds = [k for k, (match, _) in BLOCKS.items() if match(lang, body)]
        assert len(kinds) == 1, f"README block not covered by exactly one test ({kinds}):\n{body}"


def test_readme_blocks_are_found_in_lists_too():
    text = "x\n\n1. a:\n\n   ```bash\n   make demo\n   ```\n\n```sh\nmake test\n```\n"
    assert readme_blocks(text) == [("bash", "make demo\n"), ("sh", "make test\n")]


def test_make_targets_resolve():
    """`make demo` and `make test` are targets of the Makefile, and make resolves them
    (a dry run: `make -n` prints the recipe without running it)."""
    [(_, body)] = [(lang, b) for lang, b in readme_blocks() if _is_make(lang, b)]
    for line in body.strip().splitlines():
        target = line.split("#")[0].split()[1]
        proc = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (target, proc.stderr)
        assert proc.stdout.strip(), target


def test_the_essential_study_settings_are_declared_and_valid():
    """The essentials block: every key a declared setting, every value (but the prompts'
    "...") one the loader accepts, and together with the demo's prompts a study the
    loader resolves."""
    from lookahead.config import SCHEMA, check_setting, resolve

    [(_, body)] = [(lang, b) for lang, b in readme_blocks() if _is_study(lang, b)]
    block = yaml.safe_load(body)
    assert set(block) <= set(SCHEMA.settings), set(block) - set(SCHEMA.settings)
    for name, value in block.items():
        if value != "...":
            check_setting(name, value)
    demo = yaml.safe_load((ROOT / "demo/studies/contaminated.yml").read_text())
    prompts = {k: demo[k] for k in ("forecast_prompt", "recall_template")}
    resolve({**block, **prompts})


@pytest.mark.slow  # the demo model queried for 200 rows, a dbt build and a report: minutes
def test_running_a_study_step_by_step_as_written(tmp_path):
    """The "Run it" block line by line, as written, from the project folder: my_study.yml
    is the contaminated demo (200 rows, its own cache, database and results); the only
    change is the study file's path (a scratch file, not one in the project)."""
    from lookahead.config import default_study_path, read_study_file

    [(_, body)] = [(lang, b) for lang, b in readme_blocks() if _is_run(lang, b)]
    name = f"pytest_readme_{os.getpid()}"
    study = {
        **read_study_file(default_study_path()),
        "study_name": name,
        "raw_dir": str(tmp_path / "raw"),
        "results_dir": str(tmp_path / "results"),
        "outputs_dir": str(tmp_path / "outputs"),
        "subsample_rows": 200,
        "subsample_seed": 0,
    }
    study_file = tmp_path / "my_study.yml"
    study_file.write_text(yaml.safe_dump(study, sort_keys=False), encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
        HF_HUB_OFFLINE="1",
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    env.pop("LOOKAHEAD_DUCKDB", None)
    database = ROOT / "outputs" / f"{name}.duckdb"
    try:
        for line in body.splitlines():
            command = line.split("  #")[0].strip()
            if not command or command.startswith("#"):
                continue
            command = command.replace("my_study.yml", shlex.quote(str(study_file)))
            if "lookahead jobs" in command or "lookahead run" in command:
                command += " --yes"  # both ask before querying; a test has no terminal to answer on
            proc = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
            assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
        assert (tmp_path / "results" / "REPORT.md").is_file()
        con = duckdb.connect(str(database), read_only=True)
        try:
            assert con.sql("select count(*) from panel").fetchone()[0] == 200
        finally:
            con.close()
    finally:
        database.unlink(missing_ok=True)
        shutil.rmtree(ROOT / "outputs" / f"{name}.duckdb.tmp", ignore_errors=True)


@pytest.mark.slow  # reads the databases `make demo` built
def test_comparing_the_demo_studies_as_written():
    """The comparison `make demo` ends with, run as written from the project folder."""
    from lookahead.config import load_study

    [(_, body)] = [(lang, b) for lang, b in readme_blocks() if _is_compare(lang, b)]
    studies = re.findall(r"\S+\.yml", body)
    if not all(load_study(ROOT / s).database.is_file() for s in studies):
        pytest.skip("the demo databases are not built here (make demo builds them)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("LOOKAHEAD_DUCKDB", None)
    proc = subprocess.run(["bash", "-c", body.strip()], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert (ROOT / "results/compare/COMPARE.md").is_file()


#: What a researcher types at init's questions for the quick start's file (my_data.csv:
#: permno, dt, headline, ret_1d): blank lines take the proposed answer.
QUICK_START_ANSWERS = {
    "entity": "permno",
    "text": "headline",
    "text_date": "dt",
    "outcome": "ret_1d",
    "model_id": "demo-clean",
    "model_path": str(ROOT / "demo" / "models" / "clean"),
    "training_cutoff": "2021-12-31",
}


def _quick_start(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The quick start's command lines, a researcher's my_data.csv in a scratch project
    folder (its .venv the project's), and the environment."""
    import pandas as pd

    from lookahead.init import QUESTIONS

    [(_, body)] = [(lang, b) for lang, b in readme_blocks() if _is_quick_start(lang, b)]
    demo = pd.read_csv(ROOT / "demo" / "data" / "observations.csv", dtype=str).iloc[:400]
    pd.DataFrame(
        {
            "permno": demo["entity_id"].str[1:].astype(int) + 10000,
            "dt": demo["text_date"],
            "headline": demo["text"],
            "ret_1d": demo["outcome"],
        }
    ).to_csv(tmp_path / "my_data.csv", index=False)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HF_HUB_OFFLINE="1",
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
    )
    # the questions asked: --data is given, no horizon (next business day), no URL (local model)
    asked = [q.key for q in QUESTIONS if q.key not in ("data", "horizon_days", "base_url")]
    stdin = "".join(QUICK_START_ANSWERS.get(k, "") + "\n" for k in asked)
    lines = [line.split("  #")[0].strip() for line in body.strip().splitlines()]
    return lines, {"env": env, "stdin": stdin}


def test_the_quick_start_as_written(tmp_path):
    """The init line as written, from a folder holding my_data.csv, answering its
    questions on stdin: it writes my_data.yml and the study passes check."""
    lines, how = _quick_start(tmp_path)
    proc = subprocess.run(
        ["bash", "-c", lines[0]], cwd=tmp_path, env=how["env"], input=how["stdin"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "my_data.csv: columns permno, dt, headline, ret_1d" in proc.stdout
    assert "preflight passed" in proc.stdout and (tmp_path / "my_data.yml").is_file()
    assert (tmp_path / "my_data.with_target_date.csv").is_file()


@pytest.mark.slow  # the demo model queried for 400 rows, a dbt build and a report: minutes
def test_the_quick_start_runs_as_written(tmp_path):
    """Both lines; the run line with --yes (no terminal to answer on) and the study's
    cache, database and results in the scratch folder (the only changes)."""
    from dbt_runner import dbt_env

    lines, how = _quick_start(tmp_path)
    proc = subprocess.run(
        ["bash", "-c", lines[0]], cwd=tmp_path, env=how["env"], input=how["stdin"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = yaml.safe_load((tmp_path / "my_data.yml").read_text())
    study.update(raw_dir=str(tmp_path / "raw"), results_dir=str(tmp_path / "results"), outputs_dir=str(tmp_path / "outputs"))
    (tmp_path / "my_data.yml").write_text(yaml.safe_dump(study))
    env = {**dbt_env(tmp_path / "db.duckdb"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        ["bash", "-c", lines[1] + " --yes"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "whole run" in proc.stdout and "Verdict: " in proc.stdout
    assert (tmp_path / "results" / "REPORT.md").is_file()
