"""The LAP measures: one entry per measure, read by everything downstream.

A LAP measure scores how likely the model saw a text in training (higher = more likely
seen). Each entry says what the measure asks the backend for, which raw line it scores
(its task), the dbt model that scores it (THE implementation: SQL over the raw line),
its panel column, how "meaningful variation" is judged, its label, its settings and its
citation. The keys, the jobs, the panel merge (macro `lap_measure_registry`, generated
from this file), the verdict's variation rule, the paper tables, the report and the
docs read this registry instead of branching on a name (docs/measures.md has the recipe
for adding one).

The Python oracles below are the published formulas written once for the tests; the
numbers that reach the regressions come from the SQL models.

Why one forward pass serves four measures: Min-K%, loss, zlib ratio and Min-K%++ all
read the prompt-token log-probs of the `mink` task's line; zlib adds the text's
compressed length and Min-K%++ the mean and variance of the log-prob over the
vocabulary at each position, both written into the same line (`line_extras`: what a
study's measures need; on transformers every line carries both), so a study asking for
several measures queries each prompt once. Which extras a line carries is no part of its
key (lookahead.tasks.LINE_EXTRA_BITS): one line serves every study it carries enough for.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lookahead.settings_sections import MeasuresSettings, StudySections

#: Line extras a measure may need beside the prompt-token log-probs (stored per line).
VOCAB_MOMENTS = "vocab_moments"  # per position: mean and variance of log p over the vocabulary
ZLIB_BYTES = "zlib_bytes"  # zlib-compressed byte length of the prompt text (UTF-8)
LINE_EXTRAS = (VOCAB_MOMENTS, ZLIB_BYTES)

#: The raw task of the reference model's prompt log-probs (the `mink` prompt, scored by
#: the study's `reference_model_id`; its own raw file and cache key).
REFERENCE_TASK = "reference"

#: A token probability below which a prompt is far outside any model's distribution: one
#: in a million is less likely than a uniform guess over a vocabulary of a million tokens
#: (vocabularies hold 32k-256k). The floor of Min-K% and, as its log, of loss LAP.
OUT_OF_DISTRIBUTION_PROB = 1e-6

#: The verdict's variation rules (lookahead.stats.verdict.lap_min_sd applies them).
ABSOLUTE, SCALE_FREE = "absolute", "scale_free"


@dataclass(frozen=True)
class Measure:
    """One LAP measure (see the module doc); `name` is its value of `lap_measure`."""

    name: str
    label: str  # as printed in the report and the paper tables
    short: str  # as named inside a sentence
    task: str  # the raw task whose line it scores
    model: str  # the dbt model scoring it: join keys + `model_column`
    model_column: str  # the score's column in `model`
    key_column: str | None  # the raw key's column in `model` carried to the panel (the
    # measures scoring the `mink` line share its mink_key)
    join_on: tuple[str, ...]  # columns joining `model` to the observations
    variation: str  # ABSOLUTE (a probability) or SCALE_FREE (model-dependent scale)
    orientation: str  # why higher = more likely seen
    definition: str  # the formula, in words
    citation: str
    needs: tuple[str, ...] = ()  # LINE_EXTRAS the line must carry
    unavailable: Mapping[str, str] = field(default_factory=dict)  # backend -> why not
    settings: tuple[str, ...] = ()
    required_settings: tuple[str, ...] = ()  # must be set when a study computes the measure
    second_model: str | None = None  # the setting naming a second model (never the target)
    carried: tuple[str, ...] = ()  # further columns of `model` the panel carries
    # A mean pre-cutoff value below this says the prompts lie far outside the model's
    # distribution (None: the measure has no such floor). The verdict paragraph names it as
    # a weakness (lookahead.stats.verdict.lap_out_of_distribution; docs/verdict.md).
    out_of_distribution_below: float | None = None
    # Why its mean need not fall at the cutoff as the single-model measures' does (the
    # report prints it beside a measure whose mean rises; "" for a single-model measure)
    cutoff_note: str = ""

    @property
    def column(self) -> str:
        """The measure's column in the panel."""
        return f"lap_{self.name}"

    def describe(self, settings: MeasuresSettings) -> str:
        """The label with the values of the measure's settings, e.g. for the report."""
        vals = ", ".join(f"{s} = {getattr(settings, s)}" for s in self.settings)
        return f"{self.label}; {vals}" if vals else self.label


_NO_VOCAB = "Min-K%++ needs the mean and variance of the log-prob over the whole vocabulary at every prompt position"
MEASURES: dict[str, Measure] = {
    m.name: m
    for m in (
        Measure(
            name="recall",
            short="recall LAP",
            label="recall LAP (P(up)+P(down))",
            task="recall",
            model="int_recall_pairs",
            model_column="lap",
            key_column="recall_key",
            join_on=("entity_id", "target_date"),
            variation=ABSOLUTE,
            orientation="a probability that the model names a direction for the date",
            definition="P(up) + P(down) at the answer position of the date-only recall prompt",
            citation="the paper's protocol, step 2 (docs/seeds 000)",
            carried=("p_up", "p_down", "p_unknown", "up_censored", "down_censored", "unknown_censored", "residual_mass", "ud"),
        ),
        Measure(
            name="mink",
            short="Min-K%",
            label="Min-K% LAP",
            task="mink",
            model="int_mink_scores",
            model_column="lap_mink",
            key_column="mink_key",
            join_on=("row_id",),
            variation=SCALE_FREE,
            orientation="a probability of the least likely prompt tokens",
            definition="exp(mean of the lowest K% token log-probs) (geometric; or the mean of their probabilities)",
            citation="Shi et al. 2024, 'Detecting Pretraining Data from Large Language Models' (ICLR)",
            settings=("mink_k", "mink_mean"),
            # the least likely tokens below one in a million on average: less likely than a
            # uniform guess over a million-token vocabulary, which no model's text reaches
            out_of_distribution_below=OUT_OF_DISTRIBUTION_PROB,
        ),
        Measure(
            name="loss",
            short="loss LAP",
            label="loss LAP (mean token log-prob)",
            task="mink",
            model="int_lap_loss",
            model_column="lap_loss",
            key_column=None,
            join_on=("row_id",),
            variation=SCALE_FREE,
            orientation="the mean log-prob: higher (less negative) = lower loss = more likely seen",
            definition="mean over prompt tokens 2..n of log P(token | preceding tokens); exp of it is the inverse perplexity",
            citation="Yeom et al. 2018, 'Privacy Risk in Machine Learning' (the LOSS attack)",
            out_of_distribution_below=math.log(OUT_OF_DISTRIBUTION_PROB),  # the same floor, in log-prob
        ),
        Measure(
            name="zlib",
            short="zlib LAP",
            label="zlib LAP (mean log-prob / zlib bytes)",
            task="mink",
            model="int_lap_zlib",
            model_column="lap_zlib",
            key_column=None,
            join_on=("row_id",),
            variation=SCALE_FREE,
            orientation=(
                "minus Carlini et al.'s ratio (loss / zlib length): a text the model finds "
                "likely relative to its compressibility scores higher"
            ),
            definition="mean token log-prob divided by the zlib-compressed byte length of the prompt text",
            citation="Carlini et al. 2021, 'Extracting Training Data from Large Language Models' (USENIX Security)",
            needs=(ZLIB_BYTES,),
        ),
        Measure(
            name="minkpp",
            short="Min-K%++",
            label="Min-K%++ LAP",
            task="mink",
            model="int_lap_minkpp",
            model_column="lap_minkpp",
            key_column=None,
            join_on=("row_id",),
            variation=SCALE_FREE,
            orientation="a z-score of the token's log-prob within its position's distribution",
            definition=(
                "mean over the lowest K% of z_t = (log p(x_t) - mu_t) / sigma_t, with "
                "mu_t = sum_v p_v log p_v and sigma_t^2 = sum_v p_v (log p_v)^2 - mu_t^2 over the vocabulary"
            ),
            citation="Zhang et al. 2024, 'Min-K%++: Improved Baseline for Detecting Pre-Training Data from LLMs'",
            needs=(VOCAB_MOMENTS,),
            settings=("mink_k",),
            unavailable={
                "openai": f"{_NO_VOCAB}; an OpenAI-compatible server returns at most the top-20",
                "vllm": f"{_NO_VOCAB}; the vLLM backend asks for the sampled token's log-prob only",
            },
        ),
        Measure(
            name="reference",
            short="reference-model LAP",
            label="reference-model LAP (target minus reference mean log-prob)",
            task=REFERENCE_TASK,
            model="int_lap_reference",
            model_column="lap_reference",
            key_column=None,
            join_on=("row_id",),
            variation=SCALE_FREE,
            orientation=(
                "the target's mean log-prob minus the reference model's: a text the target finds "
                "likelier than a model that did not see it scores higher (minus the reference-based "
                "score target loss - reference loss)"
            ),
            definition=(
                "mean over prompt tokens 2..n of log P_target(token | preceding) minus the same mean "
                "under the reference model (reference_model_id), on the same prompt"
            ),
            citation=(
                "Carlini et al. 2021, 'Extracting Training Data from Large Language Models' (USENIX "
                "Security), the comparison with a smaller or other model; Mattern et al. 2023, Shi et al. 2024"
            ),
            settings=("reference_model_id",),
            required_settings=("reference_model_id",),
            second_model="reference_model_id",
            cutoff_note=(
                "it is a difference between two models: when the reference saw the same "
                "pre-cutoff texts, the exposure that makes the other measures fall at the "
                "cutoff cancels, and what remains compares the two models' fit to the "
                "texts, which can rise after the cutoff (docs/measures.md, the demo's references)"
            ),
        ),
    )
}


def study_measures(study: StudySections) -> list[Measure]:
    """The measures a study computes: `lap_measure` (the verdict's) and `lap_measures`.

    One clear line for an unknown name, or a measure the study's backend cannot give
    (before any query: the jobs and the build key the queries through here)."""
    from lookahead.errors import StudyConfigError

    names = list(dict.fromkeys([str(study.measures.lap_measure), *(study.measures.lap_measures or [])]))
    unknown = [n for n in names if n not in MEASURES]
    if unknown:
        raise StudyConfigError(f"setting 'lap_measures': {', '.join(map(repr, unknown))} is not one of {', '.join(MEASURES)}")
    backend = str(study.backend.backend)
    for n in names:
        if backend in MEASURES[n].unavailable:
            setting = "lap_measure" if n == study.measures.lap_measure else "lap_measures"
            raise StudyConfigError(
                f"setting '{setting}': '{n}' is unavailable on backend '{backend}': {MEASURES[n].unavailable[backend]}"
            )
    return [MEASURES[n] for n in names]


def computes(study: StudySections, name: str) -> bool:
    """Whether the study computes measure `name` (its lap_measure or one of lap_measures)."""
    return any(m.name == name for m in study_measures(study))


def line_extras(study: StudySections, task: str) -> list[str]:
    """What the study's measures need in `task`'s lines beyond the task itself (sorted)."""
    return sorted({x for m in study_measures(study) if m.task == task for x in m.needs})


def zlib_bytes(text: str) -> int:
    """The zlib-compressed byte length of a text (UTF-8, zlib's default level)."""
    return len(zlib.compress(text.encode("utf-8")))


# ------------------------------------------------------------------ oracles (for tests)


def _after_first(logprobs: Sequence[float | None]) -> list[float]:
    return [float(x) for x in logprobs[1:] if x is not None]


def loss_lap(logprobs: Sequence[float | None]) -> float:
    lps = _after_first(logprobs)
    return math.fsum(lps) / len(lps)


def zlib_lap(logprobs: Sequence[float | None], text: str) -> float:
    return loss_lap(logprobs) / zlib_bytes(text)


def reference_lap(target_logprobs: Sequence[float | None], reference_logprobs: Sequence[float | None]) -> float:
    return loss_lap(target_logprobs) - loss_lap(reference_logprobs)


def minkpp_lap(
    logprobs: Sequence[float | None], means: Sequence[float | None], variances: Sequence[float | None], k: float
) -> float:
    z = sorted(
        (float(lp) - float(mu)) / math.sqrt(float(var))
        for lp, mu, var in zip(logprobs[1:], means[1:], variances[1:], strict=False)
        if lp is not None and mu is not None and var is not None
    )
    n = max(1, math.floor(len(z) * k))
    return math.fsum(z[:n]) / n


# ------------------------------------------------------------------ the dbt macro

MACRO_PATH = Path(__file__).resolve().parent.parent / "macros" / "lap_measures.sql"


def macro_text() -> str:
    """macros/lap_measures.sql: the registry as dbt reads it (generated; a test holds it)."""
    rows = [
        json.dumps(
            {
                "name": m.name,
                "column": m.column,
                "model": m.model,
                "model_column": m.model_column,
                "key_column": m.key_column,
                "join_on": list(m.join_on),
                "carried": list(m.carried),
            }
        )
        for m in MEASURES.values()
    ]
    return (
        "{#- Generated from lookahead/measures.py by `python scripts/generated_files.py --write-macro`;\n"
        "    do not edit (tests/python/test_measures.py holds it to the registry). -#}\n"
        "{% macro lap_measure_registry() -%}\n"
        "  {{ return([\n" + ",\n".join("    " + r for r in rows) + "\n  ]) }}\n"
        "{%- endmacro %}\n"
    )
