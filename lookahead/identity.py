"""A build's identity, and the check that a result belongs to the study as it is now.

A verdict is only worth quoting for the inputs, answers and settings it was computed
from. `dbt build` records them in `build_identity` (dbt invocation id, study name,
settings hash, fingerprints of the input file and of each raw file) and copies them into
the `verdict` row; on-run-end (macros/build_log.sql) records whether the build passed in
`build_log` and, when it failed, drops every result table, so no table presents a
verdict for a failed build. `lookahead report` then checks the stored identity against
the study and its files as they are now (:func:`check_current`) and refuses a stale one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from lookahead.config import Study

RAW_TASKS = ("forecast", "recall", "mink")
RESULT_TABLES = ("verdict", "regression_results", "paper_tables", "bootstrap_results",
                 "gx_validation_results")
IDENTITY_COLUMNS = ("invocation_id", "study_name", "settings_hash", "data_fingerprint",
                    "forecast_fingerprint", "recall_fingerprint", "mink_fingerprint")


class StaleResultError(RuntimeError):
    """The database holds no result for the study as it is now; the message says why."""


def fingerprint(path: str | Path) -> str:
    """sha256 of a file's bytes ('missing' when there is none), read in 1 MiB blocks."""
    p = Path(path)
    if not p.is_file():
        return "missing"
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def cache_fingerprint(raw_dir: str | Path, task: str) -> str:
    """Fingerprint of a task's whole cache, every shard (lookahead.cache.shard_files).

    A cache that is just the single-process file keeps that file's own fingerprint, so
    databases built before sharding stay current; with shards it is the sha256 of each
    shard's path (relative to raw_dir) and fingerprint, in path order."""
    from lookahead.cache import shard_files

    root = Path(raw_dir)
    files = shard_files(root, task)
    if not files:
        return "missing"
    if files == [root / f"{task}.jsonl"]:
        return fingerprint(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(root).as_posix()}\0{fingerprint(f)}\n".encode())
    return "shards:" + h.hexdigest()


def current_identity(study: Study) -> dict[str, str]:
    """The identity a build of this study would record now."""
    ident = {"study_name": study.name, "settings_hash": study.settings_hash,
             "data_fingerprint": fingerprint(study.path("data_path"))}
    for task in RAW_TASKS:
        ident[f"{task}_fingerprint"] = cache_fingerprint(study.raw_dir, task)
    return ident


def with_identity(frame: pd.DataFrame, identity: pd.DataFrame) -> pd.DataFrame:
    """A result frame with the build's identity columns (from `build_identity`) added."""
    out = frame.copy()
    row = identity.iloc[0]
    for col in IDENTITY_COLUMNS:
        out[col] = str(row[col])
    return out


@dataclass(frozen=True)
class BuildCheck:
    invocation_id: str
    verdict: str


WHAT = {"study_name": "the study name", "settings_hash": "the study settings",
        "data_fingerprint": "the input file", "forecast_fingerprint": "the forecast answers",
        "recall_fingerprint": "the recall answers", "mink_fingerprint": "the Min-K% answers"}


def check_current(con: duckdb.DuckDBPyConnection, study: Study) -> BuildCheck:
    """The verdict's build if it is this study's current result, else StaleResultError."""
    tables = {r[0] for r in con.sql("select table_name from information_schema.tables").fetchall()}
    last = None
    if "build_log" in tables:
        rows = con.sql("select invocation_id, status, failed_nodes, message from build_log "
                       "order by finished_at desc limit 1").fetchall()
        last = rows[0] if rows else None
    if last is not None and last[1] != "success":
        raise StaleResultError(
            f"the last dbt build of study '{study.name}' (invocation {last[0]}) failed at "
            f"{last[2]}: {last[3]}; fix that and rerun dbt build")
    if "verdict" not in tables:
        raise StaleResultError(f"study '{study.name}' has no verdict in its database: run dbt build")
    cols = {r[0] for r in con.sql("describe verdict").fetchall()}
    if not set(IDENTITY_COLUMNS) <= cols:
        raise StaleResultError("the verdict table records no build identity (an older build): rerun dbt build")
    stored = con.sql(f"select {', '.join(IDENTITY_COLUMNS)}, verdict from verdict").df().iloc[0]
    now = current_identity(study)
    changed = [WHAT[k] for k, v in now.items() if str(stored[k]) != v]
    if changed:
        raise StaleResultError(
            f"the verdict in the database was built from other inputs: {', '.join(changed)} "
            f"changed since dbt build (invocation {stored['invocation_id']}); rerun dbt build")
    if last is not None and last[0] != stored["invocation_id"]:
        raise StaleResultError(
            f"the verdict comes from dbt invocation {stored['invocation_id']}, not from the last "
            f"build ({last[0]}): rerun dbt build")
    return BuildCheck(str(stored["invocation_id"]), str(stored["verdict"]))
