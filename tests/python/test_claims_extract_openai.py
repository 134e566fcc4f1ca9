"""The extraction job over a real HTTP server on 127.0.0.1 through the real `openai`
client: schema-constrained output on the chat API (response_format json_schema), and on
the completions API the validate-and-ask-again path (the server answers prose first and
JSON only when the prompt names the previous error; one rationale never gets JSON)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from completion_server import serve_in_background
from kill_job import kill_once_written

from lookahead.claims.schema import claims_from_object
from lookahead.claims.tables import build
from lookahead.config import load_study

ROOT = Path(__file__).resolve().parents[2]


def _claims_json(prompt: str) -> str:
    rationale = prompt.split("RATIONALE TO ANALYZE:\n", 1)[1].split("\n\nYOUR PREVIOUS", 1)[0]
    sentences = [s.strip() for s in re.split(r"(?<=\.)\s+", rationale) if s.strip()]
    return json.dumps(
        {
            "claims": [
                {
                    "claim_id": i,
                    "claim_text": s,
                    "original_text": s,
                    "temporal_reference": None,
                    "claim_category": "B1",
                    "category_reasoning": "background",
                }
                for i, s in enumerate(sentences, 1)
            ]
        }
    )


class State:
    def __init__(self) -> None:
        self.formats: list[object] = []
        self.lock = threading.Lock()
        self.delay_s = 0.0
        self.prompts: list[str] = []


def _server(state: State) -> ThreadingHTTPServer:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(state.delay_s)
            with state.lock:
                state.prompts.append(json.dumps(body, sort_keys=True))
            if self.path.endswith("/chat/completions"):
                prompt = body["messages"][0]["content"]
                fmt = body.get("response_format")
                with state.lock:
                    state.formats.append(fmt)
                text = _claims_json(prompt) if fmt and fmt.get("type") == "json_schema" else "Here are claims."
                out = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "logprobs": None, "message": {"role": "assistant", "content": text}}
                    ],
                }
            else:
                prompt = body["prompt"]
                if "First write 'Rationale:'" in prompt:  # the rationale agents' prompt
                    text = (
                        "Rationale: Acme makes pumps. Acme opened a new factory on 2021-05-01.\nPrediction: up"
                        if "CRITICAL TEMPORAL CONSTRAINT" in prompt
                        else "I think it goes sideways."
                    )
                    out = {
                        "id": "x",
                        "object": "text_completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                    }
                    return self._send(out)
                ok = "YOUR PREVIOUS ANSWER WAS INVALID" in prompt and "ALWAYS-PROSE" not in prompt
                text = _claims_json(prompt) if ok else "Sure! The rationale says several things."
                out = {
                    "id": "x",
                    "object": "text_completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                }
            self._send(out)

        def _send(self, out: dict) -> None:
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return serve_in_background(ThreadingHTTPServer(("127.0.0.1", 0), H))


@pytest.fixture()
def server():
    state = State()
    srv = _server(state)
    yield srv, state
    srv.shutdown()


def _study(tmp_path: Path, port: int, api: str) -> Path:
    preds = pd.DataFrame(
        [
            {
                "instance_id": "i1",
                "agent": "a",
                "entity": "Acme",
                "task": "t",
                "t_ref": "2022-01-01",
                "task_input": "Will Acme rise?",
                "prediction": "up",
                "rationale": "Acme makes pumps. Acme has a plant.",
                "outcome": "up",
            },
            {
                "instance_id": "i2",
                "agent": "a",
                "entity": "Beta",
                "task": "t",
                "t_ref": "2022-01-01",
                "task_input": "Will Beta rise?",
                "prediction": "down",
                "rationale": "ALWAYS-PROSE. Beta sells lamps.",
                "outcome": "up",
            },
            {
                "instance_id": "i3",
                "agent": "a",
                "entity": "Cora",
                "task": "t",
                "t_ref": "2022-01-01",
                "task_input": "Will Cora rise?",
                "prediction": "down",
                "rationale": "",
                "outcome": "down",
            },
        ]
    )
    preds.to_csv(tmp_path / "p.csv", index=False)
    from lookahead.config import default_study_path, read_study_file

    demo = {k: x for k, x in read_study_file(default_study_path()).items() if k != "model_path"}
    v = {
        **demo,
        "study_name": "claims_extract_test",
        "raw_dir": str(tmp_path / "raw"),
        "backend": "openai",
        "model_id": "fake-extractor",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "api_mode": api,
        "claims_predictions_path": str(tmp_path / "p.csv"),
        "claims_extract_retries": 1,
        "batch_size": 2,
    }
    p = tmp_path / "s.yml"
    p.write_text(yaml.safe_dump(v))
    return p


def _run(study: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_extract", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _lines(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "raw" / "claims_extract.jsonl").read_text().splitlines()]


def test_chat_api_uses_the_json_schema(server, tmp_path):
    srv, state = server
    res = _run(_study(tmp_path, srv.server_address[1], "chat"))
    assert res.returncode == 0, res.stderr
    lines = _lines(tmp_path)
    assert len(lines) == 2 and all(r["valid"] and r["params"]["structured"] for r in lines)
    from lookahead.claims.schema import EXTRACTION_SCHEMA

    assert len(state.formats) == 2  # one request per rationale, each constrained
    assert all(
        f["type"] == "json_schema" and f["json_schema"]["schema"] == EXTRACTION_SCHEMA and f["json_schema"]["strict"] is True
        for f in state.formats
    )
    for r in lines:
        claims_from_object({"claims": r["claims"]})
    inst = build(load_study(tmp_path / "s.yml"))["instance_leakage"].set_index("instance_id")
    assert inst.loc["i3", "status"] == "empty rationale"
    assert inst.loc["i1", "n_claims"] == 2


def test_completions_api_retries_with_the_error_then_gives_up(server, tmp_path):
    srv, _ = server
    study = _study(tmp_path, srv.server_address[1], "completions")
    res = _run(study)
    assert res.returncode == 0, res.stderr
    lines = _lines(tmp_path)
    by = {(r["instance_id"], r["attempt"]): r for r in lines}
    assert set(by) == {("i1", 0), ("i1", 1), ("i2", 0), ("i2", 1)}
    assert not by[("i1", 0)]["valid"] and by[("i1", 1)]["valid"]
    assert "no JSON object found" in by[("i1", 0)]["error"]
    assert not by[("i2", 1)]["valid"]
    t = build(load_study(study))
    inst = t["instance_leakage"].set_index("instance_id")
    assert inst.loc["i1", "status"] == "values pending" and inst.loc["i1", "n_claims"] == 2
    assert inst.loc["i2", "status"] == "extraction failed"
    assert "no valid extraction after 2 attempt(s)" in " ".join(t["claims_rejects"]["reason"])
    # a rerun asks nothing: every attempt is cached
    res = _run(study)
    assert "to query: 0" in res.stdout and len(_lines(tmp_path)) == 4


def _run_rationale_agents(tmp_path: Path, port: int, **settings: Any) -> tuple[Path, dict[str, Any]]:
    """A study of one instance (r1, Acme, outcome up) and the claims ``settings`` given,
    on which the Temporal Hint and Superforecasting agents have run (each exit 0): the
    study file and its settings."""
    study = _study(tmp_path, port, "completions")
    pd.DataFrame(
        [
            {
                "instance_id": "r1",
                "entity": "Acme",
                "task": "t",
                "t_ref": "2022-01-01",
                "task_input": "Will Acme rise?",
                "outcome": "up",
            }
        ]
    ).to_csv(tmp_path / "inst.csv", index=False)
    v = yaml.safe_load(study.read_text())
    v.update(claims_instances_path=str(tmp_path / "inst.csv"), **settings, claims_rationale_min_chars=0)
    study.write_text(yaml.safe_dump(v))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for agent in ("temporal_hint", "superforecasting"):
        res = subprocess.run(
            [sys.executable, "-m", "llm_jobs.run_all", "--only", f"claims_rationale ({agent})", "--study", str(study), "--yes"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
    return study, v


def test_rationale_agents_parse_or_reject(server, tmp_path):
    """Temporal Hint (the server answers in the asked format) and Superforecasting (no
    label in the answer: kept, counted as a reject, never guessed)."""
    srv, _ = server
    study, _ = _run_rationale_agents(tmp_path, srv.server_address[1], claims_predictions_path=None)
    from lookahead.claims.inputs import load_predictions

    preds, rejects = load_predictions(load_study(study))
    assert list(preds["agent"]) == ["temporal_hint"]
    assert preds["prediction"].iloc[0] == "up"
    assert preds["rationale"].iloc[0] == "Acme makes pumps. Acme opened a new factory on 2021-05-01."
    assert any("agent answer rejected: no label (up, down)" in r["reason"] for r in rejects)


def test_parse_rationale():
    from lookahead.claims.rationale_parse import parse_rationale

    assert parse_rationale("Rationale: A. B.\nPrediction: Down.", ["up", "down"]) == ("down", "A. B.")
    assert parse_rationale("It will go up, not down", ["up", "down"]) == ("down", "It will go up, not down")
    assert parse_rationale("no label here", ["up", "down"]) == (None, "no label here")


def test_kill9_mid_extraction_then_resume_without_requery(server, tmp_path):
    import signal

    srv, state = server
    state.delay_s = 0.3
    study = _study(tmp_path, srv.server_address[1], "chat")
    preds = pd.DataFrame(
        [
            {
                "instance_id": f"k{i}",
                "agent": "a",
                "entity": "E",
                "task": "t",
                "t_ref": "2022-01-01",
                "task_input": "Will E rise?",
                "prediction": "up",
                "rationale": f"E makes {i} pumps. E has {i} plants.",
                "outcome": "up",
            }
            for i in range(12)
        ]
    )
    preds.to_csv(tmp_path / "p.csv", index=False)
    v = yaml.safe_load(study.read_text())
    v["batch_size"] = 1
    study.write_text(yaml.safe_dump(v))
    raw = tmp_path / "raw" / "claims_extract.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    code = kill_once_written(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_extract", "--study", str(study), "--yes"], raw, 3, env, 120
    )
    assert code == -signal.SIGKILL
    done = {r["instance_id"] for r in _lines(tmp_path)}
    assert 3 <= len(done) < 12
    n_before = len(state.prompts)
    state.delay_s = 0.0
    res = _run(study)
    assert res.returncode == 0, res.stderr
    lines = _lines(tmp_path)
    assert sorted(r["instance_id"] for r in lines) == sorted(preds["instance_id"])  # each once
    asked_after = [json.loads(p)["messages"][0]["content"] for p in state.prompts[n_before:]]
    assert not any(f"E makes {i[1:]} pumps." in a for a in asked_after for i in done)


def test_dbt_claim_models_read_the_staged_extractions_and_agent_answers(server, tmp_path):
    """The claim marts of a dbt build, which read the extraction and agent lines through
    the claim staging models (stg_claim_extractions: an invalid attempt then a valid one,
    and two invalid ones; stg_claim_agent_answers: an agent answer that fits and one
    rejected), equal the tables the package computes from the raw files, to 1e-12."""
    from dbt_runner import run_dbt

    sys.path.insert(0, str(ROOT / "scripts"))
    from claims_equivalence import differences

    from lookahead.claims.dbt_entry import typed

    srv, _ = server
    study, v = _run_rationale_agents(tmp_path, srv.server_address[1])
    assert _run(study).returncode == 0
    for task in ("forecast", "recall", "mink"):  # dbt's input check wants the protocol's raw files
        (tmp_path / "raw" / f"{task}.jsonl").touch()
    res = run_dbt(["build", "--select", "+tag:claims"], v, tmp_path / "c.duckdb")
    assert res.returncode == 0, res.output[-3000:]
    extractions = res.table("stg_claim_extractions")
    assert extractions["fields_match"].all() and set(extractions["valid"]) == {True, False}
    answers = res.table("stg_claim_agent_answers")
    assert sorted(answers["agent"]) == ["superforecasting", "temporal_hint"] and answers["fields_match"].all()
    for name, want in build(load_study(study)).items():
        assert differences(name, typed(want), res.table(name)) == [], name
