"""Benchmark: what pointing one DuckDB cursor at the build's study costs, one struct
variable (lookahead.dbt_plugin.use_study: `use study` and one bound `set variable
lookahead_study`) against a variable per field (the plugin before: `use study` and one
bound `set variable` per field, eleven statements for the fixture study).

dbt opens a cursor for every node and data test, and the plugin sets the study on each
(variables are per connection), so this cost is paid a few hundred times a build. The two
ways run alternately on fresh cursors of one connection, with the same values (the
plugin's own, STUDY_FIELDS), CPU time of this process.

    python benchmarks/bench_study_variable.py [--cursors 300] [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "python")]

import duckdb  # noqa: E402
from fixture_study import write_fixture_study  # noqa: E402

from lookahead import dbt_plugin  # noqa: E402
from lookahead.children import settings_file_env  # noqa: E402
from lookahead.config import study_from_dbt_vars  # noqa: E402


def per_field(cursor: duckdb.DuckDBPyConnection, fields: dict) -> None:
    """The baseline: a statement per field, as the plugin set them before."""
    cursor.execute(f"use {dbt_plugin.STUDY_CATALOG}")
    for name, value in fields.items():
        if value is None:
            continue
        kind = dbt_plugin.STUDY_FIELDS[name]
        cursor.execute(f"set variable lookahead_{name} = cast(? as {kind})", [value])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cursors", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    fixture = write_fixture_study(tmp / "study")
    study = study_from_dbt_vars(json.dumps(fixture.vars, default=str))
    with settings_file_env(study) as env:
        os.environ.update(env)
        con = duckdb.connect(str(tmp / f"{dbt_plugin.STUDY_CATALOG}.duckdb"))  # the catalog `use study` names
        fields = dbt_plugin._study_fields()
        statements = 1 + sum(v is not None for v in fields.values())

        def timed(set_up) -> float:
            start = time.process_time()
            for _ in range(a.cursors):
                cursor = con.cursor()
                set_up(cursor)
                cursor.close()
            return (time.process_time() - start) / a.cursors * 1000

        ms: dict[str, list[float]] = {"per_field": [], "struct": []}
        for _ in range(a.rounds):
            ms["per_field"].append(timed(lambda c: per_field(c, fields)))
            ms["struct"].append(timed(dbt_plugin.use_study))
    med = {k: statistics.median(v) for k, v in ms.items()}
    result = {
        "command": " ".join(["benchmarks/bench_study_variable.py", *sys.argv[1:]]),
        "cursors_per_round": a.cursors,
        "statements_per_cursor": {"per_field": statements, "struct": 2},
        "cpu_ms_per_cursor": ms,
        "median_ms": med,
        "struct_over_per_field": med["struct"] / med["per_field"],
        "load": os.getloadavg(),
    }
    print(json.dumps({k: result[k] for k in ("statements_per_cursor", "median_ms", "struct_over_per_field")}, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
