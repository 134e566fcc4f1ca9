"""The fingerprints behind `lookahead run`'s build skip (lookahead.identity), without dbt.

The states a user reaches with dbt (an edited row, a changed setting or model file, a
failed or partial last build) are tested against real builds in test_dbt_build.py; here
the pieces those tests rely on: every path setting is classified as read by the build or
not, and each fingerprint moves with the files it covers and only with them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lookahead import raw_reads
from lookahead.config import SCHEMA, Study, load_study, resolve
from lookahead.identity import (
    BUILD_INPUT_SETTINGS,
    NOT_BUILD_INPUT_SETTINGS,
    build_distributions,
    build_imports,
    code_fingerprint,
    copy_code,
    fingerprint,
    inputs_fingerprint,
    nodes_selected,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_path_setting_is_declared_read_or_not_read_by_the_build() -> None:
    paths = {name for name, spec in SCHEMA.settings.items() if spec.type == "path"}
    assert paths == set(BUILD_INPUT_SETTINGS) | set(NOT_BUILD_INPUT_SETTINGS)
    assert not set(BUILD_INPUT_SETTINGS) & set(NOT_BUILD_INPUT_SETTINGS)


def test_code_fingerprint_follows_the_content_of_the_code(tmp_path: Path) -> None:
    code = copy_code(tmp_path / "code")
    assert code_fingerprint(code) == code_fingerprint(ROOT)  # content, not location
    cache = code / "lookahead" / "__pycache__" / "x.cpython-311.pyc"
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(b"compiled")  # byte code is no code change
    assert code_fingerprint(code) == code_fingerprint(ROOT)
    suite = next((code / "expectations").glob("*.json"))
    suite.write_text(suite.read_text() + " ")
    assert code_fingerprint(code) != code_fingerprint(ROOT)


def test_every_library_on_the_statistics_path_is_in_the_code_fingerprint() -> None:
    """Issue 35, item 2: the libraries are found from the imports of the build's Python
    (dbt Python models, the plugin and every project module they reach, lazy imports
    included) and what those require, not from a hand-kept list."""
    assert {"wildboottest", "numba", "pyfixest", "numpy", "scipy", "duckdb"} <= build_imports(ROOT)
    found = build_distributions(ROOT)
    assert {
        "wildboottest",
        "formulaic",
        "numba",
        "pyfixest",
        "numpy",
        "scipy",
        "duckdb",
        "pandas",
        "pyarrow",
        "great-expectations",
        "dbt-core",
        "dbt-duckdb",
        "pyyaml",
    } <= set(found)
    assert "torch" not in found  # the LLM backends are not on the build's path


def test_a_library_bump_changes_the_code_fingerprint(tmp_path: Path, monkeypatch) -> None:
    """A newer wildboottest (or formulaic, which no project file imports) installed ahead
    of the current one on sys.path changes the fingerprint, so the report refuses and
    `lookahead run` rebuilds."""
    before = code_fingerprint(ROOT)
    for name, version in (("wildboottest", "99.0.0"), ("formulaic", "99.0.0")):
        site = tmp_path / name
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        monkeypatch.syspath_prepend(str(site))
        build_distributions.cache_clear()
        assert build_distributions(ROOT)[name] == version
        now = code_fingerprint(ROOT)
        assert now != before, name
        before = now
    build_distributions.cache_clear()


def _study(tmp_path: Path) -> Study:
    data = tmp_path / "obs.csv"
    data.write_text("row_id,x\n1,a\n")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "forecast.jsonl").write_text('{"key": "a"}\n')
    base = load_study(None)
    return Study(vars=resolve({**base.vars, "data_path": str(data), "raw_dir": str(raw)}))


def test_inputs_fingerprint_covers_every_file_the_build_reads_but_the_raw_answers(tmp_path: Path) -> None:
    study = _study(tmp_path)
    before = inputs_fingerprint(study)
    raw = study.raw_dir
    (raw / "forecast.jsonl.lock").write_text("")  # a lock file is not read by the build
    assert inputs_fingerprint(study) == before
    (raw / "forecast.failures.jsonl").write_text('{"key": "a", "reason": "timeout"}\n')
    # read by stg_query_failures, and recorded with the raw answers by what the build read
    # (lookahead.raw_reads, tests/python/test_shared_raw.py), not by this fingerprint
    assert inputs_fingerprint(study) == before
    assert [r.path for r in raw_reads.record(raw)] == ["forecast.failures.jsonl", "forecast.jsonl"]
    (tmp_path / "obs.csv").write_text("row_id,x\n1,b\n")  # an edited row, same size
    assert inputs_fingerprint(study) != before
    moved = Study(vars=resolve({**study.vars, "results_dir": str(tmp_path / "elsewhere")}))
    assert inputs_fingerprint(moved) == inputs_fingerprint(study)  # not read by the build


def test_fingerprint_rereads_a_rewritten_file(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text("one\n")
    first = fingerprint(f)
    f.write_text("two\n")  # same size: the mtime (ns) tells the cache it changed
    assert fingerprint(f) != first
    f.unlink()
    assert fingerprint(f) == "missing"


def test_build_identity_reads_each_raw_file_once(tmp_path: Path) -> None:
    """build_identity fingerprints each task's cache and then every input file together;
    the second pass takes the raw files' digests from the first instead of rereading them."""
    from lookahead.identity import RAW_TASKS, _fingerprint, cache_fingerprint

    study = _study(tmp_path)
    for task in ("recall", "mink"):
        (study.raw_dir / f"{task}.jsonl").write_text(f'{{"key": "{task}"}}\n')
    before = _fingerprint.cache_info().misses
    per_task = [cache_fingerprint(study.raw_dir, task) for task in RAW_TASKS]
    assert _fingerprint.cache_info().misses - before == len(RAW_TASKS)  # one read per file
    inputs_fingerprint(study)
    assert _fingerprint.cache_info().misses - before == len(RAW_TASKS) + 1  # + the data file
    assert per_task == [fingerprint(study.raw_dir / f"{t}.jsonl") for t in RAW_TASKS]


def test_fingerprinting_a_small_file_allocates_about_its_size(tmp_path: Path) -> None:
    """The fingerprint reads large files in 32 MiB blocks; a buffer that size for each of
    the 130-odd small code files made code_fingerprint take 3.4 s instead of 0.02 s."""
    import tracemalloc

    from lookahead.identity import _fingerprint

    small = tmp_path / "model.sql"
    small.write_text("select 1\n" * 1000)
    st = small.stat()
    tracemalloc.start()
    try:
        digest = _fingerprint(str(small), st.st_size, st.st_mtime_ns, st.st_ino)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest == "sha256:" + hashlib.sha256(small.read_bytes()).hexdigest()
    assert peak < 1 << 20


@pytest.mark.parametrize(
    "recorded, nodes",
    [
        ("", ""),
        ("--exclude-resource-type unit_test", ""),
        ("--exclude tag:claims --exclude-resource-type unit_test", "--exclude tag:claims"),
        ("--select +tag:claims --exclude-resource-type unit_test", "--select +tag:claims"),
        ("--exclude-resource-type test unit_test", "--exclude-resource-type test"),
        ("--exclude-resource-type test", "--exclude-resource-type test"),
        ("--resource-type model", "--resource-type model"),
    ],
)
def test_a_build_without_unit_tests_built_the_same_nodes(recorded: str, nodes: str) -> None:
    """build_log's selection, read for build skipping: leaving the unit tests out (as
    `lookahead run` does) builds the same tables and runs the same data tests; leaving
    the data tests out, or building models only, does not."""
    assert nodes_selected(recorded) == nodes
