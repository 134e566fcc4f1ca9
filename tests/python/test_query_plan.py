"""The forecast and Min-K% plan held as columns (llm_jobs.queries.QueryPlan) reads as the
list of Query objects it replaced, row for row, through every way a job reads it; and the
openai-backend forecast job runs without importing torch."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

ROOT = Path(__file__).resolve().parents[2]
N_ROWS = 45


def context(tmp_path: Path, **extra: Any) -> Any:
    from llm_jobs.cli import arg_parser
    from llm_jobs.context import make_context

    study = write_openai_study(tmp_path, "http://127.0.0.1:9/v1", "plan", N_ROWS, **extra)
    return make_context(arg_parser("plan").parse_args(["--study", str(study), "--yes"]))


def listed_queries(ctx: Any, task: str, params: dict[str, Any]) -> list[Any]:
    """The plan as a list, built one row at a time: each key by query_key on the row's
    rendered prompt (not the plan's column-wise keying)."""
    from llm_jobs.queries import Query
    from lookahead.keys import query_key
    from lookahead.prompts import render_forecast

    template = str(ctx.study.prompts.forecast_prompt)
    out = []
    for row in ctx.rows.to_dict("records"):
        prompt = render_forecast(template, row)
        out.append(
            Query(
                query_key(task, str(ctx.study.backend.model_id), str(row["row_id"]), prompt, params),
                prompt,
                row_id=str(row["row_id"]),
            )
        )
    return out


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_jobs.queries import QueryPlan

    monkeypatch.setattr(QueryPlan, "SLICE_ROWS", 7)  # slice edges inside the plan


def test_plan_reads_as_the_list_of_queries(tmp_path: Path, small_slices: None) -> None:
    from llm_jobs import forecast
    from llm_jobs.queries import QueryPlan, keys_of

    ctx = context(tmp_path)
    plan, params = forecast.plan(ctx)
    expected = listed_queries(ctx, "forecast", params)
    assert isinstance(plan, QueryPlan) and len(plan) == N_ROWS
    assert list(plan) == expected
    assert [plan[i] for i in range(N_ROWS)] == expected and plan[-1] == expected[-1]
    assert list(plan[5:31]) == expected[5:31] and list(plan[40:]) == expected[40:] and list(plan[50:]) == []
    assert list(plan[3:40][4:20]) == expected[3:40][4:20] and list(plan[::4]) == expected[::4]
    taken = plan.take([44, 2, 17, 3])
    assert list(taken) == [expected[i] for i in (44, 2, 17, 3)] and list(taken[1:3]) == [expected[2], expected[17]]
    assert list(keys_of(plan)) == [q.key for q in expected]
    assert plan.row_ids(10, 20) == [q.row_id for q in expected[10:20]]
    assert [plan.row_id_at(i) for i in (0, 13, 44)] == [expected[i].row_id for i in (0, 13, 44)]
    with pytest.raises(IndexError):
        plan[N_ROWS]


def test_for_backend_and_cut_texts_read_as_in_the_list(tmp_path: Path, small_slices: None) -> None:
    """A text sent otherwise (a chat template) and a cut text read as the list's
    ``replace`` made them; a plan sent as it is stays the same plan."""
    from llm_jobs import forecast

    ctx = context(tmp_path)
    plan, params = forecast.plan(ctx)
    expected = listed_queries(ctx, "forecast", params)
    assert ctx.for_backend(plan) is plan  # use_chat_template: false, the openai backend sends the text
    shout = plan.sending(lambda t: f"<user>{t.upper()}</user>")
    assert list(shout) == [replace(q, prompt=f"<user>{q.prompt.upper()}</user>") for q in expected]
    assert list(shout.take([8, 1])) == [replace(expected[i], prompt=f"<user>{expected[i].prompt.upper()}</user>") for i in (8, 1)]
    cut = shout.with_replaced({3: replace(shout[3], prompt="cut", truncated_to=2)})
    want = [replace(q, prompt=f"<user>{q.prompt.upper()}</user>") for q in expected]
    want[3] = replace(want[3], prompt="cut", truncated_to=2)
    assert list(cut) == want and list(cut[2:5]) == want[2:5] and list(cut.take([3, 0])) == [want[3], want[0]]


def test_not_cached_and_cached_fields_on_a_plan_equal_the_list(tmp_path: Path, small_slices: None) -> None:
    """The cache lookups give the same pending queries and summary fields for the plan as
    for the list (answers written for a third of the rows, one of them under a key whose
    fields disagree)."""
    from llm_jobs import forecast
    from llm_jobs.context import cached_fields, not_cached, open_store
    from llm_jobs.queries import QueryPlan
    from llm_jobs.query_loop import record_skeleton
    from lookahead.cache.files import utc_now

    ctx = context(tmp_path)
    plan, params = forecast.plan(ctx)
    listed = list(plan)
    with open_store(ctx, "forecast") as store:
        for i, q in enumerate(listed[::3]):
            rec = record_skeleton(ctx, "forecast", q, params)
            rec.update(
                {
                    "response_text": "up" if i % 2 else "down",
                    "first_token_prob": 0.5 + i / 100,
                    "top_logprobs": [{"token_id": None, "token": "up", "logprob": -0.1}],
                    "started_at": utc_now(),
                    "finished_at": utc_now(),
                }
            )
            if i == 4:
                rec["row_id"] = "r0"  # disagrees with its key: no answer
            store.append(rec)
        pending = not_cached(ctx, store, "forecast", plan)
        assert isinstance(pending, QueryPlan)
        assert list(pending) == not_cached(ctx, store, "forecast", listed)
        assert len(pending) == N_ROWS - N_ROWS // 3 + 1
        fields = ("response_text", "first_token_prob")
        assert cached_fields(ctx, store, "forecast", plan, fields) == cached_fields(ctx, store, "forecast", listed, fields)
        found, cols = cached_fields(ctx, store, "forecast", plan, fields)
        assert sum(found) == N_ROWS // 3 - 1 and cols["response_text"][0] == "down"


def test_forecast_job_on_an_api_backend_imports_no_torch(tmp_path: Path, server_factory: Any) -> None:
    """The forecast job against the loopback server counts its prompts (tokenizer_path
    set) and never imports torch: a fresh process, run to its parse-rate check."""
    url, state = server_factory(vary=True)
    study = write_openai_study(tmp_path, url, "notorch", 30, context_length=512)
    code = (
        "import sys\nfrom llm_jobs import run_all\n"
        f"rc = run_all.main(['--only', 'forecast', '--study', {str(study)!r}, '--yes'])\n"
        "print('exit', rc, 'torch', 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "exit 0 torch False" in out.stdout, out.stdout + out.stderr
    assert "estimate:" in out.stdout and state.requests >= 30
    assert "forecast parse rate: 100.0% (30/30)" in out.stdout  # every row's answer read back
