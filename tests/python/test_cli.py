"""The command line ends every way in one line, never a traceback: --help of every
command, a read-only raw folder, a full disk (a file-size limit), and the jobs' own
stops (server down, retries exhausted, 401: see test_openai_backend.py)."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [[], ["jobs"], ["build"], ["report"], ["run"]])
def test_lookahead_help_prints_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from lookahead.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    out = capsys.readouterr()
    assert exit_.value.code == 0, out.err
    assert out.out.startswith("usage: lookahead") and "Traceback" not in out.err + out.out
    if argv in (["jobs"], ["run"]):
        assert "llm_jobs.run_all" in out.out
    if argv == ["jobs"]:
        assert "--only JOB" in out.out


@pytest.mark.parametrize("argv", [["claims"], ["claims", "check"], ["demo"], ["demo", "cutoff-check"]])
def test_group_help_prints_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`lookahead claims check` and `lookahead demo cutoff-check`: a group's --help names
    its commands, a command's --help its own arguments, under the name a user types."""
    from lookahead.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    out = capsys.readouterr()
    assert exit_.value.code == 0, out.err
    assert out.out.startswith(f"usage: lookahead {' '.join(argv)} ") and "Traceback" not in out.err + out.out
    if len(argv) == 1:
        assert ("check" if argv == ["claims"] else "cutoff-check") in out.out
    else:
        assert "--db" in out.out


def test_claims_check_without_its_database_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lookahead.cli import main

    code = main(["claims", "check", "--demo", str(ROOT / "demo" / "claims"), "--db", f"leaky={tmp_path / 'none.duckdb'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "of model 'leaky' not found" in err, err


#: The package's only `__main__` blocks, each with the reason it is one. A command a user
#: types is a `lookahead` subcommand (one job alone: `lookahead jobs --only NAME`), a
#: maintainer's or researcher's program a script outside the package (scripts/build_demo.py,
#: scripts/generated_files.py, research/); the demo's checks are `lookahead claims check` and `lookahead demo cutoff-check`.
PACKAGE_MAINS = {
    "lookahead/cli.py": "the `lookahead` command; `python -m lookahead.cli` is it on a named interpreter (sys.executable)",
    "llm_jobs/run_all.py": "the job process `lookahead jobs` and `run` start, in the backend's environment (.venv-vllm)",
    "llm_jobs/preflight.py": "`lookahead check`'s preflight, a process of its own: the package never imports the jobs",
    "lookahead/gates/worker.py": "the gates' Great Expectations worker a dbt build starts, a process of its own: its "
    "import and checks hold none of the build's interpreter lock",
}

#: The modules a string may name for `python -m`: those with a `__main__` block above.
PROCESS_MODULES = {path.removesuffix(".py").replace("/", ".") for path in PACKAGE_MAINS}


def package_mains() -> set[str]:
    import re

    return {
        str(p.relative_to(ROOT))
        for pkg in ("lookahead", "llm_jobs")
        for p in (ROOT / pkg).rglob("*.py")
        if re.search(r'^if __name__ == "__main__"', p.read_text(encoding="utf-8"), re.M)
    }


def test_the_package_has_no_other_entry_point() -> None:
    """A new `if __name__ == "__main__"` in the package fails here: a command a user types
    is a `lookahead` subcommand, a maintainer's program a script outside the package."""
    assert package_mains() == set(PACKAGE_MAINS)
    assert all(len(reason) > 20 for reason in PACKAGE_MAINS.values())


def job_modules() -> set[str]:
    """Every module of llm_jobs, by its dotted name."""
    return {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "llm_jobs").rglob("*.py")}


def modules_named_for_python_m(source: str, jobs: set[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, module) for every module a string of ``source`` names to run with `python -m`:
    ``-m pkg.module`` inside a string (a command in a docstring, a message or one string),
    the string or f-string after a ``"-m"`` item of a list or tuple (a subprocess's command
    line), and a string that is the whole name of a module of ``jobs`` (in the package: a
    ``module=`` argument or default; outside it, where a test names a module of the import
    graph, ``jobs`` is empty)."""
    import ast
    import itertools
    import re

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, m) for m in re.findall(r"-m\s+((?:lookahead|llm_jobs)(?:\.\w+)+)", node.value)]
            if node.value in jobs:
                found.append((node.lineno, node.value))
        if isinstance(node, (ast.List, ast.Tuple)):
            for flag, name in itertools.pairwise(node.elts):
                if not (isinstance(flag, ast.Constant) and flag.value == "-m"):
                    continue
                if isinstance(name, ast.Constant) and str(name.value).split(".")[0] in ("lookahead", "llm_jobs"):
                    found.append((name.lineno, str(name.value)))  # another program (pytest, pip) is not the project's
                elif isinstance(name, ast.JoinedStr):  # f"llm_jobs.{job}": a module named by a variable
                    found.append((name.lineno, ast.unparse(name)))
    return found


def test_no_string_names_another_module_for_python_m() -> None:
    """No job is named by a module string: the package's source (code, docstrings,
    messages), the tests, benchmarks, research programs and scripts, the docs, README and
    Makefile name for `python -m` only the modules that keep a `__main__` block (the job
    process, the preflight, the command): one job alone is `--only NAME`."""
    import re

    jobs = job_modules()
    off = [
        f"{p.relative_to(ROOT)}:{line}: {module}"
        for pkg in ("lookahead", "llm_jobs", "tests", "benchmarks", "research", "scripts")
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if p != Path(__file__).resolve()  # this file plants what the rule finds
        for line, module in modules_named_for_python_m(
            p.read_text(encoding="utf-8"), jobs if pkg in ("lookahead", "llm_jobs") else set()
        )
        if module not in PROCESS_MODULES
    ]
    texts = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]
    off += [
        f"{p.relative_to(ROOT)}: {m}"
        for p in texts
        for m in re.findall(r"-m\s+((?:lookahead|llm_jobs)(?:\.\w+)+)", p.read_text(encoding="utf-8"))
        if m not in PROCESS_MODULES
    ]
    assert not off, "\n".join(off)


def test_a_job_named_for_python_m_is_found() -> None:
    """The check can fail: a command line naming a job module, a docstring telling to run
    one and a ``module=`` string are each found; the job process is not."""
    planted = (
        '"""Run: ``python -m llm_jobs.recall --study FILE``."""\n'
        'cmd = [sys.executable, "-m", "lookahead.paper.analysis", "--study", study]\n'
        'run_jobs(settings, None, True, [], module="llm_jobs.claims_value")\n'
        'ok = [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast"]\n'
        'by_name = [PY, "-m", f"llm_jobs.{job}", "--study", study]\n'
    )
    found = modules_named_for_python_m(planted, job_modules())
    assert sorted(m for _, m in found if m not in PROCESS_MODULES) == [
        "f'llm_jobs.{job}'",
        "llm_jobs.claims_value",
        "llm_jobs.recall",
        "lookahead.paper.analysis",
    ]


def test_make_demo_types_only_lookahead_commands() -> None:
    """`make demo` runs the tool as a user does: every command of its recipe is
    `lookahead <command>` (no `python -m` of a package module)."""
    import re

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndemo: install\n", 1)[1].split("\n\n", 1)[0]
    assert not re.search(r"-m (lookahead|llm_jobs)\b", recipe), recipe
    commands = re.findall(r"\$\(VENV\)/bin/lookahead (\w+)", recipe)
    assert {"run", "compare", "claims", "demo"} <= set(commands), commands


def test_job_help_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from llm_jobs import run_all

    with pytest.raises(SystemExit) as exit_:
        run_all.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("usage:") and "--accept-low-parse-rate" in out and "--only" in out


def _read_only_dir(tmp_path: Path) -> Path:
    """A folder this process cannot write: chmod 555, or (as root, which ignores modes)
    a path under /sys, a read-only file system in containers."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if not os.access(ro, os.W_OK):
        return ro / "raw"
    try:
        os.mkdir("/sys/lookahead-test-raw")
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EPERM, errno.EACCES):
            return Path("/sys/lookahead-test-raw")
        raise
    os.rmdir("/sys/lookahead-test-raw")
    pytest.skip("no read-only folder available to this user")


def test_read_only_raw_dir_is_one_line(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from llm_jobs import run_all

    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "ro", 4, raw_dir=str(_read_only_dir(tmp_path)))
    code = run_all.main(["--only", "forecast", "--study", str(study), "--yes"])
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith(("error:", "stopped:"))]
    assert code == 2 and len(lines) == 1 and "cannot use" in lines[0], err
    assert "Traceback" not in err and state.requests == 0  # stopped before paying for a query


def test_full_disk_is_one_line_and_the_rerun_resumes(server_factory: Any, tmp_path: Path) -> None:
    """A file-size limit (ulimit -f) stands in for a full disk: the append fails part way
    through a line; the job says so in one line; the rerun repairs the torn line and
    finishes without asking any finished key again."""
    url, state = server_factory()
    # no tokenizer: the subprocess then never imports transformers (seconds on a busy machine)
    study = write_openai_study(tmp_path, url, "full", 30, tokenizer_path=None, model_path=None)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))

    first = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, preexec_fn=limit, timeout=120)
    lines = [l for l in first.stderr.splitlines() if l.startswith(("error:", "stopped:"))]
    assert first.returncode == 2 and len(lines) == 1, first.stderr
    assert "File too large" in lines[0] and "run the same command again to resume" in lines[0]
    assert "Traceback" not in first.stderr + first.stdout
    import json

    raw_path = tmp_path / "full/raw/forecast.jsonl"
    finished = []
    for line in raw_path.read_text().split("\n")[:-1]:  # complete lines only
        finished.append(json.loads(line)["prompt"])
    assert 0 < len(finished) < 30
    from llm_jobs import run_all  # the rerun, without the limit, in this process (faster)

    assert run_all.main(["--only", "forecast", "--study", str(study), "--yes"]) == 0
    raw = [json.loads(line) for line in raw_path.read_text().splitlines()]
    assert len(raw) == 30 and len({r["key"] for r in raw}) == 30
    assert all(len(state.attempts[p]) == 1 for p in finished)  # never asked twice


def test_dbt_output_keeps_the_gate_message_and_drops_the_traceback() -> None:
    """What dbt-duckdb prints when a gate (a dbt Python model) fails, as `lookahead build`
    passes it on: the exception's message stays, the traceback goes."""
    from lookahead.children import without_tracebacks

    dbt_lines = [
        "12:00:27    Runtime Error in model gate_panel (python_models/marts/gates/gate_panel.py)\n",
        "  Python model failed:\n",
        "  Traceback (most recent call last):\n",
        '    File "/x/environments/__init__.py", line 286, in run_python_job\n',
        "      df = module.model(dbt, con)\n",
        "           ^^^^^^^^^^^^^^^^^^^^^^\n",
        '    File "/work/lookahead/gates.py", line 133, in check_no_missing_answers\n',
        "      raise GateFailed(\n",
        "  lookahead.gates.GateFailed: GX gate 'gate_panel' stopped: 1 LLM queries have no answer\n",
        "  \n",
        "12:00:27  Done. PASS=110 WARN=0 ERROR=1 SKIP=21 NO-OP=0 TOTAL=132\n",
    ]
    out = "".join(without_tracebacks(dbt_lines))
    assert "Traceback" not in out and "File " not in out and "raise GateFailed" not in out
    assert "  GateFailed: GX gate 'gate_panel' stopped: 1 LLM queries have no answer\n" in out
    assert out.startswith("12:00:27    Runtime Error in model gate_panel") and "Done. PASS=110" in out


def test_a_job_module_run_as_a_program_is_one_line() -> None:
    """`python -m llm_jobs.forecast` (an older doc's command) is one line naming the command
    to type, exit 2: without a `__main__` block Python would import the job and exit 0
    having asked nothing. The package's list of processes is the allow-list's."""
    import llm_jobs

    assert set(llm_jobs.PROCESSES) == {m for m in PROCESS_MODULES if m.startswith("llm_jobs.")}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "llm_jobs.claims_value", "--study", "s.yml", "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert res.stderr == (
        "error: llm_jobs.claims_value is not a command; one job alone: lookahead jobs --study FILE --only claims_value\n"
    )


def test_lookahead_jobs_only_runs_the_named_job(server_factory: Any, tmp_path: Path) -> None:
    """`lookahead jobs --only forecast`, the command a user types for one job alone: the
    forecast job answers every row and no other job runs (no recall or Min-K% file, the
    server asked once a row); an unknown name is one line naming the jobs, before any query."""
    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "only", 4, tokenizer_path=None, model_path=None)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    lookahead = [sys.executable, "-m", "lookahead.cli", "jobs", "--study", str(study), "--yes"]
    bad = subprocess.run([*lookahead, "--only", "forcast"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [l for l in bad.stderr.splitlines() if l.startswith("error:")]
    assert bad.returncode == 2 and len(lines) == 1 and "'forcast': no such job" in lines[0], bad.stderr
    assert "'forecast'" in lines[0] and state.requests == 0
    res = subprocess.run([*lookahead, "--only", "forecast"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    tasks = {p.name.split(".")[0] for p in (tmp_path / "only" / "raw").glob("*.jsonl")}
    assert tasks == {"forecast"}, tasks  # its answers and failures; no recall or Min-K% line
    assert "== forecast ==" in res.stdout and "== recall ==" not in res.stdout
