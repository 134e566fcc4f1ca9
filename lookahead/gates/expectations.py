"""Great Expectations' side of a gate: the package imported quietly, a suite checked on a
pandas frame, and each result as the gate table's row. Run in the build process or in the
gate worker (lookahead.gates.worker), with the same rows either way."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pandas as pd


def import_gx() -> Any:
    """The great_expectations module, quiet and without analytics."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    for name in ("great_expectations", "great_expectations.data_context.types.base"):
        logging.getLogger(name).setLevel(logging.ERROR)  # no "Created temporary directory" noise
    import great_expectations as gx

    return gx


def expectation_rows(
    gate: str, df: pd.DataFrame, suite_dict: Mapping[str, Any], parameters: Mapping[str, Any], id_column: str | None
) -> list[dict[str, Any]]:
    """One row per expectation of the suite on the frame (Great Expectations' results,
    as the gate table stores them, less the gate's and the suite's names)."""
    gx = import_gx()
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
            ).run(batch_parameters={"dataframe": df}, expectation_parameters=dict(parameters), result_format=result_format)
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
                "expectation": cfg.type,
                "kwargs": json.dumps(kwargs, default=str, sort_keys=True),
                "success": bool(res.success),
                "observed": str(result.get("observed_value", "")),
                "unexpected_count": int(result.get("unexpected_count") or 0),
                "detail": _describe(cfg.type, kwargs, result),
                "why": (cfg.meta or {}).get("why", ""),
            }
        )
    return rows


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
