"""One job run's context: the study, the rows to query (after the preflight that refuses
a study which could reach no verdict), the lazily built backend and the cache lookups that
decide which queries are pending (the queries themselves: llm_jobs.queries)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from llm_jobs.queries import Query, QueryPlan, keys_of
from lookahead.backends import Backend, get_backend
from lookahead.cache.index import KeyPositions
from lookahead.cache.lookup import Ident, load_fields
from lookahead.cache.store import RawStore
from lookahead.config import Study, load_study, settings_file_study
from lookahead.consent import Destination
from lookahead.guard import JobStop
from lookahead.keys import sampling_fallback
from lookahead.measures import line_extras
from lookahead.rows import RowFacts, RowScan, release_freed_memory, scan_study_rows, subsample_rows
from lookahead.tasks import needs_bits

LARGE_STUDY_ROWS = 10_000


class Backends:
    """The backends of one job process, one per model: every context made on the same
    model (the protocol jobs', the claim jobs', the reference job's when it is the same
    model) gets the same backend, built when a job first needs it.

    Why: each claim job had a context of its own and loaded the claim model again, and
    the reference job's context loaded its model once for the plan and once for the run."""

    def __init__(self) -> None:
        self._made: dict[str, Backend] = {}
        self.loads = 0  # how many backends were built (a test counts them)

    def get(self, study: Study) -> Backend:
        """``study``'s backend: the one already built for the same backend, model and
        options, else a new one."""
        from lookahead.backends import backend_options

        key = json.dumps([study.backend.backend, study.backend.model_id, backend_options(study)], sort_keys=True, default=str)
        if key not in self._made:
            self._made[key] = get_backend(study)
            self.loads += 1
        return self._made[key]


@dataclass
class JobContext:
    """One job run's settings, rows and (lazily built) backend: from ``backends`` when the
    process shares its backends among its jobs (llm_jobs.run_all), else its own."""

    study: Study
    args: argparse.Namespace
    rows: pd.DataFrame
    n_rejected: int
    _backend: Backend | None = None
    notes: list[str] = field(default_factory=list)
    _row_index: pd.Index | None = field(default=None, repr=False)
    backends: Backends | None = field(default=None, repr=False)

    def input_row(self, row_id: str | None) -> dict[str, Any] | None:
        """The input row of a forecast or Min-K% query (its row_id's row in ``rows``, as
        ``to_dict("records")`` gives it), or None. Looked up when needed (a text to cut)
        rather than held in every query: a dict per row was most of a large job's memory."""
        at = self.row_position(row_id)
        return None if at < 0 else self.rows.iloc[[at]].to_dict("records")[0]

    def row_position(self, row_id: str | None) -> int:
        """Where the row of ``row_id`` is in ``rows`` (-1 when none); the index is built on
        the first call only."""
        if self._row_index is None:
            self._row_index = pd.Index(self.rows["row_id"].astype(str))
        return int(self._row_index.get_indexer([row_id])[0])

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.backends.get(self.study) if self.backends is not None else get_backend(self.study)
        return self._backend

    @property
    def destination(self) -> Destination | None:
        """Where the loaded backend sends prompts (an API backend), for the confirmation;
        None for a model in this process, or before the backend is loaded."""
        return getattr(self._backend, "destination", None)

    @property
    def use_chat_template(self) -> bool:
        return bool(self.study.prompts.use_chat_template)

    @property
    def batch_size(self) -> int:
        return int(self.study.backend.batch_size)

    def for_backend(self, queries: Sequence[Query]) -> list[Query]:
        """The queries with the exact text the backend is sent (its chat template applied
        when the study asks): the backend, and so the model, is loaded only here, when
        something is left to query."""
        if not queries:
            return []
        if not sampling_fallback(self.study) and not getattr(self.backend, "supports_logprobs", True):
            raise JobStop(
                f"backend '{self.study.backend.backend}' returns no logprobs: set "
                "logprobs_available: false (recall then uses the sampling fallback)"
            )
        chat = self.use_chat_template
        if isinstance(queries, QueryPlan):  # kept as columns (a plan of a million rows)
            return queries.sending(lambda text: self.backend.render_prompt(text, chat))  # type: ignore[return-value]
        out = []
        for q in queries:  # a query whose text is sent as it is stays the same object (no copy a row)
            prompt = self.backend.render_prompt(q.prompt, chat)
            out.append(q if prompt == q.prompt else replace(q, prompt=prompt))
        return out


def job_study(args: argparse.Namespace) -> Study:
    """The study a job process runs: the resolved settings file `lookahead jobs/run` hands
    every job and dbt (--settings: the study file plus the command's overrides, such as
    --accept-low-parse-rate and --subsample), else the study file (--study, $LOOKAHEAD_STUDY,
    the default study). Loaded once per process (llm_jobs.run_all passes it to every job's
    context), so the protocol and the claim jobs cannot see different settings."""
    settings = getattr(args, "settings", None)
    if settings:
        return settings_file_study(settings, "--settings")
    return load_study(args.study)


def make_context(
    args: argparse.Namespace, backend: Backend | None = None, study: Study | None = None, backends: Backends | None = None
) -> JobContext:
    """Load the study (unless given: :func:`job_study`'s, loaded once) and the rows to
    query: the valid rows in the study's subsample.

    The rows come from lookahead.rows, the definition dbt staging uses too. The
    subsample is the study's subsample_rows/subsample_seed; --subsample/--seed override
    them for this run only, and a note says how to give dbt the same rows."""
    study, scan, ask_size = scan_context_rows(args, study)
    rows = pd.concat([chunk for chunk, _ in scan.chunks()], ignore_index=True)
    facts = scan.facts(study.protocol.training_cutoff)
    if ask_size and not args.yes and sys.stdin.isatty():
        answer = input("subsample size (blank = all rows): ").strip()
        if answer:
            if not answer.isdigit():
                raise JobStop(f"subsample size '{answer}' is not a number")
            seed = int(study.input.subsample_seed or 0)
            rows = subsample_rows(rows, int(answer), seed)
            facts = RowFacts.of(rows, study.protocol.training_cutoff)
            print(
                f"subsample: {len(rows)} rows (seed {seed}); put 'subsample_rows: "
                f"{answer}' in the study file so dbt build analyses these same rows"
            )
    n_rejected = scan.n_rejected
    del scan
    preflight(study, facts)
    release_freed_memory()
    return JobContext(study, args, rows, n_rejected, backend, backends=backends)


def check_study_links(study: Study) -> None:
    """Stop (one line) before anything is written when a raw or output folder of the study
    is reached through a symbolic link out of the project or the folder named, or is the
    file system's root (lookahead.artefacts.check_symlinked_folders): the jobs lock, append
    to and scan the raw folder, also when started without the lookahead command."""
    from lookahead.artefacts import OutputFolderError, check_symlinked_folders

    try:
        check_symlinked_folders(study)
    except OutputFolderError as err:
        raise JobStop(str(err)) from None


def scan_context_rows(args: argparse.Namespace, study: Study | None = None) -> tuple[Study, RowScan, bool]:
    """The study and a first pass over its rows (lookahead.rows.RowScan: reasons and the
    rows to query, no row held), with the counts and notes every job prints. The rows
    themselves are the scan's ``chunks()``: `make_context` collects them, the preflight of
    `lookahead check` (llm_jobs.preflight) checks them a chunk at a time.
    The flag is True for a large study without a subsample (a terminal may be asked one).
    ``study``: the process's study already loaded (:func:`job_study`, else loaded here)."""
    study = study or job_study(args)
    check_study_links(study)
    if args.seed is not None and args.subsample is None:
        raise JobStop("--seed needs --subsample N (or set subsample_rows in the study file)")
    study_sub = (study.input.subsample_rows, int(study.input.subsample_seed or 0))
    subsample = None
    if args.subsample is not None:
        subsample = (args.subsample, args.seed if args.seed is not None else study_sub[1])
    scan = scan_study_rows(study, subsample)
    n_rows, n_rejected = scan.n_queried, scan.n_rejected
    detail = "; ".join(f"{n} {reason}" for reason, n in scan.reject_counts().items())
    if n_rows == 0:
        raise JobStop(
            f"no valid rows in {study.input.data_path} ({n_rejected} rejected"
            + (f": {detail}" if detail else "")
            + "); see seeds/reject_reasons.csv"
        )
    # valid rows, not "rows to query": how many are asked (the rest cached) is each job's plan
    print(f"study '{study.output.study_name}': {n_rows} valid rows, {n_rejected} rejected" + (f" ({detail})" if detail else ""))
    size, seed = subsample or study_sub
    if size is not None:
        print(f"subsample: {n_rows} rows (subsample_rows {size}, seed {seed})")
        if subsample is not None and subsample != study_sub:
            print(
                f"note: dbt build and the report follow the study file: put 'subsample_rows: {size}' "
                f"and 'subsample_seed: {seed}' in it so they analyse these same rows"
            )
    elif n_rows > LARGE_STUDY_ROWS:
        print(
            f"note: {n_rows} rows is a large study; consider a seeded random subsample first "
            f"(subsample_rows: 2000 and subsample_seed: 0 in the study file)."
        )
        return study, scan, True
    return study, scan, False


def preflight(study: Study, facts: RowFacts) -> None:
    """Refuse, before anything is asked or paid for, a study whose rows cannot reach a
    verdict or would get one the answers cannot change: too few rows for gate_panel
    (min_panel_rows), no pre-cutoff row (the verdict would be Underpowered: nothing to
    test), fewer than two pre-cutoff clusters (beta_3's clustered test cannot run).
    The prompts' placeholders and lengths are checked next, by each job's plan, also
    before its confirmation. ``facts`` (lookahead.rows.RowFacts) are counts of the rows
    to query, so that the check needs no copy of them."""
    n_pre, n_post = facts.n_pre, facts.n_rows - facts.n_pre
    counts = (
        f"{facts.n_rows} valid rows ({n_pre} pre-cutoff, {n_post} post-cutoff, training_cutoff {study.protocol.training_cutoff})"
    )
    print(f"preflight: {counts}")
    fix = "nothing was queried; add rows, or check training_cutoff and the date columns"
    if facts.n_rows < int(study.protocol.min_panel_rows):
        raise JobStop(
            f"{counts}: fewer than min_panel_rows ({study.protocol.min_panel_rows}), so gate_panel "
            f"would stop the build and no verdict could be reached; {fix}"
        )
    if n_pre == 0:
        raise JobStop(
            f"{counts}: no pre-cutoff row, so the verdict could only be Underpowered (the detection test cannot run); {fix}"
        )
    cluster = str(study.protocol.cluster)
    n_clusters = {"entity": facts.pre_entities, "date": facts.pre_dates}.get(cluster)
    if n_clusters is not None and n_clusters < 2:
        if cluster == "entity" and facts.entities == 1:
            # a single entity is a time series: the protocol's regression for it drops the
            # entity effect and uses Newey-West, which cluster: none asks for
            fix = (
                "nothing was queried; a single entity is a time series: set cluster: none (no entity "
                "fixed effect, Newey-West standard errors), or add entities"
            )
        raise JobStop(
            f"{counts}: the pre-cutoff rows form {n_clusters} cluster(s) (cluster: "
            f"{cluster}), so beta_3's clustered test cannot run and the verdict could only be "
            f"Underpowered; {fix}"
        )


def study_shard(study_name: str) -> str:
    """The shard folder a study's job appends to when another process writes the shared
    file (lookahead.cache.store.RawStore own_shard): one path segment, named after the study."""
    import hashlib
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", study_name)[:48].strip(".") or "study"
    return f"study-{safe}-{hashlib.sha256(study_name.encode()).hexdigest()[:8]}"


def open_store(ctx: JobContext, task: str) -> RawStore:
    """A job's cache file, readable even where it cannot be written (a complete cache in
    a read-only folder is reused; RawStore.require_writable stops a job with work left).
    While another process writes the file (a second study sharing raw_dir), the job
    appends to its own shard instead (:func:`study_shard`)."""
    return RawStore(ctx.study.raw_file(task), read_only_ok=True, own_shard=study_shard(ctx.study.name))


def query_ident(ctx: JobContext, task: str, q: Query) -> Ident:
    """The fields a cached line must share with query ``q`` (lookahead.cache.lookup.ident_of),
    its fields hashing to its key included."""
    return (task, str(ctx.study.backend.model_id), q.row_id, q.entity_id, q.target_date, True)


def line_needs(study: Any, task: str) -> tuple[str, ...]:
    """The extras a `task` line must carry to answer the study (lookahead.measures
    line_extras: the vocabulary moments for Min-K%++, the zlib length for zlib); a line
    without them is the same forward pass but not enough, so its row is asked again."""
    return tuple(line_extras(study, task))


def not_cached(ctx: JobContext, store: RawStore, task: str, queries: Sequence[Query]) -> Sequence[Query]:
    """The queries without an answer in the cache: no line under their key, only lines
    whose fields disagree with it (the build lists those in raw_line_rejects), which the
    job says in one line before asking them again, or only lines without the extras the
    study needs (:func:`line_needs`), also said in one line."""
    needs = needs_bits(line_needs(ctx.study, task))
    if isinstance(queries, QueryPlan):  # a slice's keys looked up together, no prompt rendered
        at = []
        for a in range(0, len(queries), QueryPlan.SLICE_ROWS):
            b = min(len(queries), a + QueryPlan.SLICE_ROWS)
            idents = [query_ident(ctx, task, Query("", "", row_id=r)) for r in queries.row_ids(a, b)]
            found = store.has_answers(queries.keys[a:b].to_pylist(), idents, needs)
            at += [a + i for i, ok in enumerate(found) if not ok]
    else:
        at = [i for i, q in enumerate(queries) if not store.has_answer(q.key, query_ident(ctx, task, q), needs)]
    # a plan stays a plan (its columns, no Query object a row); a list keeps its objects
    pending = queries.take(at) if isinstance(queries, QueryPlan) else [queries[i] for i in at]
    if needs:
        if isinstance(pending, QueryPlan):
            idents = [query_ident(ctx, task, Query("", "", row_id=r)) for r in pending.row_ids(0, len(pending))]
        else:
            idents = [query_ident(ctx, task, q) for q in pending]
        lacking = sum(store.has_answers(list(keys_of(pending)), idents))
        if lacking:
            print(
                f"{task}: {lacking} cached line(s) lack what the study's measures need "
                f"({', '.join(line_needs(ctx.study, task))}): those rows are asked again"
            )
    else:
        lacking = 0
    disagreeing = sum(1 for key in keys_of(pending) if key in store) - lacking  # no prompt rendered a query
    if disagreeing:
        print(
            f"{task}: {disagreeing} cached line(s) disagree with their key (another row, task or model, "
            "or query text or params that do not hash to it): not used, asked again; the build lists "
            "them in raw_line_rejects"
        )
    return pending


def cached_records(ctx: JobContext, store: RawStore, task: str, queries: Sequence[Query]) -> dict[str, dict[str, Any]]:
    """key -> the answer line of each query (only lines that agree with their key)."""
    return store.load({q.key: query_ident(ctx, task, q) for q in queries})


def cached_fields(
    ctx: JobContext,
    store: RawStore,
    task: str,
    queries: Sequence[Query],
    fields: Sequence[str],
    derived: Mapping[str, Callable[[dict[str, Any]], Any]] | None = None,
) -> tuple[list[bool], dict[str, list[Any]]]:
    """The named fields of each query's answer line, in the order of ``queries``: (found,
    {field: values}), the line :func:`cached_records` would give (only lines that agree with
    their key; first written wins). A summary reads these instead of every whole line, so
    its memory is a few values a row (lookahead.cache.lookup.load_fields); the expected fields of a
    key are made only for the lines read, not held for the whole study. ``derived``:
    values computed from each line as it is read (lookahead.cache.lookup.load_fields)."""
    position = KeyPositions(keys_of(queries))  # a key's first position; numpy, not a dict of strings
    if isinstance(queries, QueryPlan):  # the ident needs the row_id only: no prompt rendered a line
        plan = queries

        def expect(i: int) -> Ident:
            return query_ident(ctx, task, Query("", "", row_id=plan.row_id_at(i)))
    else:

        def expect(i: int) -> Ident:
            return query_ident(ctx, task, queries[i])

    found, cols = load_fields(
        store.root, store.task, position, fields, expect, n=len(queries), derived=derived, needs=line_needs(ctx.study, task)
    )
    for i, j in position.duplicates:  # a key asked twice: each asks for the same line
        found[i] = found[j]
        for col in cols.values():
            col[i] = col[j]
    return found, cols
