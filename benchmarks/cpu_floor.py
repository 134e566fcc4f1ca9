"""Benchmark: where a `dbt build`'s CPU-seconds go that the bare script does not spend.

    python benchmarks/cpu_floor.py STUDY_DIR [--out FILE]

STUDY_DIR is a study bench_dbt_build.py generated and built (it holds vars.json, raw/,
the database a build wrote, e.g. bench.duckdb, and dbt's target folder with the compiled
SQL). Each measurement runs in this process with DuckDB at the build's settings (2
threads, the memory limit the plugin sizes), CPU-seconds from getrusage:

- `sql_alone`: every compiled SQL model, run on its own against a copy of the built
  database into a temporary (in-memory) table: what the SQL itself costs;
- `writes`: every table of the built database of more than 50,000 rows copied into a
  new database file and checkpointed: what persisting it costs (DuckDB chooses and
  applies each column's compression when it checkpoints), with DuckDB's default
  compression and with `--disable` methods turned off, and the file each gives;
- `bare`: each statement of benchmarks/bare_protocol.py's panel, timed the same way.

The sum of `sql_alone` and `writes` against the build's own CPU-seconds says how much of
the build is the SQL, how much its tables on disk, and how much the rest (the Python
models, Great Expectations, the data tests and dbt itself)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bare_protocol

from lookahead.config import Study
from lookahead.dbt_plugin import sized_memory_limit


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _connect(path: str, limit: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(path)
    con.execute(f"set threads = 2; set memory_limit = '{limit}'")
    return con


def sql_alone(study_dir: Path, db: Path, limit: str, raw_dir: str) -> dict[str, float]:
    """CPU-seconds of each compiled SQL model run on its own into a temporary table."""
    copy = study_dir / "cpu_floor_sql.duckdb"
    shutil.copy(db, copy)
    con = _connect(":memory:", limit)
    con.execute(f"attach '{copy}' as study; use study")
    con.execute("set variable lookahead_study = {'raw_dir': ?}", [raw_dir])
    out = {}
    models = study_dir / "target" / "compiled" / "lookahead_bias" / "models"
    for f in sorted(models.glob("*/**/*.sql")):
        if any(p.endswith(".yml") for p in f.parts) or f.parent.name == "claims":
            continue  # data and unit tests (compiled under their YAML's name); claim models
        c = _cpu()
        try:
            con.execute(f"create or replace temp table _floor as {f.read_text()}")
        except duckdb.Error:
            continue  # a model reading what only dbt gives it (a relation of this build's run)
        out[f.stem] = round(_cpu() - c, 3)
    con.close()
    copy.unlink()
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def writes(study_dir: Path, db: Path, limit: str, disabled: str) -> dict:
    """CPU-seconds of writing each large table into a new file, per compression choice."""
    with duckdb.connect(str(db), read_only=True) as con:
        tables = [
            r[0]
            for r in con.execute(
                "select table_name from duckdb_tables() where estimated_size > 50000 order by estimated_size desc"
            ).fetchall()
        ]
    out = {}
    for label, setting in (("default", ""), (f"without {disabled}", disabled)):
        target = study_dir / "cpu_floor_writes.duckdb"
        target.unlink(missing_ok=True)
        con = _connect(str(target), limit)
        con.execute(f"attach '{db}' as src (read_only)")
        if setting:
            con.execute(f"set disabled_compression_methods = '{setting}'")
        per_table = {}
        for t in tables:
            c = _cpu()
            con.execute(f"create table {t} as select * from src.main.{t}")
            con.execute("checkpoint")
            per_table[t] = round(_cpu() - c, 3)
        con.close()
        out[label] = {
            "cpu_s": round(sum(per_table.values()), 2),
            "file_mib": round(target.stat().st_size / 2**20),
            "tables": per_table,
        }
        target.unlink()
    return out


class _Timed:
    """A DuckDB connection whose execute records each statement's CPU-seconds."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.cpu = con, {}

    def execute(self, sql: str, *args):
        c = _cpu()
        result = self.con.execute(sql, *args)
        self.cpu[" ".join(sql.split())[:48]] = round(_cpu() - c, 3)
        return result

    def __getattr__(self, name: str):
        return getattr(self.con, name)


def bare(study_dir: Path, limit: str) -> dict[str, float]:
    path = study_dir / "cpu_floor_bare.duckdb"
    path.unlink(missing_ok=True)
    con = _Timed(_connect(str(path), limit))
    bare_protocol.build_panel(con, Study.from_json((study_dir / "vars.json").read_text()))
    con.close()
    path.unlink()
    return {k: v for k, v in con.cpu.items() if v >= 0.01}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study_dir", type=Path, help="a study bench_dbt_build.py generated and built")
    ap.add_argument("--db", default="bench.duckdb", help="the built database in STUDY_DIR")
    ap.add_argument("--disable", default="fsst,dictionary", help="compression methods to compare without")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    vars_ = json.loads((a.study_dir / "vars.json").read_text())
    limit = sized_memory_limit(vars_["data_path"])
    db = a.study_dir / a.db
    t0 = time.perf_counter()
    result = {
        "command": " ".join(["benchmarks/cpu_floor.py", *sys.argv[1:]]),
        "memory_limit": limit,
        "loadavg_before": os.getloadavg(),
    }
    result["sql_alone"] = sql_alone(a.study_dir, db, limit, vars_["raw_dir"])
    result["sql_alone_cpu_s"] = round(sum(result["sql_alone"].values()), 2)
    result["writes"] = writes(a.study_dir, db, limit, a.disable)
    result["bare"] = bare(a.study_dir, limit)
    result["bare_cpu_s"] = round(sum(result["bare"].values()), 2)
    result["loadavg_after"] = os.getloadavg()
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("sql_alone", "bare")}, indent=1)[:3000])
    print("sql alone:", result["sql_alone_cpu_s"], "bare:", result["bare_cpu_s"])
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
