"""The keys a build selects (lookahead.keys.expected_keys, every row at once) are the keys
the jobs write (row_key / pair_key, one query at a time), and both render prompts by the
rule an independent regular-expression substitution states."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from lookahead.config import Study, default_study_path, read_study_file, resolve
from lookahead.keys import (
    HASH_SLICE,
    expected_keys,
    expected_keys_for_build,
    pair_key,
    query_key,
    row_key,
    sha256_hex,
    task_params,
)
from lookahead.prompts import PromptError, Template, fill
from lookahead.rows import load_rows, stage_observations, unique_pairs

ROWS = [  # tickers empty, missing and present; braces and unicode in the text
    ("r1", "E1", "Acme", "ACM", "Beats {estimates} by 5%", "2021-01-04", "2021-01-05", "0.1"),
    ("r2", "E1", "Acme", "ACM", "Misses", "2021-01-05", "2021-01-06", "-0.2"),
    ("r3", "E2", "Büro AG", "", 'JSON {"a": 1} é', "2021-01-04", "2021-01-05", "0.3"),
    ("r4", "E3", "Gamma", "", "", "2021-01-04", "2021-01-05", "0.0"),  # empty text: rejected
    ("r5", "E2", "Büro AG", "", "Again", "2021-01-04", "2021-01-05", "0.3"),
]


def _study(tmp_path: Path, **extra: object) -> Study:
    data = tmp_path / "observations.csv"
    pd.DataFrame(
        ROWS, columns=["row_id", "entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome"]
    ).to_csv(data, index=False)
    vars_ = {
        **read_study_file(default_study_path()),
        "study_name": "keys",
        "data_path": str(data),
        "raw_dir": str(tmp_path / "raw"),
        **extra,
    }
    return Study(vars=resolve(vars_))


def _reference_fill(template: str, values: dict) -> str:
    """The rule as the docs state it, by regular expressions: an empty ticker drops
    ' ({ticker})', then every {name} is replaced by its text (None/NaN -> '')."""

    def text(v: object) -> str:
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    if not text(values.get("ticker")).strip():
        template = template.replace(" ({ticker})", "").replace("({ticker})", "")
    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: text(values[m.group(1)]), template)


def _sha(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    "prompt",
    [
        "Headline about {entity_name} ({ticker}) on {text_date}: {text}\nUp or down?",
        "{text} -- ticker:{ticker} ({ticker}) {entity_name}",
        "No placeholders {at all} here",
    ],
)
def test_build_keys_equal_job_keys_and_the_stated_rule(tmp_path: Path, prompt: str) -> None:
    study = _study(tmp_path, forecast_prompt=prompt)
    rows, _ = load_rows(study)
    keys = expected_keys(study, rows).to_pandas()
    assert list(keys["task"].value_counts().sort_index().items()) == [("forecast", 4), ("mink", 4), ("recall", 3)]
    model = str(study.backend.model_id)
    got = {tuple(None if pd.isna(v) else v for v in (t, r, e, d)): k for t, k, r, e, d in keys.itertuples(index=False)}
    for row in rows.to_dict("records"):
        for task in ("forecast", "mink"):
            job = row_key(study, task, row, task_params(study, task))
            independent = _sha(
                task,
                model,
                row["row_id"],
                _reference_fill(prompt, row),
                json.dumps(task_params(study, task), sort_keys=True, separators=(",", ":")),
            )
            assert got[(task, row["row_id"], None, None)] == job == independent
    labels = {f"label_{k}": str(v) for k, v in study.prompts.recall_labels.items()}
    for pair in unique_pairs(rows).to_dict("records"):
        job = pair_key(study, pair, task_params(study, "recall"))
        values = {
            **pair,
            **labels,
            "outcome_description": study.prompts.outcome_description,
            "reference_period": study.prompts.reference_period,
        }
        independent = _sha(
            "recall",
            model,
            f"{pair['entity_id']}|{pair['target_date']}",
            _reference_fill(str(study.prompts.recall_template), values),
            json.dumps(task_params(study, "recall"), sort_keys=True, separators=(",", ":")),
        )
        assert got[("recall", None, pair["entity_id"], pair["target_date"])] == job == independent


@pytest.mark.parametrize(
    "values",
    [
        {"a": "x", "ticker": "T"},
        {"a": "x", "ticker": ""},
        {"a": "x", "ticker": None},
        {"a": float("nan"), "ticker": float("nan")},
        {"a": "x"},
        {"a": dt.date(2021, 1, 4), "ticker": " \u2003"},
        {"a": 0.1, "ticker": "\x1c"},
        {"a": True, "ticker": "é"},
        {"a": pd.Timestamp("2021-01-04"), "ticker": 7},
        {"a": "𝄞 ü", "ticker": " T "},
    ],
)
def test_template_matches_the_stated_rule(values: dict) -> None:
    template = "A={a} ({ticker}) and({ticker}) {not-a-name} {}"
    assert fill(template, values, "s") == _reference_fill(template, values)
    expect = [fill(template, values, "s")] * 2
    columns = {k: [v, v] for k, v in values.items()}
    assert Template.parse(template, columns, "s").render_columns(columns, 2).to_pylist() == expect
    # the same values as pandas and Arrow columns (a build's and the jobs' column types)
    series = {k: pd.Series([v, v], dtype=object) for k, v in values.items()}
    assert Template.parse(template, series, "s").render_columns(series, 2).to_pylist() == expect
    arrow = {k: pa.array([v, v], from_pandas=True) for k, v in values.items()}
    assert Template.parse(template, arrow, "s").render_columns(arrow, 2).to_pylist() == expect


def test_columns_with_missing_values_render_as_the_stated_rule() -> None:
    """String columns holding nulls (Arrow, pandas: what a build and the jobs pass) render
    each row as the rule renders it alone: a missing value is empty text."""
    template = "{a} ({ticker}) {b}"
    rows = [
        {"a": "x", "ticker": "T", "b": "é"},
        {"a": None, "ticker": None, "b": float("nan")},
        {"a": "", "ticker": " ", "b": None},
        {"a": "𝄞", "ticker": "U", "b": "z"},
    ]
    expect = [_reference_fill(template, r) for r in rows]
    lists = {k: [r[k] for r in rows] for k in ("a", "ticker", "b")}
    for columns in (
        lists,
        {k: pd.Series(v, dtype=object) for k, v in lists.items()},
        {k: pa.array(v, pa.string(), from_pandas=True) for k, v in lists.items()},
    ):
        assert Template.parse(template, columns, "s").render_columns(columns, 4).to_pylist() == expect
    assert [fill(template, r, "s") for r in rows] == expect


def test_unknown_placeholder_names_the_setting() -> None:
    with pytest.raises(PromptError, match=r"setting 'forecast_prompt': placeholder\(s\) \{sector\}"):
        fill("{sector} ({ticker})", {"ticker": "T"}, "forecast_prompt")
    with pytest.raises(PromptError, match=r"\{ticker\}"):  # a bare {ticker} is not dropped
        fill("ticker: {ticker}", {"a": 1}, "forecast_prompt")


def _staged_relation(study: Study) -> duckdb.DuckDBPyRelation:
    """stg_observations as the build stores it (python_models/staging/stg_observations.py: DATE
    date columns, a DOUBLE outcome, text for the rest), as a DuckDB relation."""
    staged = stage_observations(study.input, study.resolve(study.input.data_path))
    for col in ("text_date", "target_date"):
        staged[col] = staged[col].to_numpy().astype("datetime64[D]")
    fixed = {
        "source_row_number": pa.int64(),
        "row_id_derived": pa.bool_(),
        "text_date": pa.date32(),
        "target_date": pa.date32(),
        "outcome": pa.float64(),
        "in_subsample": pa.bool_(),
    }
    schema = pa.schema([(c, fixed.get(c, pa.string())) for c in staged.columns])
    table = pa.Table.from_pandas(staged, schema=schema, preserve_index=False)
    return duckdb.connect().from_arrow(table)


def test_build_path_keys_equal_the_stated_rule(tmp_path: Path) -> None:
    """The build's path (stg_observations as Arrow: DATE and DOUBLE columns, nulls in an
    extra column, non-ASCII text) gives the keys the stated rule gives on the jobs' rows."""
    prompt = "{entity_name} ({ticker}) on {text_date} [{sector}] {outcome} #{source_row_number}: {text}"
    data = tmp_path / "with_sector.parquet"  # parquet: the sector column holds real nulls
    frame = pd.DataFrame(
        ROWS, columns=["row_id", "entity_id", "entity_name", "ticker", "text", "text_date", "target_date", "outcome"]
    )
    frame["sector"] = ["Tech", None, "Bäu 𝄞", "", None]
    frame.to_parquet(data, index=False)
    study = _study(tmp_path, forecast_prompt=prompt, forecast_prompt_allowed_columns=["outcome"], data_path=str(data))
    build = expected_keys_for_build(pd.DataFrame({"settings_json": [study.settings_json()]}), _staged_relation(study)).to_pandas()
    rows, _ = load_rows(study)
    model = str(study.backend.model_id)
    expect = []
    for task in ("forecast", "mink"):
        params = json.dumps(task_params(study, task), sort_keys=True, separators=(",", ":"))
        expect += [
            (task, _sha(task, model, r["row_id"], _reference_fill(prompt, r), params), r["row_id"], None, None)
            for r in rows.to_dict("records")
        ]
    params = json.dumps(task_params(study, "recall"), sort_keys=True, separators=(",", ":"))
    labels = {f"label_{k}": str(v) for k, v in study.prompts.recall_labels.items()}
    for pair in unique_pairs(rows).to_dict("records"):
        values = {
            **pair,
            **labels,
            "outcome_description": study.prompts.outcome_description,
            "reference_period": study.prompts.reference_period,
        }
        expect.append(
            (
                "recall",
                _sha(
                    "recall",
                    model,
                    f"{pair['entity_id']}|{pair['target_date']}",
                    _reference_fill(str(study.prompts.recall_template), values),
                    params,
                ),
                None,
                pair["entity_id"],
                pair["target_date"],
            )
        )
    got = [tuple(None if pd.isna(v) else v for v in t) for t in build.itertuples(index=False)]
    assert got == expect
    shown = [_reference_fill(prompt, r) for r in rows.to_dict("records")]  # the values reached the prompts
    assert "Acme (ACM) on 2021-01-05 [] -0.2 #2" in shown[1] and "Büro AG on 2021-01-04 [Bäu 𝄞] 0.3 #3" in shown[2]


def test_column_hash_is_sha256_of_the_utf8_text() -> None:
    """The column-wise hash is sha256 hex of each text's UTF-8 bytes, non-ASCII included."""
    texts = ["", "plain", "Büro AG é", "𝄞 astral", "中文 | pipe", "tab\tnew\nline"] * 1000
    assert sha256_hex(pa.array(texts)).to_pylist() == [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
    assert query_key("recall", "m", "E1|2021-01-05", "Büro 𝄞", "{}") == _sha("recall", "m", "E1|2021-01-05", "Büro 𝄞", "{}")


def test_column_hashing_over_several_slices_matches_hashlib_text_by_text():
    """sha256_hex works in slices (other threads get the interpreter between them): the
    digests across slice boundaries, and of no texts at all, are hashlib's."""
    texts = [f"forecast|m|r{i}|prompt {i} é|{{}}" for i in range(2 * HASH_SLICE + 5)]
    got = sha256_hex(pa.array(texts, pa.string())).to_pylist()
    assert got == [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    assert sha256_hex(pa.array([], pa.string())).to_pylist() == []


def test_keys_made_in_slices_equal_each_key_made_alone(monkeypatch) -> None:
    """query_keys joins and hashes KEY_SLICE rows at a time (the key texts of millions of
    recall pairs pass Arrow's 2 GiB string limit in one array): keys on both sides of a
    slice boundary, from chunked columns, are each the key query_key gives alone."""
    import pyarrow as pa

    from lookahead import keys as key_rule

    monkeypatch.setattr(key_rule, "KEY_SLICE", 3)
    idents = pa.chunked_array([pa.array(["r0", "r1"]), pa.array(["r2", "r3", "r4", "r5", "r6"])])
    prompts = pa.chunked_array([pa.array([f"prompt {i}" for i in range(4)]), pa.array(["a", "b", "é"])])
    keys = key_rule.query_keys("forecast", "m", idents, prompts, {"max_tokens": 16})
    assert keys.to_pylist() == [
        key_rule.query_key("forecast", "m", i, p, {"max_tokens": 16})
        for i, p in zip(idents.to_pylist(), prompts.to_pylist(), strict=False)
    ]
