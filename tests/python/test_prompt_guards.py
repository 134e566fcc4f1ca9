"""Prompt guards run before any query is paid for: templates that leak the answer or
miss the entity/date, and prompts longer than the model's context (an error, or the
explicit prompt_overflow: truncate_text whose count reaches dbt and the report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_openai_backend import DEMO_TOKENIZER, server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

from lookahead.prompts import PromptError, check_forecast_template, check_recall_template

CMAP = {"outcome": "ret", "target_date": "realized_on", "text": "headline"}


@pytest.mark.parametrize(
    "template,allowed,message",
    [
        ("News: {text}. Return was {outcome}. Up or down?", [], "{outcome} is the realized outcome"),
        ("News: {headline}. Return was {ret}. Up or down?", [], "{ret} is the realized outcome"),
        ("News: {text}. What happens on {target_date}?", [], "{target_date} is the target date"),
        ("News: {text}. What happens on {realized_on}?", [], "{realized_on} is the target date"),
        ("News: {text}. {target_date}", ["tomorrow"], "forecast_prompt_allowed_columns"),
    ],
)
def test_forecast_template_may_not_see_the_answer(template: str, allowed: list[str], message: str) -> None:
    with pytest.raises(PromptError, match=message.replace("{", r"\{").replace("}", r"\}")):
        check_forecast_template(template, CMAP, allowed)


def test_forecast_template_allowed_columns_and_plain_prompts_pass() -> None:
    check_forecast_template("News on {text_date}: {text}. Up or down?", CMAP, [])
    check_forecast_template("News: {text}. What happens on {target_date}?", CMAP, ["target_date"])
    check_forecast_template('JSON example {"a": 1}: {text}', CMAP, [])  # braces that are no placeholder


@pytest.mark.parametrize(
    "template,message",
    [
        ("Did {entity_name} go up or down?", "must name the date"),
        ("On {target_date}, did the market go up or down?", "must name the entity"),
        ("On {target_date}, did {entity_name} go up after '{text}'?", r"may not contain \{text\}"),
        ("On {target_date}, did {ticker} go up ({outcome})?", r"may not contain \{outcome\}"),
    ],
)
def test_recall_template_names_entity_and_date_and_no_text(template: str, message: str) -> None:
    with pytest.raises(PromptError, match=message):
        check_recall_template(template)
    check_recall_template("On {target_date}, did {ticker} go up or down?")


def test_transformers_backend_knows_its_context_length() -> None:
    from lookahead.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend("demo", model_path=str(DEMO_TOKENIZER))
    assert backend.context_length() == json.loads((DEMO_TOKENIZER / "config.json").read_text())["max_position_embeddings"] == 256


def _long_text_study(tmp_path: Path, url: str, **extra: Any) -> Path:
    import pandas as pd

    study = write_openai_study(tmp_path, url, "long", 6, context_length=256, **extra)
    data = Path(__import__("yaml").safe_load(study.read_text())["data_path"])
    df = pd.read_csv(data, dtype=str)
    df.loc[2, "text"] = "word " * 10_000  # 50,000 characters against a 256-token model
    df.to_csv(data, index=False)
    return study


def test_a_prompt_longer_than_the_context_stops_before_any_query(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from llm_jobs import run_all

    url, state = server_factory()
    study = _long_text_study(tmp_path, url)
    for job in ("forecast", "mink"):
        assert run_all.main(["--only", job, "--study", str(study), "--yes"]) == 2
        err = capfd.readouterr().err
        lines = [l for l in err.splitlines() if l.startswith("stopped:")]
        assert len(lines) == 1 and "1 of 6 prompts exceed the model's context length (256 tokens" in lines[0]
        assert "row r2" in lines[0] and "prompt_overflow: truncate_text" in lines[0]
    assert state.requests == 0  # nothing was paid for


def test_truncate_text_cuts_to_fit_and_records_it(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from transformers import AutoTokenizer

    from llm_jobs import run_all

    url, _state = server_factory()
    study = _long_text_study(tmp_path, url, prompt_overflow="truncate_text", forecast_max_tokens=16)
    assert run_all.main(["--only", "forecast", "--study", str(study), "--yes"]) == 0
    assert run_all.main(["--only", "mink", "--study", str(study), "--yes"]) == 0
    out = capfd.readouterr().out
    assert "the text of 1 of 6 rows was cut to fit the context length" in out
    tok = AutoTokenizer.from_pretrained(str(DEMO_TOKENIZER))
    for task in ("forecast", "mink"):
        recs = {json.loads(l)["row_id"]: json.loads(l) for l in (tmp_path / f"long/raw/{task}.jsonl").read_text().splitlines()}
        cut = recs["r2"]
        kept = cut["params"]["text_truncated_to_chars"]
        assert 0 < kept < 50_000
        n = len(tok.encode(cut["prompt"]))
        assert 256 - 16 - 3 <= n <= 256 - 16  # the longest prefix that fits (a word is ~2 tokens)
        assert all("text_truncated_to_chars" not in r["params"] for k, r in recs.items() if k != "r2")
    forecast_prompts = {json.loads(l)["prompt"] for l in (tmp_path / "long/raw/forecast.jsonl").read_text().splitlines()}
    mink_prompts = {json.loads(l)["prompt"] for l in (tmp_path / "long/raw/mink.jsonl").read_text().splitlines()}
    assert forecast_prompts == mink_prompts  # Min-K% scores exactly what the forecast sent


def test_the_openai_backend_needs_a_tokenizer_to_check_lengths(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    import yaml

    from llm_jobs import run_all

    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "notok", 3, context_length=4096)
    y = yaml.safe_load(study.read_text())
    del y["tokenizer_path"]
    y["model_path"] = None  # the project default would lend its tokenizer
    study.write_text(yaml.safe_dump(y))
    assert run_all.main(["--only", "forecast", "--study", str(study), "--yes"]) == 2
    err = capfd.readouterr().err
    assert "setting 'tokenizer_path'" in err and "context length" in err and state.requests == 0


def test_the_documented_openai_study_file_is_complete(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """docs/backends.md's study file loads with every required setting and builds the
    backend it describes (nothing is sent: construction does not connect)."""
    import re

    from lookahead.backends import get_backend
    from lookahead.config import load_study, read_study_file, resolve

    doc = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()
    block = re.search(r"```yaml\n(# studies/smollm2_openai.yml.*?)```", doc, re.S).group(1)
    path = tmp_path / "smollm2_openai.yml"
    path.write_text(block)
    resolve(read_study_file(path))  # a complete study: nothing falls back to the demo
    monkeypatch.setenv("LOOKAHEAD_API_KEY", "sk-doc-" + "0" * 16)
    backend = get_backend(load_study(path))
    try:
        assert (backend.api, backend.served_model, backend.concurrency) == ("completions", "smollm2", 8)
    finally:
        backend.close()


def test_without_tokenizer_or_context_length_the_job_runs_and_says_so(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """An API study with neither tokenizer nor context_length: the estimate falls back to
    ~4 characters per token and the job notes that lengths were not checked."""
    import yaml

    from llm_jobs import run_all

    url, state = server_factory()
    study = write_openai_study(tmp_path, url, "bare", 3)
    y = yaml.safe_load(study.read_text())
    del y["tokenizer_path"]
    y["model_path"] = None
    study.write_text(yaml.safe_dump(y))
    assert run_all.main(["--only", "forecast", "--study", str(study), "--yes"]) == 0
    out = capfd.readouterr().out
    assert "prompt lengths not checked" in out and "estimate:" in out and state.requests == 3


@pytest.mark.parametrize("overflow", ["error", "truncate_text"])
def test_lookahead_checks_a_chunk_at_a_time_and_says_what_the_job_says(
    server_factory: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    overflow: str,
) -> None:
    """`lookahead check`'s preflight fits a large study's prompts a chunk of rows at a time
    (lookahead.rows.CHUNK_ROWS): two long rows in different chunks give the one stop, or
    the one line, the forecast job gives over every row at once."""
    import pandas as pd

    from llm_jobs import preflight, run_all

    url, state = server_factory()
    study = _long_text_study(tmp_path, url, prompt_overflow=overflow, forecast_max_tokens=16)
    data = Path(__import__("yaml").safe_load(study.read_text())["data_path"])
    df = pd.read_csv(data, dtype=str)
    df.loc[5, "text"] = "more words " * 5_000
    df.to_csv(data, index=False)
    monkeypatch.setattr("lookahead.rows.CHUNK_ROWS", 2)  # 6 rows: 3 chunks, r2 and r5 in two of them
    from lookahead.config import load_study
    from lookahead.rows import scan_study_rows

    assert scan_study_rows(load_study(study)).chunk_sizes == [2, 2, 2]

    def said(main: Any, *flags: str) -> tuple[int, list[str]]:
        code = main(["--study", str(study), *flags])
        out = capfd.readouterr()
        return code, [l for l in (out.out + out.err).splitlines() if l.startswith("stopped:") or l.startswith("prompt_overflow:")]

    job = said(run_all.main, "--only", "forecast", "--yes")
    check = said(preflight.main)
    if overflow == "error":
        assert job[0] == check[0] == 2
        assert check[1] == job[1] and "2 of 6 prompts exceed" in check[1][0]
        assert "row r2" in check[1][0] and "row r5" in check[1][0]
    else:
        assert job[0] == check[0] == 0
        assert (
            check[1]
            == job[1]
            == [
                "prompt_overflow: truncate_text: the text of 2 of 6 rows was cut to "
                "fit the context length (counted in the report)"
            ]
        )
    assert state.requests == (0 if overflow == "error" else 6)
