"""The dbt-duckdb plugin (lookahead.dbt_plugin) outside dbt: the functions it gives DuckDB,
and that opening the build's database takes the objects alive by then out of the garbage
collector's reach (the build's process keeps them until it exits)."""

from __future__ import annotations

import gc
import subprocess
import sys

import duckdb

from lookahead import dbt_plugin
from lookahead.config import SCHEMA
from lookahead.identity import RESULT_TABLES


def test_opening_the_database_registers_the_functions_and_freezes_the_heap() -> None:
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
