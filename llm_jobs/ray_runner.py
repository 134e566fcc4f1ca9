"""The jobs' queries as a Ray Data pipeline (setting ``runner: ray``; docs/scaling.md).

Why it looks the way it does: the single-process loop (llm_jobs.query_loop.run_queries) is the
crash-safety contract, and this runner keeps it across workers and restarts.
- The driver (the job process) plans exactly as before: keys, prompt guards, the
  confirmation, and the pending keys = the study's keys minus every key in any shard of
  the cache. It holds the lock of ``<raw_dir>/<task>.jsonl`` for the whole run, so no
  second job, local or Ray, works on the same cache at the same time.
- The pending queries become a Ray dataset cut into blocks of batch_size (a key lies in
  exactly one block); ``map_batches`` hands the blocks to ``ray_workers`` actors
  (:class:`ShardWorker`), each holding the study's backend and writing its own shard,
  ``<raw_dir>/shards/<host>-<slot>/<task>.jsonl``, with the same record, the same
  per-line flush and fsync, and its failures beside it. No two processes ever append
  to one file.
- Before a batch is sent to the model the worker re-reads what any shard gained since
  its last look (RawStore.refresh) and drops the keys already there. When a worker is
  killed (kill -9, OOM, a lost node), Ray restarts it and retries its block: the
  restarted worker re-claims the free shard (its lock went with the dead process),
  cuts a torn last line, and skips every key the dead worker wrote. A key is therefore
  never asked again once it is written; a key that was being answered but not written
  is asked again. A later run of the job resumes the same way, from every shard.
- Reading the cache, dbt's staging models and the jobs take the union of the shards,
  one line per key (lookahead.cache.lookup.load_cache), so a duplicate could never count twice
  even if one were written.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_jobs.context import JobContext
from llm_jobs.failures import QueryTally, too_many_failures
from llm_jobs.queries import Query
from llm_jobs.query_loop import QUERY_LOG_ENV, Answer, answer_each, answer_streams, progress_bar, settle
from lookahead.backends.base import BackendFatal, QueryFailure
from lookahead.cache.files import SHARDS_DIR, repair_idle_shard, shard_files
from lookahead.cache.lookup import ident_of
from lookahead.cache.store import CacheLocked, RawStore
from lookahead.config import PROJECT_ROOT, Study
from lookahead.errors import RESUME
from lookahead.guard import EXIT_INCOMPLETE, EXIT_USER_ERROR, JobStop
from lookahead.masking import mask
from lookahead.measures import line_extras
from lookahead.tasks import needs_bits

RAY_PIN = "ray[data]==2.60.0"  # requirements.txt pins the same
MAX_SHARD_SLOTS = 4096
# REFUSED: a permanent failure (llm_jobs.failures), counted apart so that it excludes its
# row instead of stopping the job
WRITTEN, CACHED, FAILED, REFUSED, FATAL = "written", "cached", "failed", "refused", "fatal"


def shard_path(raw_dir: Path, task: str, slot: int) -> Path:
    """``<raw_dir>/shards/<host>-<slot>/<task>.jsonl``: the host in the name keeps two
    nodes of a cluster from ever sharing a file (locks need not work across nodes)."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"
    return raw_dir / SHARDS_DIR / f"{host}-{slot}" / f"{task}.jsonl"


def claim_shard(raw_dir: Path, task: str) -> RawStore:
    """Open the first shard of this host whose lock is free (a restarted worker takes
    the one its dead predecessor held, repairing a torn tail), creating one if need be."""
    for slot in range(MAX_SHARD_SLOTS):
        store = RawStore(shard_path(raw_dir, task, slot), root=raw_dir)
        try:
            store.open()
        except CacheLocked:
            continue
        return store
    raise JobStop(f"runner ray: all {MAX_SHARD_SLOTS} shard slots of {raw_dir} are locked")


class ShardWorker:
    """A Ray Data actor: one backend, one shard. Called with a batch of pending queries
    (key, prompt, the line's skeleton as JSON); returns one status row per key."""

    def __init__(self, study_json: str, root: str, task: str, answer: Answer, raw_dir: str, query_log: str | None = None) -> None:
        self.task = task
        self.answer = answer
        self.query_log = query_log
        self.error: str | None = None
        try:
            self.study = Study.from_json(study_json, root=Path(root))
            self.store = claim_shard(Path(raw_dir), task)
            from lookahead.backends import get_backend

            self.backend = get_backend(self.study)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        keys = [str(k) for k in batch["key"]]
        status, reasons = [CACHED] * len(keys), [""] * len(keys)
        out: dict[str, list[Any]] = {
            "key": keys,
            "status": status,
            "reason": reasons,
            "pid": [os.getpid()] * len(keys),
            "shard": [str(getattr(getattr(self, "store", None), "path", ""))] * len(keys),
        }
        if self.error:
            out["status"] = [FATAL] * len(keys)
            out["reason"] = [mask(f"worker could not start: {self.error}")] * len(keys)
            return out
        self.store.refresh()  # what every shard gained: a key written anywhere is not asked again
        recs = [json.loads(str(r)) for r in batch["record"]]
        needs = needs_bits(line_extras(self.study, self.task))  # a line without them is asked again
        todo = [i for i, r in enumerate(recs) if not self.store.has_answer(r["key"], ident_of(r), needs)]
        if not todo:
            return out
        queries = [
            Query(
                recs[i]["key"],
                str(batch["prompt"][i]),
                row_id=recs[i]["row_id"],
                entity_id=recs[i]["entity_id"],
                target_date=recs[i]["target_date"],
                text=recs[i]["query_text"],
            )
            for i in todo
        ]
        index = {q.key: i for q, i in zip(queries, todo, strict=False)}
        settled: set[int] = set()

        def on_answer(q: Query, res: Any, started: str, finished: str) -> bool:
            i = index[q.key]
            reason = settle(self.store, self.task, q, recs[i], res, started, finished)
            permanent = isinstance(res, QueryFailure) and res.permanent
            status[i], reasons[i] = ((REFUSED if permanent else FAILED), reason) if reason else (WRITTEN, "")
            settled.add(i)
            return True

        try:
            answer_each(
                lambda b: self.answer(self.backend, b),
                queries,
                len(queries),
                answer_streams(self.backend),
                on_answer,
                self.query_log,
            )
        except BackendFatal as exc:
            for i in todo:
                if i not in settled:
                    status[i], reasons[i] = FATAL, mask(str(exc))
        return out


def import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError:
        raise JobStop(f"setting 'runner': 'ray' needs Ray Data: pip install '{RAY_PIN}'", EXIT_USER_ERROR) from None
    return ray


def start_ray(ray: Any, study: Study) -> bool:
    """Join the study's cluster (ray_address), or start a local one with one CPU per
    worker; return whether this call started it (and so shuts it down after)."""
    if ray.is_initialized():
        return False
    import logging

    kw: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
        "configure_logging": True,
    }
    address = study.runner.ray_address
    if address:
        ray.init(address=str(address), **kw)
    else:
        # local workers import this checkout, whatever is installed
        path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        ray.init(num_cpus=int(study.runner.ray_workers), num_gpus=None, runtime_env={"env_vars": {"PYTHONPATH": path}}, **kw)
    return True


def worker_error(exc: BaseException) -> str:
    """The last line of what went wrong inside a worker (a Ray error wraps the worker's
    traceback; the job prints one line)."""
    cause: BaseException = exc
    while (inner := getattr(cause, "cause", None)) is not None and inner is not cause:
        cause = inner
    lines = [x.strip() for x in str(cause).strip().splitlines() if x.strip()]
    return mask(lines[-1] if lines else type(exc).__name__)


def run_queries_ray(
    ctx: JobContext,
    store: RawStore,
    pending: Sequence[Query],
    task: str,
    answer: Answer,
    base_record: Callable[[Query], dict[str, Any]],
) -> QueryTally:
    """Ask the pending queries on Ray Data workers; return the same tally as the local loop.

    ``store`` is the driver's (the single-process file, locked for the run); after the
    pipeline it re-reads every shard, so the job's completeness check sees every answer."""
    ray = import_ray()
    started_here = start_ray(ray, ctx.study)
    tally = QueryTally(task, len(pending))
    try:
        tally = _run(ray, ctx, store, pending, task, answer, base_record)
    except ray.exceptions.RayError as exc:
        raise JobStop(
            f"{task}: a Ray worker failed ({worker_error(exc)}); finished answers are saved; {RESUME}", EXIT_INCOMPLETE
        ) from None
    finally:
        if started_here:
            ray.shutdown()
        for shard in shard_files(store.root, store.task):  # a worker killed mid-line left it torn
            if shard != store.path:
                repair_idle_shard(shard)
        store.refresh()
    return tally


def _run(
    ray: Any,
    ctx: JobContext,
    store: RawStore,
    pending: Sequence[Query],
    task: str,
    answer: Answer,
    base_record: Callable[[Query], dict[str, Any]],
) -> QueryTally:
    from ray.data import ActorPoolStrategy, DataContext

    dctx = DataContext.get_current()
    dctx.enable_progress_bars = False  # the job's own bar counts the answers
    dctx.print_on_execution_start = False
    workers = int(ctx.study.runner.ray_workers)
    items = [{"key": q.key, "prompt": q.prompt, "record": json.dumps(base_record(q), ensure_ascii=False)} for q in pending]
    batch = ctx.batch_size
    ds = ray.data.from_items(items, override_num_blocks=max(1, math.ceil(len(items) / batch)))
    ds = ds.map_batches(
        ShardWorker,
        batch_size=batch,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=workers),
        fn_constructor_kwargs={
            "study_json": ctx.study.settings_json(),
            "root": str(ctx.study.root),
            "task": task,
            "answer": answer,
            "raw_dir": str(store.root),
            "query_log": os.environ.get(QUERY_LOG_ENV),
        },
        num_cpus=1,
        num_gpus=float(ctx.study.runner.ray_gpus_per_worker) or None,
    )
    tally = QueryTally(task, len(pending))
    with progress_bar(len(pending), f"{task} (ray, {workers} workers)") as bar:
        for out in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for status, reason in zip(out["status"], out["reason"], strict=False):
                if status == FATAL:
                    raise BackendFatal(str(reason))
                tally.count(str(reason) if status in (REFUSED, FAILED) else None, status == REFUSED)
            bar.update(len(out["status"]))
            if tally.server_down:
                bar.close()
                raise too_many_failures(task, tally, store)
    return tally
