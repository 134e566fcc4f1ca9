"""The jobs on Ray Data (setting runner: ray): two workers on one local Ray cluster, the
real transformers backend (the tiny SmolLM2-tokenizer model of test_jobs_transformers).

What is checked, against the single-process run as the reference:
- the answers are the same, each key is in the cache once, and staging reads the shards;
- kill -9 of one worker mid-job: Ray restarts it and retries its batch, and still every
  key is written once and no key is asked again after it was written (the query log,
  LOOKAHEAD_QUERY_LOG, lists every key sent to the model; the killed worker's shard,
  read after its death, is what it wrote);
- a rerun queries nothing; the local runner reads the Ray shards as its cache.

One Ray cluster serves the module (starting one costs 10-40 s here). The kill test is
the default suite's; the three-job comparison is in the slow tier (minutes on 2 cores)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from test_jobs_transformers import lines, make_study, run_job

from lookahead.cache.files import shard_files
from lookahead.cache.lookup import load_cache

ROOT = Path(__file__).resolve().parents[2]
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster with two CPUs: two one-CPU workers."""
    import logging

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from test_jobs_transformers import GGUF_DIR, GGUF_FILE, _tiny_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(GGUF_DIR), gguf_file=GGUF_FILE)
    d = tmp_path_factory.mktemp("model") / "random"
    _tiny_model(tok).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def ray_study(tmp: Path, model: Path, n: int, **kw) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    return make_study(tmp, model, n=n, runner="ray", ray_workers=2, torch_threads=1, **kw)


def answers(raw_dir: Path, task: str) -> dict[str, dict]:
    """key -> what the model said (no timings), over every shard."""
    fields = ("response_text", "top_logprobs", "prompt_logprobs", "first_token_prob", "prompt", "params")
    return {k: {f: r[f] for f in fields} for k, r in load_cache(raw_dir, task).items()}


def assert_same_answers(a: dict[str, dict], b: dict[str, dict]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        assert x["response_text"] == y["response_text"] and x["prompt"] == y["prompt"]
        assert x["params"] == y["params"]
        for field in ("top_logprobs", "prompt_logprobs"):
            if x[field] is None:
                assert y[field] is None
                continue
            assert [t["token_id"] for t in x[field]] == [t["token_id"] for t in y[field]]
            for s, t in zip(x[field], y[field], strict=False):
                assert (s["logprob"] is None) == (t["logprob"] is None)
                if s["logprob"] is not None:
                    assert abs(s["logprob"] - t["logprob"]) < 1e-4


def keys_per_line(raw_dir: Path, task: str) -> Counter:
    return Counter(r["key"] for f in shard_files(raw_dir, task) for r in lines(f))


@pytest.mark.slow
def test_two_workers_answer_like_one_process(tmp_path, ray_cluster, tiny_model):
    study = ray_study(tmp_path / "ray", tiny_model, n=16, forecast_max_tokens=4)
    res = run_job("run_all", study, "--yes", "--accept-low-parse-rate")
    assert "(ray, 2 workers)" in res.stderr
    ray_raw = tmp_path / "ray/raw"
    shards = {p.parent.name for p in shard_files(ray_raw, "forecast") if p.parent != ray_raw}
    assert len(shards) == 2, shards  # both workers started and claimed a shard
    assert sum(len(lines(p)) for p in shard_files(ray_raw, "forecast")) == 16  # all in worker shards
    (tmp_path / "local").mkdir()
    local = make_study(tmp_path / "local", tiny_model, n=16, forecast_max_tokens=4, torch_threads=1)
    run_job("run_all", local, "--yes", "--accept-low-parse-rate")
    for task in ("forecast", "recall", "mink"):
        per_key = keys_per_line(ray_raw, task)
        assert per_key and max(per_key.values()) == 1  # every key once over all shards
        assert_same_answers(answers(ray_raw, task), answers(tmp_path / "local/raw", task))
    # a rerun, Ray or local, finds every answer in the shards and asks nothing
    log = tmp_path / "q.log"
    for s in (study, local):
        y = yaml.safe_load(s.read_text())
        y["raw_dir"] = str(ray_raw)
        s.write_text(yaml.safe_dump(y))
        res = run_job("run_all", s, "--yes", "--accept-low-parse-rate", env={"LOOKAHEAD_QUERY_LOG": str(log)})
        assert "to query: 0" in res.stdout and "cached (identical key): 16" in res.stdout
    assert not log.exists()


def test_kill9_of_a_worker_mid_job_loses_and_repeats_nothing(tmp_path, ray_cluster, tiny_model):
    n, batch = 40, 2
    study = ray_study(tmp_path / "ray", tiny_model, n=n, forecast_max_tokens=8, batch_size=batch)
    raw = tmp_path / "ray/raw"
    log = tmp_path / "q.log"
    killed: dict = {}
    stop = threading.Event()

    def kill_a_worker() -> None:
        """kill -9 the first worker whose shard has 3 answers (its pid is in the shard's lock)."""
        while not stop.is_set():
            for lock in sorted(raw.glob("shards/*/forecast.jsonl.lock")):
                shard = lock.with_name("forecast.jsonl")
                if shard.exists() and shard.read_bytes().count(b"\n") >= 3:
                    try:
                        pid = int(lock.read_text().split()[0])
                    except (IndexError, ValueError):  # the lock is being taken: look again
                        continue
                    killed["at"] = time.time()
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid, shard=shard)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    try:
        res = run_job("forecast", study, "--yes", "--accept-low-parse-rate", env={"LOOKAHEAD_QUERY_LOG": str(log)})
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was killed: the job finished first"
    # the job went on: Ray restarted the worker and retried its batch
    per_key = keys_per_line(raw, "forecast")
    assert len(per_key) == n and set(per_key.values()) == {1}, "every key exactly once over all shards"
    # lines carry finished_at in lookahead.cache.files.utc_now's format: comparable as text
    kill_iso = dt.datetime.fromtimestamp(killed["at"], dt.UTC).isoformat(timespec="microseconds")
    written_before_kill = {r["key"] for f in shard_files(raw, "forecast") for r in lines(f) if r["finished_at"] < kill_iso}
    dead_lines = [r for r in lines(killed["shard"]) if r["finished_at"] < kill_iso]
    assert dead_lines, "the killed worker had written answers"
    assert len(written_before_kill) < n, "the kill came mid-job"
    asked = Counter(log.read_text().split())
    assert set(asked) == set(per_key)
    # nothing written was asked again: a key written before the kill was asked once; a
    # key asked twice was in the killed worker's batch and not yet written
    assert all(asked[k] == 1 for k in written_before_kill)
    again = {k for k, c in asked.items() if c > 1}
    assert len(again) <= batch and not again & written_before_kill
    print(
        f"kill -9 of pid {killed['pid']}: {len(dead_lines)} answers in its shard, {len(written_before_kill)} "
        f"of {n} written before the kill, {len(again)} asked twice (never written before the kill)"
    )
    assert "(ray, 2 workers)" in res.stderr
    # answers equal the single-process run's
    (tmp_path / "local").mkdir()
    local = make_study(tmp_path / "local", tiny_model, n=n, forecast_max_tokens=8, batch_size=batch, torch_threads=1)
    run_job("forecast", local, "--yes", "--accept-low-parse-rate")
    assert_same_answers(answers(raw, "forecast"), answers(tmp_path / "local/raw", "forecast"))
    # a torn last line in a shard (a kill mid-write) is cut when the job next opens the
    # cache; the rerun finds every answer and asks nothing
    with open(killed["shard"], "a") as fh:
        fh.write('{"key": "torn-half-writ')
    log.unlink()
    res = run_job("forecast", study, "--yes", "--accept-low-parse-rate", env={"LOOKAHEAD_QUERY_LOG": str(log)})
    assert "repaired a torn last line" in res.stdout
    assert f"cached (identical key): {n}" in res.stdout and not log.exists()
    assert list(killed["shard"].parent.glob("forecast.jsonl.torn-*"))
    assert keys_per_line(raw, "forecast") == per_key


@pytest.mark.slow
def test_vllm_cpu_on_two_ray_workers_answers_like_one_vllm_process(tmp_path):
    """Min-K% (prompt log-probs) and recall (top-20) with the vLLM CPU engine in two Ray
    workers, run from .venv-vllm (which needs ray[data] too), against one vLLM process."""
    import subprocess

    from test_backend_parity import MODEL_DIR

    from lookahead.backends.vllm_serve import VLLM_PYTHON, vllm_env

    if not VLLM_PYTHON.exists():
        pytest.skip("needs .venv-vllm (bash scripts/make_vllm_env.sh)")
    if subprocess.run([str(VLLM_PYTHON), "-c", "import ray.data"], env=vllm_env()).returncode != 0:
        pytest.skip("needs ray[data] in .venv-vllm: .venv-vllm/bin/pip install 'ray[data]==2.60.0'")
    if not (MODEL_DIR / "model.safetensors").exists():
        pytest.skip("needs the exported SmolLM2 (scripts/export_smollm2_hf.py)")
    opts = {
        "model_id": "smollm2-135m-instruct",
        "backend": "vllm",
        "model_path": str(MODEL_DIR),
        "dtype": "float32",
        "backend_options": {"enforce_eager": True, "kv_cache_gib": 0.25},
        "max_model_len": 1024,
        "batch_size": 4,
    }
    raws = {}
    for runner in ("ray", "local"):
        d = tmp_path / runner
        d.mkdir()
        study = make_study(d, MODEL_DIR, n=8, runner=runner, ray_workers=2, **opts)
        for job in ("mink", "recall"):
            proc = subprocess.run(
                [str(VLLM_PYTHON), "-m", "llm_jobs.run_all", "--only", job, "--study", str(study), "--yes"],
                cwd=ROOT,
                env=vllm_env(),
                capture_output=True,
                text=True,
                timeout=1500,
            )
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        raws[runner] = d / "raw"
    shards = {p.parent.name for p in shard_files(raws["ray"], "mink") if p.parent != raws["ray"]}
    assert len(shards) == 2, shards  # both workers started (with 2 blocks, one may answer both)
    assert not lines(raws["ray"] / "mink.jsonl")  # every answer came from a worker
    for task in ("mink", "recall"):
        assert max(keys_per_line(raws["ray"], task).values()) == 1
        assert_same_answers(answers(raws["ray"], task), answers(raws["local"], task))
