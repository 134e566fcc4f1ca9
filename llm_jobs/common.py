"""What every LLM job shares: arguments, rows, the batch plan, confirmation, the
query loop with its progress bar, and user-facing errors.

The loop is the crash-safety contract in practice: each answer is appended (flushed,
fsynced) as soon as its batch returns, and the plan counts only keys not yet in the
raw file, so a killed job resumes where it stopped and never pays twice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lookahead.backends import Backend, get_backend
from lookahead.cache import CacheError, RawStore, utc_now
from lookahead.config import Study, StudyConfigError, load_study
from lookahead.rows import load_rows, subsample_rows

LARGE_STUDY_ROWS = 10_000
MIN_SAMPLES = 25
LOCAL_BACKENDS = ("transformers", "vllm")
QUERY_LOG_ENV = "LOOKAHEAD_QUERY_LOG"  # optional: one line per key sent to the model

EXIT_OK, EXIT_DECLINED, EXIT_USER_ERROR, EXIT_PARSE_RATE = 0, 1, 2, 3


class JobStop(Exception):
    """A user-facing stop: message printed without a traceback, then exit ``code``."""

    def __init__(self, message: str, code: int = EXIT_USER_ERROR) -> None:
        super().__init__(message)
        self.code = code


def arg_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--study", help="study file (YAML var overrides); default: dbt_project.yml vars "
                   "or $LOOKAHEAD_STUDY")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts, CI)")
    p.add_argument("--subsample", type=int, default=None, metavar="N",
                   help="query a seeded random subsample of N valid rows (overrides the study's "
                        "subsample_rows; dbt and the report follow the study file)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="subsample seed (default: the study's subsample_seed, 0)")
    p.add_argument("--allow-sampling", action="store_true",
                   help="permit the sampling fallback (>= 25 samples per query) when the backend "
                        "returns no logprobs")
    p.add_argument("--accept-low-parse-rate", action="store_true",
                   help="forecast: continue below 95%% parse rate (you accept the prompt as is)")
    return p


@dataclass
class JobContext:
    """One job run's settings, rows and (lazily built) backend."""

    study: Study
    args: argparse.Namespace
    rows: pd.DataFrame
    n_rejected: int
    _backend: Backend | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = get_backend(self.study)
        return self._backend

    @property
    def use_chat_template(self) -> bool:
        return bool(self.study.get("use_chat_template", True))

    @property
    def batch_size(self) -> int:
        return int(self.study.get("batch_size") or 16)

    @property
    def logprobs_available(self) -> bool:
        if self.study.get("logprobs_available") is False:
            return False
        return bool(getattr(self.backend, "supports_logprobs", True))

    def out_dir(self) -> Path:
        """Derived per-study files (parquet summaries): ``outputs_dir`` or outputs/<study_name>/."""
        if self.study.get("outputs_dir"):
            return self.study.path("outputs_dir")
        return self.study.root / "outputs" / str(self.study.get("study_name") or "study")


def make_context(args: argparse.Namespace, backend: Backend | None = None) -> JobContext:
    """Load the study and the rows to query: the valid rows in the study's subsample.

    The rows come from lookahead.rows, the definition dbt staging uses too. The
    subsample is the study's subsample_rows/subsample_seed; --subsample/--seed override
    them for this run only, and a note says how to give dbt the same rows."""
    study = load_study(args.study)
    if args.seed is not None and args.subsample is None:
        raise JobStop("--seed needs --subsample N (or set subsample_rows in the study file)")
    study_sub = (study.get("subsample_rows"), int(study.get("subsample_seed") or 0))
    subsample = None
    if args.subsample is not None:
        subsample = (args.subsample, args.seed if args.seed is not None else study_sub[1])
    rows, rejects = load_rows(study, subsample)
    counts = rejects["reject_reason"].value_counts() if len(rejects) else pd.Series(dtype=int)
    detail = "; ".join(f"{n} {reason}" for reason, n in counts.items())
    if rows.empty:
        raise JobStop(f"no valid rows in {study['data_path']} ({len(rejects)} rejected"
                      + (f": {detail}" if detail else "") + "); see seeds/reject_reasons.csv")
    print(f"study '{study.get('study_name')}': {len(rows)} rows to query, {len(rejects)} rejected"
          + (f" ({detail})" if detail else ""))
    size, seed = subsample or study_sub
    if size is not None:
        print(f"subsample: {len(rows)} rows (subsample_rows {size}, seed {seed})")
        if subsample is not None and subsample != study_sub:
            print(f"note: dbt build and the report follow the study file: put 'subsample_rows: {size}' "
                  f"and 'subsample_seed: {seed}' in it so they analyse these same rows")
    elif len(rows) > LARGE_STUDY_ROWS:
        print(f"note: {len(rows)} rows is a large study; consider a seeded random subsample first "
              f"(subsample_rows: 2000 and subsample_seed: 0 in the study file).")
        if not args.yes and sys.stdin.isatty():
            answer = input("subsample size (blank = all rows): ").strip()
            if answer:
                if not answer.isdigit():
                    raise JobStop(f"subsample size '{answer}' is not a number")
                rows = subsample_rows(rows, int(answer), study_sub[1])
                print(f"subsample: {len(rows)} rows (seed {study_sub[1]}); put 'subsample_rows: "
                      f"{answer}' in the study file so dbt build analyses these same rows")
    return JobContext(study, args, rows, len(rejects), backend)


def confirm(question: str, yes: bool) -> None:
    """Ask before paying for queries; --yes answers for scripts and CI."""
    if yes:
        print(f"{question} yes (--yes)")
        return
    if not sys.stdin.isatty():
        raise JobStop("confirmation needed but stdin is not a terminal: rerun with --yes", EXIT_DECLINED)
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise JobStop("cancelled; nothing was queried", EXIT_DECLINED)


@dataclass
class Query:
    """One pending query: its key, the exact prompt and the identifying fields."""

    key: str
    prompt: str
    row_id: str | None = None
    entity_id: str | None = None
    target_date: str | None = None


def estimate_tokens(backend: Backend, prompts: Sequence[str]) -> int:
    counter = getattr(backend, "count_tokens", None)
    if callable(counter):
        return sum(int(counter(p)) for p in prompts)
    return sum(max(1, len(p) // 4) for p in prompts)  # ~4 characters per token


def print_plan(ctx: JobContext, task: str, unit: str, n_total: int, pending: Sequence[Query],
               output_tokens: int, multiplier: int = 1) -> None:
    """Query count after dedupe and cache hits, and the cost estimate."""
    n_cached = n_total - len(pending)
    print(f"{task}: {n_total} {unit}; cached (identical key): {n_cached}; to query: {len(pending)}"
          + (f" x {multiplier} samples = {len(pending) * multiplier} generations" if multiplier > 1 else ""))
    if not pending:
        return
    prompt_tokens = estimate_tokens(ctx.backend, [q.prompt for q in pending]) * multiplier
    out_tokens = output_tokens * len(pending) * multiplier
    total = prompt_tokens + out_tokens
    price = ctx.study.get("price_per_1k_tokens")
    backend = ctx.study["backend"]
    if price is None and backend in LOCAL_BACKENDS:
        price = 0.0
    if price is None:
        cost = "unknown (set price_per_1k_tokens)"
    else:
        cost = f"${total / 1000 * float(price):,.2f} at {float(price)} per 1k tokens"
        if backend in LOCAL_BACKENDS and float(price) == 0:
            cost += " (local model)"
    print(f"  estimate: {prompt_tokens:,} prompt + {out_tokens:,} output tokens = {total:,} tokens; cost {cost}")


def progress_bar(total: int, desc: str) -> Any:
    """tqdm bar with count, rate and ETA on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="q", file=sys.stderr, dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]")


def run_queries(
    store: RawStore,
    pending: Sequence[Query],
    batch_size: int,
    desc: str,
    answer: Callable[[list[Query]], list[dict[str, Any]]],
    base_record: Callable[[Query], dict[str, Any]],
) -> int:
    """Ask ``answer`` for each batch, append one line per answer, return lines written."""
    log_path = os.environ.get(QUERY_LOG_ENV)
    written = 0
    with progress_bar(len(pending), desc) as bar:
        for a in range(0, len(pending), batch_size):
            batch = list(pending[a : a + batch_size])
            if log_path:
                with open(log_path, "a", encoding="utf-8") as fh:
                    fh.write("".join(f"{q.key}\n" for q in batch))
                    fh.flush()
            started = utc_now()
            results = answer(batch)
            finished = utc_now()
            for q, res in zip(batch, results, strict=True):
                rec = base_record(q)
                rec.update(res)
                rec["started_at"], rec["finished_at"] = started, finished
                store.append(rec)
                written += 1
            bar.update(len(batch))
    return written


def record_skeleton(ctx: JobContext, task: str, q: Query, params: dict[str, Any]) -> dict[str, Any]:
    """A raw line with every contract field present (docs/CONTRACTS.md)."""
    return {
        "key": q.key, "task": task, "model_id": ctx.study["model_id"],
        "backend": getattr(ctx.backend, "name", ctx.study["backend"]),
        "row_id": q.row_id, "entity_id": q.entity_id, "target_date": q.target_date,
        "prompt": q.prompt, "params": params, "response_text": None, "top_logprobs": None,
        "prompt_logprobs": None, "samples": None, "approximated": False,
        "first_token_prob": None, "stated_confidence": None,
        "started_at": None, "finished_at": None,
    }


def logprob_dicts(items: Sequence[Any]) -> list[dict[str, Any]]:
    """TokenLogprob objects -> the contract's {token_id, token, logprob} dicts."""
    return [{"token_id": t.token_id, "token": t.token, "logprob": t.logprob} for t in items]


def run_main(job: Callable[[JobContext], int], description: str, argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run one job, turn user errors into one clear line + exit code."""
    args = arg_parser(description).parse_args(argv)
    return guarded(lambda: job(make_context(args)))


def guarded(fn: Callable[[], int]) -> int:
    t0 = time.time()
    try:
        code = fn()
    except JobStop as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return exc.code
    except (StudyConfigError, CacheError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted: finished answers are saved; rerun to resume", file=sys.stderr)
        return 130
    print(f"done in {time.time() - t0:.1f} s")
    return code
