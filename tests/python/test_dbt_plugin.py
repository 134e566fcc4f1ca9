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


def test_opening_the_database_registers_the_functions_and_freezes_the_heap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
            + ("import lookahead.dbt_plugin\n" if import_plugin else ""))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


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
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
        assert cursor.sql("select getvariable('lookahead_raw_dir')").fetchone()[0] == study.output.raw_dir
        assert cursor.sql("select count(*) from query(getvariable('lookahead_observations_sql'))").fetchone()[0] == n_rows
        assert cursor.sql("select lookahead_study_name()").fetchone()[0] == study.name
    finally:
        cursor.close()
        con.close()


def test_vars_name_the_study_before_the_settings_file_and_a_bad_one_still_names_its_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOKAHEAD_DUCKDB", raising=False)
    monkeypatch.setenv(STUDY_SETTINGS_ENV, str(tmp_path / "absent.json"))
    full = read_study_file(PROJECT_ROOT / "demo/studies/clean.yml")
    assert dbt_study_name(full) == "demo_clean"
    bad = {**full, "training_cutoff": "not a date"}  # the run-start check names the setting
    assert dbt_study_name(bad) == "demo_clean"
    assert load_study(PROJECT_ROOT / "demo/studies/clean.yml").database == PROJECT_ROOT / "outputs/demo_clean.duckdb"
