"""The shared builds' guard (tests/python/shared_builds.py): a reader that leaves the
database or an input file changed is named, so the next reading file does not fail on
state it did not make."""

from __future__ import annotations

from pathlib import Path

import pytest
from dbt_runner import DbtResult
from fixture_study import FixtureStudy
from shared_builds import SharedBuild


def _build(tmp_path: Path) -> SharedBuild:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "forecast.jsonl").write_text('{"key": "a"}\n')
    data = tmp_path / "observations.csv"
    data.write_text("row_id\nr1\n")
    db = tmp_path / "db.duckdb"
    db.write_bytes(b"tables")
    return SharedBuild.of(FixtureStudy(tmp_path, data, raw, {}), DbtResult(0, "", db))


def test_an_unchanged_build_passes_and_a_restored_file_counts_as_unchanged(tmp_path: Path) -> None:
    built = _build(tmp_path)
    built.check_unchanged()
    data = built.study.data_path
    original = data.read_bytes()
    data.write_bytes(original + b"r2\n")
    data.write_bytes(original)
    built.check_unchanged()


@pytest.mark.parametrize("change", ["database", "input", "added", "removed"])
def test_a_changed_added_or_removed_file_is_named(tmp_path: Path, change: str) -> None:
    built = _build(tmp_path)
    raw = built.study.raw_dir
    path = {
        "database": built.result.db,
        "input": raw / "forecast.jsonl",
        "added": raw / "forecast.failures.jsonl",
        "removed": raw / "forecast.jsonl",
    }[change]
    if change == "removed":
        path.unlink()
    else:
        with open(path, "ab") as fh:
            fh.write(b"x")
    with pytest.raises(AssertionError, match="left the shared build changed") as err:
        built.check_unchanged()
    assert str(path) in str(err.value) and str(built.study.data_path) not in str(err.value)
