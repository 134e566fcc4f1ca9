"""Reference-model LAP: the Min-K% prompts scored by the study's reference model.

Run alone: ``lookahead jobs --study FILE --only reference --yes`` (else with the study's other jobs)

The `reference` measure (lookahead/measures.py) compares the target's mean prompt
log-prob with a reference model's on the same prompt (Carlini et al. 2021). This job
asks the reference model (`reference_model_id`, `reference_model_path`, on the study's
backend) for every forecast prompt's token log-probs, exactly as the Min-K% job asks the
target, into its own raw file <raw_dir>/reference.jsonl under keys that hash the
reference's model_id (lookahead.keys.reference_study). A study that does not
compute the measure asks nothing.
"""

from __future__ import annotations

from llm_jobs.context import JobContext
from llm_jobs.mink import plan, score_prompts
from lookahead.guard import EXIT_OK
from lookahead.keys import reference_study, task_params
from lookahead.measures import REFERENCE_TASK, computes

TASK = REFERENCE_TASK


def reference_context(ctx: JobContext) -> JobContext:
    """The job context with the reference model in place of the target (its own backend)."""
    return JobContext(reference_study(ctx.study), ctx.args, ctx.rows, ctx.n_rejected, backends=ctx.backends)


def plan_reference(ctx: JobContext) -> None:
    """The reference job's plan (template guards, keys) when the study computes it."""
    if computes(ctx.study, "reference"):
        plan(reference_context(ctx), task_params(ctx.study, TASK), TASK)


def run(ctx: JobContext) -> int:
    if not computes(ctx.study, "reference"):
        print("reference-model LAP: not computed by this study (lap_measure, lap_measures); nothing to ask")
        return EXIT_OK
    ref = reference_context(ctx)
    queries = score_prompts(ref, TASK, task_params(ctx.study, TASK))
    print(
        f"reference model '{ref.study.backend.model_id}': {len(queries)} prompts scored; dbt build "
        "computes the reference-model LAP from their lines (int_lap_reference)"
    )
    return EXIT_OK
