"""Run the real dbt project against a test study: in this process through dbt's own
programmatic entry point (dbtRunner, the `dbt` command's click group), or as a `dbt`
subprocess where a test needs the command itself (``subprocess_=True``).

Why in process by default: every `dbt` process imports dbt, the adapter, pandas, pyarrow and
Great Expectations (about 7 CPU-s before it parses anything) and a test worker runs dozens
of builds; in process each worker pays the imports once. The command line, the environment,
the working folder and the exit code are those of the subprocess (:func:`invoke_in_process`),
and the user-facing commands (`lookahead run`, the README's `dbt build`) still run as
subprocesses in the tests that walk them."""

from __future__ import annotations

import gc
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack, redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.children import settings_file_env
from lookahead.cli import STUDY_KINDS
from lookahead.config import STUDY_SETTINGS_ENV, Study, study_from_dbt_vars
from lookahead.errors import StudyConfigError
from lookahead.identity import UNIT_TESTS_LEFT_OUT

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DbtResult:
    returncode: int
    output: str
    db: Path

    def table(self, name: str) -> pd.DataFrame:
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            return con.sql(f"select * from {name}").df()
        finally:
            con.close()

    def has_table(self, name: str) -> bool:
        if not self.db.exists():
            return False
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            names = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
        finally:
            con.close()
        return name in names


def result_status(db: Path) -> str:
    """The verdict row's result_status, as a SQL user reads it (read-only)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return str(con.sql("select result_status from verdict").fetchone()[0])
    finally:
        con.close()


def dbt_env(db: Path | None) -> dict[str, str]:
    """dbt's environment; db None = the study's own database (profiles/profiles.yml).

    dbt writes no debug log file (logs/dbt.log, every event and statement of the run):
    formatting it is about an eighth of a fixture build's CPU time (41 CPU-s with it, 36
    without), no test reads it, and what dbt prints (the output a test checks) is the
    same. A test that reads the log sets its own environment (test_partial_parse.py)."""
    env = dict(os.environ)
    env.pop("LOOKAHEAD_DUCKDB", None)
    scratch = db.parent if db is not None else Path(tempfile.mkdtemp(prefix="dbt-"))
    env.update(
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        MPLCONFIGDIR=str(scratch / ".mpl"),
        GX_ANALYTICS_ENABLED="False",
        DBT_LOG_PATH=str(scratch / "logs"),
        DBT_LOG_LEVEL_FILE="none",
        DBT_TARGET_PATH=str(scratch / "target"),
        PYTHONPATH=str(ROOT),
    )
    if db is not None:
        env["LOOKAHEAD_DUCKDB"] = str(db)
    seed_parse(scratch / "target")
    return env


#: This worker's parsed project (dbt's partial_parse.msgpack), copied into each test's
#: fresh target folder so that dbt parses only what changed (test_partial_parse.py shows
#: that a study passed this way leaves the parse reusable).
_PARSED: list[Path] = []
#: Before this worker's first build: the project's own parse, when a run from the project
#: folder (`make demo`, which CI runs first) left one.
PROJECT_PARSE = ROOT / "target" / "partial_parse.msgpack"


def seed_parse(target: Path) -> None:
    """A fresh target folder gets a parse of the project to start from, so that every dbt
    command a test runs in it (`lookahead run`, `dbt show`, a build) parses only what
    changed: 3 CPU-s instead of 7 for a whole parse. dbt checks the copy itself (file
    checksums, vars, profile, version) and parses again whatever it does not match."""
    parsed = target / "partial_parse.msgpack"
    seed = _PARSED[0] if _PARSED else PROJECT_PARSE
    if parsed.exists() or not seed.exists():
        return
    target.mkdir(parents=True, exist_ok=True)
    with suppress(OSError):  # a seed being rewritten: dbt parses the whole project, as before
        shutil.copyfile(seed, parsed)


#: Set to 1, every run_dbt starts a `dbt` process of its own, as before dbt ran in the test
#: worker (benchmarks/suite_dbt_in_process.py times the two side by side).
SUBPROCESS_ENV = "LOOKAHEAD_TEST_DBT_SUBPROCESS"

#: The commands whose JSON artifacts a test reads by default (target/manifest.json of
#: `dbt parse`, the catalog of `dbt docs generate`).
ARTIFACT_COMMANDS = frozenset({"parse", "docs"})


def run_dbt(
    args: list[str],
    vars_: dict,
    db: Path | None,
    *,
    as_vars: bool = False,
    artifacts: bool | None = None,
    subprocess_: bool = False,
    unit_tests: bool = False,
) -> DbtResult:
    """dbt on the study `vars_`, passed as the lookahead command passes one: its resolved
    settings in the file $LOOKAHEAD_STUDY_SETTINGS names. With `as_vars`, or when the
    loader refuses the settings (a test of the run-start check's message), they go on
    the command line as `--vars`, as a user's `dbt build --vars "$(cat study.yml)"`.

    Why the settings file by default: `--vars` that change make dbt parse the whole project
    again (5-6 s a call), and each test has a study of its own.

    `artifacts`: whether dbt writes its JSON artifacts (manifest.json, twice a command, and
    run_results.json) into the target folder; by default only for ARTIFACT_COMMANDS. No test
    reads them after any other command but a later `--state` comparison (which passes
    True), and writing them is about a tenth of a `dbt show`'s CPU time ($DBT_WRITE_JSON;
    the partial parse and compiled SQL are written either way). The lookahead command and
    the README's commands, run as a user runs them, still write them.

    `subprocess_`: run the `dbt` command as a process of its own instead of in this one.

    `unit_tests`: whether a `dbt build` runs dbt's unit tests (the models' `unit_tests:`).
    They check a model's SQL on fixed rows, the same whatever the study, so the suite runs
    them where a build stands for a plain `dbt build`: the shared fixture build
    (shared_builds.py, which passes True; test_dbt_build.py checks each one ran and
    passed) and the README's `dbt build` and `dbt test` (test_readme_data_team.py). Every other
    build leaves them out (lookahead.identity.UNIT_TESTS_LEFT_OUT), as `lookahead run` does:
    about 2.5 of a demo build's 24 CPU-s (BENCHMARKS.md, "The suite"); a test that builds
    its own study tests that study's tables and data tests, which are all still run."""
    dbt = Path(sys.executable).with_name("dbt")
    env = dbt_env(db)
    if artifacts is None:
        artifacts = bool(args) and args[0] in ARTIFACT_COMMANDS
    env["DBT_WRITE_JSON"] = "True" if artifacts else "False"
    cmd = [str(dbt), *args, "--project-dir", str(ROOT)]
    if args[:1] == ["build"] and not unit_tests and "--exclude-resource-type" not in args:
        cmd += UNIT_TESTS_LEFT_OUT
    study = None
    if not as_vars:
        with suppress(StudyConfigError):
            study = study_from_dbt_vars(json.dumps(vars_, default=str))
    if args[:1] == ["build"] and study is not None and not SELECTION_FLAGS & set(args):
        cmd += study_selection(study)
    parsed = Path(env["DBT_TARGET_PATH"]) / "partial_parse.msgpack"
    seed_parse(parsed.parent)
    with ExitStack() as stack:
        if study is None:
            cmd += ["--vars", json.dumps(vars_)]
        else:  # the settings file, as the lookahead command writes it
            env[STUDY_SETTINGS_ENV] = stack.enter_context(settings_file_env(study))[STUDY_SETTINGS_ENV]
        if subprocess_ or os.environ.get(SUBPROCESS_ENV) == "1":
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            returncode, output = proc.returncode, proc.stdout + proc.stderr
        else:
            returncode, output = invoke_in_process(cmd[1:], env)
    if study is not None and not _PARSED and parsed.exists():
        seed = Path(tempfile.mkdtemp(prefix="dbt-parsed-")) / "partial_parse.msgpack"
        shutil.copyfile(parsed, seed)
        _PARSED.append(seed)
    return DbtResult(returncode, output, db)


#: The flags that say which nodes a command runs: a build given one is left as it is.
SELECTION_FLAGS = frozenset({"--select", "-s", "--exclude", "--selector", "--resource-type"})


def declared_unit_tests() -> set[tuple[str, str]]:
    """(model, name) of every unit test the project's YAML declares, from dbt's model paths."""
    import yaml

    return {
        (test["model"], test["name"])
        for folder in ("models", "python_models")
        for path in (ROOT / folder).rglob("*.yml")
        for test in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("unit_tests") or []
    }


def study_selection(study: Study) -> tuple[str, ...]:
    """The nodes `lookahead run` builds for the study (its kind's entry in
    lookahead.cli.STUDY_KINDS): what a test's build stands for."""
    return STUDY_KINDS[study.output.study_kind].build_select(study)


def invoke_in_process(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`dbt <args>` in this process, as the `dbt` command runs it from ROOT with the
    environment `env`: returns its exit code (0 success, 1 a node or test failed, 2 dbt
    stopped on an error, as the command's) and what it printed.

    What a process of its own would have given for free, done here:
    - the environment and the working folder are `env` and ROOT for the call only (dbt and
      the project's plugin read both while they run), and restored after;
    - dbt's console log and anything a Python model prints are captured, not the worker's;
    - dbt-duckdb keeps one database environment per process (its class attribute `_ENV`)
      and reuses it while the profile is the same, which it is for every study (the
      plugin attaches the study's file when the environment opens): it is closed after
      each call, so the next study's build opens its own database, and a test can open
      the file read-only at once;
    - the plugin freezes the objects alive during a build out of the garbage collector's
      reach (lookahead.dbt_plugin._freeze_long_lived, right for a process that ends with
      the build): unfrozen after each call, so a worker running many builds does not keep
      every build's parsed project;
    - dbt's global flags (the call's --vars among them, which the plugin reads) are put
      back as they were: a test that calls the plugin directly after a build in the same
      worker reads its own study, not the build's."""
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager
    from dbt.cli.main import dbtRunner
    from dbt.flags import get_flags, set_flags
    from dbt_common.events.functions import capture_stdout_logs, stop_capture_stdout_logs

    saved_env, saved_cwd, saved_flags = dict(os.environ), os.getcwd(), get_flags()
    out = io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    capture_stdout_logs(out)
    try:
        with redirect_stdout(out), redirect_stderr(out):
            result = dbtRunner().invoke(list(args))
    finally:
        stop_capture_stdout_logs()
        with DuckDBConnectionManager._LOCK:
            if DuckDBConnectionManager._ENV is not None:
                with suppress(Exception):
                    DuckDBConnectionManager._ENV.close()
                DuckDBConnectionManager._ENV = None
        plugin = sys.modules.get("lookahead.dbt_plugin")
        if plugin is not None:  # the study of this call's settings file, by its path
            plugin._resolved.cache_clear()
        set_flags(saved_flags)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        gc.unfreeze()
        gc.collect()
    if result.success:
        return 0, out.getvalue()
    if result.exception is None:
        return 1, out.getvalue()
    text = out.getvalue()
    message = str(result.exception)
    return 2, text if message in text else text + message + "\n"
