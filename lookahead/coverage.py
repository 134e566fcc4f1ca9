"""A LAP measure the study asks for is never silently missing: the coverage gate.

Every measure a study computes (`lap_measure` and `lap_measures`) joins the panel as a
column, lap_<measure>, from the raw lines whose key the study asks for now. When the
cache holds that task's answers under another key only (a setting that joins the key
changed since the jobs ran: a reduced `dtype`, for instance), or its lines lack what the
measure reads (Min-K%++ on lines written without the vocabulary moments), the column is
null on those rows, and
before this gate the build passed, the robustness table printed the measure with N 0,
and nothing said why. gate_panel calls :func:`coverage_failures`: a measure scoring
fewer than `min_measure_coverage` of the panel rows (default 0.95; a query without an
answer has already stopped the build at query_issues, and a row refused for good has
left the panel, so a measure short of the floor is one whose answers sit under another
key, or one that scores few rows) stops the build with one line naming the measure,
how many rows it scored, and, when its raw lines exist under another key, the setting
that changed the key (:data:`PARAM_SETTINGS`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import duckdb

from lookahead.config import Study
from lookahead.keys import KEY_FREE_PARAMS
from lookahead.measures import REFERENCE_TASK, Measure, study_measures

#: A query parameter (lookahead.keys._task_params) -> the setting that decides it, so a
#: line whose parameters differ from the study's names the setting that changed its key.
#: (`line_extras`, which older Min-K% lines hold, is no part of the key: lookahead.cache
#: KEY_FREE_PARAMS; such a line is read under the study's key.)
PARAM_SETTINGS = {
    "mink_body_dtype": "mink_body_dtype",
    "matmul_precision": "matmul_precision",
    "dtype": "dtype",
    "chat_template": "use_chat_template",
    "prompt_overflow": "prompt_overflow",
    "context_length": "context_length",
    "max_tokens": "forecast_max_tokens",
    "label_synonyms": "recall_label_synonyms",
    "top_logprobs": "logprobs_available",
    "n_samples": "n_samples",
    "seed": "sampling_seed",
}


def _absent(value: Any) -> bool:
    """A parameter left out and one set to its empty value are the same query here."""
    return value is None or value is False or value == {} or value == []


def changed_settings(study: Study, task: str, line_params: Any, line_model_id: str | None) -> list[str]:
    """The settings whose values made a cached line's key differ from the study's key:
    its parameters against the study's (by :data:`PARAM_SETTINGS`), then the model."""
    from lookahead.keys import reference_study, task_params

    keyed_by = reference_study(study) if task == REFERENCE_TASK else study
    ours = task_params(study, task)
    if isinstance(line_params, str):
        try:
            line_params = json.loads(line_params)
        except ValueError:
            line_params = {}
    theirs = line_params if isinstance(line_params, dict) else {}
    names = []
    for param in sorted((set(ours) | set(theirs)) - set(KEY_FREE_PARAMS)):
        a, b = ours.get(param), theirs.get(param)
        if (_absent(a) and _absent(b)) or a == b:
            continue
        names.append(PARAM_SETTINGS.get(param, f"the query parameter {param}"))
    if line_model_id is not None and str(line_model_id) != str(keyed_by.backend.model_id):
        names.append("reference_model_id" if task == REFERENCE_TASK else "model_id")
    return list(dict.fromkeys(names))


def coverage_failures(study: Study, panel: Any, lines_of: Callable[[str], Any], expected: Any) -> list[str]:
    """One line per measure scoring under the floor ([] when every measure passes).

    ``panel`` is the panel (a DuckDB relation), ``lines_of(task)`` that task's raw
    source lines (a relation), ``expected`` int_expected_keys (a relation); the raw lines
    are read only for a measure that failed."""
    n_rows = int(panel.aggregate("count(*)").fetchone()[0])
    floor = float(study.measures.min_measure_coverage)
    out = []
    for m in study_measures(study):
        scored = int(panel.aggregate(f'count("{m.column}")').fetchone()[0])
        if n_rows == 0 or scored >= floor * n_rows - 1e-9:
            continue
        out.append(_failure_line(study, m, panel, n_rows, scored, floor, lines_of, expected))
    return out


def _failure_line(
    study: Study, m: Measure, panel: Any, n_rows: int, scored: int, floor: float, lines_of: Callable[[str], Any], expected: Any
) -> str:
    head = (
        f"LAP measure '{m.name}' ({m.short}) has a score on {scored} of {n_rows} panel rows, under "
        f"the floor min_measure_coverage = {floor:g}"
    )
    rerun = "run the LLM jobs for this study (lookahead jobs --study <file>), which ask those queries"
    if m.needs and "mink_key" in panel.columns:
        lacking = int(panel.filter(f'"{m.column}" is null and mink_key is not null').aggregate("count(*)").fetchone()[0])
        if lacking:
            return (
                f"{head}: {lacking} of the rows have their {m.task} line, but it lacks {', '.join(m.needs)} "
                f"(written for a study whose measures did not need it); {rerun} (only those rows)"
            )
    casts = {c: f"cast(u.{c} as varchar)" for c in m.join_on}
    missing = panel.filter(f'"{m.column}" is null').project(", ".join(m.join_on)).distinct()
    current = expected.filter(f"task = '{m.task}'").project("key")
    other = (
        lines_of(m.task)
        .set_alias("l")
        .join(current.set_alias("e"), "l.key = e.key", how="anti")
        .set_alias("o")
        .join(missing.set_alias("u"), " and ".join(f"o.{c} = {casts[c]}" for c in m.join_on), how="semi")
    )
    try:
        n_other = int(other.aggregate(f"count(distinct ({', '.join(m.join_on)}))").fetchone()[0])
        sample = other.project("key, model_id, cast(params as varchar)").limit(1).fetchone() if n_other else None
    except duckdb.Error:  # no raw file of the task at all
        n_other, sample = 0, None
    if not n_other or sample is None:
        return f"{head}; no raw {m.task} line answers the other rows: {rerun}"
    key, model_id, params = sample
    settings = changed_settings(study, m.task, params, model_id)
    why = (
        f"setting {', '.join(repr(s) for s in settings)} changed the key since they were written"
        if settings
        else "the prompt or the row's text or id changed the key since they were written "
        "(settings forecast_prompt, recall_template, or the data file)"
    )
    return (
        f"{head}: {n_other} of the rows have {m.task} lines under another key (e.g. {key[:12]}): {why}; "
        f"{rerun} under the study's key"
    )
