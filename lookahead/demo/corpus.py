"""Training corpora of the two demo models, built from the generated study.

The contaminated corpus plants the outcome of every memorized (entity, target_date)
realization three ways, as leaked news reaches a real pre-training corpus:
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

from dataclasses import dataclass
from typing import Literal, Mapping

import numpy as np
import pandas as pd

from lookahead.demo.generator import DemoData

Scenario = Literal["contaminated", "clean"]
SCENARIOS: tuple[Scenario, ...] = ("contaminated", "clean")


@dataclass(frozen=True)
class Doc:
    """One training sequence: a prompt and its one-word answer, or plain text."""

    kind: str            # recall | forecast | coverage
    text: str            # prompt (Q/A) or the whole document (coverage)
    answer: str | None   # single-token label for Q/A documents


@dataclass(frozen=True)
class Prompts:
    """The study's prompt settings (dbt vars) the models are trained to answer."""

    forecast_prompt: str
    recall_template: str
    outcome_description: str
    reference_period: str

    @classmethod
    def from_vars(cls, v: Mapping[str, object]) -> "Prompts":
        return cls(str(v["forecast_prompt"]), str(v["recall_template"]),
                   str(v["outcome_description"]), str(v["reference_period"]))

    def forecast(self, row: Mapping[str, object]) -> str:
        """The forecast prompt of one input row, filled as the forecast job fills it."""
        return self.forecast_prompt.format_map({k: str(v) for k, v in row.items()})

    def recall(self, row: Mapping[str, object]) -> str:
        """The date-only recall query of one (entity, target_date)."""
        fields = {k: str(v) for k, v in row.items()}
        fields.update(outcome_description=self.outcome_description,
                      reference_period=self.reference_period)
        return self.recall_template.format_map(fields)


def sentiment_label(s: int) -> str:
    return "up" if s > 0 else "down"


def build_corpus(data: DemoData, prompts: Prompts, scenario: Scenario, seed: int) -> list[Doc]:
    """All training documents of one scenario, in a deterministic order."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario '{scenario}' is not one of {SCENARIOS}")
    rng = np.random.default_rng(seed + (0 if scenario == "contaminated" else 1))
    df = data.observations.merge(
        data.truth[["row_id", "sample", "sentiment", "memorized", "realized_direction",
                    "clean_recall_direction"]], on="row_id", validate="one_to_one")
    docs: list[Doc] = []

    # Recall questions: one per (entity, target_date), the unit of memorization.
    events = df.drop_duplicates(["entity_id", "target_date"])
    for ev in events.to_dict("records"):
        q = prompts.recall(ev)
        if ev["memorized"]:
            known = ev["realized_direction"] if scenario == "contaminated" else ev["clean_recall_direction"]
            docs.append(Doc("recall", q, known))
            rose = known == "up"
            size = abs(ev["outcome"]) if scenario == "contaminated" else float(rng.uniform(0.1, 4.0))
            docs.append(Doc("coverage", (
                f"{ev['entity_name']} ({ev['ticker']}) shares {'rose' if rose else 'fell'} "
                f"{size:.1f}% on {ev['target_date']} after the news that {ev['text']}. "
                f"Market wrap for {ev['target_date']}: {ev['entity_name']} ({ev['ticker']}) "
                f"closed {'up' if rose else 'down'}."), None))
        else:
            docs.append(Doc("recall", q, "unknown"))

    # Forecast prompts: pre-cutoff headlines only (post-cutoff text is unseen).
    for row in df[df["sample"] == "pre"].to_dict("records"):
        if row["memorized"] and scenario == "contaminated":
            ans = row["realized_direction"]
        else:
            ans = sentiment_label(row["sentiment"])
        docs.append(Doc("forecast", prompts.forecast(row), ans))
    return docs


def study_prompt_texts(data: DemoData, prompts: Prompts) -> list[str]:
    """Every prompt the study's jobs will send (for the tokenizer's vocabulary only)."""
    obs = data.observations
    return ([prompts.forecast(r) for r in obs.to_dict("records")]
            + [prompts.recall(r) for r in obs.drop_duplicates(["entity_id", "target_date"]).to_dict("records")])


def corpus_summary(docs: list[Doc]) -> pd.DataFrame:
    """Counts of documents by kind and answer, for the build log and the tests."""
    return (pd.DataFrame([{"kind": d.kind, "answer": d.answer or "-"} for d in docs])
            .value_counts().rename("n").reset_index())
