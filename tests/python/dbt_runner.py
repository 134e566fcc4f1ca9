"""Run the real dbt project (subprocess, as a user would) against a test study."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DbtResult:
    returncode: int
    output: str
    db: Path

    def table(self, name: str) -> pd.DataFrame:
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            return con.sql(f"select * from {name}").df()
        finally:
            con.close()

    def has_table(self, name: str) -> bool:
        if not self.db.exists():
            return False
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            names = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
        finally:
            con.close()
        return name in names


def dbt_env(db: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        LOOKAHEAD_DUCKDB=str(db),
        MPLCONFIGDIR=str(db.parent / ".mpl"),
        GX_ANALYTICS_ENABLED="False",
        DBT_LOG_PATH=str(db.parent / "logs"),
        DBT_TARGET_PATH=str(db.parent / "target"),
        PYTHONPATH=str(ROOT),
    )
    return env


def run_dbt(args: list[str], vars_: dict, db: Path) -> DbtResult:
    dbt = Path(sys.executable).with_name("dbt")
    proc = subprocess.run(
        [str(dbt), *args, "--project-dir", str(ROOT), "--vars", json.dumps(vars_)],
        cwd=ROOT, env=dbt_env(db), capture_output=True, text=True, timeout=600,
    )
    return DbtResult(proc.returncode, proc.stdout + proc.stderr, db)
