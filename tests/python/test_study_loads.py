"""One load of the study per process, measured: `dbt build` and `lookahead report` of the
fixture study (fixture_study.py), each process instrumented.

A probe imported before anything else in the process wraps the loader's entry points
(lookahead.config): reads of a study file (``read_study_file``, the YAML), loads
(``load_study``), full validations (``resolve``), calls of ``Study.from_json`` (every
dbt Python model reads the recorded settings) and the decodes behind them (``_decode``,
once per process and study). At exit it writes its counts, so the test reads what each
real process did rather than what the code is believed to do.

Why: the study is one resolved settings file handed to every process
(lookahead.children.resolved_settings); a process that reads or validates it again can see
other settings than its neighbours, and pays for it (docs/CONTRACTS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from dbt_runner import ROOT, dbt_env
from fixture_study import write_fixture_study

from lookahead.children import settings_file_env
from lookahead.config import STUDY_SETTINGS_ENV, study_from_dbt_vars

pytestmark = pytest.mark.slow  # a dbt build and a report, each in its own process: minutes of CPU

PROBE = textwrap.dedent(
    '''
    """Counts the study loader's work in this process; writes them at exit."""
    import atexit, functools, json, os, sys, traceback

    from lookahead import config

    COUNTS = {"read_study_file": 0, "load_study": 0, "resolve": 0, "from_json": 0, "decode": 0}
    CALLERS = {key: [] for key in COUNTS}


    def counted(fn, key):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            COUNTS[key] += 1
            outside = [f for f in traceback.extract_stack()[:-1] if "functools" not in f.filename]
            CALLERS[key].append(" < ".join(f"{os.path.basename(f.filename)}:{f.lineno}" for f in outside[-4:][::-1]))
            return fn(*args, **kwargs)

        return wrapper


    for name in ("read_study_file", "load_study", "resolve"):
        setattr(config, name, counted(getattr(config, name), name))
    config._decode = counted(config._decode, "decode")
    _from_json = config.Study.from_json.__func__
    config.Study.from_json = classmethod(counted(_from_json, "from_json"))


    @atexit.register
    def _write():
        out = os.environ["STUDY_LOADS_OUT"]
        with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
            json.dump({"argv": sys.argv[1:3], **COUNTS, "callers": CALLERS}, f)
    '''
)


def _run(code: str, args: list[str], env: dict[str, str], probe: Path, out: Path) -> dict[str, int]:
    env = {**env, "PYTHONPATH": f"{probe}:{ROOT}", "STUDY_LOADS_OUT": str(out)}
    before = set(out.glob("*.json"))
    proc = subprocess.run(
        [sys.executable, "-c", f"import study_loads_probe\n{code}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (written,) = set(out.glob("*.json")) - before  # one process, one record
    return json.loads(written.read_text())


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The counts of `dbt build` and then `lookahead report` of the fixture study, each
    process instrumented by the probe; printed with the callers of each count (-s)."""
    tmp_path = tmp_path_factory.mktemp("study_loads")
    fx = write_fixture_study(tmp_path / "study")
    vars_ = {**fx.vars, "results_dir": str(tmp_path / "results"), "outputs_dir": str(tmp_path / "outputs")}
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "study_loads_probe.py").write_text(PROBE, encoding="utf-8")
    out = tmp_path / "counts"
    out.mkdir()
    db = tmp_path / "db.duckdb"

    env = dbt_env(db)
    with settings_file_env(study_from_dbt_vars(json.dumps(vars_, default=str))) as settings:
        env[STUDY_SETTINGS_ENV] = settings[STUDY_SETTINGS_ENV]
        build = _run("from dbt.cli.main import cli\ncli()", ["build", "--project-dir", str(ROOT)], env, probe, out)

    study_file = tmp_path / "study.yml"
    study_file.write_text(yaml.safe_dump(vars_), encoding="utf-8")
    report = _run(
        "import sys\nfrom lookahead.cli import main\nraise SystemExit(main(sys.argv[1:]))",
        ["report", "--study", str(study_file)],
        {**env, "LOOKAHEAD_DUCKDB": str(db)},
        probe,
        out,
    )
    result = {"dbt build": build, "lookahead report": report}
    for name, c in result.items():
        print(f"\n{name}: " + ", ".join(f"{k} {v}" for k, v in c.items() if k not in ("argv", "callers")))
        for key in ("read_study_file", "decode", "resolve"):
            for caller in c["callers"][key]:
                print(f"  {key}: {caller}")
    return result


def test_the_report_reads_and_decodes_the_study_once(counts: dict[str, dict[str, Any]]) -> None:
    """`lookahead report`: one read of the study file (no default study beside it), one
    load, and one decode of the settings the build recorded, which every reader shares."""
    c = counts["lookahead report"]
    assert (c["read_study_file"], c["load_study"], c["decode"]) == (1, 1, 1), c


def test_the_build_reads_no_study_file_and_decodes_the_study_once(counts: dict[str, dict[str, Any]]) -> None:
    """`dbt build` with the study in the resolved settings file: no study file read, and
    one decode shared by the plugin and every Python model."""
    c = counts["dbt build"]
    assert (c["read_study_file"], c["load_study"], c["decode"]) == (0, 0, 1), c
