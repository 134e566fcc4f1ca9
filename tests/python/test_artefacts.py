"""The report's files as one unit (lookahead.artefacts): only files the manifest lists
move, nothing is deleted, a kill at any move leaves no old REPORT.md beside new files and
the next command completes the swap, and a results folder that is the data, raw or
project folder is refused in one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lookahead import artefacts
from lookahead.artefacts import (
    JOURNAL,
    MANIFEST,
    Folders,
    OutputFolderError,
    check_output_folders,
    recover,
    retire,
    write_artefact_set,
)
from lookahead.config import load_study


def _producer(version: str, extra: bool = True):
    """A report set of every artefact type, each file saying which version wrote it."""

    def produce(results: Path, outputs: Path) -> None:
        (results / "tables").mkdir()
        (results / "figures").mkdir()
        for rel in (
            "REPORT.md",
            "verdict.csv",
            "regression_results.csv",
            "reghdfe.do",
            "tables/table2.tex",
            "figures/lap_hist.png",
            "index.html",
        ):
            (results / rel).write_text(version)
        if extra:
            (results / "only_in_this_version.csv").write_text(version)
        (outputs / "panel_pre.dta").write_text(version)
        (outputs / "panel_post.dta").write_text(version)

    return produce


def _folders(tmp_path: Path) -> Folders:
    f = Folders(tmp_path / "results", tmp_path / "outputs")
    f.results.mkdir()
    f.outputs.mkdir()
    return f


def _user_files(f: Folders) -> dict[Path, str]:
    """A user's own files in every folder the report writes to, with names the tool uses
    for its own files elsewhere."""
    files = {
        f.results / "user_data.csv": "mine",
        f.results / "notes.md": "mine",
        f.outputs / "my_panel.dta": "mine",
        f.results / "tables" / "mine.tex": "mine",
        f.results / "figures" / "mine.png": "mine",
    }
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return files


def _tool_files(f: Folders) -> dict[str, str]:
    """Relative path -> content of every tool file presented now (stale folders excluded)."""
    out = {}
    for root in (f.results, f.outputs):
        for p in root.rglob("*"):
            rel = p.relative_to(root)
            if p.is_file() and not rel.parts[0].startswith(("stale", ".")) and p.read_text() != "mine":
                out[rel.as_posix()] = p.read_text()
    return out


def test_user_files_survive_writes_retires_and_rewrites(tmp_path: Path) -> None:
    f = _folders(tmp_path)
    mine = _user_files(f)
    write_artefact_set(f, "old", _producer("v1"))
    assert set(_tool_files(f).values()) == {"v1"} and (f.results / "figures" / "lap_hist.png").is_file()
    write_artefact_set(f, "replaced", _producer("v2", extra=False))
    now = _tool_files(f)
    assert set(now.values()) == {"v2"} and "only_in_this_version.csv" not in now  # nothing of v1 left behind
    assert (f.results / "stale" / "only_in_this_version.csv").read_text() == "v1"
    moved = retire(f, "a build started")
    assert len(moved) == 9 and _tool_files(f) == {}
    for _ in range(3):
        retire(f, "again")  # nothing left to move; the user's files stay
        write_artefact_set(f, "again", _producer("v3"))
    for p, text in mine.items():
        assert p.read_text() == text, p


def test_an_older_stale_folder_is_kept_under_a_number(tmp_path: Path) -> None:
    f = _folders(tmp_path)
    (f.results / "stale").mkdir()
    (f.results / "stale" / "user_kept.txt").write_text("mine")  # even a file a user put there
    write_artefact_set(f, "first", _producer("v1"))
    write_artefact_set(f, "second", _producer("v2"))
    retire(f, "third")
    assert (f.results / "stale.1" / "user_kept.txt").read_text() == "mine"
    assert (f.results / "stale.2" / "REPORT.md").read_text() == "v1"
    assert (f.results / "stale" / "REPORT.md").read_text() == "v2"
    assert "third" in (f.results / "stale" / "WHY.txt").read_text()
    assert (f.outputs / "stale.1" / "panel_pre.dta").read_text() == "v1"


def test_a_failed_producer_changes_nothing(tmp_path: Path) -> None:
    f = _folders(tmp_path)
    write_artefact_set(f, "first", _producer("v1"))

    def half(results: Path, outputs: Path) -> None:
        (results / "verdict.csv").write_text("v2")
        raise RuntimeError("killed while writing")

    with pytest.raises(RuntimeError):
        write_artefact_set(f, "second", half)
    assert set(_tool_files(f).values()) == {"v1"} and len(_tool_files(f)) == 10
    assert not [p for p in f.results.iterdir() if p.name.startswith(artefacts.STAGING_PREFIX)]


class _Killed(BaseException):
    pass


def _count_moves(f: Folders) -> int:
    n = [0]
    real = os.replace

    def counting(a, b):
        n[0] += 1
        return real(a, b)

    artefacts.os.replace = counting  # type: ignore[attr-defined]
    try:
        write_artefact_set(f, "count", _producer("v2"))
    finally:
        artefacts.os.replace = real  # type: ignore[attr-defined]
    return n[0]


def test_a_kill_at_any_move_presents_no_mix_and_the_next_command_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill the swap before each of its renames in turn: REPORT.md is only ever present
    with the files of its own version, and recover() (every later command calls it)
    ends in the new set."""
    moves = _count_moves(_seeded(tmp_path / "count"))
    assert moves > 20
    for k in range(moves):
        f = _seeded(tmp_path / f"k{k}")
        real = os.replace
        calls = [0]

        def dying(a, b, real=real, calls=calls, k=k):
            if calls[0] == k:
                raise _Killed()
            calls[0] += 1
            return real(a, b)

        monkeypatch.setattr(artefacts.os, "replace", dying)
        with pytest.raises(_Killed):
            write_artefact_set(f, "new", _producer("v2"))
        monkeypatch.setattr(artefacts.os, "replace", real)
        shown = _tool_files(f)
        for page in ("REPORT.md", "index.html"):
            if page in shown:
                assert set(shown.values()) == {shown[page]}, (k, page, shown)
        journalled = (f.results / JOURNAL).exists()
        recover(f)
        # the first rename puts the journal in place: killed before it, the old set stays whole
        assert set(_tool_files(f).values()) == {"v2" if k else "v1"} and len(_tool_files(f)) == 10, k
        assert journalled == (k > 0)
        assert not (f.results / JOURNAL).exists()
        assert (f.results / "user_data.csv").read_text() == "mine"


def _seeded(base: Path) -> Folders:
    base.mkdir(parents=True)
    f = _folders(base)
    _user_files(f)
    write_artefact_set(f, "first", _producer("v1"))
    return f


def test_without_a_manifest_only_the_exact_names_the_report_writes_move(tmp_path: Path) -> None:
    """A results folder from before manifests: REPORT.md and the CSVs the report names
    move; a user's CSV does not."""
    f = _folders(tmp_path)
    for name in ("REPORT.md", "verdict.csv", "regression_detection_pre.csv", "user_data.csv"):
        (f.results / name).write_text("old")
    (f.outputs / "panel_pre.dta").write_text("old")
    moved = {p.name for p in retire(f, "upgrade")}
    assert moved == {"REPORT.md", "verdict.csv", "regression_detection_pre.csv", "panel_pre.dta"}
    assert (f.results / "user_data.csv").read_text() == "old"
    assert (f.results / MANIFEST).is_file()


@pytest.mark.parametrize(
    "setting,value,says",
    [
        ("results_dir", "DATA", "the data folder (data_path)"),
        ("outputs_dir", "DATA", "the data folder (data_path)"),
        ("results_dir", "RAW", "the raw folder (raw_dir)"),
        ("results_dir", ".", "the project root"),
        ("outputs_dir", "/", "a folder that holds the project"),
    ],
)
def test_a_results_folder_that_holds_inputs_is_refused(tmp_path: Path, setting: str, value: str, says: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "obs.csv").write_text("x\n")
    paths = {"DATA": str(data), "RAW": str(tmp_path / "raw")}
    study = load_study(
        None, overrides={"data_path": str(data / "obs.csv"), "raw_dir": str(tmp_path / "raw"), setting: paths.get(value, value)}
    )
    with pytest.raises(OutputFolderError, match=rf"setting '{setting}': .* is {re.escape(says)}; .*point {setting} at"):
        check_output_folders(study)
    with pytest.raises(OutputFolderError) as refused:
        check_output_folders(study)
    assert "\n" not in str(refused.value)


def test_a_results_folder_of_its_own_is_accepted(tmp_path: Path) -> None:
    study = load_study(
        None, overrides={"data_path": str(tmp_path / "data" / "obs.csv"), "results_dir": str(tmp_path / "data" / "results")}
    )
    check_output_folders(study)  # inside the data folder is fine: only manifest files move
