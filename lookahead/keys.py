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

This module is the one home of the key rule: the key text (:data:`KEY_FIELDS` joined by
:data:`KEY_SEPARATOR`) and its hash (:func:`query_keys`, :func:`query_key`), the key a
line's own fields hash to (:func:`fields_key`) and the key a line is found under
(:func:`line_key`). The cache (lookahead.cache) reads and writes lines by these keys and
holds no rule of its own; the same formula in SQL is macros/study_helpers.sql's
`fields_match`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from operator import methodcaller
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lookahead.backends import MATMUL_PRECISION_BACKENDS
from lookahead.backends.base import reduced_matmul_precision
from lookahead.config import Study, protocol_setting
from lookahead.measures import LINE_EXTRAS, REFERENCE_TASK, computes, study_measures
from lookahead.prompts import Template, check_recall_template, recall_prompt_columns, text_column
from lookahead.rows import PAIR_COLUMNS, SPLIT_COLUMNS, split_staged_arrow, unique_pairs

TOP_LOGPROBS = 20  # the protocol: top-20 log-probs at the answer position
MIN_SAMPLES = 25  # the protocol's floor for the sampling fallback
KEY_COLUMNS = ("task", "key", "row_id", "entity_id", "target_date")


def params_json(params: Mapping[str, Any]) -> str:
    """Canonical JSON of the query parameters (sorted keys, no spaces)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


#: The key text is these fields in this order, joined by KEY_SEPARATOR (docs/CONTRACTS.md);
#: a recall ident is ``entity_id|target_date``, joined by the same separator.
KEY_FIELDS = ("task", "model_id", "ident", "prompt", "params_json")
KEY_SEPARATOR = "|"
#: Rows keyed at a time by `query_keys` (their joined texts are what it holds).
KEY_SLICE = 262_144


def query_key(task: str, model_id: str, ident: str, prompt: str, params: Mapping[str, Any] | str) -> str:
    """sha256 hex of ``task|model_id|ident|prompt|params_json`` (docs/CONTRACTS.md).

    ident is the row_id (forecast, Min-K%) or ``entity_id|target_date`` (recall).
    ``params`` may be given as its ``params_json`` text already. One key is `query_keys`
    on one-element columns, so the jobs' keys and a build's are made by one rule."""
    return query_keys(task, model_id, pa.array([ident], pa.string()), pa.array([prompt], pa.string()), params)[0].as_py()


def query_keys(task: str, model_id: str, idents: pa.Array, prompts: pa.Array, params: Mapping[str, Any] | str) -> pa.Array:
    """`query_key` of every (ident, prompt) pair, column-wise (Arrow strings in, out).

    Why column-wise: a build keys every row of a study (millions of keys) and a Python
    loop over the key texts was most of its time; the texts are joined by Arrow and
    hashed with no Python code per key (`sha256_hex`). Why in slices of KEY_SLICE rows,
    as large strings: the key texts of 5,000,000 recall pairs (2,000 entities by 2,500
    dates) are 2.3 GB, past the 2 GiB an Arrow string array holds, and the joined texts
    of a slice are all that is held at a time."""
    text = {"task": task, "model_id": model_id, "params_json": params if isinstance(params, str) else params_json(params)}
    parts = []
    for start in range(0, len(idents), KEY_SLICE):
        fields = {
            **{k: pa.scalar(v, pa.large_string()) for k, v in text.items()},
            "ident": idents.slice(start, KEY_SLICE).cast(pa.large_string()),
            "prompt": prompts.slice(start, KEY_SLICE).cast(pa.large_string()),
        }
        parts.append(
            sha256_hex(pc.binary_join_element_wise(*(fields[f] for f in KEY_FIELDS), pa.scalar(KEY_SEPARATOR, pa.large_string())))
        )
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def recall_idents(entity_ids: pa.Array, target_dates: pa.Array) -> pa.Array:
    """The ident of recall keys: ``entity_id|target_date`` (text columns)."""
    return pc.binary_join_element_wise(entity_ids, target_dates, KEY_SEPARATOR)


def sha256_hex(texts: pa.Array) -> pa.Array:
    """Lowercase hex sha256 of the UTF-8 bytes of each text (hashlib's ``hexdigest``).

    hashlib (OpenSSL, with the CPU's SHA instructions) mapped over the texts' bytes, no
    Python code per key: about a microsecond a key, most of a build's keying time. DuckDB's
    vectorised ``sha256`` gives the same digests but took about three times as long.
    The texts go in slices of HASH_SLICE: a map over C functions never gives up the
    interpreter lock, so one map over a million keys stalled the other dbt thread (a
    Python model, or the hashing of build_identity) for a second at a time."""
    parts = []
    for start in range(0, len(texts), HASH_SLICE):
        data = texts.slice(start, HASH_SLICE).cast(pa.binary()).to_pylist()
        parts.append(pa.array(list(map(_HEXDIGEST, map(hashlib.sha256, data))), pa.string()))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


_HEXDIGEST = methodcaller("hexdigest")
HASH_SLICE = 16384  # keys hashed between two chances for another thread: about 15 ms


#: params a line records beside the key's own (docs/CONTRACTS.md): not hashed into the key.
UNKEYED_PARAMS = ("text_truncated_to_chars",)


def fields_key(record: Mapping[str, Any]) -> str | None:
    """The key a line's own fields hash to (`query_key` of its task, model_id, ident,
    query_text and params less UNKEYED_PARAMS); None when a field is missing.

    Why on read: a line is trusted by its key, and the key alone cannot show that the
    answer beside it is that query's (a line copied under another row's key and row_id
    read as that row's answer). The same rule in SQL is macros/study_helpers.sql's
    `fields_match`. hashlib on one text, not `query_key`: this runs for every line a
    store reads, and an Arrow array per line cost ten times as much."""
    task, model_id, text, params = (record.get(f) for f in ("task", "model_id", "query_text", "params"))
    ident = f"{record.get('entity_id')}{KEY_SEPARATOR}{record.get('target_date')}" if task == "recall" else record.get("row_id")
    if not all(isinstance(v, str) for v in (task, model_id, ident, text)) or not isinstance(params, dict):
        return None
    keyed = {k: v for k, v in params.items() if k not in UNKEYED_PARAMS}
    text = KEY_SEPARATOR.join((task, model_id, ident, text, params_json(keyed)))  # type: ignore[arg-type]
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: Query parameters that joined a Min-K% line's key before the key stood for the forward
#: pass alone: a line whose params hold them was keyed with them and is
#: found by the key its fields hash to without them (:func:`line_key`), so an older cache
#: serves every study it can with nothing asked again.
KEY_FREE_PARAMS = ("line_extras",)


def line_key(record: Mapping[str, Any]) -> str:
    """The key of the forward pass a line holds: its own key, or, for a line written when
    its params' extras (:data:`KEY_FREE_PARAMS`) joined the key and whose fields hash to
    that key, the key its fields hash to without them (the key a study asks for now).
    A line whose fields do not hash to its key keeps its key (it answers nothing)."""
    params = record.get("params")
    if not isinstance(params, dict) or not any(p in params for p in KEY_FREE_PARAMS):
        return record["key"]
    if fields_key(record) != record.get("key"):
        return record["key"]
    bare = {k: v for k, v in params.items() if k not in KEY_FREE_PARAMS}
    return fields_key({**record, "params": bare}) or record["key"]


def sampling_fallback(study: Study) -> bool:
    """Recall by sampling (no log-probs): only when the study says logprobs are unavailable."""
    return study.backend.logprobs_available is False


EXACT, TOP_LOGPROBS_RULE = "exact", "top_logprobs"
#: Why a backend cannot give exact label probabilities (docs/cutoff.md); a backend not
#: listed reads them from the full next-token distribution.
NO_EXACT_RECALL: dict[str, str] = {
    "vllm": (
        "the vLLM backend asks for the top-20 log-probs of the answer token; exact scoring "
        "through prompt log-probs of prompt+label is not implemented yet"
    ),
    "openai": "an OpenAI-compatible API returns at most the top-20 log-probs of the answer token",
}


def recall_probabilities(study: Study) -> str:
    """How recall reads P(label): setting recall_probabilities, or (unset) exact where the
    backend offers it. One clear line when `exact` is asked of a backend without it."""
    from lookahead.errors import StudyConfigError

    asked = study.backend.recall_probabilities
    backend = str(study.backend.backend)
    if asked == EXACT and backend in NO_EXACT_RECALL:
        raise StudyConfigError(
            f"setting 'recall_probabilities': 'exact' is unavailable on backend "
            f"'{backend}': {NO_EXACT_RECALL[backend]}; use top_logprobs"
        )
    if asked is None:
        return TOP_LOGPROBS_RULE if backend in NO_EXACT_RECALL else EXACT
    return str(asked)


def task_params(study: Study, task: str) -> dict[str, Any]:
    """The query parameters of a task, from the study's settings alone."""
    return _with_weights_dtype(study, _task_params(study, task))


def _with_weights_dtype(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """Weights in bfloat16 or float16 (setting dtype) give other answers than float32
    weights, so a reduced dtype joins every task's key; null and float32 are one query."""
    dtype = study.backend.dtype
    return params if dtype in (None, "float32") else {**params, "dtype": dtype}


def _task_params(study: Study, task: str) -> dict[str, Any]:
    chat = bool(study.prompts.use_chat_template)
    if task == "forecast":
        return _with_overflow(
            study,
            {
                "temperature": 0,
                "max_tokens": int(study.prompts.forecast_max_tokens),
                "top_logprobs": 0 if sampling_fallback(study) else TOP_LOGPROBS,
                "seed": 0,
                "n_samples": None,
                "chat_template": chat,
            },
        )
    if task == "recall":
        if sampling_fallback(study):
            return {
                "temperature": 1,
                "max_tokens": 1,
                "top_logprobs": None,
                "seed": int(study.runner.sampling_seed),
                "n_samples": max(MIN_SAMPLES, int(study.runner.n_samples)),
                "chat_template": chat,
            }
        params: dict[str, Any] = {
            "temperature": 0,
            "max_tokens": 1,
            "top_logprobs": TOP_LOGPROBS,
            "seed": 0,
            "n_samples": None,
            "chat_template": chat,
            "label_synonyms": study.prompts.recall_label_synonyms or {},
        }
        # Exact probabilities are another answer (another key); top_logprobs studies keep theirs.
        if recall_probabilities(study) == EXACT:
            params["recall_probabilities"] = EXACT
        return params
    if task == "mink":
        params = {
            "temperature": 0,
            "max_tokens": 0,
            "top_logprobs": 0,
            "seed": 0,
            "n_samples": None,
            "chat_template": chat,
            "prompt_logprobs": True,
        }
        # The fp32 bodies agree with the fp32 per-text loop within 2e-5 relative LAP (the
        # same answers, so the same key); a bf16 body moves LAP by ~5-15%: another answer.
        if study.backend.mink_body_dtype == "bfloat16":
            params["mink_body_dtype"] = "bfloat16"
        # A matmul precision below float32 gives other answers on some machines
        # (lookahead.backends.base.FULL_MATMUL_PRECISION), so it joins the key; null and
        # 'highest' are one query.
        reduced = reduced_matmul_precision(study.backend.matmul_precision)
        if study.backend.backend in MATMUL_PRECISION_BACKENDS and reduced:
            params["matmul_precision"] = reduced
        study_measures(study)  # a measure the backend cannot give stops here, before any query
        # The key stands for the forward pass alone: what the study's other prompt
        # measures need in the same line (lookahead.measures line_extras) is not part of it,
        # so one line serves every study it carries enough for (lookahead.tasks LINE_EXTRA_BITS).
        return _with_overflow(study, params)
    if task == REFERENCE_TASK:
        # The Min-K% prompt scored by the reference model: the same query without the
        # target's line extras (only the log-probs are read); the reference's identity
        # is its model_id (reference_study), hashed into every key like the target's.
        return _task_params(study, "mink")
    raise ValueError(f"unknown task {task!r}")


def legacy_key_params(study: Study, task: str) -> list[str]:
    """The params JSON a `task` line was keyed with before its key stood for the forward
    pass alone: the study's params with each set of extras that once joined them
    (``line_extras``, a sorted non-empty subset of lookahead.measures.LINE_EXTRAS); [] for a
    task whose key never held them. The build reads such a line under the key its fields
    hash to without them (macros/study_helpers.sql fields_match; :func:`line_key`),
    so a cache written before serves the study with nothing asked again."""
    if task != "mink":
        return []
    base = task_params(study, task)
    names = sorted(LINE_EXTRAS)
    subsets = [[n for i, n in enumerate(names) if mask >> i & 1] for mask in range(1, 1 << len(names))]
    return [params_json({**base, KEY_FREE_PARAMS[0]: sub}) for sub in subsets]


def _with_overflow(study: Study, params: dict[str, Any]) -> dict[str, Any]:
    """A prompt that may be cut to fit (prompt_overflow: truncate_text) is a different
    query: the rule and the context length join its parameters (and so its key)."""
    if study.prompts.prompt_overflow == "error":
        return params
    return {**params, "prompt_overflow": study.prompts.prompt_overflow, "context_length": study.prompts.context_length}


def recall_prompt_column(study: Study, pairs: Any, labels: dict[str, str] | None = None) -> pa.Array:
    """The recall queries of (entity, target date) pairs (columns PAIR_COLUMNS: a
    DataFrame, an Arrow table or a dict of lists) as Arrow strings, with the study's
    labels unless given."""
    return recall_prompt_columns(
        str(study.prompts.recall_template),
        outcome_description=str(study.prompts.outcome_description),
        reference_period=str(study.prompts.reference_period),
        entity_names=pairs["entity_name"],
        tickers=pairs["ticker"],
        target_dates=pairs["target_date"],
        entity_ids=pairs["entity_id"],
        labels=labels or {k: str(v) for k, v in protocol_setting("recall_labels", study.prompts.recall_labels).items()},
    )


def forecast_prompt_column(study: Study, rows: Any) -> pa.Array:
    """The forecast prompt of every row (a DataFrame, an Arrow table or a dict of
    columns holding every column the template names), as Arrow strings."""
    template = Template.parse(str(study.prompts.forecast_prompt), _names(rows), "forecast_prompt")
    return template.render_columns({c: rows[c] for c in template.columns()}, _length(rows))


def row_keys(study: Study, task: str, rows: Any, params: dict[str, Any] | str, prompts: pa.Array | None = None) -> pa.Array:
    """Keys of a forecast or Min-K% query per row (both score the forecast prompt);
    `prompts` when the caller rendered them already (`forecast_prompt_column`)."""
    if prompts is None:
        prompts = forecast_prompt_column(study, rows)
    return query_keys(task, str(study.backend.model_id), text_column(rows["row_id"]), prompts, params)


def pair_keys(study: Study, pairs: Any, params: dict[str, Any] | str) -> pa.Array:
    """Keys of the recall queries of (entity, target date) pairs (columns PAIR_COLUMNS)."""
    idents = recall_idents(text_column(pairs["entity_id"]), text_column(pairs["target_date"]))
    return query_keys("recall", str(study.backend.model_id), idents, recall_prompt_column(study, pairs), params)


def row_key(study: Study, task: str, row: dict[str, Any], params: dict[str, Any] | str) -> str:
    """Key of a forecast or Min-K% query (one per row: both score the forecast prompt)."""
    return row_keys(study, task, {c: [v] for c, v in row.items()}, params)[0].as_py()


def pair_key(study: Study, pair: dict[str, Any], params: dict[str, Any] | str) -> str:
    """Key of a recall query (one per entity and target date)."""
    return pair_keys(study, {c: [pair.get(c)] for c in PAIR_COLUMNS}, params)[0].as_py()


def _names(rows: Any) -> list[str]:
    return list(rows.column_names if isinstance(rows, pa.Table) else rows.keys())


def _length(rows: Any) -> int:
    return len(rows) if isinstance(rows, (pa.Table, pd.DataFrame)) else len(next(iter(rows.values()), []))


#: The target's model settings a reference study never inherits (they name the target's
#: weights, tokenizer or served name); reference_model_path replaces model_path.
_TARGET_MODEL_SETTINGS = ("model_path", "gguf_file", "tokenizer_path", "served_model")


def reference_study(study: Study) -> Study:
    """The study as the reference task sees it: the two models swapped
    (`reference_model_id` and `reference_model_path` in place of `model_id` and
    `model_path`, and the other way round), every other setting (backend, its options,
    prompts, dtype, chat template flag) the study's own.

    Why one swapped study: the jobs key, query and record a line under the study's
    `model_id`, so the reference's lines carry its own model_id and a key hashing it (a
    changed reference is a new query, never the target's or an old reference's line),
    and the same code paths (plan, cache, failures, a Ray worker that re-reads the
    study) serve it unchanged. Swapped rather than overwritten so that it is still a
    valid study (its reference is not itself)."""
    target, reference = study.backend, study.measures
    return study.with_settings(
        **{
            **dict.fromkeys(_TARGET_MODEL_SETTINGS),
            "model_id": reference.reference_model_id,
            "reference_model_id": target.model_id,
            "model_path": reference.reference_model_path,
            "reference_model_path": target.model_path,
        }
    )


def expected_keys(study: Study, rows: pd.DataFrame | pa.Table) -> pa.Table:
    """Every key the study asks for: one row per (task, key) with what it identifies
    (columns KEY_COLUMNS, as Arrow strings: forecast keys first, then Min-K%, the reference
    model's when the study computes its measure, then recall).

    `rows` are the rows the jobs query (`lookahead.rows.load_rows`, or an Arrow table of
    them from `expected_keys_for_build`). The same functions key one query for the jobs
    (`row_key`, `pair_key`), column-wise: prompts are joined and keys hashed by Arrow
    and DuckDB over whole columns, because a build keys every row of the study. Keys
    are made a chunk of rows at a time and kept as Arrow strings: Python strings for
    every key of a large study would take more memory than the rest of the build."""
    check_recall_template(str(study.prompts.recall_template))
    f_params, m_params = params_json(task_params(study, "forecast")), params_json(task_params(study, "mink"))
    Template.parse(str(study.prompts.forecast_prompt), _names(rows), "forecast_prompt")  # unknown names raise first
    parts: dict[str, list[pa.Table]] = {"forecast": [], "mink": [], REFERENCE_TASK: [], "recall": []}
    # forecast, Min-K% and the reference model (when the study computes its measure) score one prompt
    row_tasks = [(study, "forecast", f_params), (study, "mink", m_params)]
    if computes(study, "reference"):
        row_tasks.append((reference_study(study), REFERENCE_TASK, params_json(task_params(study, REFERENCE_TASK))))
    for chunk in _chunks(rows):
        prompts = forecast_prompt_column(study, chunk)
        ids = text_column(chunk["row_id"])
        for keyed_by, task, params in row_tasks:
            parts[task].append(_key_table(task, row_keys(keyed_by, task, chunk, params, prompts), row_id=ids))
        del prompts
    pairs = unique_pairs(rows)
    r_params = params_json(task_params(study, "recall"))
    for chunk in _chunks(pairs):
        parts["recall"].append(
            _key_table(
                "recall",
                pair_keys(study, chunk, r_params),
                entity_id=text_column(chunk["entity_id"]),
                target_date=text_column(chunk["target_date"]),
            )
        )
    return pa.concat_tables(
        [_key_table("forecast", pa.array([], pa.string()))] + [t for tables in parts.values() for t in tables]
    )


def expected_queries(study: Study, rows: pd.DataFrame | pa.Table) -> pa.Table:
    """`expected_keys` with what each key hashes beside its ident: ``query_text`` (the
    prompt rendered from the study's template) and ``params_json``. A line written with
    them hashes to its key (:func:`fields_key`), as a line the jobs write does;
    for code that writes lines without the jobs (test fixtures, benchmarks at a million
    rows), in one pass over the rows (the keys' order: expected_keys')."""
    keys = expected_keys(study, rows)
    prompts = forecast_prompt_column(study, rows)
    row_tasks = ["forecast", "mink"] + ([REFERENCE_TASK] if computes(study, "reference") else [])
    texts = [prompts] * len(row_tasks) + [recall_prompt_column(study, unique_pairs(rows))]
    params = [
        pa.repeat(pa.scalar(params_json(task_params(study, t)), pa.string()), len(text))
        for t, text in zip([*row_tasks, "recall"], texts, strict=False)
    ]
    return keys.append_column("query_text", pa.concat_arrays(texts)).append_column("params_json", pa.concat_arrays(params))


def _chunks(rows: pd.DataFrame | pa.Table) -> Iterator[pd.DataFrame | pa.Table]:
    """KEY_CHUNK_ROWS rows at a time, of a DataFrame or an Arrow table."""
    for start in range(0, len(rows), KEY_CHUNK_ROWS):
        yield rows.iloc[start : start + KEY_CHUNK_ROWS] if isinstance(rows, pd.DataFrame) else rows.slice(start, KEY_CHUNK_ROWS)


def _key_table(task: str, keys: pa.Array, **idents: pa.Array) -> pa.Table:
    """One task's keys with their identifiers (the other identifier columns null)."""
    n = len(keys)
    columns = {"task": pa.repeat(pa.scalar(task, pa.string()), n), "key": keys}
    for col in KEY_COLUMNS[2:]:
        columns[col] = idents[col] if col in idents else pa.nulls(n, pa.string())
    return pa.table(columns)


#: Rows rendered at a time by `expected_keys` (bounds its memory, not its result).
KEY_CHUNK_ROWS = 200_000
#: The staged columns a build reads besides those the forecast prompt names: the split
#: into queried rows (lookahead.rows.split_staged), the row order and the recall pairs.
STAGED_KEY_INPUTS = ("source_row_number", *SPLIT_COLUMNS, "row_id", *PAIR_COLUMNS)


def expected_keys_for_build(study_settings: pd.DataFrame, staged: Any) -> pa.Table:
    """What dbt's `int_expected_keys` builds: the keys of the study a build is for.

    `staged` is dbt's stg_observations (a DuckDB relation, or a DataFrame or Arrow table
    of it): the rows `stage_observations` read for the jobs, split into the rows the jobs
    query by the jobs' own rule (lookahead.rows.split_staged_arrow), so the prompts
    hashed here are exactly the ones the jobs hashed. Only the columns the prompts, the
    split and the keys read are loaded, as Arrow columns (no pandas objects per value)."""
    study = Study.from_json(str(study_settings["settings_json"].iloc[0]))
    available = [c for c in staged.columns if c not in SPLIT_COLUMNS]
    forecast = Template.parse(str(study.prompts.forecast_prompt), available, "forecast_prompt")
    wanted = list(dict.fromkeys([*STAGED_KEY_INPUTS, *forecast.columns()]))
    table = _arrow(staged, wanted)
    if table.num_rows == 0:  # a header-only file: a data test stops the build
        return _key_table("forecast", pa.array([], pa.string()))
    return expected_keys(study, split_staged_arrow(table))


def _arrow(staged: Any, columns: list[str]) -> pa.Table:
    """`columns` of the staged rows in source_row_number order, as an Arrow table."""
    if isinstance(staged, pd.DataFrame):
        staged = pa.Table.from_pandas(staged[columns], preserve_index=False)
    if isinstance(staged, pa.Table):
        table = staged.select(columns)
        return table.take(pc.sort_indices(table["source_row_number"]))
    rel = staged.select(*(f'"{c}"' for c in columns)).order("source_row_number")
    return rel.to_arrow_table()
