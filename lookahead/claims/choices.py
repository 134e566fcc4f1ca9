"""The choices the claim pipeline makes where seed 002 is silent or where the tool departs
from it, each with the rule a study applied (from its settings).

docs/claims.md's table "Choices where the seed is silent or the tool departs from it"
gives each choice the seed's words, the tool's rule and why, one row per entry here
under the same name (tests/python/test_claims_choices.py holds the two to each other).
The claim section of every report lists the entries its study used, with the rule as
that study's settings made it, so a reader sees which departures stand behind the
figures without opening the settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lookahead.config import Study
from lookahead.settings_sections import ClaimsSettings


@dataclass(frozen=True)
class Used:
    """What a study's claim tables hold, beyond its settings, that decides whether a
    choice applied: the agents scored and whether the re-prediction check ran."""

    agents: frozenset[str]
    repredicted: bool


@dataclass(frozen=True)
class Choice:
    """One row of docs/claims.md's table of choices: its name there, and the rule the
    study applied, or None when the choice played no part in its figures."""

    name: str
    rule: Callable[[ClaimsSettings, Used], str | None]


def _coalition_prompt(s: ClaimsSettings, used: Used) -> str:
    if s.claims_coalition_prompt == "legacy":
        return "claims_coalition_prompt: legacy: the task input, only the claims of S and the task kind's answer instruction"
    return "claims_coalition_prompt: seed: the seed's Shapley Prediction prompt with both RULES"


def _empty_set(s: ClaimsSettings, used: Used) -> str:
    if s.claims_coalition_prompt == "legacy":
        return "asked of the model, as every coalition (claims_coalition_prompt: legacy)"
    return f"RULE 2's default for the task kind {s.claims_task_kind}, never queried"


def _value(s: ClaimsSettings, used: Used) -> str:
    if s.claims_task_kind != "classification":
        return f"the stated value of the task kind {s.claims_task_kind}"
    target = s.claims_target_class or s.claims_labels[0]
    how = (
        "the stated probability, parsed as one number from 0 to 1"
        if s.claims_coalition_value == "stated"
        else "the label's exact probability from the full next-token distribution"
    )
    return (
        f"claims_coalition_value: {s.claims_coalition_value}: {how}; claims_class_value: {s.claims_class_value} "
        f"(P({target} | S) under target_class)"
    )


def _batch(s: ClaimsSettings, used: Used) -> str:
    n = s.claims_coalition_batch
    if n <= 1:
        return "one coalition a request, its claims written out (claims_coalition_batch: 1)"
    return (
        f"up to {n} coalitions of an instance a request, its claims listed once and each coalition naming "
        f"their IDs (claims_coalition_batch: {n}); each coalition stored as its own one-a-request line"
    )


def _regression_default(s: ClaimsSettings, used: Used) -> str | None:
    if s.claims_task_kind != "regression" or s.claims_coalition_prompt != "seed":
        return None
    if s.claims_default_column:
        return f"each instance's value of the column {s.claims_default_column} (claims_default_column)"
    return f"the constant {s.claims_default_value} (claims_default_value)"


def _timespec(s: ClaimsSettings, used: Used) -> str | None:
    if "timespec" not in used.agents:
        return None
    if s.claims_timespec_draft == "generate":
        return (
            "the aggregator (the seed's prompt) writes the final rationale and prediction; the rationale is "
            "extracted, dated and valued like every agent's"
        )
    return (
        "claims_timespec_draft: predictions: the model writes no text, so the final rationale is the validated "
        "claims' text and its extraction those claims; dated and valued like every agent's"
    )


def _exact(s: ClaimsSettings, used: Used) -> str:
    return (
        f"exact Shapley values up to {s.claims_exact_max} claims (claims_exact_max), and above it wherever every "
        f"coalition is drawn or stored; else Monte Carlo with {s.claims_mc_permutations} permutations "
        f"(seed {s.claims_shapley_seed})"
    )


def _topk(s: ClaimsSettings, used: Used) -> str:
    by = "K" if s.claims_topk_denominator == "k" else "min(K, number of claims)"
    return f"top-1, top-3 and top-5 leakage, divided by {by} (claims_topk_denominator: {s.claims_topk_denominator})"


def _search(s: ClaimsSettings, used: Used) -> str:
    judge = (
        "a model's yes/no judgment" if s.claims_support_judge == "llm" else "the rule 'the claim's words appear in the document'"
    )
    return (
        f"the {s.claims_bm25_k} best BM25 documents of the corpus (claims_corpus_path) per A1-A3 claim, "
        f"support by {judge} (claims_support_judge: {s.claims_support_judge}); tau = the earliest supporting "
        "document's publication date"
    )


def _repred(s: ClaimsSettings, used: Used) -> str | None:
    if not used.repredicted or s.claims_task_kind != "classification":
        return None
    return "the relative error of the probability of the originally predicted class"


#: Every choice, in the order of docs/claims.md's table.
CHOICES: tuple[Choice, ...] = (
    Choice("Coalition prompt", _coalition_prompt),
    Choice("v(empty set)", _empty_set),
    Choice("The coalition's value", _value),
    Choice("Batched coalitions", _batch),
    Choice("Regression's insufficient-claims default", _regression_default),
    Choice("TimeSPEC scoring", _timespec),
    Choice("Exact where free", _exact),
    Choice(
        "Error of an instance's Shapley-DCLR",
        lambda s, u: "0 where exact; the delta method over the Monte Carlo permutations, 95% interval clipped to [0, 1]",
    ),
    Choice("Error of a summary mean", lambda s, u: "sd / sqrt(k) over the k instances, 95% t interval"),
    Choice("Top-5", _topk),
    Choice("Ties in Top-K", lambda s, u: "equal |phi| keep claim order, the earlier claim first"),
    Choice(
        "Unverifiable claims",
        lambda s, u: "counted as not leaked in the main figures; as leaked in the `_unverifiable_leaked` columns",
    ),
    Choice(
        "Summary OLR", lambda s, u: "the mean of the instances' OLRs (each rationale weighs the same), not pooled over claims"
    ),
    Choice("Instances whose Shapley values are all 0", lambda s, u: "left out of the Shapley-DCLR mean (Eq. 10 is 0/0)"),
    Choice("Eq. 12 on the predicted class", _repred),
    Choice("Search", _search),
    Choice(
        "Category shortcuts",
        lambda s, u: "A4/A5 leaked and B1/B2 not leaked with no search; only A1-A3 claims are searched",
    ),
    Choice(
        "Vague periods",
        lambda s, u: (
            f"a vague temporal reference read as its period's {s.claims_vague_period} "
            f"(claims_vague_period: {s.claims_vague_period})"
        ),
    ),
)


def used_choices(study: Study, used: Used) -> list[tuple[str, str]]:
    """(name, the rule as this study applied it) of every choice behind its figures."""
    return [(c.name, rule) for c in CHOICES if (rule := c.rule(study.claims, used)) is not None]
