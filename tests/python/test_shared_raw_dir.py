"""Issue 35, item 5: studies that share one raw_dir run at the same time and ask every
shared key once (llm_jobs.sharing), as a user runs them: forecast job processes
(`python -m llm_jobs.run_all --only forecast`, what `lookahead jobs --only forecast` starts)
against the loopback OpenAI-compatible server. The server holds chosen requests until the
test releases them, so each job is caught mid-run without a clock."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_openai_backend import server_factory, write_openai_study  # noqa: F401 - server_factory is a fixture

from lookahead.cache.locks import plan_path, read_plan
from lookahead.cache.lookup import load_cache
from lookahead.cache.store import RawStore

ROOT = Path(__file__).resolve().parents[2]


def item(prompt: str) -> int:
    """The row number in a prompt of write_openai_study's rows ("Firm k reports item i")."""
    m = re.search(r"reports item (\d+)", prompt)
    return int(m.group(1)) if m else -1


class Job:
    """One forecast job in its own process, its output and query log in files."""

    def __init__(self, study: Path, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.out, self.log = work / "out.txt", work / "queries.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", LOOKAHEAD_QUERY_LOG=str(self.log))
        self.fh = open(self.out, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llm_jobs.run_all", "--only", "forecast", "--study", str(study), "--yes"],
            cwd=ROOT,
            env=env,
            stdout=self.fh,
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.out.read_text()

    def asked(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []

    def wait(self) -> int:
        rc = self.proc.wait(timeout=180)
        self.fh.close()
        return rc


def until(cond: Callable[[], bool], *jobs: Job) -> None:
    """Wait for ``cond``; fail (with the jobs' output) if a job ends first or after 60 s."""
    deadline = time.monotonic() + 60
    while not cond():
        for j in jobs:
            assert j.proc.poll() is None, j.text()[-3000:]
        assert time.monotonic() < deadline, [j.text()[-2000:] for j in jobs]
        time.sleep(0.05)


def n_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def studies(tmp_path: Path, url: str, **rows: int) -> dict[str, Path]:
    opts: dict[str, Any] = {
        "raw_dir": str(tmp_path / "shared_raw"),
        "tokenizer_path": None,
        "model_path": None,
        "backend_options": {"backoff_s": 0.01, "timeout_s": 60},
    }
    return {name: write_openai_study(tmp_path, url, name, n, **opts) for name, n in rows.items()}


def test_two_studies_running_together_ask_each_shared_key_once(
    server_factory: Any,
    tmp_path: Path,
) -> None:
    """study_one (rows r0-r15) holds the shared file; study_two (r0-r23) starts while
    study_one's requests are held: it asks its own 8 rows, says it waits for study_one's
    16, and asks none of them. 24 requests in all, both exit 0, each parse-rate check reads every row."""
    url, state = server_factory()
    state.held = lambda prompt: 0 <= item(prompt) < 16
    s = studies(tmp_path, url, study_one=16, study_two=24)
    raw = tmp_path / "shared_raw"
    one = Job(s["study_one"], tmp_path / "one")
    until(lambda: plan_path(raw / "forecast.jsonl").exists() and state.in_flight > 0, one)
    two = Job(s["study_two"], tmp_path / "two")
    until(lambda: "waiting for its answers" in two.text(), one, two)
    line = next(x for x in two.text().splitlines() if "waiting for its answers" in x)
    assert line == f"16 queries are being asked by study study_one's job (pid {one.proc.pid}); waiting for its answers"
    shard = next((raw / "shards").glob("study-study_two-*/forecast.jsonl"))
    assert n_lines(shard) == 8 and n_lines(raw / "forecast.jsonl") == 0  # its own rows first
    state.release.set()
    assert one.wait() == 0, one.text()[-3000:]
    assert two.wait() == 0, two.text()[-3000:]
    assert "16 queries answered by another study's job sharing raw_dir" in two.text()
    asked = one.asked() + two.asked()
    assert len(asked) == len(set(asked)) == 24 and state.requests == 24
    assert not set(one.asked()) & set(two.asked())
    assert n_lines(raw / "forecast.jsonl") == 16 and n_lines(shard) == 8
    assert len(load_cache(raw, "forecast")) == 24
    for j, n in ((one, 16), (two, 24)):  # each job's parse-rate check reads every row's answer
        assert f"forecast parse rate: 100.0% ({n}/{n})" in j.text(), j.text()[-3000:]
    assert not list(raw.glob("**/*.plan"))  # said only while asking
    for j in (one, two):
        assert "Traceback" not in j.text()


def test_a_killed_holder_leaves_its_keys_to_the_waiter_and_ctrl_c_stops_a_waiter(server_factory: Any, tmp_path: Path) -> None:
    """study_one writes 4 answers and is held; study_two and study_three wait for it (the
    third also for the second, which said its plan first). Ctrl-C stops the third at
    once (exit 130, nothing asked). study_one is killed (-9): the second asks exactly the
    12 keys it never wrote, and finishes; every key has one line."""
    url, state = server_factory()
    state.held = lambda prompt: item(prompt) >= 4
    s = studies(tmp_path, url, study_one=16, study_two=16, study_three=16)
    raw = tmp_path / "shared_raw"
    one = Job(s["study_one"], tmp_path / "one")
    until(lambda: n_lines(raw / "forecast.jsonl") == 4 and plan_path(raw / "forecast.jsonl").exists(), one)
    two = Job(s["study_two"], tmp_path / "two")
    until(lambda: "waiting for its answers" in two.text(), one, two)
    assert f"12 queries are being asked by study study_one's job (pid {one.proc.pid})" in two.text()
    three = Job(s["study_three"], tmp_path / "three")
    until(lambda: "waiting for its answers" in three.text(), one, two, three)
    three.proc.send_signal(signal.SIGINT)
    assert three.wait() == 130, three.text()[-3000:]
    assert "interrupted: finished answers are saved" in three.text() and "Traceback" not in three.text()
    assert three.asked() == [] and not list(raw.glob("shards/study-study_three-*/*.plan"))

    written_by_one = {json.loads(x)["key"] for x in (raw / "forecast.jsonl").read_text().splitlines()}
    one.proc.send_signal(signal.SIGKILL)
    one.wait()
    state.release.set()
    assert two.wait() == 0, two.text()[-3000:]
    every = set(load_cache(raw, "forecast"))
    assert len(every) == 16 and sorted(two.asked()) == sorted(every - written_by_one)
    recs = [json.loads(x) for f in raw.glob("**/forecast.jsonl") for x in f.read_text().splitlines()]
    assert len(recs) == 16  # no key written twice
    assert "forecast parse rate: 100.0% (16/16)" in two.text()


@pytest.mark.slow
def test_a_ray_study_waits_for_a_local_study_on_the_same_raw_dir(
    server_factory: Any,
    tmp_path: Path,
) -> None:
    """runner: ray on the second study: its driver says the plan, its worker asks its own
    8 rows into a worker shard, and the 16 rows study_one is asking are waited for."""
    pytest.importorskip("ray")
    import yaml

    url, state = server_factory()
    state.held = lambda prompt: 0 <= item(prompt) < 16
    s = studies(tmp_path, url, study_one=16, study_two=24)
    study = yaml.safe_load(s["study_two"].read_text())
    s["study_two"].write_text(yaml.safe_dump({**study, "runner": "ray", "ray_workers": 1}))
    raw = tmp_path / "shared_raw"
    one = Job(s["study_one"], tmp_path / "one")
    until(lambda: plan_path(raw / "forecast.jsonl").exists() and state.in_flight > 0, one)
    two = Job(s["study_two"], tmp_path / "two")
    until(lambda: "waiting for its answers" in two.text(), one, two)
    state.release.set()
    assert one.wait() == 0 and two.wait() == 0, two.text()[-3000:]
    asked = one.asked() + two.asked()
    assert len(asked) == len(set(asked)) == 24 == state.requests
    assert len(load_cache(raw, "forecast")) == 24
    assert "16 queries answered by another study's job" in two.text()


def _rec(key: str) -> dict:
    from lookahead.cache.store import REQUIRED_FIELDS

    r = {f: None for f in REQUIRED_FIELDS}
    r.update(key=key, task="forecast", response_text="up", params={}, approximated=False, finished_at="2021-01-01T00:00:00")
    return r


def test_plans_are_ordered_said_only_while_writing_and_a_dead_writers_plan_is_nobodys(tmp_path: Path) -> None:
    """RawStore.claim / earlier_plans: the first writer waits for nobody, a later one for
    the earlier plans only; a holder that has not said yet is waited for; a plan is
    removed on close, and a plan whose writer is gone (a killed job's) is ignored and
    removed by the next writer of that file."""
    raw = tmp_path / "raw"
    with (
        RawStore(raw / "forecast.jsonl", own_shard="study-a-00000000") as a,
        RawStore(raw / "forecast.jsonl", read_only_ok=True, own_shard="study-b-11111111") as b,
    ):
        assert b.path != a.path
        [holder] = b.earlier_plans()  # the holder has not said what it asks
        assert holder.keys is None and holder.pid == str(os.getpid()) and holder.label == "study-a-00000000"
        a.claim(["k1", "k2"])
        b.claim(["k2", "k3"])
        assert a.earlier_plans() == []  # the first never waits
        [plan] = b.earlier_plans()
        assert plan.keys == {"k1", "k2"} and plan.path == plan_path(raw / "forecast.jsonl")
        a.append(_rec("k1"))
    assert not list(raw.glob("**/*.plan"))
    # a killed writer's plan stays on disk but names no live writer
    stale = plan_path(raw / "forecast.jsonl")
    stale.write_text(json.dumps({"pid": 999999, "label": "study-x-22222222", "order_ns": 1}) + "\nk9\n")
    assert read_plan(stale) is not None and read_plan(stale).keys == {"k9"}
    with RawStore(raw / "shards/x/forecast.jsonl", root=raw) as c:
        assert c.earlier_plans() == []
    with RawStore(raw / "forecast.jsonl", own_shard="study-d-33333333"):
        assert not stale.exists()
