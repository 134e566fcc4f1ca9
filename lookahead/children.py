"""The child processes a command starts: dbt and the LLM jobs, each in the project folder
with the project's environment, dbt's output without Python tracebacks, and a child
killed by a signal reported in one line; SIGINT and SIGTERM reach the child, and the
child stops when the wrapper dies (lookahead.stopping). Used by the ``lookahead`` command
(lookahead.cli). A "run" is the command `lookahead run`, never one of these
(docs/CONTRACTS.md, Vocabulary)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from lookahead.config import PROJECT_ROOT, STUDY_SETTINGS_ENV, Study, load_study
from lookahead.errors import UserError
from lookahead.stopping import child_options, forwarding_signals, run_child


def dbt_env() -> dict[str, str]:
    """Environment for dbt: project profiles, no usage stats, caches inside the project."""
    env = dict(os.environ)
    env.setdefault("DBT_PROFILES_DIR", str(PROJECT_ROOT / "profiles"))
    env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "False"
    env.setdefault("MPLCONFIGDIR", str(PROJECT_ROOT / ".mplconfig"))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("GX_ANALYTICS_ENABLED", "False")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


def dbt_command(args: list[str]) -> list[str]:
    """The dbt command line. The study is not on it (no --vars): see :func:`study_env`."""
    dbt = Path(sys.executable).with_name("dbt")
    return [str(dbt) if dbt.exists() else "dbt", *args, "--project-dir", str(PROJECT_ROOT)]


@contextmanager
def study_env(study_file: str | None, overrides: dict | None = None, settings: Path | None = None) -> Iterator[dict[str, str]]:
    """dbt's environment for a study: its resolved settings (the file and the overrides)
    in a JSON file that $LOOKAHEAD_STUDY_SETTINGS names, read by the project's DuckDB
    plugin when dbt opens the database (lookahead.config.dbt_study). ``settings``: the file
    the command has already written (:func:`resolved_settings`: the one the LLM jobs get
    too); else the study is loaded here and written to a temporary file.

    Why not --vars: dbt re-parses the whole project whenever --vars change, so each new or
    edited study paid a full parse; the variable is invisible to dbt's parser
    (docs/CONTRACTS.md, "How a study reaches dbt")."""
    from lookahead.collision import SOURCE_ENV, file_source

    with (
        nullcontext(settings) if settings is not None else resolved_settings(load_study(study_file, overrides=overrides))
    ) as path:
        # where the study came from, recorded in build_log: a build from another study file
        # into the same database is stopped (lookahead.collision)
        yield {**settings_env(path), SOURCE_ENV: file_source(study_file)}


@contextmanager
def resolved_settings(study: Study) -> Iterator[Path]:
    """`study`'s resolved settings (every setting, the study file plus the command's
    overrides) in a temporary JSON file, removed on exit: what `lookahead` writes once per
    command and hands every LLM job (--settings, llm_jobs.context.job_study) and dbt
    ($LOOKAHEAD_STUDY_SETTINGS), so that no process reads the study file again and an
    override (--accept-low-parse-rate, --subsample) reaches each of them alike."""
    with tempfile.TemporaryDirectory(prefix="lookahead-study-") as tmp:
        settings = Path(tmp) / "study.json"
        # in the study's own order (settings_json sorts keys): a label mapping's order is
        # the order of the columns it makes (stg_recall_responses)
        settings.write_text(json.dumps(study.vars, default=str), encoding="utf-8")
        yield settings


def settings_env(settings: Path) -> dict[str, str]:
    """dbt's environment with the resolved settings file ``settings`` as its study."""
    return {**dbt_env(), STUDY_SETTINGS_ENV: str(settings)}


@contextmanager
def settings_file_env(study: Study) -> Iterator[dict[str, str]]:
    """dbt's environment with `study` in the settings file $LOOKAHEAD_STUDY_SETTINGS names
    (removed on exit); :func:`study_env` for a study already loaded."""
    with resolved_settings(study) as settings:
        yield settings_env(settings)


_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Failed|Exception)): (.*)$")


def without_tracebacks(lines: Iterable[str]) -> Iterator[str]:
    """dbt's output with each Python traceback (a failed gate in a dbt Python model)
    reduced to its last line, the exception message, which names what failed."""
    in_traceback = False
    for line in lines:
        if "Traceback (most recent call last):" in line:
            in_traceback = True
            continue
        if in_traceback:
            match = _EXCEPTION_LINE.match(line)
            if match:
                in_traceback = False
                yield f"  {match.group(1)}: {match.group(2)}\n"
            continue
        yield line


def run_dbt(args: list[str], study_file: str | None, overrides: dict | None = None, settings: Path | None = None) -> int:
    """dbt as a subprocess on the study (``settings``, the command's resolved settings file,
    else `study_file` with `overrides`); its output is passed through without Python
    tracebacks (LOOKAHEAD_DEBUG=1 keeps them)."""
    cmd = dbt_command(args)
    then = "its partial results are marked unfinished; rerun the same command"
    with study_env(study_file, overrides, settings) as env:
        if os.environ.get("LOOKAHEAD_DEBUG"):
            return killed_is_one_line(run_child(cmd, env, cwd=PROJECT_ROOT), "dbt was", then)
        with (
            subprocess.Popen(
                cmd,
                cwd=PROJECT_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                **child_options(env),
            ) as proc,
            forwarding_signals(proc),
        ):
            assert proc.stdout is not None
            for line in without_tracebacks(proc.stdout):
                sys.stdout.write(line)
                sys.stdout.flush()
    return killed_is_one_line(proc.returncode, "dbt was", then)


def failed_column_rules(database: Path, target: Path | None = None, since: float = 0.0) -> list[str]:
    """One line per rule and column behind each column_rules data test (macros/generic_tests.sql)
    that failed in the last dbt command, e.g. "stg_forecast_responses.first_token_prob: 1 row
    breaks accepted_range". Why: the project checks a model's columns in one test (one dbt
    node, not one per column), so dbt's failure line names the test and not the column; the
    test's query, kept in run_results.json, returns the rule, the column and the rows that
    break it, read here from the database the build wrote. Empty when nothing can be read,
    or when run_results.json is older than `since` (a command that failed before writing it
    leaves an earlier command's). The query is text read from a file, so it runs on a
    read-only connection without external access: it can read the database's tables and
    nothing else (no file read or written, no extension loaded)."""
    target = target or PROJECT_ROOT / os.environ.get("DBT_TARGET_PATH", "target")
    try:
        if (target / "run_results.json").stat().st_mtime < since:
            return []
        results = json.loads((target / "run_results.json").read_text())["results"]
        # each test is named column_rules_<model> (tests/python/test_layering.py holds it)
        failed = {
            name.removeprefix("column_rules_"): r["compiled_code"]
            for r in results
            if r["status"] == "fail" and (name := r["unique_id"].split(".")[2]).startswith("column_rules_")
        }
    except (OSError, ValueError, KeyError, IndexError):
        return []
    if not failed:
        return []
    import duckdb

    lines: list[str] = []
    try:
        con = duckdb.connect(str(database), read_only=True, config={"enable_external_access": False})
    except duckdb.Error:
        return []
    try:
        for model, query in failed.items():
            try:
                rows = con.sql(query).fetchall()
            except (duckdb.Error, TypeError):
                continue
            lines += [
                f"{model}.{column}: {n} row{'s' if n != 1 else ''} break{'' if n != 1 else 's'} {rule}"
                for rule, column, n in rows
            ]
    finally:
        con.close()
    return lines


class JobEnvironmentError(UserError, RuntimeError):
    """The study's backend needs an environment of its own that is missing and was not
    created (declined, or its script failed); the message says which and what to run."""

    exit_code = 1  # as a declined confirmation (lookahead.guard's EXIT_DECLINED)


def job_python(study: Study, yes: bool, ask: Callable[[str], str] | None = None) -> str:
    """The interpreter the study's LLM jobs run with: the environment its backend needs
    (lookahead.backends.JOB_ENVIRONMENTS, e.g. .venv-vllm for vllm), created first when
    missing, after a confirmation that says so and what it costs (--yes: said, not asked);
    else this command's own interpreter. Why: `lookahead run` is the one command on every
    backend, vLLM's included, whose library cannot live in the main environment."""
    from lookahead.backends import JOB_ENVIRONMENTS

    kind = study.backend.backend
    env = JOB_ENVIRONMENTS.get(kind)
    if env is None:
        return sys.executable
    if env.python.exists():
        return str(env.python)
    folder = env.python.parent.parent
    where = folder.relative_to(PROJECT_ROOT) if folder.is_relative_to(PROJECT_ROOT) else folder
    make = " ".join(env.make)
    print(
        f"backend '{kind}': the LLM jobs run in the environment {where}, which does not exist yet; "
        f"creating it (`{make}`) is {env.cost}",
        flush=True,
    )
    if not yes and _answer(ask or input, f"Create {where} now? [y/N] ") not in ("y", "yes"):
        raise JobEnvironmentError(
            f"backend '{kind}' needs {where}: create it with `{make}` (or answer y, or pass --yes), then rerun"
        )
    rc = subprocess.call(list(env.make), cwd=PROJECT_ROOT)
    if rc or not env.python.exists():
        raise JobEnvironmentError(f"`{make}` failed (exit {rc}) and {where} is not usable; see its messages above, then rerun")
    return str(env.python)


def _answer(ask: Callable[[str], str], question: str) -> str:
    """The user's answer, lower-cased; no answer (end of input, no terminal) is no."""
    try:
        return ask(question).strip().lower()
    except EOFError:
        return ""


def run_jobs(
    settings: Path,
    study_file: str | None,
    yes: bool,
    extra: list[str],
    module: str = "llm_jobs.run_all",
    python: str | None = None,
) -> int:
    """The LLM jobs (or, as `module`, their preflight) as a subprocess, with ``python``
    (job_python: the backend's own environment) or this interpreter, on the command's
    resolved settings file (:func:`resolved_settings`, --settings): every job, protocol and
    claim alike, runs the study this command loaded, its overrides included, and reads no
    study file. --study still names the user's file (`study_file`), for what names it."""
    cmd = [python or sys.executable, "-m", module, "--settings", str(settings)]
    if study_file:
        cmd += ["--study", study_file]
    if yes:
        cmd.append("--yes")
    return killed_is_one_line(
        run_child(cmd + extra, dbt_env(), cwd=PROJECT_ROOT),
        "the LLM jobs were",
        "finished answers are saved; rerun the same command to resume",
    )


def killed_is_one_line(rc: int, what: str, then: str) -> int:
    """A child's exit status; a child killed by a signal (an out-of-memory kill is SIGKILL)
    gets one line saying so and what to do, and a non-zero exit (128 + the signal)."""
    if rc >= 0:
        return rc
    import signal

    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    hint = " (the system may have run out of memory)" if -rc == signal.SIGKILL else ""
    # on a line of its own: the killed child may have left its progress bar's line open
    print(f"\nerror: {what} killed by {name}{hint}; {then}", file=sys.stderr)
    return 128 - rc
