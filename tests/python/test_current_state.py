"""Every path ends in a true state (issue 22): no stale result is presented, no bad cache
line blocks a study, no paid answer is lost, nothing is paid before a check that could
have refused it, no flag edits a user file, and every stop is one line.

One real dbt build (the synthetic fixture study) serves the database checks; the jobs run
against the loopback OpenAI server of test_openai_backend.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from dbt_runner import dbt_env, result_status, run_dbt
from kill_job import kill_once_written
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(fixture_build: Any) -> tuple[Any, Path]:
    """The default fixture study's build, shared with other files (tests/conftest.py):
    every test here works on a copy of its database (_copy)."""
    fixture_build.check_unchanged()
    return fixture_build.study, fixture_build.result.db


def _copy(built: tuple[Any, Path], tmp_path: Path) -> tuple[Any, Path, Any]:
    from lookahead.config import Study, resolve

    study, db = built
    copy = tmp_path / "db.duckdb"
    shutil.copy(db, copy)
    here = Study(vars=resolve({**study.vars, "results_dir": str(tmp_path / "results")}))
    return study, copy, here


def test_a_study_without_claims_has_no_claim_tables(built, tmp_path: Path) -> None:
    """A protocol study without claim settings is built without the claim path (what
    `lookahead run` passes, lookahead.claims.inputs.protocol_build_selection; the suite's
    builds pass the same), and any build of it first drops the claim tables an earlier
    build with claims left: neither the report nor an analyst reads them as its own."""
    from lookahead.claims.inputs import protocol_build_selection
    from lookahead.config import load_study

    study, db, here = _copy(built, tmp_path)
    assert protocol_build_selection(here) == ("--exclude", "tag:claims")
    assert protocol_build_selection(load_study(str(ROOT / "demo/claims/demo_contaminated.yml"))) == ()

    def names() -> set[str]:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
        finally:
            con.close()

    claim_models = {
        "claims",
        "claims_py",
        "claims_summary",
        "claims_summary_py",
        "int_claim_shapley",
        "int_claim_coalition_answers",
        "stg_claim_values",
    }
    # no claim model, not even the claim jobs' staging (the raw-line rejects then read
    # the protocol's lines only), and the protocol's tables
    assert {"raw_line_rejects", "stg_forecast_responses"} <= names()
    assert not claim_models & names()
    con = duckdb.connect(str(db))  # an earlier build of the study with claims: its tables and views
    for name in claim_models:
        if name.endswith("_py") or name.startswith(("int_", "stg_")):
            con.execute(f"create table {name} as select 1 as x")
    con.execute("create view claims as select * from claims_py")
    con.execute("create view claims_summary as select * from claims_summary_py")
    con.close()
    assert claim_models <= names()
    res = run_dbt(["build", "--select", "study_settings"], study.vars, db)
    assert res.returncode == 0, res.output
    assert not claim_models & names()
    assert "stg_forecast_responses" in names()  # what is not a claim model stays


def test_report_refuses_a_code_change_and_moves_the_old_report_away(built, tmp_path: Path) -> None:
    """Item 1 and 3: a build's code fingerprint is checked by the report as by `lookahead
    run`; the refused report's files move to results/<study>/stale/, the verdict row is
    marked stale for SQL users."""
    from lookahead.identity import COMPLETE
    from lookahead.pages.report import ReportError, write_report

    _, db, here = _copy(built, tmp_path)
    assert result_status(db) == COMPLETE  # on-run-end marked the passed build's verdict
    write_report(here, database=db)
    results = here.results_dir
    assert (results / "REPORT.md").exists() and (results / "verdict.csv").exists()
    # the paper's section is an entry of SECTIONS (lookahead.pages.sections), read from the
    # database by the report itself: after the protocol's tables, before the files
    heads = re.findall(r"(?m)^## (.+)$", (results / "REPORT.md").read_text())
    paper = next(i for i, h in enumerate(heads) if h.startswith("Paper analysis"))
    assert heads[paper - 1] == "Regression tables" and heads[-1] == "Files", heads
    assert (results / "tables" / "table2.tex").exists() and (results / "table5_reading.csv").exists()
    con = duckdb.connect(str(db))
    con.execute("update build_identity set code_fingerprint = 'sha256:an-older-code'")
    con.close()
    with pytest.raises(ReportError, match=r"the code \(models, macros.*changed since dbt build.*moved to"):
        write_report(here, database=db)
    assert not (results / "REPORT.md").exists() and not list(results.glob("*.csv"))
    assert (results / "stale" / "REPORT.md").exists() and "the code" in (results / "stale" / "WHY.txt").read_text()
    assert result_status(db).startswith("stale: ") and "the code" in result_status(db)


def test_a_build_that_did_not_finish_is_never_current(built, tmp_path: Path) -> None:
    """Item 2: a build killed after `verdict` was created left only its 'started' row in
    build_log (on-run-start); the report refuses, however the verdict looks."""
    from lookahead.identity import UNFINISHED, with_identity
    from lookahead.pages.report import ReportError, write_report

    _, db, here = _copy(built, tmp_path)
    con = duckdb.connect(str(db))
    con.execute(
        "insert into build_log (invocation_id, study_name, status, failed_nodes, message, finished_at, "
        "command, selection) select 'killed-build', study_name, 'started', '', '', "
        "now()::timestamp + interval 1 minute, 'build', '' from build_log limit 1"
    )
    ident = con.sql("select * from build_identity").df()
    con.close()
    with pytest.raises(ReportError, match=r"\(invocation killed-build\) did not finish"):
        write_report(here, database=db)
    import pandas as pd

    assert with_identity(pd.DataFrame({"verdict": ["x"]}), ident)["result_status"].iloc[0] == UNFINISHED


def test_the_database_path_does_not_depend_on_the_working_directory(built, tmp_path: Path) -> None:
    """Items 11 and 12: plain dbt from another folder (--project-dir), and the one way to
    preview a Python model, `dbt show --inline`."""
    study, db, _ = _copy(built, tmp_path)
    env = dbt_env(None)  # the profile's own path: relative to profiles/, not to the cwd
    outputs = ROOT / "outputs"
    target = outputs / f"{study.vars['study_name']}.duckdb"
    outputs.mkdir(exist_ok=True)
    shutil.copy(db, target)
    try:
        proc = subprocess.run(
            [
                str(Path(sys.executable).with_name("dbt")),
                "show",
                "--project-dir",
                str(ROOT),
                "--inline",
                "select verdict, result_status from {{ ref('verdict') }}",
                "--vars",
                json.dumps(study.vars),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        target.unlink()
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
    assert "| complete: the dbt" in proc.stdout  # dbt show cuts cells to 20 characters


def test_readme_sql_examples_run_as_written(built, tmp_path: Path) -> None:
    """Item 15: the README's SQL shell commands, each run with the installed duckdb CLI."""
    _, db, _ = _copy(built, tmp_path)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- sql-examples -->", 1)[1].split("<!-- /sql-examples -->", 1)[0]
    commands = [line for line in block.splitlines() if line.startswith(".venv/bin/duckdb")]
    assert len(commands) >= 3
    cli = ROOT / ".venv" / "bin" / "duckdb"
    assert cli.exists(), "make install installs the duckdb shell (duckdb-cli in requirements.txt)"
    import shlex

    for command in commands:
        argv = shlex.split(command)
        argv = [str(cli)] + [str(db) if a.startswith("outputs/") else a for a in argv[1:]]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and not proc.stderr, (command, proc.stderr)


def test_a_line_that_disagrees_with_its_key_is_not_an_answer(tmp_path: Path) -> None:
    """Item 4: a line under the right key but for another row is not cached; the job asks
    again and its answer is the one read back."""
    from test_cache import rec

    from lookahead.cache.lookup import ident_of
    from lookahead.cache.store import RawStore

    bad = rec("k1", row_id="another-row", task="forecast", response_text="down")
    (tmp_path / "forecast.jsonl").write_text(json.dumps(bad) + "\n")
    want = ident_of({**bad, "row_id": "r1"})
    with RawStore(tmp_path / "forecast.jsonl") as store:
        assert "k1" in store and not store.has_answer("k1", want)
        store.append({**bad, "row_id": "r1", "response_text": "up (the real answer)"})
        assert store.has_answer("k1", want)
        got = store.load({"k1": want})
    assert got["k1"]["response_text"] == "up (the real answer)"


def _job(study: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        **kw,
    )


def test_kills_lose_at_most_the_request_in_flight(server_factory: Any, tmp_path: Path) -> None:
    """Item 5: each answer is on disk before the next is awaited, so 3 kills cost at most
    one request each beyond the 24 the study needs (one stream: concurrency 1)."""
    url, state = server_factory()
    study = write_openai_study(
        tmp_path,
        url,
        "kills",
        24,
        tokenizer_path=None,
        model_path=None,
        backend_options={"backoff_s": 0.01, "timeout_s": 5, "concurrency": 1},
        batch_size=16,
    )
    raw = tmp_path / "kills/raw/forecast.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"]
    kills = 0
    for lines in (3, 9, 15):
        if kill_once_written(argv, raw, lines, env, 120) < 0:
            kills += 1
    assert _job(study, "--yes").returncode == 0
    keys = {json.loads(line)["key"] for line in raw.read_text().splitlines()}
    assert len(keys) == 24 and kills >= 1
    assert state.requests - 24 <= kills, (state.requests, kills)


def test_full_disk_names_the_file(server_factory: Any, tmp_path: Path) -> None:
    """Item 6: the append's error names the file (no second error from a flush on close)."""
    import resource

    url, _ = server_factory()
    study = write_openai_study(tmp_path, url, "full", 30, tokenizer_path=None, model_path=None)
    proc = _job(study, "--yes", preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000)))
    lines = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "stopped:"))]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(tmp_path / "full/raw/forecast.jsonl") in lines[0] and "File too large" in lines[0]


def test_a_complete_cache_is_reused_without_the_write_lock(server_factory: Any, tmp_path: Path) -> None:
    """Item 7: with the lock held elsewhere (or a read-only folder) a complete cache is
    read and reused; only a job with something left to ask stops, in one line."""
    from lookahead.cache.locks import release_lock, try_lock

    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "locked", 8, tokenizer_path=None, model_path=None)
    assert _job(study, "--yes").returncode == 0
    raw = tmp_path / "locked/raw/forecast.jsonl"
    lock = try_lock(raw)
    try:
        again = _job(study, "--yes")
        assert again.returncode == 0 and "to query: 0" in again.stdout, again.stderr
        data = tmp_path / "locked.csv"
        data.write_text(data.read_text() + "r99,E1,Firm 1,F1,Firm 1 news,2021-03-01,2021-03-02,0.5\n")
        more = _job(study, "--yes")
    finally:
        release_lock(lock)
    lines = [line for line in more.stderr.splitlines() if line.startswith(("error:", "stopped:"))]
    assert more.returncode == 2 and len(lines) == 1 and "being written by another job" in lines[0], more.stderr
    assert state.requests == 8


def test_declining_leaves_no_files(server_factory: Any, tmp_path: Path) -> None:
    """Item 14: no confirmation (stdin not a terminal), nothing asked, no empty cache file,
    failures file or lock left behind."""
    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "decline", 6, tokenizer_path=None, model_path=None)
    proc = _job(study, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "confirmation needed" in proc.stderr
    raw = tmp_path / "decline/raw"
    assert not raw.exists() or not list(raw.iterdir()), list(raw.iterdir())
    assert state.requests == 0


@pytest.mark.parametrize(
    "change,says",
    [
        ({"training_cutoff": "2020-01-01"}, "no pre-cutoff row, so the verdict could only be Underpowered"),
        ({"min_panel_rows": 500}, "fewer than min_panel_rows (500), so gate_panel would stop the build"),
    ],
)
def test_preflight_refuses_before_paying(server_factory: Any, tmp_path: Path, change: dict, says: str) -> None:
    """Item 9: what the rows and settings decide is checked before any confirmation."""
    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "pre", 12, tokenizer_path=None, model_path=None, **change)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--study", str(study)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith(("error:", "stopped:"))]
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
    assert "confirmation" not in proc.stderr and state.requests == 0
    assert re.search(r"12 valid rows \(\d+ pre-cutoff, \d+ post-cutoff", lines[0])


def test_a_killed_child_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Item 8: `lookahead run`'s child killed by SIGKILL (an out-of-memory kill): one line,
    a non-zero exit."""
    from lookahead.children import killed_is_one_line

    assert killed_is_one_line(-9, "the LLM jobs were", "rerun the same command to resume") == 137
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "",
        "error: the LLM jobs were killed by SIGKILL (the system may have run out of memory); rerun the same command to resume",
    ]
    assert killed_is_one_line(3, "dbt was", "x") == 3


def test_config_check_without_a_file_and_with_a_missing_column(tmp_path: Path) -> None:
    """Item 14: usage and a non-zero exit without a file; a mapped column missing from the
    data file is one line naming it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bare = subprocess.run(
        [sys.executable, "scripts/generated_files.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert bare.returncode == 2 and bare.stderr.startswith("usage:")
    text = (ROOT / "demo/studies/contaminated.yml").read_text()
    bad = tmp_path / "bad.yml"
    bad.write_text(text.replace("text: text", "text: headline"))
    proc = subprocess.run(
        [sys.executable, "-m", "lookahead.cli", "check", "--study", str(bad)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert "setting 'column_map': column(s) not in" in proc.stderr and "'headline'" in proc.stderr


def test_a_failed_python_model_is_one_line_without_its_traceback() -> None:
    """The failure message build_log stores for a failed Python model (a gate) carries the
    model's traceback; the report's refusal quotes only the exception."""
    from lookahead.identity import _without_traceback

    stored = (
        "Runtime Error in model gate_panel (python_models/marts/gates/gate_panel.py)   Python model failed:"
        '   Traceback (most recent call last):     File "/x/environments/__init__.py", line 286, in '
        "run_python_job       df = module.model(dbt, con)       raise GateFailed(   "
        "lookahead.gates.GateFailed: GX gate 'gate_panel' failed: 1 unexpected"
    )
    assert _without_traceback(stored) == "GateFailed: GX gate 'gate_panel' failed: 1 unexpected"
    assert _without_traceback("Database Error: no such table") == "Database Error: no such table"


def test_lookahead_jobs_whose_child_is_killed_says_so(server_factory: Any, tmp_path: Path) -> None:
    """Item 8, for real: the job child of `lookahead jobs` killed by SIGKILL (as an
    out-of-memory kill would) -> one line from `lookahead`, exit 137."""
    import signal
    import time

    url, _ = server_factory()
    # with the tokenizer the recall labels are checked on: the whole run is planned (and
    # refused or confirmed) before the first request (llm_jobs.jobs_plan)
    study = write_openai_study(tmp_path, url, "oom", 400, backend_options={"backoff_s": 0.01, "timeout_s": 5, "concurrency": 1})
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lookahead.cli", "jobs", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    raw = tmp_path / "oom/raw/forecast.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (raw.exists() and raw.stat().st_size):
        time.sleep(0.05)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert children, "the job child is running"
    os.kill(int(children[0]), signal.SIGKILL)
    _out, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 137 and "Traceback" not in err, err
    assert lines == [
        "error: the LLM jobs were killed by SIGKILL (the system may have run out of memory); "
        "finished answers are saved; rerun the same command to resume"
    ]


def _user_files_in(study: Any) -> dict[Path, str]:
    """A user's files in every folder the report writes to (issue 32, item 3)."""
    files = {
        study.results_dir / "user_data.csv": "mine",
        study.results_dir / "tables" / "mine.tex": "mine",
        study.results_dir / "figures" / "mine.png": "mine",
        study.outputs_dir / "my_panel.dta": "mine",
    }
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return files


def _presented(study: Any) -> list[str]:
    """The report's files a reader finds now (stale folders, the user's files and the
    tool's hidden files left out)."""
    out = []
    for root in (study.results_dir, study.outputs_dir):
        for p in root.rglob("*"):
            rel = p.relative_to(root)
            if p.is_file() and not rel.parts[0].startswith(("stale", ".")) and p.read_text(errors="replace") != "mine":
                out.append(rel.as_posix())
    return sorted(out)


def test_every_artefact_is_retired_by_a_refusal_and_by_a_plain_dbt_build(built, tmp_path: Path) -> None:
    """Issue 35, item 1: a refusal retires REPORT.md, every CSV, the do-file and the .dta
    panels together; so does a plain `dbt build` (on-run-start hook), not only `lookahead
    build`. A user's files in the same folders survive every step."""
    from lookahead.config import Study, resolve
    from lookahead.pages.report import ReportError, write_report

    study, db, _ = _copy(built, tmp_path)
    vars_ = {**study.vars, "results_dir": str(tmp_path / "results"), "outputs_dir": str(tmp_path / "outputs")}
    here = Study(vars=resolve(vars_))
    mine = _user_files_in(here)
    files = write_report(here, database=db)
    shown = _presented(here)
    assert {"REPORT.md", "verdict.csv", "reghdfe.do", "panel_pre.dta"} <= set(shown), shown
    assert len(files.csvs) >= 5 and files.report.read_text(encoding="utf-8").startswith("# Lookahead")
    # a refusal (an edited setting) retires the whole set
    edited = Study(vars=resolve({**vars_, "training_cutoff": "2021-06-30"}))
    with pytest.raises(ReportError, match="the study settings changed"):
        write_report(edited, database=db)
    assert _presented(here) == []
    assert {p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("*/stale/*")} >= {
        "outputs/stale/panel_pre.dta",
        "results/stale/REPORT.md",
        "results/stale/verdict.csv",
        "results/stale/reghdfe.do",
    }
    # a new report, then plain dbt build: the build's on-run-start moves it to stale/ (a second
    # retirement: the first stale/ is kept as stale.1)
    write_report(here, database=db)
    assert _presented(here) == shown
    res = run_dbt(["build"], vars_, db, as_vars=True)
    assert res.returncode == 0, res.output[-3000:]
    assert _presented(here) == []
    assert (here.results_dir / "stale" / "REPORT.md").is_file() and (here.results_dir / "stale.1" / "REPORT.md").is_file()
    assert "a dbt build (invocation" in (here.results_dir / "stale" / "WHY.txt").read_text()
    for p, text in mine.items():
        assert p.read_text() == text, p


def test_a_held_database_is_one_line_naming_the_file_the_pid_and_the_fix(
    built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35 item 2 / issue 37 item 5: a database another process holds read-write
    (a duckdb shell, a notebook) is 'cannot check: held by another process (PID ...)',
    never current; `lookahead build` says so once instead of DuckDB's lock error per
    thread."""
    from lookahead.cli import main
    from lookahead.pages.report import ReportError, write_report

    _, db, here = _copy(built, tmp_path)
    write_report(here, database=db)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys, time\ncon = duckdb.connect({str(db)!r})\nprint('held', flush=True)\ntime.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(
            ReportError,
            match=rf"cannot check: {re.escape(str(db))} is held by another process "
            rf"\(PID {holder.pid}, python.*\); close that process.*-readonly",
        ):
            write_report(here, database=db)
        assert not (here.results_dir / "REPORT.md").exists()  # never presented as current
        study_file = tmp_path / "study.yml"
        import yaml

        study_file.write_text(yaml.safe_dump(here.vars), encoding="utf-8")
        os.environ["LOOKAHEAD_DUCKDB"] = str(db)
        try:
            rc = main(["build", "--study", str(study_file)])
        finally:
            del os.environ["LOOKAHEAD_DUCKDB"]
        err = capsys.readouterr().err
        assert rc == 2 and err.count("held by another process") == 1 and f"PID {holder.pid}" in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    finally:
        holder.kill()
        holder.wait()


def _build_with_final_checkpoint(study: Any, db: Path, code: Path, before: str) -> subprocess.CompletedProcess:
    """`dbt build` of the project copy `code` (lookahead.identity.copy_code) into `db`, its
    on-run-end running the SQL `before` just ahead of the final checkpoint (the one before
    the build's status row is written), with the copy's package ahead of the project's."""
    from lookahead.children import settings_file_env
    from lookahead.config import Study, resolve

    hook = code / "macros" / "build_log.sql"
    marker = "    {% set status = 'failed' if failed else 'success' %}"
    head, tail = hook.read_text().split(marker, 1)
    checkpoint = '{% do run_query("checkpoint") %}'
    assert checkpoint in tail.split('{% do run_query("insert into build_log', 1)[0]  # before the status row
    hook.write_text(head + marker + tail.replace(checkpoint, "{% do run_query(" + json.dumps(before) + ") %}" + checkpoint, 1))
    env = {**dbt_env(db), "DBT_PROFILES_DIR": str(code / "profiles")}
    with settings_file_env(Study(vars=resolve(study.vars))) as extra:
        return subprocess.run(
            [str(Path(sys.executable).with_name("dbt")), "build", "--project-dir", str(code)],
            cwd=code,
            env={**env, **extra, "PYTHONPATH": str(code)},
            capture_output=True,
            text=True,
            timeout=900,
        )


@pytest.mark.slow  # a second dbt build, of a copy of the project
def test_a_build_whose_final_checkpoint_fails_is_not_complete(built, tmp_path: Path) -> None:
    """Issue 35, item 3: a full disk at the build's final checkpoint. The build's tables
    are checkpointed before its status is written, so a failure there leaves only the
    'started' row: the build reads as unfinished, however the write-ahead log replays.
    Simulated (no small file system needed) by a copy of the project whose on-run-end
    fails at that checkpoint."""
    from lookahead.identity import COMPLETE, copy_code

    study, db, _ = _copy(built, tmp_path)
    code = copy_code(tmp_path / "code")
    shutil.copytree(ROOT / "demo" / "studies", code / "demo" / "studies")  # the copy's default study
    proc = _build_with_final_checkpoint(study, db, code, "select error('simulated: No space left on device at the checkpoint')")
    assert proc.returncode != 0 and "simulated: No space left" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    con = duckdb.connect(str(db), read_only=True)
    try:
        last = con.sql("select status from build_log order by finished_at desc, status = 'started' limit 1").fetchone()
    finally:
        con.close()
    assert last == ("started",)
    assert result_status(db) != COMPLETE


_FILL_DISK = '''

def _fill_disk(folder: str) -> int:
    """Test only: write a file in `folder` until its file system is full."""
    import errno as _errno

    written, chunk = 0, b"\\0" * 65536
    with open(os.path.join(folder, "filler.bin"), "wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(chunk)
                os.fsync(fh.fileno())
            except OSError as exc:
                if exc.errno != _errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]


_configure_connection = Plugin.configure_connection


def _configure_with_filler(self, conn):
    _configure_connection(self, conn)
    conn.create_function("fill_disk", _fill_disk, ["VARCHAR"], "BIGINT", side_effects=True)


Plugin.configure_connection = _configure_with_filler
'''


def _mount_tmpfs(where: Path, size_mb: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)], capture_output=True).returncode
        == 0
    )


@pytest.mark.slow  # a second dbt build, of a copy of the project, on a small file system
def test_a_full_disk_at_the_final_checkpoint_never_reads_as_complete(built, tmp_path: Path) -> None:
    """Issue 35, item 3, on a real full disk: the study's database on a small tmpfs, filled
    (ENOSPC) the moment before the build's final checkpoint by a copy of the project whose
    on-run-end writes a file until the disk is full. However DuckDB fares there, the state
    a fresh connection reads agrees with what dbt said: a build dbt reports failed is not
    complete, and one it reports passed is complete on reopen. Skipped where this machine
    cannot mount a tmpfs (it needs root); the simulated failure above runs everywhere."""
    from lookahead.identity import COMPLETE, copy_code

    study, db, _ = _copy(built, tmp_path)
    disk = tmp_path / "disk"
    size_mb = int(db.stat().st_size * 4 / 2**20) + 64
    if not _mount_tmpfs(disk, size_mb):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        small = disk / "db.duckdb"
        shutil.copy(db, small)
        code = copy_code(tmp_path / "code")
        shutil.copytree(ROOT / "demo" / "studies", code / "demo" / "studies")  # the copy's default study
        (code / "lookahead" / "dbt_plugin.py").write_text((code / "lookahead" / "dbt_plugin.py").read_text() + _FILL_DISK)
        proc = _build_with_final_checkpoint(study, small, code, f"select fill_disk({str(disk)!r})")
        out = proc.stdout + proc.stderr
        assert (disk / "filler.bin").exists(), out[-2000:]  # the disk was filled at that moment
        (disk / "filler.bin").unlink()  # room to open the database again (its WAL replays)
        status = result_status(small)
        print(
            f"dbt exit {proc.returncode} ({('No space left' in out and 'ENOSPC') or 'no ENOSPC message'}); "
            f"status on reopen {status!r}"
        )
        if proc.returncode != 0:
            assert status != COMPLETE, out[-2000:]
        else:
            assert status == COMPLETE, out[-2000:]
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
