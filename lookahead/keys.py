"""The cache key of every query, computed once for the jobs and for dbt.

The protocol: raw answers are keyed by sha256(task | model_id | row_id or
entity+target_date | prompt | params), and a cached answer is never used under another
key. The jobs use these functions to decide what to query; dbt's `int_expected_keys`
model uses the same functions to decide which raw lines a build uses, so an edited row,
prompt, parameter or model selects exactly the new answers, and older answers stay in the
cache unused.

Why the key hashes the prompt as rendered from the study's template, before the
backend's chat template: the chat template is a fixed function of the model (model_id)
and of the `chat_template` flag in params, and leaving it out lets dbt (and a cached
rerun) compute every key without loading a tokenizer. The exact text sent to the model
is stored in each line's `prompt` field.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd
import pyarrow as pa

from lookahead.cache import params_json, query_key
from lookahead.config import Study
from lookahead.prompts import Template, check_recall_template, render_forecast, render_recalls
from lookahead.rows import unique_pairs

TASKS = ("forecast", "recall", "mink")
TOP_LOGPROBS = 20  # the protocol: top-20 log-probs at the answer position
MIN_SAMPLES = 25   # the protocol's floor for the sampling fallback
KEY_COLUMNS = ("task", "key", "row_id", "entity_id", "target_date")


def sampling_fallback(study: Study) -> bool:
    """Recall by sampling (no log-probs): only when the study says logprobs are unavailable."""
    return study.get("logprobs_available") is False


def task_params(study: Study, task: str) -> dict[str, Any]:
    """The query parameters of a task, from the study's settings alone."""
    return _with_weights_dtype(study, _task_params(study, task))


def _with_weights_dtype(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """Weights in bfloat16 or float16 (setting dtype) give other answers than float32
    weights, so a reduced dtype joins every task's key; null and float32 are one query."""
    dtype = study.get("dtype")
    return params if dtype in (None, "float32") else {**params, "dtype": dtype}


def _task_params(study: Study, task: str) -> dict[str, Any]:
    chat = bool(study["use_chat_template"])
    if task == "forecast":
        return _with_overflow(study, {
            "temperature": 0, "max_tokens": int(study["forecast_max_tokens"]),
            "top_logprobs": 0 if sampling_fallback(study) else TOP_LOGPROBS, "seed": 0,
            "n_samples": None, "chat_template": chat})
    if task == "recall":
        if sampling_fallback(study):
            return {"temperature": 1, "max_tokens": 1, "top_logprobs": None,
                    "seed": int(study["sampling_seed"]),
                    "n_samples": max(MIN_SAMPLES, int(study["n_samples"])), "chat_template": chat}
        return {"temperature": 0, "max_tokens": 1, "top_logprobs": TOP_LOGPROBS, "seed": 0,
                "n_samples": None, "chat_template": chat,
                "label_synonyms": study.get("recall_label_synonyms") or {}}
    if task == "mink":
        params = {"temperature": 0, "max_tokens": 0, "top_logprobs": 0, "seed": 0,
                  "n_samples": None, "chat_template": chat, "prompt_logprobs": True}
        # The fp32 bodies agree with the fp32 per-text loop within 2e-5 relative LAP (the
        # same answers, so the same key); a bf16 body moves LAP by ~5-15%: another answer.
        if study.get("mink_body_dtype") == "bfloat16":
            params["mink_body_dtype"] = "bfloat16"
        return _with_overflow(study, params)
    raise ValueError(f"unknown task {task!r}")


def _with_overflow(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """A prompt that may be cut to fit (prompt_overflow: truncate_text) is a different
    query: the rule and the context length join its parameters (and so its key)."""
    if study["prompt_overflow"] == "error":
        return params
    return {**params, "prompt_overflow": study["prompt_overflow"], "context_length": study["context_length"]}


def recall_prompt(study: Study, pair: dict[str, Any], labels: dict[str, str] | None = None) -> str:
    """The recall query of one (entity, target date), with the study's labels unless given."""
    return recall_prompts(study, {c: [pair.get(c)] for c in ("entity_id", "entity_name", "ticker", "target_date")},
                          labels)[0]


def recall_prompts(study: Study, pairs: Mapping[str, Any], labels: dict[str, str] | None = None) -> list[str]:
    """The recall queries of (entity, target date) pairs (columns entity_id, entity_name,
    ticker, target_date: a DataFrame or lists), with the study's labels unless given."""
    def text(col: str) -> list[str]:
        return [str(v) for v in pairs[col]]

    return render_recalls(
        str(study["recall_template"]), outcome_description=str(study["outcome_description"]),
        reference_period=str(study["reference_period"]), entity_names=text("entity_name"),
        tickers=list(pairs["ticker"]), target_dates=text("target_date"), entity_ids=text("entity_id"),
        labels=labels or {k: str(v) for k, v in study["recall_labels"].items()},
    )


def row_key(study: Study, task: str, row: dict[str, Any], params: dict[str, Any] | str) -> str:
    """Key of a forecast or Min-K% query (one per row: both score the forecast prompt)."""
    prompt = render_forecast(str(study["forecast_prompt"]), row)
    return query_key(task, str(study["model_id"]), str(row["row_id"]), prompt, params)


def pair_key(study: Study, pair: dict[str, Any], params: dict[str, Any] | str) -> str:
    """Key of a recall query (one per entity and target date)."""
    ident = f"{pair['entity_id']}|{pair['target_date']}"
    return query_key("recall", str(study["model_id"]), ident, recall_prompt(study, pair), params)


def expected_keys(study: Study, rows: pd.DataFrame) -> pa.Table:
    """Every key the study asks for: one row per (task, key) with what it identifies
    (columns KEY_COLUMNS, as Arrow strings: forecast keys first, then Min-K%, then recall).

    The same keys as `row_key` and `pair_key` give one query at a time (a test holds
    them equal), rendered from value columns: the template is split once and each
    prompt joined from its parts, because a build keys every row of the study and a
    regular expression per row was most of its time. Keys are made a chunk of rows at a
    time and kept as Arrow strings: Python strings for every key of a large study
    would take more memory than the rest of the build."""
    check_recall_template(str(study["recall_template"]))
    model = str(study["model_id"])
    f_params, m_params = params_json(task_params(study, "forecast")), params_json(task_params(study, "mink"))
    forecast = Template.parse(str(study["forecast_prompt"]), rows.columns, "forecast_prompt")
    parts: dict[str, list[pa.Table]] = {"forecast": [], "mink": [], "recall": []}
    for start in range(0, len(rows), KEY_CHUNK_ROWS):  # forecast and Min-K% score one prompt
        chunk = rows.iloc[start:start + KEY_CHUNK_ROWS]
        prompts = forecast.render_columns({c: chunk[c].tolist() for c in forecast.columns()}, len(chunk))
        ids = [str(r) for r in chunk["row_id"].tolist()]
        for task, params in (("forecast", f_params), ("mink", m_params)):
            parts[task].append(_key_table(task, [query_key(task, model, i, pr, params)
                                                 for i, pr in zip(ids, prompts)], row_id=ids))
    pairs = unique_pairs(rows)
    r_params = params_json(task_params(study, "recall"))
    for start in range(0, len(pairs), KEY_CHUNK_ROWS):
        chunk = pairs.iloc[start:start + KEY_CHUNK_ROWS]
        entity_ids = [str(e) for e in chunk["entity_id"].tolist()]
        dates = [str(d) for d in chunk["target_date"].tolist()]
        parts["recall"].append(_key_table("recall", [
            query_key("recall", model, f"{e}|{d}", pr, r_params)
            for e, d, pr in zip(entity_ids, dates, recall_prompts(study, chunk))], entity_id=entity_ids,
            target_date=dates))
    return pa.concat_tables([_key_table("forecast", [])] + [t for tables in parts.values() for t in tables])


def _key_table(task: str, keys: list[str], **idents: list[str]) -> pa.Table:
    """One task's keys with their identifiers (the other identifier columns null)."""
    n = len(keys)
    columns = {"task": pa.array([task] * n, pa.string()), "key": pa.array(keys, pa.string())}
    for col in KEY_COLUMNS[2:]:
        columns[col] = pa.array(idents[col], pa.string()) if col in idents else pa.nulls(n, pa.string())
    return pa.table(columns)


#: Rows rendered at a time by `expected_keys` (bounds its memory, not its result).
KEY_CHUNK_ROWS = 200_000


def expected_keys_for_build(study_settings: pd.DataFrame, staged: pd.DataFrame) -> pa.Table:
    """What dbt's `int_expected_keys` builds: the keys of the study a build is for.

    `staged` is dbt's stg_observations: the rows `stage_observations` read for the jobs,
    split into the rows the jobs query by the jobs' own rule (lookahead.rows.split_staged),
    so the prompts hashed here are exactly the ones the jobs hashed."""
    from lookahead.rows import split_staged

    study = Study.from_json(str(study_settings["settings_json"].iloc[0]))
    if staged.empty:  # a header-only file: a data test stops the build
        return _key_table("forecast", [])
    valid, _ = split_staged(staged.sort_values("source_row_number", kind="stable").reset_index(drop=True))
    return expected_keys(study, valid)
