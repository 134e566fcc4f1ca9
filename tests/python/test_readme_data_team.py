"""The README's data-team section (issue 37), run as written from a temporary folder: the
demo's jobs, `dbt build`, `dbt test`, `dbt ls`, `dbt show` on result marts, `dbt docs
generate`, `dbt source freshness`, and the demo's claim study (a file that `extends:`
another) through `--vars`. Each step must exit 0 and print no traceback.

One walk, shared by every check below: it builds the two demo studies as the README says,
into the project's outputs/ (demo_contaminated_protocol.duckdb, the default study, and
demo_contaminated.duckdb, the claim study: each study has a database of its own), as `make
demo` does; the contract checks work on a copy. The walk's departures from a user's
shell: dbt's target and log folders go to the test's folder ($DBT_TARGET_PATH,
$DBT_LOG_PATH), so the checkout's own are untouched; the target folder starts with the
project's parse, as the checkout's own does after `make demo`; and dbt writes no debug
log file ($DBT_LOG_LEVEL_FILE=none: what each command prints, which the checks read, is
the same, and a build spends about an eighth less CPU time)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from dbt_runner import declared_unit_tests, seed_parse

ROOT = Path(__file__).resolve().parents[2]
CLAIM_STUDY = ROOT / "demo" / "claims" / "demo_contaminated.yml"
CLAIM_DB = ROOT / "outputs" / "demo_contaminated.duckdb"  # its study_name's database
STEP = "@@step"
#: The result marts: each Python mart (python_models/marts/<area>/<mart>_py.py, the gates
#: aside) behind its contracted view <mart> (test_data_team.py checks the pairing). The
#: claim study's database holds every one: the protocol's, as the study extends the default
#: one, and the claim path's.
MARTS = tuple(
    sorted(
        py.stem.removesuffix("_py") for py in (ROOT / "python_models" / "marts").glob("*/*_py.py") if py.parent.name != "gates"
    )
)


def readme_commands() -> list[str]:
    """The command lines of the README's data-team block (comments and blank lines left out)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- data-team -->", 1)[1].split("<!-- /data-team -->", 1)[0]
    body = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DBT_PROFILES_DIR", "LOOKAHEAD_STUDY_SETTINGS", "LOOKAHEAD_STUDY", "VIRTUAL_ENV", "LOOKAHEAD_DUCKDB")
    }
    env.update(
        TMPDIR=str(tmp),  # where the block's `cd "$(mktemp -d)"` lands
        DBT_TARGET_PATH=str(tmp / "target"),
        DBT_LOG_PATH=str(tmp / "logs"),
        DBT_LOG_LEVEL_FILE="none",
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        GX_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
        MPLCONFIGDIR=str(tmp / ".mpl"),
        PYTHONPATH=str(ROOT),
    )
    return env


@dataclass
class Walk:
    commands: list[str]
    steps: dict[int, str]  # step number -> its marker line (exit status, working folder)
    tmp: Path
    env: dict[str, str]
    out: str  # everything the walk printed

    @property
    def marts(self) -> list[str]:
        """The marts the block's `for mart in ...; do dbt show ...` loops preview."""
        return [m for c in self.commands if c.startswith("for mart in ") for m in c.split(" in ", 1)[1].split(";", 1)[0].split()]


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Walk:
    """Run the block in one bash, as a user pastes it into a shell (from the clone), with a
    marker and the exit status after each line and `set -e`: a failing line ends the walk
    there."""
    tmp = tmp_path_factory.mktemp("walk")
    commands = readme_commands()
    script = ["set -e"]
    for i, line in enumerate(commands):
        script += [line, f'echo "{STEP} {i} rc=$? cwd=$PWD"']
    env = _env(tmp)
    # the parse a user's clone holds in $P/target after `make demo` (dbt's own target folder,
    # which the walk's $DBT_TARGET_PATH stands in for), so the first command parses only what
    # changed, as the user's would
    seed_parse(tmp / "target")
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    steps: dict[int, str] = {}
    for chunk in re.split(rf"(?m)^{STEP} ", proc.stdout)[1:]:
        head, _, _rest = chunk.partition("\n")
        steps[int(head.split()[0])] = head
    return Walk(commands, steps, tmp, env, out)


def _previews(out: str) -> dict[str, int]:
    """`dbt show` output: each previewed node and how many data rows its table printed."""
    found: dict[str, int] = {}
    for name, table in re.findall(r"Previewing node '(\w+)':\n((?:\|.*\n?)*)", out):
        found[name] = max(0, len([ln for ln in table.splitlines() if ln.startswith("|")]) - 2)
    return found


def test_every_readme_step_exits_zero_from_another_folder(walk: Walk) -> None:
    commands, steps = walk.commands, walk.steps
    assert sorted(steps) == list(range(len(commands))), "a step did not finish"
    for i, head in steps.items():
        assert "rc=0" in head, (commands[i], head)
    # from the line after `cd "$(mktemp -d)"` on, the steps ran outside the project folder
    moved = next(i for i, c in enumerate(commands) if c.startswith("cd "))
    for i in range(moved, len(commands)):
        cwd = Path(steps[i].split("cwd=", 1)[1])
        assert cwd.is_relative_to(walk.tmp) and not cwd.is_relative_to(ROOT), (commands[i], cwd)
    for verb in ("build", "test", "ls", "show", "docs generate", "source freshness"):
        assert any(re.search(rf"\bdbt {verb} --project-dir \"\$P\"", c) for c in commands), verb
    assert any('--vars "$STUDY"' in c and "dbt build" in c for c in commands)
    assert any(str(CLAIM_STUDY.relative_to(ROOT)) in c for c in commands)
    assert "Traceback (most recent call last)" not in walk.out


def test_show_prints_rows_of_every_result_mart(walk: Walk) -> None:
    """`dbt show --select <mart>` printed rows of each mart the block previews (the claim
    marts after the claim study's build); every result mart (MARTS, those the block does
    not preview too) is a contracted SQL view over its Python table that holds rows. The
    README previews a few and names the rest: each `dbt show` is a dbt start and parse
    (about 6 CPU-s), and the view a SQL user reads is what it prints."""
    previews = _previews(walk.out)
    assert {"verdict", "regression_results", "lap_robustness", "claims", "claims_summary"} <= set(walk.marts) <= set(MARTS)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(mart in readme for mart in MARTS)  # the rest named beside the block
    for mart in walk.marts:
        assert previews.get(mart, 0) >= 1, (mart, previews)
    con = duckdb.connect(str(CLAIM_DB), read_only=True)  # the claim study's full build: every mart
    try:
        kinds = dict(con.sql("select table_name, table_type from information_schema.tables").fetchall())
        for mart in MARTS:
            assert kinds.get(mart) == "VIEW" and kinds.get(mart + "_py") == "BASE TABLE", mart
            assert con.sql(f"select count(*) from {mart}").fetchone()[0] >= 1, mart
        measures = con.sql("select list(lap_measure order by lap_measure) from lap_robustness").fetchone()[0]
        status = con.sql("select result_status from verdict").fetchone()[0]
    finally:
        con.close()
    assert "reference" in measures  # the claim study's measures: its `extends:` chain reached dbt
    assert status.startswith("complete: ")  # the mark on verdict_py reads through the view


def test_freshness_docs_and_ls_print_what_the_readme_says(walk: Walk) -> None:
    for task in ("forecast", "recall", "mink"):
        assert re.search(rf"PASS freshness of raw\.{task}\b", walk.out), task
    assert (walk.tmp / "target" / "catalog.json").exists()
    names = set(walk.out.split())
    assert {"verdict", "verdict_py", "claims", "claims_py"} <= names  # dbt ls --output name


def _dbt(args: list[str], env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("dbt")), *args, "--project-dir", str(ROOT), "--vars", CLAIM_STUDY.read_text()],
        cwd=tmp,
        env={**env, "DBT_PROFILES_DIR": str(ROOT / "profiles")},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_drifted_column_type_stops_the_view_with_one_line(walk: Walk, tmp_path: Path) -> None:
    """The contract on a mart fails the build when its Python table drifts: a column it
    adds, or a column stored under another type that holds values; a column left all null
    (DuckDB reads it as INTEGER) is cast to its declared type and passes."""
    db = tmp_path / "drift.duckdb"
    db.write_bytes(CLAIM_DB.read_bytes())
    env = {**walk.env, "LOOKAHEAD_DUCKDB": str(db), "DBT_TARGET_PATH": str(tmp_path / "target")}
    # the walk's parse of the project with the claim study's --vars, which a user's target
    # folder holds after the walk: dbt parses only what changed
    (tmp_path / "target").mkdir()
    shutil.copyfile(walk.tmp / "target" / "partial_parse.msgpack", tmp_path / "target" / "partial_parse.msgpack")
    run = ["run", "--select", "lap_robustness"]

    def alter(sql: str) -> None:
        con = duckdb.connect(str(db))
        try:
            con.execute(sql)
        finally:
            con.close()

    alter("alter table lap_robustness_py alter column lap_sd type integer using null")
    # (with Python's import log: a run that selects no gate_ model neither imports Great
    # Expectations, which only the gates use, nor starts the gate worker that would:
    # lookahead.gates.worker)
    ok = _dbt(run, {**env, "PYTHONPROFILEIMPORTTIME": "1"}, tmp_path)
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert " pandas\n" in ok.stderr and " great_expectations" not in ok.stderr
    assert " lookahead.gates.worker" not in ok.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.sql("select typeof(lap_sd) from lap_robustness limit 1").fetchone()[0] == "DOUBLE"
    con.close()

    alter("alter table lap_robustness_py alter column n_obs type varchar")
    bad = _dbt(run, env, tmp_path)
    assert bad.returncode != 0
    assert (
        "contract of 'lap_robustness': column n_obs of lap_robustness_py is VARCHAR where the "
        "contract declares BIGINT (models/marts/results/_results__models.yml)"
    ) in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert "lap_robustness" not in {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
    con.close()

    # the failed run dropped the result tables (a failed build leaves none): a fresh copy
    db.write_bytes(CLAIM_DB.read_bytes())
    alter("alter table lap_robustness_py add column surprise integer default 1")
    extra = _dbt(run, env, tmp_path)
    assert extra.returncode != 0
    assert (
        "contract of 'lap_robustness': lap_robustness_py has column(s) surprise not declared in "
        "models/marts/results/_results__models.yml"
    ) in extra.stdout


def test_every_unit_test_passes_in_the_readmes_plain_dbt_commands(walk: Walk) -> None:
    """`lookahead run` leaves dbt's unit tests out of its builds
    (lookahead.identity.UNIT_TESTS_LEFT_OUT), and a study without claim settings the claim
    models; the README's plain `dbt build` and `dbt test` run every unit test the project
    declares (those on the claim staging models too), and each passes."""
    declared = {f"{model}::{name}" for model, name in declared_unit_tests()}
    passed = set(re.findall(r"\bPASS (\w+::\w+) ", walk.out))
    assert len(declared) >= 10 and declared <= passed, sorted(declared - passed)
