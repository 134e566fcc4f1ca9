"""The dbt plugin moves the dbt process's Arrow buffers to malloc (lookahead.dbt_plugin).

Why it matters: pyarrow's default pool keeps freed buffers, and the dbt Python models run
in the dbt process, so their short-lived Arrow buffers stayed in its peak memory
(BENCHMARKS.md, peak memory of `dbt build`). Run in a fresh interpreter: the pool is
process-wide and the test must not change it for the other tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
import pyarrow as pa
before = pa.default_memory_pool().backend_name
from lookahead.dbt_plugin import Plugin
Plugin("lookahead", {})   # what dbt-duckdb does when profiles.yml loads the plugin
after = pa.default_memory_pool().backend_name
system = pa.system_memory_pool()
held = system.bytes_allocated()
arr = pa.array(range(1_000_000), type=pa.int64())
print(json.dumps({"before": before, "after": after,
                  "system_bytes_for_array": system.bytes_allocated() - held}))
"""


def test_plugin_puts_new_arrow_buffers_on_the_system_allocator() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] != "system"  # else the test shows nothing
    assert got["after"] == "system"
    assert got["system_bytes_for_array"] >= 8_000_000  # the array's buffer came from malloc
