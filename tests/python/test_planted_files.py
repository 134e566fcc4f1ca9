"""Files planted in a study's folders are data, never orders (lookahead.artefacts,
lookahead.collision; docs/SECURITY.md, "Threat table: results folders, symlinks and
study identity").

Anyone who controls a results folder (a pull request, a shared study bundle) can plant a
swap journal, a manifest or a symbolic link there. Each attack below once moved, deleted
or overwrote a file outside the study's folders; now the command refuses in one line and
leaves the planted file where it is. A folder in ``tmp_path`` stands in for the user's
home; no test touches the real one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dbt_runner import ROOT, run_dbt
from fixture_study import write_fixture_study

from lookahead.artefacts import (
    JOURNAL,
    MANIFEST,
    Folders,
    OutputFolderError,
    UntrustedRecordError,
    check_output_folders,
    retire,
    write_artefact_set,
)
from lookahead.collision import VARS_SOURCE, BuildIdentity, collision_line
from lookahead.config import Study, resolve
from lookahead.settings_sections import OutputSettings


def _home(tmp_path: Path) -> Path:
    """A stand-in for the user's home: an ssh folder and a folder of work."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 MINE")
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    (home / "work").mkdir()
    (home / "work" / "thesis.tex").write_text("years of work")
    return home


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def _plant_journal(results: Path, home: Path) -> None:
    """The attack of issue 45: a journal whose absolute folders are the user's, whose
    staging folder holds an ATTACKER authorized_keys, and whose 'staging' names a folder of
    the user's work (the old recover() removed every staging folder recursively)."""
    attacker = home.parent / "attacker"
    attacker.mkdir()
    (attacker / "authorized_keys").write_text("ATTACKER")
    journal = {
        "id": "x",
        "why": "planted",
        "folders": {"results": str(home / ".ssh"), "outputs": str(home / ".ssh")},
        "staging": {"results": str(attacker), "outputs": str(home / "work")},
        "retire": [["results", "authorized_keys"]],
        "install": [["results", "authorized_keys"]],
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / JOURNAL).write_text(json.dumps(journal))


def _plant_manifest(results: Path, home: Path) -> None:
    """A manifest whose folders are the user's home: the old retire moved ~/.ssh/id_rsa."""
    results.mkdir(parents=True, exist_ok=True)
    (results / MANIFEST).write_text(
        json.dumps(
            {"folders": {"results": str(home), "outputs": str(home)}, "files": [{"root": "results", "path": ".ssh/id_rsa"}]}
        )
    )


def _producer(version: str):
    def produce(results: Path, outputs: Path) -> None:
        (results / "tables").mkdir()
        for rel in ("REPORT.md", "verdict.csv", "tables/table2.tex"):
            (results / rel).write_text(version)
        (outputs / "panel_pre.dta").write_text(version)

    return produce


def _folders(tmp_path: Path, **kw) -> Folders:
    f = Folders(tmp_path / "results", tmp_path / "outputs", **kw)
    f.results.mkdir(parents=True, exist_ok=True)
    f.outputs.mkdir(parents=True, exist_ok=True)
    return f


# --- the journal and the manifest ------------------------------------------------------


@pytest.mark.parametrize("plant", [_plant_journal, _plant_manifest])
@pytest.mark.parametrize("command", ["retire", "write"])
def test_a_planted_record_is_refused_in_one_line_and_left_in_place(tmp_path: Path, plant, command: str) -> None:
    home = _home(tmp_path)
    before = _snapshot(home)
    f = _folders(tmp_path)
    plant(f.results, home)
    planted = {p.name: p.read_text() for p in f.results.iterdir()}
    with pytest.raises(UntrustedRecordError) as err:
        if command == "retire":
            retire(f, "a build started")
        else:
            write_artefact_set(f, "replaced", _producer("v1"))
    assert "\n" not in str(err.value) and "refused and left in place" in str(err.value)
    assert _snapshot(home) == before
    assert {p.name: p.read_text() for p in f.results.iterdir() if p.name in planted} == planted
    assert not (f.results / "REPORT.md").exists()


def test_a_record_copied_from_another_folder_or_edited_is_refused(tmp_path: Path) -> None:
    """Signed for the folder it was written in: the same file in another results folder,
    or with one path changed, is not the tool's."""
    a = _folders(tmp_path / "a")
    write_artefact_set(a, "first", _producer("v1"))
    b = _folders(tmp_path / "b")
    (b.results / MANIFEST).write_bytes((a.results / MANIFEST).read_bytes())
    with pytest.raises(UntrustedRecordError, match="did not write for this folder"):
        retire(b, "copied")
    edited = json.loads((a.results / MANIFEST).read_text())
    edited["files"][0]["path"] = "../../home/.ssh/id_rsa"
    (a.results / MANIFEST).write_text(json.dumps(edited))
    with pytest.raises(UntrustedRecordError):
        retire(a, "edited")
    assert (a.results / "REPORT.md").read_text() == "v1"


def test_the_records_the_tool_writes_hold_relative_paths_only(tmp_path: Path) -> None:
    f = _folders(tmp_path)
    write_artefact_set(f, "first", _producer("v1"))
    write_artefact_set(f, "second", _producer("v2"))
    text = (f.results / MANIFEST).read_text()
    assert str(tmp_path) not in text and "folders" not in json.loads(text)
    assert retire(f, "done") and not (f.results / JOURNAL).exists()


def test_a_planted_temporary_file_link_does_not_redirect_a_write(tmp_path: Path) -> None:
    """A link planted at the name of the manifest's temporary file: the old write followed
    it and overwrote the file it points at."""
    home = _home(tmp_path)
    f = _folders(tmp_path)
    (f.results / (MANIFEST + ".tmp")).symlink_to(home / "work" / "thesis.tex")
    write_artefact_set(f, "first", _producer("v1"))
    assert (home / "work" / "thesis.tex").read_text() == "years of work"
    assert not (f.results / MANIFEST).is_symlink() and (f.results / "REPORT.md").read_text() == "v1"


def test_a_planted_lock_link_creates_nothing_outside(tmp_path: Path) -> None:
    home = _home(tmp_path)
    f = _folders(tmp_path)
    (f.results / ".lookahead-artefacts.lock").symlink_to(home / ".bashrc")
    with pytest.raises(OutputFolderError) as err:
        retire(f, "a build started")
    assert "\n" not in str(err.value) and not (home / ".bashrc").exists()


# --- symbolic links --------------------------------------------------------------------


def test_a_symlinked_tables_folder_is_not_followed(tmp_path: Path) -> None:
    """The report's tables/ replaced by a link to a folder of the user's: the old swap
    wrote the new .tex files there and moved the user's table2.tex to stale/."""
    home = _home(tmp_path)
    f = _folders(tmp_path)
    write_artefact_set(f, "first", _producer("v1"))
    (f.results / "tables" / "table2.tex").unlink()
    (f.results / "tables").rmdir()
    (home / "work" / "table2.tex").write_text("my own table")
    (f.results / "tables").symlink_to(home / "work")
    before = _snapshot(home)
    with pytest.raises(OutputFolderError, match="is a symbolic link") as err:
        write_artefact_set(f, "second", _producer("v2"))
    assert "\n" not in str(err.value) and "follow_symlinks" in str(err.value)
    assert _snapshot(home) == before
    assert (f.results / "REPORT.md").read_text() == "v1"  # nothing moved
    # allowed explicitly, the link is followed
    allowed = Folders(f.results, f.outputs, OutputSettings.with_defaults(follow_symlinks=True))
    write_artefact_set(allowed, "second", _producer("v2"))
    assert (home / "work" / "table2.tex").read_text() == "v2"


def _project_study(tmp_path: Path, **settings: str) -> Study:
    """A study whose project folder is ``tmp_path/project`` (paths resolve against it)."""
    fixture = write_fixture_study(tmp_path / "project" / "study", n_entities=3, n_dates=4, cutoff_index=2)
    return Study(vars=resolve({**fixture.vars, **settings}), root=tmp_path / "project")


@pytest.mark.parametrize("setting", ["results_dir", "outputs_dir", "raw_dir"])
def test_a_study_folder_linked_out_of_the_project_is_refused(tmp_path: Path, setting: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "project" / "linked").parent.mkdir(parents=True)
    (tmp_path / "project" / "linked").symlink_to(outside)
    study = _project_study(tmp_path, **{setting: "linked"})
    with pytest.raises(OutputFolderError, match=rf"setting '{setting}': .* is a symbolic link to .*out of the project"):
        check_output_folders(study)
    check_output_folders(study.with_settings(follow_symlinks=True))  # an explicit setting allows it
    inside = tmp_path / "project" / "real"
    inside.mkdir()
    (tmp_path / "project" / "inner").symlink_to(inside)
    check_output_folders(study.with_settings(**{setting: "inner"}))  # a link within the project is fine


def test_a_raw_dir_linked_to_the_root_is_refused_even_when_links_are_allowed(tmp_path: Path) -> None:
    (tmp_path / "raw").symlink_to("/")
    study = _project_study(tmp_path, raw_dir=str(tmp_path / "raw"))
    for s in (study, study.with_settings(follow_symlinks=True)):
        with pytest.raises(OutputFolderError, match="setting 'raw_dir': .* the file system root"):
            check_output_folders(s)


# --- stale folders ---------------------------------------------------------------------


def test_stale_folders_are_pruned_beyond_the_count_the_user_sets(tmp_path: Path) -> None:
    f = _folders(tmp_path, output=OutputSettings.with_defaults(stale_reports_kept=2))
    (f.results / "stale.7").mkdir()
    (f.results / "stale.7" / "mine.txt").write_text("mine")  # a user's own stale.N: never deleted
    for v in range(1, 8):
        write_artefact_set(f, f"replaced {v}", _producer(f"v{v}"))
    names = sorted(p.name for p in f.results.iterdir() if p.name.startswith("stale"))
    assert names == ["stale", "stale.1", "stale.2"], names
    assert (f.results / "stale.1" / "mine.txt").read_text() == "mine"
    assert (f.results / "stale.2" / "REPORT.md").read_text() == "v5"
    assert (f.results / "stale" / "REPORT.md").read_text() == "v6"
    assert (f.results / "REPORT.md").read_text() == "v7"
    assert sorted(p.name for p in f.outputs.iterdir() if p.name.startswith("stale")) == ["stale", "stale.1", "stale.2"]


def test_the_default_keeps_three_and_the_setting_reaches_the_folders(tmp_path: Path) -> None:
    study = _project_study(tmp_path, results_dir=str(tmp_path / "r"), outputs_dir=str(tmp_path / "o"))
    assert Folders.of(study).output.stale_reports_kept == 3
    assert Folders.of(study.with_settings(stale_reports_kept=0)).output.stale_reports_kept == 0
    f = Folders.of(study)
    for v in range(8):
        write_artefact_set(f, "again", _producer(f"v{v}"))
    assert sorted(p.name for p in f.results.iterdir() if p.name.startswith("stale")) == ["stale", "stale.1", "stale.2", "stale.3"]


# --- end to end: `lookahead report`, `lookahead check` and plain `dbt build` ---------------


def _study_file(tmp_path: Path, name: str, **settings: object) -> tuple[Path, dict]:
    fixture = write_fixture_study(tmp_path / "study", n_entities=4, n_dates=6, cutoff_index=3)
    vars_ = {
        **fixture.vars,
        "study_name": name,
        "results_dir": str(tmp_path / "results"),
        "outputs_dir": str(tmp_path / "outputs"),
        **settings,
    }
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(vars_))
    return path, vars_


def _lookahead(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HF_HUB_OFFLINE="1",
        LOOKAHEAD_DUCKDB=str(db),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
    )
    return subprocess.run(
        [sys.executable, "-m", "lookahead.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("plant", [_plant_journal, _plant_manifest])
def test_lookahead_report_refuses_a_planted_record(tmp_path: Path, plant) -> None:
    """`lookahead report` on a study whose results folder holds a planted journal or
    manifest (before any database exists: the old report retired the folder first)."""
    home = _home(tmp_path)
    before = _snapshot(home)
    study, _ = _study_file(tmp_path, "planted_report")
    plant(tmp_path / "results", home)
    proc = _lookahead("report", "--study", str(study), db=tmp_path / "db.duckdb")
    assert _snapshot(home) == before
    line = _one_error_line(proc)
    assert proc.returncode == 2 and "refused and left in place" in line
    assert (tmp_path / "results" / (JOURNAL if plant is _plant_journal else MANIFEST)).is_file()


def test_lookahead_check_refuses_a_raw_dir_linked_to_the_root(tmp_path: Path) -> None:
    study, _ = _study_file(tmp_path, "linked_raw")
    (tmp_path / "rawlink").symlink_to("/")
    data = yaml.safe_load(study.read_text())
    data["raw_dir"] = str(tmp_path / "rawlink")
    study.write_text(yaml.safe_dump(data))
    proc = _lookahead("check", "--study", str(study), db=tmp_path / "db.duckdb")
    line = _one_error_line(proc)
    assert proc.returncode == 2 and "setting 'raw_dir'" in line and "file system root" in line
    assert not Path("/forecast.jsonl.lock").exists()


@pytest.mark.parametrize("plant", [_plant_journal, _plant_manifest])
def test_plain_dbt_build_refuses_a_planted_record(tmp_path: Path, plant) -> None:
    """`dbt build --full-refresh --vars ...`, the CI gate docs/SECURITY.md recommends: the
    run-start check refuses the planted file before the hook that retires the report."""
    home = _home(tmp_path)
    before = _snapshot(home)
    _, vars_ = _study_file(tmp_path, "planted_dbt")
    plant(tmp_path / "results", home)
    res = run_dbt(["build", "--full-refresh", "--select", "study_settings"], vars_, tmp_path / "db.duckdb", as_vars=True)
    assert _snapshot(home) == before
    assert res.returncode != 0
    lines = [ln for ln in res.output.splitlines() if "refused and left in place" in ln]
    assert lines, res.output[-3000:]
    assert (tmp_path / "results" / (JOURNAL if plant is _plant_journal else MANIFEST)).is_file()


# --- study identity --------------------------------------------------------------------


def test_two_studies_through_dbt_vars_are_told_apart_by_their_identifying_settings() -> None:
    stored = BuildIdentity("s", VARS_SOURCE, "1" * 64, "a" * 64)
    assert "other identifying settings" in collision_line("db", stored, BuildIdentity("s", VARS_SOURCE, "2" * 64, "b" * 64))
    assert collision_line("db", stored, BuildIdentity("s", VARS_SOURCE, "2" * 64, "a" * 64)) == ""  # edited
    assert collision_line("db", stored, BuildIdentity("s", VARS_SOURCE, "1" * 64, "b" * 64)) == ""  # same settings


def test_the_threat_table_names_tests_that_exist() -> None:
    """Each row of docs/SECURITY.md's threat table for these surfaces names the tests that
    hold it; a renamed or removed test makes the table lie."""
    text = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")
    table = text.split("## Threat table: results folders, symlinks and study identity", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(?:[\w/]+\.py::)?(test_\w+)`", table))
    defined = set()
    for path in (ROOT / "tests" / "python").glob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    assert len(named) >= 12 and named <= defined, named - defined


def _key_in(folder: str) -> bytes:
    os.environ["LOOKAHEAD_STATE_DIR"] = folder
    from lookahead import artefacts

    return artefacts._signing_key()


def test_the_signing_key_is_the_users_own_and_one_under_a_race(tmp_path: Path) -> None:
    """The key is made once, readable by the user only, in the state folder; processes
    that make it at once all get the one that won (none reads it half written)."""
    from concurrent.futures import ProcessPoolExecutor

    folder = tmp_path / "state"
    with ProcessPoolExecutor(4) as pool:
        keys = set(pool.map(_key_in, [str(folder)] * 8))
    assert len(keys) == 1 and len(next(iter(keys))) == 32
    key = folder / "artefacts.key"
    assert key.stat().st_mode & 0o777 == 0o600 and [p.name for p in folder.iterdir()] == ["artefacts.key"]


def test_a_cache_file_linked_out_of_the_raw_folder_is_refused(tmp_path: Path) -> None:
    """raw/forecast.jsonl planted as a link to a file of the user's: the jobs would append
    their answers to it and lock beside it."""
    study = _project_study(tmp_path)
    victim = _home(tmp_path) / "work" / "thesis.tex"
    (study.raw_dir / "forecast.jsonl").unlink()
    (study.raw_dir / "forecast.jsonl").symlink_to(victim)
    with pytest.raises(OutputFolderError, match=r"setting 'raw_dir': .*forecast.jsonl is a symbolic link .*out of"):
        check_output_folders(study)
    check_output_folders(study.with_settings(follow_symlinks=True))


def test_the_jobs_refuse_a_raw_dir_linked_to_the_root_before_writing(tmp_path: Path) -> None:
    """`python -m llm_jobs.run_all`, without the lookahead command: the issue's
    `/forecast.jsonl.lock` came from the jobs."""
    study, _ = _study_file(tmp_path, "linked_raw_jobs")
    (tmp_path / "rawlink").symlink_to("/")
    data = yaml.safe_load(study.read_text())
    data["raw_dir"] = str(tmp_path / "rawlink")
    study.write_text(yaml.safe_dump(data))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "setting 'raw_dir'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not Path("/forecast.jsonl.lock").exists()


def test_a_state_folder_that_cannot_hold_the_key_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("LOOKAHEAD_STATE_DIR", str(tmp_path / "not-a-folder"))
    with pytest.raises(OutputFolderError, match="cannot keep the key .* set LOOKAHEAD_STATE_DIR") as err:
        write_artefact_set(_folders(tmp_path), "first", _producer("v1"))
    assert "\n" not in str(err.value)
