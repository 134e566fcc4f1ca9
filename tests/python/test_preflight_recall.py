"""`lookahead check`'s preflight plans the recall pairs of a study with many entities and
dates a chunk of rows and a slice of pairs at a time (llm_jobs.preflight.check_recall,
lookahead.rows.RowScan.first_of_pairs): the pairs, prompts and keys it plans are those
of the first queried row of each (entity_id, target_date), computed here independently
(a dict over the file's rows, str.format, hashlib), and those the recall job plans over
every row at once; a too-long recall prompt gives the job's stop line."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from test_openai_backend import demo_study_text, server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

SHAPE = (40, 50)  # entities, dates: 2,000 pairs
N_ROWS = 3_000  # rows 2,000 to 2,999 ask the pairs of rows 0 to 999 again
REJECTED = (5, 47, 903)  # no outcome: the pair's first queried row is a later one (rows 2,005, 2,047, 2,903)


def shaped_study(tmp_path: Path, url: str, **extra: Any) -> Path:
    """write_openai_study at SHAPE, where a pair's later rows name the entity otherwise
    (so that the prompt shows which row was taken) and the REJECTED rows have no outcome."""
    study = write_openai_study(tmp_path, url, "shaped", N_ROWS, shape=SHAPE, **extra)
    data = Path(yaml.safe_load(study.read_text())["data_path"])
    df = pd.read_csv(data, dtype=str, keep_default_na=False)
    later = df.index >= SHAPE[0] * SHAPE[1]
    df.loc[later, "entity_name"] = df.loc[later, "entity_name"] + " (later)"
    df.loc[list(REJECTED), "outcome"] = ""
    df.to_csv(data, index=False)
    return study


def expected_queries(study_file: Path) -> list[tuple[str, str, str, str]]:
    """(entity_id, target_date, prompt, key) of each pair's first valid row, in file order,
    by the rule of docs/CONTRACTS.md: sha256 of task|model_id|entity_id|target_date|prompt|params_json."""
    from lookahead.config import load_study
    from lookahead.keys import params_json, task_params

    study = load_study(str(study_file))
    df = pd.read_csv(study.input.data_path, dtype=str, keep_default_na=False)
    first: dict[tuple[str, str], dict[str, str]] = {}
    for row in df.to_dict("records"):
        if row["outcome"] != "":
            first.setdefault((row["entity_id"], row["target_date"]), row)
    p = study.prompts
    labels = {f"label_{k}": str(v) for k, v in p.recall_labels.items()}
    params = params_json(task_params(study, "recall"))
    out = []
    for (entity, date), row in first.items():
        prompt = str(p.recall_template).format(
            target_date=date,
            entity_name=row["entity_name"],
            ticker=row["ticker"],
            entity_id=entity,
            outcome_description=p.outcome_description,
            reference_period=p.reference_period,
            **labels,
        )
        text = "|".join(("recall", str(study.backend.model_id), entity, date, prompt, params))
        out.append((entity, date, prompt, hashlib.sha256(text.encode("utf-8")).hexdigest()))
    return out


def job_queries(study_file: Path) -> list[tuple[str, str, str, str]]:
    """What the recall job plans over every row at once (llm_jobs.recall.plan)."""
    from llm_jobs import recall
    from llm_jobs.cli import arg_parser
    from llm_jobs.context import make_context
    from lookahead.keys import task_params

    ctx = make_context(arg_parser("job").parse_args(["--study", str(study_file), "--yes"]))
    return [(q.entity_id, q.target_date, q.prompt, q.key) for q in recall.plan(ctx, task_params(ctx.study, recall.TASK), None)]


def test_the_check_plans_each_pairs_first_row_over_chunks_and_slices(
    server_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from llm_jobs import preflight, recall
    from lookahead.config import load_study
    from lookahead.rows import scan_study_rows

    url, state = server_factory()
    study = shaped_study(tmp_path, url)
    monkeypatch.setattr("lookahead.rows.CHUNK_ROWS", 256)  # 12 chunks: a pair's rows are chunks apart
    monkeypatch.setattr(preflight, "RECALL_SLICE_PAIRS", 300)  # 7 slices of pairs
    assert len(scan_study_rows(load_study(str(study))).chunk_sizes) == 12

    planned: list[tuple[str, str, str, str]] = []
    slices: list[int] = []
    job_plan = recall.plan

    def recording(ctx: Any, params: Any, labels: Any) -> Any:
        queries = job_plan(ctx, params, labels)
        if labels is not None:  # the slices the check counts (the first call finds the labels)
            slices.append(len(queries))
            planned.extend((q.entity_id, q.target_date, q.prompt, q.key) for q in queries)
        return queries

    monkeypatch.setattr(recall, "plan", recording)
    assert preflight.main(["--study", str(study)]) == 0
    out = capsys.readouterr().out
    monkeypatch.setattr(recall, "plan", job_plan)

    expected = expected_queries(study)
    assert len(expected) == SHAPE[0] * SHAPE[1] and slices == [300] * 6 + [200]
    assert planned == expected
    assert job_queries(study) == expected
    assert f"{N_ROWS - len(REJECTED)} forecast and Min-K% prompts and {len(expected)} recall prompts" in out
    # the pairs whose first row was rejected take a later row's entity name
    by_pair = {(e, d): prompt for e, d, prompt, _ in planned}
    assert "Firm 5 (later)" in by_pair[("E5", "2015-01-02")] and "(later)" not in by_pair[("E6", "2015-01-02")]
    assert state.requests == 0


def test_a_too_long_recall_prompt_stops_the_check_with_the_jobs_line(
    server_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Two entities with long ids (named by the recall template only), their pairs in every
    slice: the check counts every pair over its slices and stops with the line the recall
    job gives."""
    from llm_jobs import preflight, recall
    from llm_jobs.cli import arg_parser
    from llm_jobs.context import make_context
    from lookahead.guard import JobStop
    from lookahead.keys import task_params

    url, _ = server_factory()
    template = str(demo_study_text()["recall_template"]) + " (id {entity_id})"
    study = shaped_study(tmp_path, url, context_length=100, recall_template=template)
    data = Path(yaml.safe_load(study.read_text())["data_path"])
    df = pd.read_csv(data, dtype=str, keep_default_na=False)
    long_ids = df["entity_id"].isin(["E3", "E31"])
    df.loc[long_ids, "entity_id"] = df.loc[long_ids, "entity_id"] + "-" + "-".join(["identifier"] * 25)
    df.to_csv(data, index=False)
    monkeypatch.setattr("lookahead.rows.CHUNK_ROWS", 256)
    monkeypatch.setattr(preflight, "RECALL_SLICE_PAIRS", 300)

    ctx = make_context(arg_parser("job").parse_args(["--study", str(study), "--yes"]))
    queries = ctx.for_backend(recall.plan(ctx, task_params(ctx.study, recall.TASK), None))
    with pytest.raises(JobStop) as job:
        recall.check_recall_lengths(ctx, queries)
    capfd.readouterr()
    assert preflight.main(["--study", str(study)]) == 2
    err = capfd.readouterr().err
    assert f"stopped: {job.value}" in err, err
    assert "100 of 2000 prompts exceed" in str(job.value)
