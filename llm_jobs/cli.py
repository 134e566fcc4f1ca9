"""The job process's command line (llm_jobs.run_all, llm_jobs.preflight): the arguments
`lookahead jobs` hands it."""

from __future__ import annotations

import argparse

from lookahead.consent import add_consent_arguments


def arg_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--study", help="study file (YAML var overrides); default: dbt_project.yml vars or $LOOKAHEAD_STUDY")
    p.add_argument(
        "--settings",
        default=None,
        metavar="JSON",
        help="the study's resolved settings (the study file plus the command's overrides), "
        "as `lookahead jobs/run` writes them once for every job and for dbt; read instead of "
        "--study, which then only names the study file",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts, CI)")
    p.add_argument(
        "--subsample",
        type=int,
        default=None,
        metavar="N",
        help="query a seeded random subsample of N valid rows (overrides the study's "
        "subsample_rows; dbt and the report follow the study file)",
    )
    p.add_argument("--seed", type=int, default=None, metavar="S", help="subsample seed (default: the study's subsample_seed, 0)")
    p.add_argument(
        "--allow-sampling",
        action="store_true",
        help="permit the sampling fallback (>= 25 samples per query) when the backend returns no logprobs",
    )
    p.add_argument(
        "--accept-low-parse-rate",
        action="store_true",
        help="forecast: continue below 95%% parse rate (this run only; the study file "
        "is not edited: `lookahead run --accept-low-parse-rate` passes the same "
        "acceptance to dbt, which records it in the build identity and the report)",
    )
    p.add_argument(
        "--max-cost",
        type=float,
        default=None,
        metavar="USD",
        help="refuse a run whose estimated price (price_per_1k_tokens) is above USD, or unknown; nothing is queried",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="ask again the queries the server refused for good in an earlier run "
        "(a 4xx other than 408/409/429, a content refusal); without it those rows "
        "are excluded and counted",
    )
    p.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="JOB",
        help="run only this job (a name of llm_jobs.registry, e.g. forecast, claims_value, "
        "'claims_rationale (temporal_hint)'), whether or not the study's settings call for it; repeatable",
    )
    add_consent_arguments(p)
    return p
