"""Protocol step 2: the date-only recall query, one per unique (entity_id, target_date).

Run alone: ``lookahead jobs --study FILE --only recall --yes`` (else with the study's other jobs)

Pairs are deduplicated before querying; the template (protocol default, configurable)
is filled with the outcome description and reference period and wrapped in the model's
chat template when it has one. The labels are checked on the exact tokenizer first.
Queries are temperature 0, max_tokens 1, top-20 logprobs; P(label) follows the
protocol rule and a label absent from the top-20 is counted as censored, not zero.
Without logprobs the sampling fallback (>= 25 samples at temperature 1, fixed seed)
runs only with --allow-sampling, and its lines say approximated=true.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from llm_jobs.context import JobContext, cached_fields, not_cached, open_store
from llm_jobs.failures import refused_keys, require_complete, skip_refused
from llm_jobs.jobs_plan import say_repaired
from llm_jobs.planning import confirm, print_plan, prompt_token_limit, too_long_stop
from llm_jobs.queries import Query
from llm_jobs.query_loop import logprob_dicts
from llm_jobs.runners import query_all
from lookahead.backends.base import Backend, QueryFailure
from lookahead.config import protocol_setting
from lookahead.guard import EXIT_OK, JobStop
from lookahead.keys import (
    EXACT,
    MIN_SAMPLES,
    pair_keys,
    recall_probabilities,
    recall_prompt_column,
    sampling_fallback,
    task_params,
)
from lookahead.prompts import check_recall_labels
from lookahead.rows import unique_pairs

TASK = "recall"


def label_tokenizer(ctx: JobContext) -> Any:
    """The exact tokenizer of the model: the backend's ``tokenizer`` attribute, else one
    loaded from tokenizer_path / model_path (API backends serving a local model)."""
    tok = getattr(ctx.backend, "tokenizer", None)
    if tok is not None and hasattr(tok, "encode"):
        return tok
    local = ctx.study.backend.tokenizer_path or ctx.study.backend.model_path
    if local:
        from transformers import AutoTokenizer

        gguf = ctx.study.backend.gguf_file
        kw = {"gguf_file": str(gguf)} if gguf else {}
        return AutoTokenizer.from_pretrained(str(ctx.study.resolve(local)), **kw)
    raise JobStop(
        "recall labels must be checked on the model's exact tokenizer: set 'tokenizer_path' to a "
        "local copy of it (protocol step 2)"
    )


def resolve_labels(ctx: JobContext, sample_prompt: str) -> dict[str, str]:
    """Checked labels (synonyms substituted); a substituted label must be asked for.

    With exact probabilities (setting recall_probabilities) a multi-token label is scored
    by teacher forcing, so the labels stay as configured (they must still be distinct)."""
    labels = {k: str(v) for k, v in protocol_setting("recall_labels", ctx.study.prompts.recall_labels).items()}
    if recall_probabilities(ctx.study) == EXACT:
        if len({v.strip().lower() for v in labels.values()}) < len(labels):
            raise JobStop(f"setting 'recall_labels': labels {labels} are not distinct")
        print(
            "recall labels scored exactly (full next-token distribution; a multi-token label by "
            "teacher forcing): " + ", ".join(f"{k}='{v}'" for k, v in labels.items())
        )
        return labels
    check = check_recall_labels(label_tokenizer(ctx), labels, ctx.study.prompts.recall_label_synonyms or {}, sample_prompt)
    template = str(ctx.study.prompts.recall_template)
    for note in check.notes:
        print(f"note: {note}")
    for role, lab in check.labels.items():
        if lab != labels[role] and f"{{label_{role}}}" not in template and lab not in template:
            raise JobStop(
                f"setting 'recall_template': label '{labels[role]}' was replaced by '{lab}' "
                f"(single token); the template must ask for it: write {{label_{role}}} where "
                f"the answer word goes"
            )
    print(
        f"recall labels checked on the model's tokenizer ({check.emitted_form} form): "
        + ", ".join(f"{k}='{v}'" for k, v in check.labels.items())
    )
    return check.labels


def plan(ctx: JobContext, params: dict[str, Any], labels: dict[str, str] | None) -> list[Query]:
    """One query per unique (entity_id, target_date), keyed by lookahead.keys. The prompt
    sent uses ``labels`` (the tokenizer-checked ones, when they differ from the study's);
    the key hashes the prompt with the study's labels (the swap is fixed by the model and
    label_synonyms, both in the key), and that is the line's query_text, so that a line's
    fields hash to its key (lookahead.keys.fields_key)."""
    pairs = unique_pairs(ctx.rows)  # every pair at once: a study may have millions
    keys = pair_keys(ctx.study, pairs, params).to_pylist()
    texts = recall_prompt_column(ctx.study, pairs).to_pylist()
    prompts = recall_prompt_column(ctx.study, pairs, labels).to_pylist() if labels else texts
    return [
        Query(key, prompt, entity_id=str(pair["entity_id"]), target_date=pair["target_date"], text=text)
        for key, prompt, text, pair in zip(keys, prompts, texts, pairs.to_dict("records"), strict=False)
    ]


def plan_pending(ctx: JobContext, params: dict[str, Any], labels: dict[str, str], keys: set[str]) -> list[Query]:
    return [q for q in plan(ctx, params, labels) if q.key in keys]


def check_recall_lengths(ctx: JobContext, queries: Sequence[Query]) -> None:
    """Every recall prompt fits the context length with room for its one-token answer."""
    limit, too_long = recall_too_long(ctx, queries)
    if too_long:
        raise too_long_stop("recall prompt", too_long, len(queries), limit, 1, can_truncate=False)


def recall_too_long(ctx: JobContext, queries: Iterable[Query]) -> tuple[int, list[tuple[str, int]]]:
    """(prompt token limit, the recall prompts over it as (pair, tokens)); no prompt is
    over an unknown limit (then the limit reads 0). Apart from the stop so that `lookahead
    check` can count a study's pairs a slice at a time and stop once, with the same line."""
    limit, count = prompt_token_limit(ctx, 1)
    if limit is None or count is None:
        return 0, []
    return limit, [(f"{q.entity_id} {q.target_date}", n) for q in queries if (n := count(q.prompt)) > limit]


def run(ctx: JobContext) -> int:
    sampling = sampling_fallback(ctx.study)
    if sampling and not ctx.args.allow_sampling:
        raise JobStop(
            "logprobs_available is false: the sampling fallback "
            f"(>= {MIN_SAMPLES} samples per query at temperature 1) multiplies the query count and "
            "needs its own approval: rerun with --allow-sampling"
        )
    params = task_params(ctx.study, TASK)
    queries = plan(ctx, params, None)
    print(f"recall: {len(ctx.rows)} rows -> {len(queries)} unique (entity_id, target_date) pairs")
    with open_store(ctx, TASK) as store:
        say_repaired(store)
        pending = skip_refused(TASK, store, not_cached(ctx, store, TASK, queries), bool(getattr(ctx.args, "retry_failed", False)))
        store.require_writable(len(pending))  # before the model loads: nothing to ask, no lock needed
        store.claim(q.key for q in pending)  # another study sharing raw_dir waits for these (llm_jobs.sharing)
        labels = {k: str(v) for k, v in protocol_setting("recall_labels", ctx.study.prompts.recall_labels).items()}
        # The label check needs the model's tokenizer (importing torch and transformers,
        # seconds): it runs only when something is left to ask; answered keys passed it.
        if pending:
            labels = resolve_labels(ctx, ctx.for_backend(pending[:1])[0].prompt)
            pending = ctx.for_backend(plan_pending(ctx, params, labels, {q.key for q in pending}))
            check_recall_lengths(ctx, pending)
        mult = params["n_samples"] if sampling else 1
        print_plan(ctx, TASK, "unique pairs", len(queries), pending, 1, multiplier=mult)
        if pending:
            if sampling:
                print(
                    f"SAMPLING FALLBACK: {len(pending)} queries x {mult} samples at temperature 1 "
                    f"(seed {params['seed']}); results will be labelled approximated"
                )
                confirm(f"run {len(pending) * mult} sampled generations?", ctx.args.yes, ctx.destination)
            else:
                confirm(f"query {len(pending)} recall pairs?", ctx.args.yes, ctx.destination)

            answer = functools.partial(
                recall_answer,
                sampling=sampling,
                n_samples=params["n_samples"],
                seed=params["seed"],
                top_logprobs=params["top_logprobs"],
                exact_labels=labels if params.get("recall_probabilities") == EXACT else None,
            )
            tally = query_all(ctx, store, pending, TASK, answer, params)
            require_complete(tally, store)
        store.forget()  # the completeness check reads the lines themselves: the key index goes first
        found, _ = cached_fields(ctx, store, TASK, queries, ())
        refused = refused_keys(store) if not all(found) else {}
    if not all(found):
        missing = [q for q, ok in zip(queries, found, strict=False) if not ok and q.key not in refused]
        if missing:
            q = missing[0]
            raise JobStop(
                f"recall: {len(missing)} pairs have no answer in the cache (e.g. {q.entity_id} "
                f"{q.target_date}); run the same command again to ask them"
            )
        print(
            f"recall: {found.count(False)} of {len(found)} pairs excluded: the server refused them "
            "for good (counted in the report's exclusions)"
        )
    print(
        f"recall: {found.count(True)} of {len(found)} pairs answered; dbt build "
        "scores them (P(label), the LAP, each label's censoring: int_recall_pairs, recall_censoring)"
    )
    return EXIT_OK


def recall_answer(
    backend: Backend,
    batch: list[Query],
    *,
    sampling: bool,
    n_samples: int | None,
    seed: int,
    top_logprobs: int | None,
    exact_labels: dict[str, str] | None = None,
) -> list[dict[str, Any] | QueryFailure]:
    """One batch of recall queries: the top log-probs of the one answer token, or in the
    sampling fallback n_samples sampled answers (llm_jobs.query_loop.Answer). With
    `exact_labels` the line also records each label's exact log-probability and how it was
    obtained (`label_logprobs`, `probability_method: exact`)."""
    prompts = [q.prompt for q in batch]
    if sampling:
        samples = backend.try_sample(prompts, int(n_samples or 0), seed, 1)
        return [
            s
            if isinstance(s, QueryFailure)
            else {"samples": s, "response_text": s[0] if s else None, "top_logprobs": [], "approximated": True}
            for s in samples
        ]
    gens = backend.try_generate(prompts, 1, int(top_logprobs or 0))
    exact = backend.label_logprobs(prompts, exact_labels) if exact_labels else None  # type: ignore[attr-defined]
    out: list[dict[str, Any] | QueryFailure] = []
    for i, g in enumerate(gens):
        if isinstance(g, QueryFailure):
            out.append(g)
            continue
        line: dict[str, Any] = {"response_text": g.response_text, "top_logprobs": logprob_dicts(g.top_logprobs)}
        if exact is not None:
            line.update({"label_logprobs": exact[i], "probability_method": EXACT})
        out.append(line)
    return out
