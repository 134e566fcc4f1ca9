"""Run the real dbt project (subprocess, as a user would) against a test study."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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


def dbt_env(db: Path | None) -> dict[str, str]:
    """dbt's environment; db None = the study's own database (profiles/profiles.yml)."""
    env = dict(os.environ)
    env.pop("LOOKAHEAD_DUCKDB", None)
    scratch = db.parent if db is not None else Path(tempfile.mkdtemp(prefix="dbt-"))
    env.update(
        DBT_PROFILES_DIR=str(ROOT / "profiles"),
        DBT_SEND_ANONYMOUS_USAGE_STATS="False",
        MPLCONFIGDIR=str(scratch / ".mpl"),
        GX_ANALYTICS_ENABLED="False",
        DBT_LOG_PATH=str(scratch / "logs"),
        DBT_TARGET_PATH=str(scratch / "target"),
        PYTHONPATH=str(ROOT),
    )
    if db is not None:
        env["LOOKAHEAD_DUCKDB"] = str(db)
    return env


def run_dbt(args: list[str], vars_: dict, db: Path | None) -> DbtResult:
    dbt = Path(sys.executable).with_name("dbt")
    proc = subprocess.run(
        [str(dbt), *args, "--project-dir", str(ROOT), "--vars", json.dumps(vars_)],
        cwd=ROOT, env=dbt_env(db), capture_output=True, text=True, timeout=600,
    )
    return DbtResult(proc.returncode, proc.stdout + proc.stderr, db)
