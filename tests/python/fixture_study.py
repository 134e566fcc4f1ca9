"""Writes a small synthetic study (observations CSV + raw JSONL in the job contract)
whose ground truth is known: on a memorized share of pre-cutoff rows the recall answer
and the forecast carry the realized direction with high LAP; elsewhere LAP is low and
the forecast follows a noisy signal. Used by the dbt and report tests in place of the
LLM jobs (which have their own tests)."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lookahead.config import PROTOCOL_COLUMNS, Study, resolve
from lookahead.keys import expected_queries
from lookahead.rows import load_rows

FORECAST_PROMPT = "Headline: {text}\nUp or down?"
RECALL_TEMPLATE = "On {target_date}, did {entity_name} go up or down?"


@dataclass
class FixtureStudy:
    root: Path
    data_path: Path
    raw_dir: Path
    vars: dict


def _top(p_up: float, p_down: float, p_unknown: float) -> list[dict]:
    toks = [(" up", 701, p_up), ("down", 702, p_down), ("unknown", 703, p_unknown)]
    rest = max(1e-9, 1 - p_up - p_down - p_unknown)
    out = [{"token_id": tid, "token": tok, "logprob": math.log(p)} for tok, tid, p in toks if p > 0]
    out += [{"token_id": 900 + i, "token": f"w{i}", "logprob": math.log(rest / 17)} for i in range(17)]
    return out


def write_fixture_study(
    root: Path,
    seed: int = 7,
    n_entities: int = 30,
    n_dates: int = 40,
    cutoff_index: int = 25,
    memorized_share: float = 0.5,
    contaminated: bool = True,
) -> FixtureStudy:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    raw = root / "raw"
    raw.mkdir(exist_ok=True)
    start = dt.date(2021, 1, 4)
    dates = [start + dt.timedelta(days=7 * i) for i in range(n_dates)]
    cutoff = dates[cutoff_index]
    rows, forecast, recall, mink = [], [], [], []
    for e in range(n_entities):
        for d_i, d in enumerate(dates):
            target = d + dt.timedelta(days=1)
            signal = rng.normal()
            outcome = 0.3 * signal + rng.normal()
            row_id = f"r{e:03d}_{d_i:03d}"
            text = f"Entity {e} news {d_i}: sentiment {signal:+.2f}"
            rows.append(
                dict(
                    row_id=row_id,
                    entity_id=f"E{e:03d}",
                    entity_name=f"Firm {e}",
                    ticker=f"F{e}",
                    text=text,
                    text_date=d.isoformat(),
                    target_date=target.isoformat(),
                    outcome=round(outcome, 6),
                )
            )
            pre = target <= cutoff
            memorized = contaminated and pre and rng.random() < memorized_share
            truth = "up" if outcome > 0 else "down"
            label = truth if memorized else "up" if signal + rng.normal() > 0 else "down"
            forecast.append(
                dict(
                    key=("forecast", row_id),
                    task="forecast",
                    model_id="fixture-model",
                    backend="fixture",
                    row_id=row_id,
                    prompt=FORECAST_PROMPT.format(text=text),
                    params={"temperature": 0},
                    response_text=label.capitalize() + ".",
                    first_token_prob=0.8,
                    approximated=False,
                    finished_at="2026-01-01T00:00:00Z",
                )
            )
            if memorized:
                p_hit = rng.uniform(0.7, 0.95)
                p_up, p_down = (p_hit, 0.02) if truth == "up" else (0.02, p_hit)
                p_unknown = 0.9 - p_hit if p_hit < 0.9 else 0.01
            else:
                # after the cutoff LAP collapses below the variation rule (sd < 0.01): the
                # signature the placebo reads as passing (docs/verdict.md)
                lap = rng.uniform(0.01, 0.3) if pre else rng.uniform(0.0, 0.02)
                share = rng.uniform()
                p_up, p_down, p_unknown = lap * share, lap * (1 - share), 0.95 - lap
            recall.append(
                dict(
                    key=("recall", f"E{e:03d}", target.isoformat()),
                    task="recall",
                    model_id="fixture-model",
                    backend="fixture",
                    entity_id=f"E{e:03d}",
                    target_date=target.isoformat(),
                    prompt=RECALL_TEMPLATE.format(target_date=target, entity_name=f"Firm {e}"),
                    params={"temperature": 0, "max_tokens": 1, "top_logprobs": 20},
                    response_text="up",
                    top_logprobs=_top(p_up, p_down, p_unknown),
                    approximated=False,
                    finished_at="2026-01-01T00:00:00Z",
                )
            )
            lps = [None, *list(np.log(rng.uniform(0.05 if memorized else 0.01, 1, size=12)))]
            mink.append(
                dict(
                    key=("mink", row_id),
                    task="mink",
                    model_id="fixture-model",
                    backend="fixture",
                    row_id=row_id,
                    prompt=text,
                    params={},
                    prompt_logprobs=[{"token_id": i, "token": f"t{i}", "logprob": lp} for i, lp in enumerate(lps)],
                    approximated=False,
                    finished_at="2026-01-01T00:00:00Z",
                )
            )
    data_path = root / "observations.csv"
    pd.DataFrame(rows).to_csv(data_path, index=False)
    vars_ = dict(
        study_name="fixture",
        data_path=str(data_path),
        raw_dir=str(raw),
        column_map={c: c for c in PROTOCOL_COLUMNS},
        model_id="fixture-model",
        backend="transformers",
        model_path="fixture-model",
        training_cutoff=cutoff.isoformat(),
        period_frequency="week",
        outcome_description="the closing stock price",
        reference_period="the previous trading day",
        forecast_prompt=FORECAST_PROMPT,
        recall_template=RECALL_TEMPLATE,
        forecast_labels={"up": 1, "down": -1},
        recall_labels={"up": "up", "down": "down", "unknown": "unknown"},
        use_chat_template=False,
        bootstrap_draws=200,
    )
    write_raw(raw, vars_, forecast, recall, mink)
    return FixtureStudy(root=root, data_path=data_path, raw_dir=raw, vars=vars_)


def write_raw(raw: Path, vars_: dict, forecast: list[dict], recall: list[dict], mink: list[dict]) -> None:
    """The raw files, each line under the key the study computes for it (lookahead.keys),
    with the query text and params that key hashes, as the jobs would have written them
    (a line whose fields do not hash to its key is no answer: lookahead.keys.fields_key)."""
    study = Study(vars=resolve(vars_))
    valid, _ = load_rows(study)
    by_ident = {
        (q["task"], q["row_id"] or q["entity_id"], q["target_date"]): q for q in expected_queries(study, valid).to_pylist()
    }
    for line in forecast + mink + recall:
        ident = line["key"] if line["task"] == "recall" else (*line["key"], None)
        line["key"] = by_ident[ident]["key"]
    with_key_fields(forecast + mink + recall, study, valid)
    for name, lines in (("forecast", forecast), ("recall", recall), ("mink", mink)):
        with open(raw / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(json.dumps(line) + "\n")


def with_key_fields(lines: list[dict], study: Study, rows: pd.DataFrame) -> list[dict]:
    """Each line under a key `study` asks for, given the query text and params that key
    hashes (lookahead.keys.expected_queries), as the jobs write them."""
    by_key = {q["key"]: q for q in expected_queries(study, rows).to_pylist()}
    for line in lines:
        if (q := by_key.get(line["key"])) is not None:
            line.update(query_text=q["query_text"], params=json.loads(q["params_json"]))
    return lines
