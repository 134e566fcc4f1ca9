"""What the claim jobs share: the context (study, settings, backend, instances) and the
raw-line skeleton with the claim identifiers.

The claim jobs follow the other jobs' crash-safety contract (llm_jobs.common): one
fsynced line per answer, keys that cover model, instance, exact prompt and parameters,
so a killed job resumes where it stopped and never pays twice. Their lines carry extra
fields (instance_id, agent, ...) that lookahead.claims.tables matches on.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import pandas as pd

from llm_jobs.common import JobContext, JobStop, Query, arg_parser, guarded, record_skeleton
from lookahead.claims.inputs import ClaimSettings, claim_study, load_predictions
from lookahead.config import load_study


class ClaimContext(JobContext):
    """JobContext without protocol rows, plus the claim settings."""

    settings: ClaimSettings


def make_claim_context(args: Any) -> ClaimContext:
    study = claim_study(load_study(args.study))   # the claim model, when the study names one
    ctx = ClaimContext(study, args, pd.DataFrame(), 0)
    ctx.settings = ClaimSettings.from_study(study)
    return ctx


def predictions(ctx: ClaimContext) -> pd.DataFrame:
    """The instances to evaluate; rejects printed one line each (never a traceback)."""
    preds, rejects = load_predictions(ctx.study, ctx.settings)
    for r in rejects:
        where = f"row {r['row']}" if r["row"] is not None else ""
        print(f"{r['source']} {where} column {r['column']}: {r['reason']}".replace("  ", " "))
    if preds.empty:
        raise JobStop("no instances: set claims_predictions_path or run llm_jobs.claims_rationale first")
    return preds


def claim_record(ctx: ClaimContext, task: str, q: Query, params: dict[str, Any],
                 extra: dict[str, Any]) -> dict[str, Any]:
    rec = record_skeleton(ctx, task, q, params)
    rec.update(extra)
    return rec


def claim_main(job: Callable[[ClaimContext], int], description: str, argv: Sequence[str] | None,
               extra_args: Callable[[Any], None] | None = None) -> int:
    p = arg_parser(description)
    if extra_args:
        extra_args(p)
    args = p.parse_args(argv)
    return guarded(lambda: job(make_claim_context(args)))


def exit_with(code: int) -> None:
    sys.exit(code)
