"""The dbt-duckdb plugin (lookahead.dbt_plugin) outside dbt: the functions it gives DuckDB,
the study's database it attaches and the settings it serves, and that opening the build's
database takes the objects alive by then out of the garbage collector's reach (the build's
process keeps them until it exits)."""

from __future__ import annotations

import csv
import gc
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from lookahead import dbt_plugin
from lookahead.config import (
    PROJECT_ROOT,
    SCHEMA,
    STUDY_SETTINGS_ENV,
    dbt_study_name,
    default_study_path,
    load_study,
    read_study_file,
)
from lookahead.identity import RESULT_TABLES
from lookahead.rows import count_data_rows


def test_opening_the_database_registers_the_functions_and_freezes_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))
    gc.unfreeze()
    con = duckdb.connect()
    try:
        dbt_plugin.Plugin(name="lookahead", plugin_config={}).configure_connection(con)
        assert gc.get_freeze_count() > 0
        names = con.sql("select lookahead_setting_names()").fetchone()[0].split(",")
        assert names == list(SCHEMA.names())
        assert con.sql("select lookahead_result_tables()").fetchone()[0] == ",".join(RESULT_TABLES)
    finally:
        gc.unfreeze()
        con.close()


def _frozen_at_exit(import_plugin: bool) -> str:
    # atexit runs the handler registered last first: the plugin's, registered at its
    # import, runs before this check, registered earlier
    code = "import atexit, gc\natexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n" + (
        "import lookahead.dbt_plugin\n" if import_plugin else ""
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_heap_is_frozen_at_exit() -> None:
    assert _frozen_at_exit(import_plugin=False) == "frozen at exit: False"
    assert _frozen_at_exit(import_plugin=True) == "frozen at exit: True"


def _open_like_dbt(db: Path) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
    """What dbt-duckdb does with profiles/profiles.yml: an in-memory primary, the plugin's
    configure_connection, the profile's own ATTACH IF NOT EXISTS of the alias (a
    placeholder), then a cursor per node through configure_cursor."""
    con = duckdb.connect(":memory:lookahead")
    plugin = dbt_plugin.Plugin(name="lookahead", plugin_config={})
    plugin.configure_connection(con)
    con.execute("attach if not exists ':memory:' as study")
    cursor = con.cursor()
    plugin.configure_cursor(cursor)
    return con, cursor


def test_the_build_writes_into_the_studys_own_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "study.duckdb"
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(db))
    con, cursor = _open_like_dbt(db)
    try:
        cursor.execute("create table main.t as select 42 as x")  # unqualified, as build_log's SQL
        assert cursor.sql("select current_setting('temp_directory')").fetchone()[0] == f"{db}.tmp"
    finally:
        cursor.close()
        con.close()
    with duckdb.connect(str(db), read_only=True) as check:
        assert check.sql("select x from t").fetchall() == [(42,)]


def test_the_study_comes_from_the_settings_file_the_lookahead_command_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second demo study, named only through $LOOKAHEAD_STUDY_SETTINGS: its settings,
    its raw folder and its observations file reach SQL, not the default study's."""
    study = load_study(PROJECT_ROOT / "demo/studies/clean.yml")
    assert study.name != read_study_file(default_study_path())["study_name"]
    settings = tmp_path / "study.json"
    settings.write_text(json.dumps(study.vars), encoding="utf-8")
    monkeypatch.setenv(STUDY_SETTINGS_ENV, str(settings))
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))
    assert dbt_study_name({}) == study.name
    with open(study.resolve(study.input.data_path), newline="", encoding="utf-8") as fh:
        n_rows = sum(1 for _ in csv.DictReader(fh))
    con, cursor = _open_like_dbt(tmp_path / "db.duckdb")
    try:
        for name in ("study_name", "raw_dir", "model_id", "recall_labels", "mink_k"):
            got = json.loads(cursor.sql(f"select lookahead_setting('{name}')").fetchone()[0])
            assert got == study.vars[name], name  # the loader's view: each setting by name
        assert cursor.sql("select getvariable('lookahead_study').raw_dir").fetchone()[0] == str(study.raw_dir)
        assert cursor.sql("select count(*) from query(getvariable('lookahead_study').observations_sql)").fetchone()[0] == n_rows
        assert cursor.sql("select lookahead_study_name()").fetchone()[0] == study.name
    finally:
        cursor.close()
        con.close()


def test_vars_name_the_study_before_the_settings_file_and_a_bad_one_still_names_its_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOOKAHEAD_DUCKDB", raising=False)
    monkeypatch.setenv(STUDY_SETTINGS_ENV, str(tmp_path / "absent.json"))
    full = read_study_file(PROJECT_ROOT / "demo/studies/clean.yml")
    assert dbt_study_name(full) == "demo_clean_protocol"
    bad = {**full, "training_cutoff": "not a date"}  # the run-start check names the setting
    assert dbt_study_name(bad) == "demo_clean_protocol"
    assert load_study(PROJECT_ROOT / "demo/studies/clean.yml").database == PROJECT_ROOT / "outputs/demo_clean_protocol.duckdb"


def test_the_buffer_pool_grows_with_the_rows_and_stays_within_the_machine() -> None:
    """480MB a million rows, at least 640MB (the hash tables of int_panel_merged grow
    with the rows), never beyond 80% of the machine's memory, never below the base on a
    small machine."""
    gib = 2**30
    assert dbt_plugin.memory_limit(0) == "640MB"
    assert dbt_plugin.memory_limit(91_361, 24 * gib) == "640MB"
    assert dbt_plugin.memory_limit(1_000_000, 24 * gib) == "640MB"
    assert dbt_plugin.memory_limit(1_333_333, 24 * gib) == "640MB"
    assert dbt_plugin.memory_limit(1_333_334, 24 * gib) == "641MB"  # rounded up, not down
    assert dbt_plugin.memory_limit(1_600_000, 24 * gib) == "768MB"
    assert dbt_plugin.memory_limit(10_000_000, 24 * gib) == "4800MB"
    assert dbt_plugin.memory_limit(100_000_000, 24 * gib) == f"{int(0.8 * 24 * gib / 1e6)}MB"
    assert dbt_plugin.memory_limit(100_000_000, gib // 2) == "640MB"


def _study_with_rows(tmp_path: Path, n_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default study reading an input file of `n_rows` rows, named to the plugin
    through the settings file."""
    data = tmp_path / "rows.csv"
    lines = ["row_id,entity_id,entity_name,ticker,text,text_date,target_date,outcome"]
    lines += [f"r{i},E{i % 7},Firm {i % 7},T,text {i},2021-01-04,2021-01-05,0.1" for i in range(n_rows)]
    data.write_text("\n".join(lines), encoding="utf-8")  # no line break after the last row
    vars_ = {**load_study(default_study_path()).vars, "data_path": str(data)}
    settings = tmp_path / "study.json"
    settings.write_text(json.dumps(vars_), encoding="utf-8")
    monkeypatch.setenv(STUDY_SETTINGS_ENV, str(settings))
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))


def _pool_of(value: str) -> str:
    """DuckDB's reading of a memory size (it prints them in its own units)."""
    with duckdb.connect() as con:
        con.execute(f"set memory_limit = '{value}'")
        return con.sql("select current_setting('memory_limit')").fetchone()[0]


def test_opening_the_database_sizes_the_buffer_pool_for_the_studys_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(dbt_plugin.MEMORY_LIMIT_ENV, raising=False)
    _study_with_rows(tmp_path, 2_501, monkeypatch)
    assert dbt_plugin.build_study().input.data_path == str(tmp_path / "rows.csv")
    assert count_data_rows(tmp_path / "rows.csv") == 2_501
    # a million rows per row here: scale the figure so that this small file decides it
    monkeypatch.setattr(dbt_plugin, "MEMORY_LIMIT_PER_MILLION_ROWS_MB", 640_000)
    con, cursor = _open_like_dbt(tmp_path / "db.duckdb")
    try:
        expected = dbt_plugin.memory_limit(2_501, dbt_plugin.ram_bytes())
        assert expected != "640MB"
        assert cursor.sql("select current_setting('memory_limit')").fetchone()[0] == _pool_of(expected)
        con.execute("set memory_limit = '1GB'")  # anything a node changed: the next cursor sets it again
        nxt = con.cursor()
        dbt_plugin.Plugin(name="lookahead", plugin_config={}).configure_cursor(nxt)
        assert nxt.sql("select current_setting('memory_limit')").fetchone()[0] == _pool_of(expected)
        nxt.close()
    finally:
        cursor.close()
        con.close()


def test_the_memory_limit_setting_overrides_the_sizing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _study_with_rows(tmp_path, 10, monkeypatch)
    monkeypatch.setenv(dbt_plugin.MEMORY_LIMIT_ENV, "3GB")
    con, cursor = _open_like_dbt(tmp_path / "db.duckdb")
    try:
        assert cursor.sql("select current_setting('memory_limit')").fetchone()[0] == _pool_of("3GB")
    finally:
        cursor.close()
        con.close()


def _dbt_values() -> str:
    """The settings as dbt hands them to the run-start check without --vars: the study's own."""
    return json.dumps(dbt_plugin.build_study().vars, default=str)


def test_a_memory_limit_duckdb_cannot_read_is_one_line_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database opens with the sized limit and the run-start check's line names the
    setting (an exception there would reach the user as a traceback)."""
    monkeypatch.delenv(STUDY_SETTINGS_ENV, raising=False)  # the default study
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))
    monkeypatch.setenv(dbt_plugin.MEMORY_LIMIT_ENV, "lots")
    con, cursor = _open_like_dbt(tmp_path / "db.duckdb")
    try:
        assert cursor.sql("select current_setting('memory_limit')").fetchone()[0] == _pool_of("640MB")
        message = cursor.execute("select lookahead_check_settings(?, '')", [_dbt_values()]).fetchone()[0]
        assert message.startswith("$LOOKAHEAD_DUCKDB_MEMORY_LIMIT='lots' is not a memory size")
        assert "\n" not in message
    finally:
        cursor.close()
        con.close()
    monkeypatch.setenv(dbt_plugin.MEMORY_LIMIT_ENV, "2GB")  # mended: the check passes again
    con, cursor = _open_like_dbt(tmp_path / "db.duckdb")
    try:
        assert cursor.execute("select lookahead_check_settings(?, '')", [_dbt_values()]).fetchone()[0] == ""
    finally:
        cursor.close()
        con.close()


@pytest.mark.parametrize(
    ("dbt_threads", "n_cores", "cli_threads", "expected"),
    [
        (2, 2, None, 1),  # the profile's two nodes on two cores: one thread a query
        (2, 16, None, 8),
        (4, 2, None, 1),  # never below one
        (None, 8, None, 8),  # no count given: dbt runs one node at a time
        (2, 2, 1, 2),  # `dbt --threads 1` overrides the profile
    ],
)
def test_duckdb_gets_the_cores_each_of_dbts_threads_has(
    dbt_threads: int | None, n_cores: int, cli_threads: int | None, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    import dbt.flags

    monkeypatch.setattr(dbt.flags, "get_flags", lambda: argparse.Namespace(THREADS=cli_threads))
    assert dbt_plugin.duckdb_threads(dbt_threads, n_cores) == expected


def test_the_profile_hands_its_thread_count_to_the_plugin_and_the_connection_gets_the_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    profile = yaml.safe_load((Path(__file__).resolve().parents[2] / "profiles" / "profiles.yml").read_text())
    dev = profile["lookahead_bias"]["outputs"]["dev"]
    (plugin,) = [p for p in dev["plugins"] if p["module"] == "lookahead.dbt_plugin"]
    assert plugin["config"]["dbt_threads"] == dev["threads"] == 2
    monkeypatch.setenv("LOOKAHEAD_DUCKDB", str(tmp_path / "db.duckdb"))
    con = duckdb.connect(":memory:threads")
    try:
        dbt_plugin.Plugin(name="lookahead", plugin_config=plugin["config"]).configure_connection(con)
        assert con.sql("select current_setting('threads')").fetchone()[0] == max(1, dbt_plugin.cores() // 2)
    finally:
        gc.unfreeze()
        con.close()
