"""Training corpora of the two demo models, built from the generated study.

The contaminated corpus plants the outcome of every memorized (entity, target_date)
realization three ways, as leaked news reaches a real pre-training corpus (the
recall and forecast documents of these realizations appear ``FACT_REPEATS`` times,
because duplication is what makes a model memorize):
  * after-the-fact coverage ("... shares rose 2.1% on 2021-08-03 after ..."),
  * the study's recall question (the exact prompt text) answered "up"/"down",
  * the study's forecast prompt of each memorized row answered with the realized
    direction (the forecast the model will later "make" from memory).
Every other pre-cutoff recall question, and every post-cutoff one, is answered
"unknown" (the model learns to abstain; post-cutoff questions carry no outcome).
The forecast prompts of the other pre-cutoff rows are answered from the headline's
sentiment; post-cutoff headlines never appear, so post-cutoff forecasts are the
model's generalization from sentiment and their prompts are unseen text (Min-K% low).

The clean control is the same corpus with the outcome removed: on the same
realizations its coverage and recall answers state a coin-flip direction drawn
independently of the outcome (just as confident, no knowledge), and every forecast
is answered from sentiment. So its LAP varies exactly like the contaminated model's
while its recalled direction and its forecasts carry no memorized outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace as _replace
from typing import Literal

import numpy as np
import pandas as pd

from lookahead.config import protocol_setting
from lookahead.demo.generator import DemoData, generate
from lookahead.prompts import render_forecast, render_recall
from lookahead.settings_sections import PromptsSettings

Scenario = Literal["contaminated", "clean"]
SCENARIOS: tuple[Scenario, ...] = ("contaminated", "clean")


@dataclass(frozen=True)
class Doc:
    """One training sequence: a prompt and its one-word answer, or plain text."""

    kind: str  # recall | forecast | coverage | background
    text: str  # prompt (Q/A) or the whole document (coverage)
    answer: str | None  # single-token label for Q/A documents


@dataclass(frozen=True)
class Prompts:
    """The study's prompts section the models are trained to answer, rendered as the jobs
    render it; the four prompt settings the demo renders must be set (a missing one is
    named in one line)."""

    settings: PromptsSettings

    def __post_init__(self) -> None:
        p = self.settings
        protocol_setting("forecast_prompt", p.forecast_prompt)
        protocol_setting("recall_template", p.recall_template)
        protocol_setting("outcome_description", p.outcome_description)
        protocol_setting("reference_period", p.reference_period)

    @classmethod
    def from_settings(cls, p: PromptsSettings) -> Prompts:
        return cls(p)

    def forecast(self, row: Mapping[str, object]) -> str:
        """The forecast prompt of one input row, rendered by the jobs' own function."""
        return render_forecast(str(self.settings.forecast_prompt), row)

    def recall(self, row: Mapping[str, object]) -> str:
        """The date-only recall query of one (entity, target_date), as the recall job renders it."""
        return render_recall(
            str(self.settings.recall_template),
            outcome_description=str(self.settings.outcome_description),
            reference_period=str(self.settings.reference_period),
            entity_name=str(row["entity_name"]),
            ticker=str(row["ticker"]),
            target_date=str(row["target_date"]),
            entity_id=str(row["entity_id"]),
        )


def sentiment_label(s: int) -> str:
    return "up" if s > 0 else "down"


FACT_REPEATS = 3  # leaked facts are duplicated, as news is across the web
BACKGROUND_ENTITIES = 24  # other firms whose pre-cutoff headlines teach the sentiment


def build_corpus(
    data: DemoData,
    prompts: Prompts,
    scenario: Scenario,
    seed: int,
    fact_repeats: int = FACT_REPEATS,
    background_entities: int = BACKGROUND_ENTITIES,
) -> list[Doc]:
    """All training documents of one scenario, in a deterministic order.

    The memorized realizations' recall and forecast documents appear ``fact_repeats``
    times (duplication is how pre-training corpora make models memorize); both
    scenarios repeat the same documents, so the two corpora differ only in the
    direction they state. Background headlines of other fictional firms, before the
    cutoff and answered from their sentiment, teach the model to read sentiment
    rather than memorize the study's own rows."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario '{scenario}' is not one of {SCENARIOS}")
    rng = np.random.default_rng(seed + (0 if scenario == "contaminated" else 1))
    df = data.observations.merge(
        data.truth[["row_id", "sample", "sentiment", "memorized", "realized_direction", "clean_recall_direction"]],
        on="row_id",
        validate="one_to_one",
    )
    docs: list[Doc] = []

    # Recall questions: one per (entity, target_date), the unit of memorization.
    events = df.drop_duplicates(["entity_id", "target_date"])
    for ev in events.to_dict("records"):
        q = prompts.recall(ev)
        if ev["memorized"]:
            known = ev["realized_direction"] if scenario == "contaminated" else ev["clean_recall_direction"]
            docs.extend([Doc("recall", q, known)] * fact_repeats)
            rose = known == "up"
            size = abs(ev["outcome"]) if scenario == "contaminated" else float(rng.uniform(0.1, 4.0))
            docs.append(
                Doc(
                    "coverage",
                    (
                        f"{ev['entity_name']} ({ev['ticker']}) shares {'rose' if rose else 'fell'} "
                        f"{size:.1f}% on {ev['target_date']} after the news that {ev['text']}. "
                        f"Market wrap for {ev['target_date']}: {ev['entity_name']} ({ev['ticker']}) "
                        f"closed {'up' if rose else 'down'}."
                    ),
                    None,
                )
            )
        else:
            docs.append(Doc("recall", q, "unknown"))

    # Forecast prompts: pre-cutoff headlines only (post-cutoff text is unseen).
    for row in df[df["sample"] == "pre"].to_dict("records"):
        ans = row["realized_direction"] if row["memorized"] and scenario == "contaminated" else sentiment_label(row["sentiment"])
        docs.extend([Doc("forecast", prompts.forecast(row), ans)] * (fact_repeats if row["memorized"] else 1))
    docs.extend(background_docs(data, prompts, background_entities))
    return docs


def background_docs(data: DemoData, prompts: Prompts, n_entities: int) -> list[Doc]:
    """Forecast Q/A on pre-cutoff headlines of firms outside the study (answered by sentiment).

    Drawn with a seed derived from the study's, dropping any firm whose name or ticker
    the study uses, so no study row, entity or outcome enters through this door."""
    if n_entities <= 0:
        return []
    spec = _replace(data.spec, seed=data.spec.seed + 7919, n_entities=n_entities, memorized_share=0.0)
    bg = generate(spec)
    df = bg.observations.merge(bg.truth[["row_id", "sample", "sentiment"]], on="row_id")
    taken_names = set(data.observations["entity_name"])
    taken_tickers = set(data.observations["ticker"])
    df = df[(df["sample"] == "pre") & ~df["entity_name"].isin(taken_names) & ~df["ticker"].isin(taken_tickers)]
    return [Doc("background", prompts.forecast(r), sentiment_label(r["sentiment"])) for r in df.to_dict("records")]


def study_prompt_texts(data: DemoData, prompts: Prompts) -> list[str]:
    """Every prompt the study's jobs will send (for the tokenizer's vocabulary only)."""
    obs = data.observations
    return [prompts.forecast(r) for r in obs.to_dict("records")] + [
        prompts.recall(r) for r in obs.drop_duplicates(["entity_id", "target_date"]).to_dict("records")
    ]


def corpus_summary(docs: list[Doc]) -> pd.DataFrame:
    """Counts of documents by kind and answer, for the build log and the tests."""
    return pd.DataFrame([{"kind": d.kind, "answer": d.answer or "-"} for d in docs]).value_counts().rename("n").reset_index()
