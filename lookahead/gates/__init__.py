"""Great Expectations gates: validate a DataFrame against a suite kept in expectations/.

GX 1.x cannot validate DuckDB through SQLAlchemy reliably (GX issues 10738, 11579), so
each gate validates a pandas batch of the dbt model. A gate returns one row per
expectation (stored as the gate model's table, which SQL users query) and raises
GateFailed, naming every failed check, when any expectation fails: inside a dbt Python
model that makes `dbt build` stop and skip everything downstream."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lookahead.config import PROJECT_ROOT, Study
from lookahead.errors import UserError
from lookahead.gates.expectations import expectation_rows

EXPECTATIONS_DIR = PROJECT_ROOT / "expectations"


class GateFailed(UserError, RuntimeError):
    """A data-quality gate failed; the message names each failed expectation."""


def load_suite(name: str, directory: Path = EXPECTATIONS_DIR) -> dict[str, Any]:
    with open(directory / f"{name}.json", encoding="utf-8") as fh:
        return json.load(fh)


def suite_columns(suite: Mapping[str, Any]) -> list[str]:
    """The columns a suite's expectations read, in order of first mention."""
    cols: list[str] = []
    for exp in suite.get("expectations", []):
        kw = exp.get("kwargs", {})
        for c in [kw.get("column"), kw.get("column_A"), kw.get("column_B"), *(kw.get("column_list") or [])]:
            if c and c not in cols:
                cols.append(c)
    return cols


def gate_frame(data: Any, suite: Mapping[str, Any], id_column: str | None) -> pd.DataFrame:
    """The pandas batch GX validates: only the columns the suite reads (and the id column
    its messages name), every row. A DuckDB relation is projected before conversion, so
    the gate never copies (nor GX hashes) columns no check reads; a DataFrame is
    narrowed the same way. Text columns reach pandas through Arrow
    (lookahead.stats.panel_io.to_pandas: the same frame as `.df()`, a fraction of the
    memory)."""
    wanted = suite_columns(suite) + ([id_column] if id_column else [])
    present = list(data.columns)
    cols = [c for c in dict.fromkeys(wanted) if c in present]
    if isinstance(data, pd.DataFrame):
        return data[cols] if cols else data
    from lookahead.stats.panel_io import to_pandas

    if not cols:
        return to_pandas(data)
    return to_pandas(data.project(", ".join(f'"{c}"' for c in cols)))


def run_gate(
    gate: str,
    df: Any,
    suite_name: str,
    parameters: Mapping[str, Any] | None = None,
    id_column: str | None = None,
) -> pd.DataFrame:
    """Validate df (a DataFrame or a DuckDB relation) with the suite; return one row per
    expectation or raise GateFailed.

    In a dbt build the expectations are checked in the gate worker (lookahead.gates.worker
    says why), else, or when the worker cannot serve, here."""
    from lookahead.gates import worker as gates_worker  # here: `python -m lookahead.gates.worker` runs it once

    suite = load_suite(suite_name)

    def frame() -> pd.DataFrame:
        return gate_frame(df, suite, id_column)

    worker = gates_worker.worker()
    rows = worker.expectation_rows(gate, frame, suite, parameters or {}, id_column) if worker else None
    if rows is None:
        rows = expectation_rows(gate, frame(), suite, parameters or {}, id_column)
    return gate_table(gate, suite_name, rows)


def gate_table(gate: str, suite_name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The gate's table (one row per expectation), or GateFailed naming every failed one."""
    table = pd.DataFrame([{"gate": gate, "suite": suite_name, **row} for row in rows])
    failed = table[~table["success"]]
    if len(failed):
        lines = "; ".join(f"{d} [{w}]" if w else d for d, w in zip(failed["detail"], failed["why"], strict=False))
        raise GateFailed(f"GX gate '{gate}' failed {len(failed)} of {len(table)} checks: {lines}")
    return table


def min_parse_rate(study: Study) -> float:
    """The parse-rate floor for gate_panel: the protocol's MIN_PARSE_RATE, or 0 when the
    study accepted a lower rate (setting accept_low_parse_rate)."""
    from lookahead.scoring import MIN_PARSE_RATE

    return 0.0 if study.runner.accept_low_parse_rate else MIN_PARSE_RATE


def check_exclusions(n_valid: int, refused: pd.DataFrame, floor: float) -> None:
    """Raise GateFailed when the rows excluded because an LLM query was refused for good
    (int_refused_rows: row_id, exclude_reason) leave under ``floor`` (the setting
    min_measure_coverage) of the valid rows.

    One threshold for every way a row can lack a measure: a refused query excludes its
    row (no rerun changes it), and the build goes on while enough rows are left; below
    the floor it stops naming the count, the reasons and the setting."""
    n = len(refused)
    if not n or n_valid <= 0:
        return
    kept = (n_valid - n) / n_valid
    if kept >= floor - 1e-12:
        return
    reasons = refused["exclude_reason"].astype(str).value_counts().head(3)
    shown = "; ".join(f"{c} x {r}" for r, c in reasons.items())
    raise GateFailed(
        f"GX gate 'gate_panel' stopped: {n} of {n_valid} valid rows are excluded because an LLM query "
        f"was refused for good ({shown}); the {kept:.2%} left is under the floor min_measure_coverage = "
        f"{floor:g}. Lower min_measure_coverage to {math.floor(kept * 1e4) / 1e4:g} to build without them "
        "(table rejected_rows lists them), or ask them again with `lookahead jobs --retry-failed`"
    )


def check_no_missing_answers(issues: pd.DataFrame) -> None:
    """Raise GateFailed naming every task with queries that have no answer yet.

    Without this a missing recall line would merely leave a row without LAP, and a
    query whose answer could not be completed would look like nothing happened. The
    failures are in <raw_dir>/<task>.failures.jsonl; rerunning the jobs retries them."""
    missing = issues[issues["issue"].astype(str).str.startswith("no answer")] if len(issues) else issues
    if len(missing):
        parts = [f"{t}: {int(n)} x {i}" for t, i, n in zip(missing["task"], missing["issue"], missing["n_queries"], strict=False)]
        raise GateFailed(
            f"GX gate 'gate_panel' stopped: {int(missing['n_queries'].sum())} LLM queries have no "
            f"answer ({'; '.join(parts)}); see <raw_dir>/<task>.failures.jsonl and run the LLM "
            "jobs again to retry them (lookahead jobs --study <file>)"
        )
