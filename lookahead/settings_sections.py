"""The study settings as typed sections, one per concern. GENERATED from
lookahead/study_settings.yml by `python scripts/generated_files.py --write-sections`; do not edit
(tests/python/test_settings.py fails when this file is stale).

Why generated: the YAML stays the one declaration (type, default, meaning, concern), and
a reader, a type checker or an editor still sees every field with its type and its
meaning. A resolved :class:`lookahead.config.Study` hands the sections out
(``study.backend.concurrency``); ``with_defaults`` builds one outside a study (a
backend made by hand, a row function called directly), declared defaults filling the
rest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property
from typing import Any, ClassVar, Literal, TypeVar

S = TypeVar("S", bound="Section")


class Section:
    """What every section shares: built from a resolved study's values, or by hand."""

    # every section is a dataclass: declared here so dataclasses.fields() types on cls
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def from_vars(cls: type[S], values: Mapping[str, Any]) -> S:
        """The section of a resolved study (lookahead.config.resolve: every setting present)."""
        return cls(**{f.name: values[f.name] for f in fields(cls)})

    @classmethod
    def with_defaults(cls: type[S], **given: Any) -> S:
        """A section from the settings given (others ignored), declared defaults for the
        rest and None for an identifying setting not given. For code outside a study;
        values are not checked here (lookahead.config.check_setting checks one)."""
        names = {f.name for f in fields(cls)}
        required = {f.name: None for f in fields(cls)
                    if f.default is MISSING and f.default_factory is MISSING}
        return cls(**{**required, **{k: v for k, v in given.items() if k in names and v is not None}})


@dataclass(frozen=True, kw_only=True)
class OutputSettings(Section):
    """What the study is called and where its files go."""

    study_name: str
    """Names the study; its database is outputs/<study_name>.duckdb and its results default to
    results/<study_name>/."""
    study_kind: Literal['protocol', 'claims'] = 'protocol'
    """protocol: the lookahead-bias test (seed 000) on data_path, with the claim-level tables
    beside it when claim settings are given; claims: a claim-only study (seed 002,
    docs/claims.md), its predictions and corpus without an observations file, so the protocol's
    settings (data_path, column_map, training_cutoff, prompts and labels) are not asked for and
    only the claim jobs and models run."""
    raw_dir: str
    """The LLM jobs' JSONL cache, <raw_dir>/{forecast,recall,mink}.jsonl."""
    results_dir: str | None = None
    """Where `lookahead report` writes REPORT.md and its CSVs (null = results/<study_name>)."""
    outputs_dir: str | None = None
    """Where `lookahead report` writes the Stata panels, panel_pre.dta and panel_post.dta (null =
    outputs/<study_name>)."""
    stale_reports_kept: int = 3
    """How many older retired report sets (stale.1, stale.2, ... beside stale/) a results or
    outputs folder keeps; older ones, oldest first, are deleted when a report is retired."""
    follow_symlinks: bool = False
    """Allow results_dir, outputs_dir, raw_dir, claims_raw_dir, and the folders inside them, to be
    symbolic links that lead out of the project or out of the folder you named (false: refused
    in one line)."""


@dataclass(frozen=True, kw_only=True)
class InputSettings(Section):
    """The observations file and how its rows are read and subsampled."""

    data_path: str | None = None
    """The observations, a CSV or parquet file."""
    column_map: dict[str, str | None] | None = None
    """Protocol column -> your column name (row_id and ticker may be null; row_id is then derived)."""
    extra_columns: list[str] = field(default_factory=lambda: [])
    """Input columns carried into the panel (moderators such as `small`)."""
    csv_delimiter: Literal[',', ';', '|', 'tab'] | None = None
    """CSV delimiter (null = sniffed from the header line; lookahead/rows.py states the rule)."""
    date_format: str | None = None
    """strptime format for non-ISO dates, e.g. '%d/%m/%Y' (null: a numeric day/month date such as
    10/05/2021 is rejected as ambiguous)."""
    date_timezone: str | None = None
    """IANA time zone in which timestamps with an offset are dated (null: the calendar date as
    written)."""
    id_normalization: Literal['as_written', 'strip_zeros'] = 'as_written'
    """How entity ids are compared (lookahead/rows.py): as_written (stripped of whitespace), or
    strip_zeros (an all-digit id also loses its leading zeros, so 014593 and 14593 are one
    entity); `lookahead check` warns when an all-digit id column mixes zero-padded and unpadded
    values."""
    subsample_rows: int | None = None
    """Analyse a seeded random subsample of this many valid rows (null = all); jobs and dbt pick
    the same rows and the report says so."""
    subsample_seed: int = 0
    """Seed of the subsample (rows ranked by sha256(seed|row_id))."""
    check_warn_rejected_share: float = 0.05
    """`lookahead check` warns when more than this share of the input rows is rejected
    (lookahead/check_rules.py)."""
    check_refuse_rejected_share: float = 0.2
    """`lookahead check` refuses a study when more than this share of the input rows is rejected,
    naming the top reason and what fixes it (seeds/reject_reasons.csv)."""


@dataclass(frozen=True, kw_only=True)
class PromptsSettings(Section):
    """The forecast and recall queries, their answers and how a prompt must fit."""

    outcome_description: str | None = None
    """What the outcome is, as the recall query names it ({outcome_description})."""
    reference_period: str | None = None
    """What the outcome moves against, as the recall query names it ({reference_period})."""
    forecast_prompt: str | None = None
    """Your production forecast prompt, used verbatim; placeholders are input columns in braces."""
    forecast_labels: dict[str, Any] | None = None
    """Forecast answer label -> its numeric signal mu_hat (e.g. {up: 1, down: -1})."""
    recall_template: str | None = None
    """The protocol's date-only recall query (no text, only entity and target date)."""
    recall_labels: dict[str, Any] | None = None
    """The recall answer words for up, down and unknown."""
    use_chat_template: bool
    """Wrap prompts in the model's chat template (true for instruct models)."""
    forecast_max_tokens: int = 16
    """Forecast answer length (temperature 0)."""
    context_length: int | None = None
    """The model's context length in tokens (null = ask the backend; API backends - set it)."""
    prompt_overflow: Literal['error', 'truncate_text'] = 'error'
    """A prompt longer than the context - error (stop before any query) or truncate_text (cut
    {text}, counted in the report)."""
    forecast_prompt_allowed_columns: list[str] = field(default_factory=lambda: [])
    """Columns the forecast prompt may use although they can leak the answer (outcome,
    target_date)."""
    recall_label_synonyms: dict[str, Any] = field(default_factory=lambda: {})
    """Extra words per recall label, used when a label is several tokens (e.g. {up: [rise]})."""


@dataclass(frozen=True, kw_only=True)
class BackendSettings(Section):
    """The model and the backend that serves it (each backend reads what it uses)."""

    model_id: str
    """The exact model version queried; part of every cache key."""
    backend: Literal['transformers', 'vllm', 'openai']
    """How the model is queried (docs/backends.md)."""
    model_path: str | None = None
    """Local weights (a directory, or the folder of gguf_file) for transformers and vLLM."""
    base_url: str | None = None
    """The OpenAI-compatible endpoint (a non-loopback host also needs allow_remote and the host
    named on the command line: --allow-remote HOST)."""
    gguf_file: str | None = None
    """A GGUF file name inside model_path (transformers loads it)."""
    tokenizer_path: str | None = None
    """Tokenizer folder when it differs from model_path (openai completions renders chat templates
    with it)."""
    batch_size: int = 16
    """Queries per batch; one raw line is appended per answer."""
    torch_threads: int | None = None
    """transformers backend - torch threads (null = torch's default)."""
    logprobs_available: bool = True
    """false = recall uses the sampling fallback (needs --allow-sampling)."""
    recall_probabilities: Literal['exact', 'top_logprobs'] | None = None
    """How recall reads P(label) (docs/cutoff.md, Exact label probabilities): exact = from the full
    next-token distribution, a multi-token label by teacher forcing (transformers); top_logprobs
    = the protocol's top-20 rule with censoring; null = exact where the backend offers it
    (transformers), else top_logprobs."""
    dtype: Literal['float32', 'bfloat16', 'float16'] | None = None
    """Model weights' dtype for transformers and vLLM (null = float32; bfloat16 or float16 joins
    every query's key: other answers)."""
    matmul_precision: Literal['highest', 'high', 'medium'] | None = None
    """transformers backend - torch float32 matmul precision for Min-K% (null = float32 arithmetic
    on every machine: highest, or medium on a CPU where a probe finds it still float32; high and
    medium mean TF32 on cuda and bf16 kernels on CPUs with AMX or AVX512-BF16; set, it joins the
    Min-K% key)."""
    device: Literal['cpu', 'cuda'] | None = None
    """transformers backend - where the model runs: cpu or cuda (one GPU) (null = cpu). Not part of
    the key: Min-K% stays fp32 on both (docs/backends.md)."""
    mink_body_dtype: Literal['float32', 'float32_transformers', 'bfloat16'] | None = None
    """transformers backend - Min-K% decoder body: float32 (packed fp32 body for Llama models),
    float32_transformers (transformers' own fp32 body) or bfloat16 (faster, moves LAP ~5-15%, so
    it joins the Min-K% key) (null = float32)."""
    seed: int = 0
    """Backend seed where the backend takes one (vLLM)."""
    max_model_len: int = 2048
    """vLLM - context length the engine accepts (max_model_len)."""
    gpu_memory_utilization: float = 0.3
    """vLLM - share of accelerator memory for the engine (on CPU, the share of RAM reserved for the
    KV cache)."""
    api_key_env: str | None = None
    """openai backend - the environment variable holding the key (never the key itself): a name
    ending in _API_KEY or _API_TOKEN, or one named on the command line with --api-key-env NAME."""
    allow_remote: bool = False
    """openai backend - the study's half of the consent to send your text and entity names to a
    non-loopback host; the person running the command gives the other half (--allow-remote
    HOST), never the study file alone."""
    api_mode: Literal['completions', 'chat'] = 'completions'
    """openai backend - completions (chat template rendered locally) or chat."""
    served_model: str | None = None
    """openai backend - the model name the server expects (null = model_id)."""
    mink_source: Literal['auto', 'prompt_logprobs', 'echo'] = 'auto'
    """openai backend - how Min-K% gets prompt log-probs (auto: the first the server supports)."""
    concurrency: int = 8
    """openai backend - requests in flight."""
    max_retries: int = 6
    """openai backend - retries per request."""
    timeout_s: float = 60.0
    """openai backend - seconds per request."""
    backoff_s: float = 0.5
    """openai backend - first retry wait in seconds (doubled per attempt)."""
    backoff_max_s: float = 30.0
    """openai backend - longest retry wait in seconds."""
    backend_options: dict[str, Any] = field(default_factory=lambda: {})
    """Anything else passed to the backend unchanged (docs/backends.md)."""


@dataclass(frozen=True, kw_only=True)
class RunnerSettings(Section):
    """How the LLM jobs run their queries - local or Ray, the price, the sampling fallback."""

    runner: Literal['local', 'ray'] = 'local'
    """Where the jobs' queries run - local (this process) or ray (Ray Data workers, one cache shard
    each; docs/scaling.md)."""
    ray_address: str | None = None
    """runner ray - the cluster to join (e.g. auto, or host:6379; null = start a local one with
    ray_workers CPUs)."""
    ray_workers: int = 2
    """runner ray - model replicas (Ray actors), each holding the backend and writing its own
    shard."""
    ray_gpus_per_worker: float = 0.0
    """runner ray - GPUs each worker reserves (1 for a vLLM replica per GPU; 0 on CPU)."""
    failed_query_passes: int = 2
    """Passes a job makes, after asking every query, over the queries still without an answer from
    a transient failure (each pass with the backend's full retry bound), before it stops with
    exit 4: a fault storm then ends in one command (0 = none; permanent failures are never asked
    again: --retry-failed)."""
    price_per_1k_tokens: float | None = None
    """Cost estimate per 1,000 tokens (null = 0 for local backends, unknown for APIs)."""
    n_samples: int = 25
    """Sampling fallback - samples per query (at least 25)."""
    sampling_seed: int = 0
    """Sampling fallback - its fixed seed."""
    accept_low_parse_rate: bool = False
    """Accept a forecast parse rate below 95%: unparsed rows are excluded and counted in the report
    (`lookahead run --accept-low-parse-rate` sets it for one run)."""


@dataclass(frozen=True, kw_only=True)
class ProtocolSettings(Section):
    """The protocol's analysis (seed 000) - cutoff, periods, clustering, inference."""

    training_cutoff: str | None = None
    """The model's training cutoff (YYYY-MM-DD, quoted); pre-cutoff rows have target_date <= it."""
    period_frequency: Literal['trading_day', 'day', 'week', 'month', 'fiscal_quarter'] = 'month'
    """Realization-period fixed effects."""
    fiscal_year_end_month: int = 12
    """Last month of the fiscal year (period_frequency fiscal_quarter)."""
    cluster: Literal['entity', 'period', 'date', 'none'] = 'entity'
    """Standard-error clusters of the protocol regressions (the protocol - entity)."""
    high_lap_rule: Literal['pooled_median', 'entity_mean_median'] = 'pooled_median'
    """How rows are split into high and low LAP within each sample."""
    nw_lag: int | None = None
    """Newey-West lag for a single entity (null = floor(4(N/100)^(2/9)))."""
    lap_min_sd: float | None = None
    """Minimal LAP sd for \"meaningful variation\" (null = the verdict's default)."""
    wild_bootstrap_draws: int = 999
    """Restricted wild cluster bootstrap draws for every test the verdict reads (beta_3, the
    validation thetas and their difference, the placebo), at any cluster count; a p-value within
    two Monte Carlo SEs of its threshold is extended up to 63,999 draws (0 = off: CRV1 p-values,
    with a warning)."""
    wild_bootstrap_weights: Literal['webb', 'rademacher'] = 'webb'
    """Wild bootstrap weights (webb - 6-point, for few clusters)."""
    wild_bootstrap_seed: int = 20240101
    """The wild bootstrap's fixed seed; its p-values are reproducible from it."""
    min_panel_rows: int = 30
    """Fewest panel rows a build accepts: below it the panel gate stops the build (too little data
    to test anything)."""
    check_min_effective_clusters: float = 10.0
    """`lookahead check` warns when the pre-cutoff rows form fewer effective clusters (G*, from the
    cluster sizes) than this: cluster-robust inference is unreliable."""


@dataclass(frozen=True, kw_only=True)
class MeasuresSettings(Section):
    """The LAP measures - which one the verdict uses and how Min-K% is computed."""

    lap_measure: Literal['recall', 'mink', 'loss', 'zlib', 'minkpp', 'reference'] = 'recall'
    """LAP - the measure the verdict reads (docs/measures.md - recall, mink, loss, zlib, minkpp,
    reference)."""
    lap_measures: list[str] = field(default_factory=lambda: ['recall', 'mink'])
    """LAP - the further measures the study computes beside lap_measure, for the report's
    robustness table (docs/measures.md); the prompt measures share one forward pass per prompt."""
    min_measure_coverage: float = 0.95
    """The one threshold for rows without a measure: the share of valid rows that must stay in the
    panel when rows are excluded because an LLM query was refused for good (a permanent failure:
    int_refused_rows, listed in rejected_rows), and the share of panel rows each LAP measure the
    study computes must score; under it the build stops naming the count and this setting
    (lookahead/gates.py, lookahead/coverage.py). Default 0.95: one row a server refuses for good
    never blocks a study of 20 rows or more, and the verdict paragraph names the share excluded
    once it is over 1%; 1 = every row. A query without an answer that a rerun may still get
    stops the build earlier, whatever this says."""
    mink_k: float = 0.2
    """Min-K% - the share K of lowest-probability prompt tokens (the paper - 0.2)."""
    mink_mean: Literal['geometric', 'arithmetic'] = 'geometric'
    """Min-K% mean - geometric (paper eq. 1) or arithmetic (its table notes)."""
    reference_model_id: str | None = None
    """Reference-model LAP - the reference model (e.g. a point-in-time model with an earlier
    cutoff), queried on the study's backend; its name joins the reference task's cache key;
    required when the study computes `reference` (docs/measures.md)."""
    reference_model_path: str | None = None
    """Reference-model LAP - local weights of reference_model_id for transformers/vLLM (null = load
    reference_model_id by name); model_path, gguf_file, tokenizer_path and served_model are
    never inherited from the target."""


@dataclass(frozen=True, kw_only=True)
class PaperSettings(Section):
    """The paper's analysis (seed 001) - its clustering, moderator and bootstrap."""

    paper_cluster: Literal['date', 'entity', 'period', 'none'] = 'date'
    """Clusters of the paper's Tables II-V (the paper - date)."""
    moderator_column: str | None = None
    """A binary 0/1 column of extra_columns for Table III (null = Table III skipped)."""
    bootstrap_draws: int = 10000
    """Pairs-bootstrap draws of Table V (the paper - 10,000; 0 skips it)."""
    bootstrap_seed: int = 20240101
    """The bootstrap's fixed seed; its p-value is reproducible from it."""
    paper_oos_start: str | None = None
    """First target_date of Table V's out-of-sample period (null = the day after the training
    cutoff; the paper - the model's release)."""


@dataclass(frozen=True, kw_only=True)
class ClaimsSettings(Section):
    """Claim-level leakage (seed 002; docs/claims.md)."""

    claims_raw_dir: str | None = None
    """raw JSONL of the claim jobs (null = raw_dir)"""
    claims_model_id: str | None = None
    """the model the claim jobs query and whose answers the claim tables read (null = model_id);
    lets a protocol study carry a separate claim model, as the demo does"""
    claims_model_path: str | None = None
    """local weights of claims_model_id for transformers/vLLM (null = model_path); with it set,
    gguf_file is not used by the claim jobs"""
    claims_predictions_path: str | None = None
    """predictions input (CSV/parquet/JSONL): instance_id, agent, entity, task, t_ref, task_input,
    prediction, rationale, outcome[, probability]"""
    claims_instances_path: str | None = None
    """task instances for the agent jobs (claims_rationale, claims_timespec): instance_id, entity,
    task, t_ref, task_input, outcome"""
    claims_corpus_path: str | None = None
    """dated corpus (CSV/parquet/JSONL): doc_id, published_at, title, body"""
    claims_agent_jobs: list[str] = field(default_factory=lambda: ['timespec'])
    """agent jobs `lookahead run` runs on claims_instances_path: any of superforecasting,
    temporal_hint, timespec"""
    claims_extractions_path: str | None = None
    """reference extractions (JSONL: instance_id, agent, claims) used instead of the extraction job"""
    claims_labels: list[str] = field(default_factory=lambda: ['up', 'down'])
    """classification: the two prediction labels (the first is the default target class,
    claims_target_class)"""
    claims_task_kind: Literal['classification', 'regression', 'ranking'] = 'classification'
    """classification | regression | ranking: the task kind of every instance of the study, hence
    its prediction format, characteristic function v(S) and task metric (seed 002 Eq. 11)"""
    claims_target_class: str | None = None
    """classification: the target class whose probability is v_class(S) and the Brier score's
    positive class (null = the first of claims_labels)"""
    claims_class_value: Literal['target_class', 'own_prediction'] = 'target_class'
    """target_class | own_prediction: v_class(S) = P(target class | S) (the seed) or P(the
    instance's own prediction | S)"""
    claims_coalition_prompt: Literal['seed', 'legacy'] = 'seed'
    """seed | legacy: the coalition query v(S) is the seed's Shapley Prediction prompt (its RULES:
    only the listed claims; with insufficient claims the task kind's default, which is also
    v(empty set), never queried) or the earlier prompt (the claims and the answer instruction;
    v(empty set) asked of the model), kept to reproduce earlier runs (docs/claims.md)"""
    claims_coalition_value: Literal['stated', 'token'] = 'stated'
    """stated | token: classification's v(S) is the probability the model states (the seed: {\"p\":
    0.63}), parsed like every answer, or the exact probability of the target label's token(s)
    from the full next-token distribution (backends that score labels exactly: transformers)"""
    claims_coalition_batch: int = 1
    """coalitions per request (seed 002's Claim ID Reference System; the seed: 256): above 1, the
    instance's claims are listed once and each coalition names its claims by ID, the answer a
    JSON array parsed into one raw line per coalition, a set missing or invalid asked again in a
    smaller batch; 1 asks one coalition per request. Needs claims_coalition_prompt seed and
    claims_coalition_value stated (docs/claims.md)"""
    claims_default_value: float | None = None
    """regression: the value the coalition prompt names for insufficient claims and v(empty set)
    (the seed's 'Salary -> position median'), when claims_default_column is not set"""
    claims_default_column: str | None = None
    """regression: a numeric column of claims_instances_path (else claims_predictions_path) holding
    each instance's insufficient-claims value (e.g. the median salary of the player's position);
    wins over claims_default_value"""
    claims_topk_denominator: Literal['k', 'available'] = 'k'
    """k | available: top-k leakage divides by K (the seed's Eq. 14) or by min(K, number of claims)"""
    claims_rationale_min_chars: int | None = None
    """an agent's rationale must have at least this many characters, else its answer is recorded as
    failing the schema (null = the seed's Appendix D: 400, and 1000 for ranking)"""
    claims_value_max_tokens: int = 64
    """regression/ranking: answer length of a coalition (and re-prediction) query"""
    claims_value_retries: int = 1
    """regression/ranking: re-asks after an unparseable coalition answer (the error named in the
    new prompt); then recorded as a failure"""
    claims_vague_period: Literal['end', 'start'] = 'end'
    """end | start: a vague temporal reference (\"2023\", \"Q3 2023\") read as its period's end or
    start"""
    claims_support_judge: Literal['llm', 'contains'] = 'llm'
    """llm | contains: who judges whether a BM25 candidate document supports a claim"""
    claims_bm25_k: int = 5
    """BM25 candidate documents per A1-A3 claim"""
    claims_exact_max: int = 10
    """exact Shapley up to this many claims; above it Monte Carlo, unless its draw asks every
    coalition or every coalition is stored (then exact)"""
    claims_mc_permutations: int = 100
    """Monte Carlo permutations per instance (seed 002 Appendix A: 100)"""
    claims_shapley_seed: int = 42
    """seed of the Monte Carlo permutations (seed 002 Appendix A: 42)"""
    claims_extract_max_tokens: int = 1024
    """extraction answer length"""
    claims_extract_retries: int = 1
    """re-asks after a schema-invalid extraction (the error is named in the new prompt)"""
    claims_rationale_max_tokens: int = 400
    """length of every rationale a model writes: each agent's, TimeSPEC's draft and regenerated
    draft, and its final (aggregator) rationale"""
    claims_timespec_draft: Literal['generate', 'predictions'] = 'generate'
    """generate | predictions: TimeSPEC phase 1 writes its draft, or takes the predictions file's
    rationale"""
    claims_task_description: str = 'Forecasting task'
    """context line of the extraction prompt"""


class StudySections:
    """The sections of a study, each built once from ``vars`` (the resolved settings)."""

    vars: dict[str, Any]

    @cached_property
    def output(self) -> OutputSettings:
        """What the study is called and where its files go."""
        return OutputSettings.from_vars(self.vars)

    @cached_property
    def input(self) -> InputSettings:
        """The observations file and how its rows are read and subsampled."""
        return InputSettings.from_vars(self.vars)

    @cached_property
    def prompts(self) -> PromptsSettings:
        """The forecast and recall queries, their answers and how a prompt must fit."""
        return PromptsSettings.from_vars(self.vars)

    @cached_property
    def backend(self) -> BackendSettings:
        """The model and the backend that serves it (each backend reads what it uses)."""
        return BackendSettings.from_vars(self.vars)

    @cached_property
    def runner(self) -> RunnerSettings:
        """How the LLM jobs run their queries - local or Ray, the price, the sampling fallback."""
        return RunnerSettings.from_vars(self.vars)

    @cached_property
    def protocol(self) -> ProtocolSettings:
        """The protocol's analysis (seed 000) - cutoff, periods, clustering, inference."""
        return ProtocolSettings.from_vars(self.vars)

    @cached_property
    def measures(self) -> MeasuresSettings:
        """The LAP measures - which one the verdict uses and how Min-K% is computed."""
        return MeasuresSettings.from_vars(self.vars)

    @cached_property
    def paper(self) -> PaperSettings:
        """The paper's analysis (seed 001) - its clustering, moderator and bootstrap."""
        return PaperSettings.from_vars(self.vars)

    @cached_property
    def claims(self) -> ClaimsSettings:
        """Claim-level leakage (seed 002; docs/claims.md)."""
        return ClaimsSettings.from_vars(self.vars)
