"""The claim jobs of a study, in order, as `lookahead jobs` / `lookahead run` run them.

    python -m lookahead.claims.run --study FILE [--yes] [--build]

A study has claim settings when it names a predictions file or task instances
(``claims_predictions_path`` / ``claims_instances_path``); otherwise there is nothing to
do. The order is the pipeline's: the agent jobs on the instances (``claims_agent_jobs``:
TimeSPEC by default; Superforecasting and Temporal Hint on request), claim extraction,
support judgments (only with ``claims_support_judge: llm``), coalition values and the
re-prediction check. Every job is cached and resumable, so a rerun asks only what is
missing. ``--build`` then builds the claim models alone (``dbt build --select
+tag:claims``), for a claim-only study such as the regression and ranking demos.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lookahead.config import PROJECT_ROOT, Study, StudyConfigError, load_study
from lookahead.runs import dbt_env, run_dbt
from lookahead.stopping import run_child

AGENT_JOBS = {
    "superforecasting": ["llm_jobs.claims_rationale", "--agent", "superforecasting"],
    "temporal_hint": ["llm_jobs.claims_rationale", "--agent", "temporal_hint"],
    "timespec": ["llm_jobs.claims_timespec"],
}


def has_claims(study: Study) -> bool:
    return bool(study.claims.claims_predictions_path or study.claims.claims_instances_path)


def claim_jobs(study: Study) -> list[list[str]]:
    """The job modules (with arguments) this study's claim settings call for, in order."""
    if not has_claims(study):
        return []
    jobs = []
    if study.claims.claims_instances_path:
        for agent in study.claims.claims_agent_jobs or []:
            if agent not in AGENT_JOBS:
                raise StudyConfigError(f"setting 'claims_agent_jobs': '{agent}' is not one of {', '.join(AGENT_JOBS)}")
            jobs.append(AGENT_JOBS[agent])
    jobs.append(["llm_jobs.claims_extract"])
    if study.claims.claims_support_judge == "llm":
        jobs.append(["llm_jobs.claims_support"])
    jobs += [["llm_jobs.claims_value"], ["llm_jobs.claims_repredict"]]
    return jobs


def run_claim_jobs(study: Study, study_file: str | None, yes: bool) -> int:
    """Run the study's claim jobs as subprocesses; stop at the first that fails."""
    for job in claim_jobs(study):
        cmd = [sys.executable, "-m", *job] + (["--study", study_file] if study_file else []) + (["--yes"] if yes else [])
        print(f"claim job: {' '.join(job)}", flush=True)
        rc = run_child(cmd, env=dbt_env(), cwd=PROJECT_ROOT)  # signals reach it (lookahead.stopping)
        if rc:
            print(
                f"error: claim job {job[0]} failed (exit {rc}); fix the cause and rerun: answers so far are kept", file=sys.stderr
            )
            return rc
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", required=True)
    ap.add_argument("--yes", action="store_true")
    ap.add_argument("--build", action="store_true", help="then dbt build --select +tag:claims")
    a = ap.parse_args(argv)
    study_file = str(Path(a.study).resolve())
    try:
        study = load_study(study_file)
    except StudyConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rc = run_claim_jobs(study, study_file, a.yes)
    if rc or not a.build:
        return rc
    return run_dbt(["build", "--select", "+tag:claims"], study_file)


if __name__ == "__main__":
    sys.exit(main())
