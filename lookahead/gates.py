"""Great Expectations gates: validate a DataFrame against a suite kept in expectations/.

GX 1.x cannot validate DuckDB through SQLAlchemy reliably (GX issues 10738, 11579), so
each gate validates a pandas batch of the dbt model. A gate returns one row per
expectation (stored as the gate model's table, which SQL users query) and raises
GateFailed, naming every failed check, when any expectation fails: inside a dbt Python
model that makes `dbt build` stop and skip everything downstream."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from lookahead.config import PROJECT_ROOT, Study
from lookahead.errors import UserError

EXPECTATIONS_DIR = PROJECT_ROOT / "expectations"


class GateFailed(UserError, RuntimeError):
    """A data-quality gate failed; the message names each failed expectation."""


def load_suite(name: str, directory: Path = EXPECTATIONS_DIR) -> dict[str, Any]:
    with open(directory / f"{name}.json", encoding="utf-8") as fh:
        return json.load(fh)


def _format_index(index: Any) -> str:
    """An unexpected row as 'col=value' pairs (dates without a time part)."""
    if not isinstance(index, dict):
        return str(index)

    def fmt(v: Any) -> str:
        return v.date().isoformat() if isinstance(v, pd.Timestamp) else str(v)

    return " ".join(f"{k}={fmt(v)}" for k, v in index.items())


def _describe(exp_type: str, kwargs: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    target = (
        kwargs.get("column")
        or kwargs.get("column_list")
        or (f"{kwargs.get('column_A')} = {kwargs.get('column_B')}" if "column_A" in kwargs else "table")
    )
    parts = [f"{exp_type}({target})"]
    if "observed_value" in result:
        parts.append(f"observed {result['observed_value']}")
    if result.get("unexpected_count"):
        parts.append(f"{result['unexpected_count']} unexpected")
        ids = result.get("unexpected_index_list") or []
        shown = list(dict.fromkeys(_format_index(i) for i in ids))[:3]
        if shown:
            parts.append("e.g. " + ", ".join(shown))
        values = result.get("partial_unexpected_list") or []
        if values and not shown:
            parts.append("values " + ", ".join(map(str, values[:5])))
    return ": ".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]


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


_FINGERPRINT_SWITCH = threading.Lock()
_switch = {"gates_running": 0, "saved_threshold": 0.0}  # GX's own threshold while a gate runs


@contextmanager
def _no_batch_fingerprint() -> Iterator[None]:
    """GX without the md5 fingerprint it records for each pandas batch under 1 GB.

    Why: GX hashes every value of the frame for that fingerprint, batch metadata nothing
    here reads (a build's inputs are fingerprinted by build_identity). At 1,000,000 rows
    the hash took 1.3-2 s and, for gate_panel, 350 MiB on top of the frame: the build's
    peak. The threshold is GX's own switch (a frame at or above it is not hashed); it is
    restored when the last gate running leaves. dbt runs two gates at once on its two
    threads, so the switch is shared: a gate that saved and restored it on its own would
    restore the other's 0 for good."""
    from great_expectations.execution_engine import pandas_execution_engine as engine

    with _FINGERPRINT_SWITCH:
        if _switch["gates_running"] == 0:
            _switch["saved_threshold"] = engine.HASH_THRESHOLD
            engine.HASH_THRESHOLD = 0
        _switch["gates_running"] += 1
    try:
        yield
    finally:
        with _FINGERPRINT_SWITCH:
            _switch["gates_running"] -= 1
            if _switch["gates_running"] == 0:
                engine.HASH_THRESHOLD = _switch["saved_threshold"]


def import_gx() -> Any:
    """The great_expectations module, quiet and without analytics. In a dbt build the
    project's plugin may be importing it in the background (lookahead.dbt_plugin.
    import_gx_in_background): this waits for that import instead of starting a second."""
    plugin = sys.modules.get("lookahead.dbt_plugin")
    if plugin is not None:
        plugin.wait_for_gx_import()
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    for name in ("great_expectations", "great_expectations.data_context.types.base"):
        logging.getLogger(name).setLevel(logging.ERROR)  # no "Created temporary directory" noise
    import great_expectations as gx

    return gx


def run_gate(
    gate: str,
    df: Any,
    suite_name: str,
    parameters: Mapping[str, Any] | None = None,
    id_column: str | None = None,
) -> pd.DataFrame:
    """Validate df (a DataFrame or a DuckDB relation) with the suite; return one row per
    expectation or raise GateFailed."""
    gx = import_gx()
    suite_dict = load_suite(suite_name)
    df = gate_frame(df, suite_dict, id_column)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False}
    batch_definition = (
        context.data_sources.add_pandas("pandas").add_dataframe_asset(name=gate).add_batch_definition_whole_dataframe("all")
    )
    result_format: dict[str, Any] = (
        {"result_format": "COMPLETE", "unexpected_index_column_names": [id_column]}
        if id_column and id_column in df.columns
        else {"result_format": "SUMMARY"}
    )
    suite = context.suites.add(gx.ExpectationSuite(**{k: v for k, v in suite_dict.items() if k != "description"}))
    # A validation definition builds the batch once (Batch.validate after get_batch built
    # it twice), and without its fingerprint (_no_batch_fingerprint).
    try:
        with _no_batch_fingerprint():
            validation = context.validation_definitions.add(
                gx.ValidationDefinition(name=gate, data=batch_definition, suite=suite)
            ).run(batch_parameters={"dataframe": df}, expectation_parameters=dict(parameters or {}), result_format=result_format)
    finally:
        # GX keeps the last context for the process, and its data source's execution
        # engine keeps the batch: without this the frame (about 200 MiB for gate_panel at
        # 1,000,000 rows) stayed alive through every model built after the gate.
        context.data_sources.delete("pandas")
        del df
    rows = []
    for res in validation.results:
        cfg = res.expectation_config
        kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
        result = dict(res.result or {})
        rows.append(
            {
                "gate": gate,
                "suite": suite_name,
                "expectation": cfg.type,
                "kwargs": json.dumps(kwargs, default=str, sort_keys=True),
                "success": bool(res.success),
                "observed": str(result.get("observed_value", "")),
                "unexpected_count": int(result.get("unexpected_count") or 0),
                "detail": _describe(cfg.type, kwargs, result),
                "why": (cfg.meta or {}).get("why", ""),
            }
        )
    table = pd.DataFrame(rows)
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
