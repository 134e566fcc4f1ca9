"""The dbt plugin hands memory the build freed back to the system (lookahead.dbt_plugin).

Why it matters: the dbt Python models (pandas, pyfixest, Great Expectations) and DuckDB
free large amounts of memory node after node; glibc keeps freed pages inside its heap, so
without the trim the build carried them from node to node (BENCHMARKS.md, peak memory at
1,000,000 rows). Run in a fresh interpreter: malloc's settings are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
import duckdb
from lookahead.dbt_plugin import Plugin

def rss_mib():
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) // 1024 for l in f if l.startswith('VmRSS'))

plugin = Plugin("lookahead", {})        # what dbt-duckdb does when profiles.yml loads it
con = duckdb.connect()
con.execute("attach ':memory:' as study")  # the build's catalog (the plugin attaches it in dbt)
cursor = con.cursor()
plugin.configure_cursor(cursor)         # once before measuring: it loads the default study
# 300 MiB in small blocks (below malloc's mmap threshold: they live on the heap), then
# free all but the last, which keeps the heap's top in place: nothing is returned by free()
blocks = [bytearray(4000) for _ in range(75_000)]
keep = blocks[-1]
before = rss_mib()
del blocks
freed = rss_mib()
plugin.configure_cursor(cursor)         # what dbt-duckdb calls as each node opens its cursor
after = rss_mib()
print(json.dumps({"before": before, "freed": freed, "after": after}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_a_node_starts_with_the_memory_earlier_nodes_freed_given_back() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for var in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX"):
        env.pop(var, None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["freed"] > got["before"] - 100  # free() alone kept most of it (else this shows nothing)
    assert got["after"] < got["freed"] - 200  # the trim gave it back
