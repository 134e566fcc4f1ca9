"""The seed's three task kinds (seed 002, sections 6.1 and 6.3, Appendix D), one registry entry each.

Every layer that depends on the kind of prediction (input validation, the agent and
coalition prompts, parsing a model's answer, the characteristic function v(S), the task
metric, the re-prediction error) asks ``KINDS[claims_task_kind]`` instead of branching
on the kind's name:

=============  ==========================  ============================  ===================
kind           prediction                  v(S) (Eq. 11)                 task metric
=============  ==========================  ============================  ===================
classification one of ``claims_labels``    P(target class | S)           Brier score (Eq. 6)
regression     a number >= 0               y_hat(S), the predicted value relative error (Eq. 7)
ranking        2-10 distinct items         1 - rho(r(S), r_N)            Spearman's rho (Eq. 8)
=============  ==========================  ============================  ===================

The re-prediction check (Appendix B.1, Table 5) measures the relative error of the
re-predicted probability or value (Eq. 12) and, for rankings, the relative Kendall
distance (Eq. 13).

A prediction is stored as text in one canonical form: a label, a number (``repr`` of a
float) or a JSON list of item names, so the tables keep one ``prediction`` column for
every kind.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from lookahead.claims.prompts import label_instruction
from lookahead.errors import LookaheadError, StudyConfigError
from lookahead.scoring import label_probability
from lookahead.settings_sections import ClaimsSettings


class PredictionError(LookaheadError, ValueError):
    """A prediction (a file's cell or a model's answer) that does not fit the task kind;
    the message names what is wrong in one line."""


@dataclass(frozen=True)
class ClaimsDerived:
    """The study's claims section (generated, lookahead/settings_sections.py) and what the
    task kinds derive from it: the labels normalised (stripped, lower case), the target
    class filled in (the first label when claims_target_class is null), the kind's
    registry entry and the rationale minimum. Everything else is read from the section,
    ``claims.claims_<setting>``, so no setting is declared twice.

    Built from a study (lookahead.claims.inputs.ClaimsResolved) or, outside one, from
    ``ClaimsSettings.with_defaults(...)``; a classification whose labels are not a pair,
    or whose target class is not one of them, is refused in one line naming the setting."""

    claims: ClaimsSettings
    #: how many items a ranking holds (seed 002 Appendix D: 2 to 10)
    min_items: ClassVar[int] = 2
    max_items: ClassVar[int] = 10

    def __post_init__(self) -> None:
        labels, kind = self.labels, self.claims.claims_task_kind
        if kind == "classification" and len(labels) != 2:  # the schema checks a list; the pair is this kind's
            raise StudyConfigError("setting 'claims_labels' must be a list of two labels for a classification")
        if kind == "classification" and self.target_class not in labels:
            raise StudyConfigError(
                f"setting 'claims_target_class': '{self.target_class}' is not one of claims_labels ({', '.join(labels)})"
            )

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """claims_labels, stripped and in lower case (how answers are compared)."""
        return tuple(str(s).strip().lower() for s in self.claims.claims_labels)

    @cached_property
    def target_class(self) -> str:
        """claims_target_class, else the first of the labels; normalised as they are."""
        return str(self.claims.claims_target_class or (self.labels[0] if self.labels else "")).strip().lower()

    @property
    def kind(self) -> TaskKind:
        """The registry entry of the study's task kind (KINDS)."""
        return KINDS[self.claims.claims_task_kind]

    @property
    def rationale_min_chars(self) -> int:
        """An agent's rationale minimum: the setting, else the kind's Appendix D minimum."""
        given = self.claims.claims_rationale_min_chars
        return self.kind.min_rationale_chars if given is None else given


# ----------------------------------------------------------------------------- helpers

_NUMBER = re.compile(r"^\$?\s*([0-9][0-9,]*(?:\.[0-9]+)?|\.[0-9]+)(?:\s*(?:usd|dollars))?\.?$", re.IGNORECASE)


def parse_number(text: Any) -> float:
    """A non-negative finite number: '21250000', '21,250,000', '$21,250,000.50' (first line
    of the text, a trailing period allowed); anything else raises PredictionError."""
    raw = str(text if text is not None else "").strip().splitlines()
    s = raw[0].strip() if raw else ""
    m = _NUMBER.match(s)
    if not m:
        raise PredictionError(f"'{s[:60]}' is not a number >= 0")
    x = float(m.group(1).replace(",", ""))
    if not math.isfinite(x):
        raise PredictionError(f"'{s[:60]}' is not a finite number")
    return x


def decimal_text(x: float) -> str:
    """A JSON number as plain decimal digits, the shortest that reads back as the same
    float ('0.63', '1', '21250000', '0.00001'); a non-finite number is not a value."""
    if not math.isfinite(float(x)):
        raise PredictionError(f"{x!r} is not a finite number")
    if isinstance(x, int):
        return str(x)
    return np.format_float_positional(float(x), trim="-")


def parse_probability(text: Any) -> float:
    """A probability as a model states it: one number from 0 to 1 ('0.63', '.5', '1');
    anything else (a label word, 63, a sentence) raises PredictionError."""
    raw = str(text if text is not None else "").strip().splitlines()
    first = raw[0].strip() if raw else ""
    if re.fullmatch(r"\d*\s*\.\s*\d+", first):  # '0 . 5': a word-level tokenizer's decoding of 0.5
        first = re.sub(r"\s+", "", first)
    x = parse_number(first)
    if x > 1:
        raise PredictionError(f"{x:g} is not a probability (0 to 1)")
    return x


def parse_ranking(text: Any, items: Sequence[str] | None = None) -> list[str]:
    """A ranking, best first: a JSON list, or names separated by '>', ',', ';' or new
    lines (a leading '1.' / '2)' numbering dropped); with ``items`` given, names are
    matched to them case-insensitively and the ranking must hold each exactly once.
    Missing, unknown or repeated items raise PredictionError."""
    parts: list[str] | None
    if isinstance(text, (list, tuple)):
        parts = [str(x) for x in text]
    else:
        s = str(text if text is not None else "").strip()
        parts = None
        if s.startswith("["):
            try:
                val = json.loads(s)
                parts = [str(x) for x in val] if isinstance(val, list) else None
            except ValueError:
                parts = None
        if parts is None:
            parts = [p for p in re.split(r"\s*(?:>|,|;|\n)\s*", s) if p.strip()]
            parts = [re.sub(r"^\(?\d+[.)]\s*", "", p).strip().rstrip(".") for p in parts]
            if items is not None and len(parts) == 1 and len(items) > 1:
                parts = parts[0].split()
    parts = [p.strip() for p in parts if p.strip()]
    if items is not None:
        lookup = {i.lower(): i for i in items}
        unknown = [p for p in parts if p.lower() not in lookup]
        if unknown:
            raise PredictionError(f"ranking names unknown item(s) {', '.join(unknown[:3])}")
        parts = [lookup[p.lower()] for p in parts]
    if len(set(p.lower() for p in parts)) != len(parts):
        rep = sorted({p for p in parts if sum(q.lower() == p.lower() for q in parts) > 1})
        raise PredictionError(f"ranking repeats item(s) {', '.join(rep)}")
    if items is not None and len(parts) != len(items):
        missing = [i for i in items if i not in parts]
        raise PredictionError(f"ranking misses item(s) {', '.join(missing)}")
    return parts


def spearman(a: Sequence[str], b: Sequence[str]) -> float:
    """Eq. 8: 1 - 6 sum d_i^2 / (n (n^2 - 1)) of two rankings of the same items."""
    n = len(a)
    pos = {x: k for k, x in enumerate(b)}
    d2 = sum((k - pos[x]) ** 2 for k, x in enumerate(a))
    return 1.0 - 6.0 * d2 / (n * (n * n - 1))


def kendall_distance(a: Sequence[str], b: Sequence[str]) -> float:
    """Eq. 13 for one instance: the share of item pairs the two rankings order differently."""
    n = len(a)
    pa = {x: k for k, x in enumerate(a)}
    pb = {x: k for k, x in enumerate(b)}
    bad = sum(1 for i in range(n) for j in range(i + 1, n) if (pa[a[i]] - pa[a[j]]) * (pb[a[i]] - pb[a[j]]) < 0)
    return bad / (n * (n - 1) / 2)


def relative_error(pred: float, truth: float) -> float | None:
    """|pred - truth| / |truth| (Eqs. 7 and 12); None when truth is 0 (undefined)."""
    return None if truth == 0 else abs(pred - truth) / abs(truth)


# ----------------------------------------------------------------------------- kinds


class TaskKind:
    """One task kind. Subclasses fill in the kind-specific parts; ``KINDS`` maps the
    setting ``claims_task_kind`` to an instance."""

    name: str = ""
    metric_name: str = ""  # the task metric of instance_leakage / claims_summary
    repred_metric_name: str = ""  # the re-prediction error (Table 5)
    min_rationale_chars: int = 400  # Appendix D.1
    coalition_top_logprobs: int = 0
    items_needed: bool = False  # the coalition instruction lists the prediction's items

    # -- predictions
    def parse(self, text: Any, ks: ClaimsDerived, items: Sequence[str] | None = None) -> str:
        """Canonical text of a prediction (or outcome); PredictionError when it does not fit."""
        raise NotImplementedError

    def items(self, canonical: str) -> list[str] | None:
        """The items a ranking is over (None for the other kinds)."""
        return None

    def answer_instruction(self, ks: ClaimsDerived, items: Sequence[str] | None) -> str:
        raise NotImplementedError

    def prediction_format(self, ks: ClaimsDerived) -> str:
        """What follows 'Prediction:' in an agent's answer (the rationale prompt)."""
        raise NotImplementedError

    def agent_prediction(self, text: str, ks: ClaimsDerived) -> tuple[str | None, str, str | None]:
        """(canonical prediction or None, rationale, error or None) of a 'Rationale: ...
        Prediction: ...' answer: the first line after the last 'Prediction:' parsed by
        the kind; the rationale is the text before it without a leading 'Rationale:'."""
        text = text or ""
        marker = list(re.finditer(r"prediction\s*:", text, re.IGNORECASE))
        head = text[: marker[-1].start()] if marker else text
        rationale = re.sub(r"^\s*rationale\s*:\s*", "", head, flags=re.IGNORECASE).strip()
        if not marker:
            return None, rationale, "no 'Prediction:' line in the answer"
        tail = text[marker[-1].end() :].strip()
        try:
            return self.parse(tail.splitlines()[0] if tail else "", ks), rationale, None
        except PredictionError as exc:
            return None, rationale, str(exc)

    def agent_schema(self, ks: ClaimsDerived) -> dict[str, Any]:
        """Appendix D.1's submit_prediction schema (a JSON Schema)."""
        raise NotImplementedError

    # -- coalition answers
    def coalition_answer(
        self, text: str, top_logprobs: list[dict[str, Any]], ks: ClaimsDerived, items: Sequence[str] | None
    ) -> dict[str, Any]:
        """The fields a coalition's raw line stores; PredictionError when unparseable."""
        raise NotImplementedError

    # -- the coalition query (seed 002's Shapley Prediction prompt) and its value
    def task_type(self, ks: ClaimsDerived) -> str:
        """What the seed prompt's 'Predict {task_type} using ONLY these claims' names."""
        return "the answer"

    def value_instruction(self, ks: ClaimsDerived, items: Sequence[str] | None) -> str:
        """The OUTPUT line of a coalition (and aggregator, re-prediction) query: the
        answer instruction, except where the value is a stated probability."""
        return self.answer_instruction(ks, items)

    def value_top_logprobs(self, ks: ClaimsDerived) -> int:
        """Top log-probs a coalition query asks for (only a token-probability value reads them)."""
        return 0

    def exact_labels(self, ks: ClaimsDerived) -> tuple[str, ...]:
        """Labels whose exact probability a coalition query needs from the backend
        (``claims_coalition_value: token``); none for a stated value."""
        return ()

    def value_answer(
        self,
        text: str,
        top_logprobs: list[dict[str, Any]],
        ks: ClaimsDerived,
        items: Sequence[str] | None,
        exact: Mapping[str, float] | None = None,
    ) -> dict[str, Any]:
        """The fields a coalition's raw line stores (``coalition_answer``'s), the value
        read as ``claims_coalition_value`` says; PredictionError when unparseable.
        ``exact``: label -> exact log-probability (token values)."""
        return self.coalition_answer(text, top_logprobs, ks, items)

    # -- the batched coalition query (seed 002's Claim ID Reference System)
    def batch_field(self, ks: ClaimsDerived, items: Sequence[str] | None) -> tuple[str, str]:
        """(the field each object of a batched answer carries beside "set", what the
        OUTPUT line says it holds): the seed's ``{"set": 1, "p": 0.63}`` for
        classification, "value" and "ranking" for the other kinds."""
        raise NotImplementedError

    def batch_text(self, value: Any, items: Sequence[str] | None) -> str:
        """The answer text a single-coalition query would have returned for the value one
        object of a batched answer gives (a number as its shortest decimal, a ranking
        joined by ' > '), so that it is parsed by ``value_answer`` as that answer is and
        its raw line is the one the single query writes; PredictionError when the value
        is of the wrong type."""
        if isinstance(value, bool) or value is None:
            raise PredictionError(f"{json.dumps(value)} is not a number")
        if isinstance(value, (int, float)):
            return decimal_text(value)
        if isinstance(value, str):
            return value
        raise PredictionError(f"{json.dumps(value)[:60]} is not a number")

    #: the fields of a parsed coalition answer (what a raw line stores beside the text)
    answer_fields: tuple[str, ...] = ()

    def stored_answer(self, line: Mapping[str, Any], ks: ClaimsDerived, items: Sequence[str] | None) -> dict[str, Any]:
        """A raw line's parsed answer: the fields it stores (written by the job that parsed
        it, exact log-probabilities included), else its text parsed again."""
        kept = {f: line[f] for f in self.answer_fields if line.get(f) is not None}
        if len(kept) == len(self.answer_fields):
            return kept
        return self.value_answer(line.get("response_text") or "", line.get("top_logprobs") or [], ks, items)

    def insufficient(
        self, ks: ClaimsDerived, items: Sequence[str] | None, default_value: float | None
    ) -> tuple[str, dict[str, Any]]:
        """RULE (2) of the seed prompt: (the text 'If claims insufficient: ...' names, the
        parsed answer it stands for). That answer is v(empty set): with no claim the
        rule applies, so the empty coalition is not queried."""
        raise NotImplementedError

    def final_prediction(self, parsed: Mapping[str, Any], ks: ClaimsDerived) -> tuple[str | None, float | None]:
        """(canonical prediction, probability of the target class or None) from a parsed
        coalition answer: TimeSPEC's aggregator and the re-prediction check answer the
        coalition prompt, so their prediction is read as v(S) is."""
        raise NotImplementedError

    def values(
        self, lines: Mapping[int, Mapping[str, Any]], full_mask: int, prediction: str, ks: ClaimsDerived
    ) -> dict[int, float]:
        """v(S) per coalition mask from the stored coalition answers."""
        raise NotImplementedError

    def value_label(self, prediction: str, ks: ClaimsDerived) -> str | None:
        return None

    # -- metrics
    def instance_metric(self, prediction: str, outcome: str, probability: float | None, ks: ClaimsDerived) -> float | None:
        """Per-instance task metric (None when the outcome is unknown)."""
        raise NotImplementedError

    def target_probability(self, prediction: str, probability: float | None, ks: ClaimsDerived) -> float | None:
        """The probability of the target class (classification only; None otherwise)."""
        return None

    def correct(self, prediction: str, outcome: str, ks: ClaimsDerived) -> float | None:
        """1/0 when the prediction is a label and the outcome known (accuracy); None otherwise."""
        return None

    def summary_metric(self, per_instance: Sequence[float]) -> float | None:
        x = [float(v) for v in per_instance if v is not None and not (isinstance(v, float) and math.isnan(v))]
        return float(np.mean(x)) if x else None

    def mentions(self, prediction: str) -> list[str]:
        """Regexes of explicit statements of ``prediction`` in a rationale, which the
        re-prediction check removes before asking again (Appendix B.1 step 1)."""
        raise NotImplementedError

    def repred_error(
        self,
        original: str,
        original_probability: float | None,
        repredicted: str,
        repredicted_probability: float | None,
        ks: ClaimsDerived,
    ) -> float | None:
        raise NotImplementedError


class Classification(TaskKind):
    name = "classification"
    answer_fields = ("label_probs",)
    metric_name = "brier"
    repred_metric_name = "relative_error"
    coalition_top_logprobs = 20

    def parse(self, text: Any, ks: ClaimsDerived, items: Sequence[str] | None = None) -> str:
        s = str(text if text is not None else "").strip().lower()
        if s not in ks.labels:
            raise PredictionError(f"'{text}' is not one of the labels {', '.join(ks.labels)}")
        return s

    def answer_instruction(self, ks: ClaimsDerived, items: Sequence[str] | None) -> str:
        return label_instruction(ks.labels)

    def prediction_format(self, ks: ClaimsDerived) -> str:
        return "one word: " + " or ".join(ks.labels)

    def agent_prediction(self, text: str, ks: ClaimsDerived) -> tuple[str | None, str, str | None]:
        """The first label word after the last 'Prediction:'; without that marker, the last
        label word of the answer (a small model often drops the marker)."""
        text = text or ""
        words = "|".join(re.escape(x) for x in ks.labels)
        marker = list(re.finditer(r"prediction\s*:", text, re.IGNORECASE))
        if marker:
            head, tail = text[: marker[-1].start()], text[marker[-1].end() :]
            m = re.search(rf"\b({words})\b", tail, re.IGNORECASE)
            pred = m.group(1).lower() if m else None
        else:
            head = text
            found = re.findall(rf"\b({words})\b", text, re.IGNORECASE)
            pred = found[-1].lower() if found else None
        head = re.sub(r"^\s*rationale\s*:\s*", "", head, flags=re.IGNORECASE).strip()
        return pred, head, None if pred else f"no label ({', '.join(ks.labels)}) in the answer"

    def agent_schema(self, ks: ClaimsDerived) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["probability", "prediction_rationale"],
            "properties": {
                "probability": {"type": "number", "minimum": 0, "maximum": 1},
                "prediction_rationale": {"type": "string", "minLength": self.min_rationale_chars},
            },
        }

    def coalition_answer(
        self, text: str, top_logprobs: list[dict[str, Any]], ks: ClaimsDerived, items: Sequence[str] | None
    ) -> dict[str, Any]:
        """P(label) for every label from the first token's top-20 (the protocol rule); a
        label outside the top 20 is None (censored, read as 0)."""
        return {"label_probs": {lab: label_probability(top_logprobs, lab) for lab in ks.labels}}

    def task_type(self, ks: ClaimsDerived) -> str:
        return f"the probability of {ks.target_class}"

    def batch_field(self, ks: ClaimsDerived, items: Sequence[str] | None) -> tuple[str, str]:
        return "p", f"the probability (from 0 to 1) of {ks.target_class}"

    def value_instruction(self, ks: ClaimsDerived, items: Sequence[str] | None) -> str:
        """stated (the seed's {"p": 0.63}): the probability of the target class as one
        number; token: the label word, whose probability is then read."""
        if ks.claims.claims_coalition_value == "token":
            return label_instruction(ks.labels)
        return f"Answer with the probability (from 0 to 1) of {ks.target_class}: one number, digits only, nothing else."

    def value_top_logprobs(self, ks: ClaimsDerived) -> int:
        return self.coalition_top_logprobs if ks.claims.claims_coalition_value == "token" else 0

    def exact_labels(self, ks: ClaimsDerived) -> tuple[str, ...]:
        return ks.labels if ks.claims.claims_coalition_value == "token" else ()

    def value_answer(
        self,
        text: str,
        top_logprobs: list[dict[str, Any]],
        ks: ClaimsDerived,
        items: Sequence[str] | None,
        exact: Mapping[str, float] | None = None,
    ) -> dict[str, Any]:
        """stated: the number answered is P(target class), the other label's 1 - p (two
        labels); token: P(label) = exp(exact log-prob) for every label, from the full
        next-token distribution (``exact``, what the jobs always score), never the top-20
        rule's censored reading; only a stored line written before exact scoring, which
        carries no ``exact``, is read by the top-20 rule it was written under."""
        if ks.claims.claims_coalition_value == "token":
            if exact is None:  # a line written before exact scoring: read as it was written (top-20 rule)
                return self.coalition_answer(text, top_logprobs, ks, items)
            return {"label_probs": {lab: math.exp(float(exact[lab])) for lab in ks.labels}}
        p = parse_probability(text)
        return {"label_probs": {lab: (p if lab == ks.target_class else 1.0 - p) for lab in ks.labels}}

    def insufficient(
        self, ks: ClaimsDerived, items: Sequence[str] | None, default_value: float | None
    ) -> tuple[str, dict[str, Any]]:
        """The seed's 'Legal -> 0.5': equal odds."""
        return "0.5", {"label_probs": dict.fromkeys(ks.labels, 0.5)}

    def final_prediction(self, parsed: Mapping[str, Any], ks: ClaimsDerived) -> tuple[str | None, float | None]:
        """The label with the higher probability; its target-class probability normalised
        over the labels (None when no label is among the top 20)."""
        probs = {lab: float(parsed["label_probs"].get(lab) or 0.0) for lab in ks.labels}
        total = sum(probs.values())
        if total <= 0:
            return None, None
        return max(ks.labels, key=lambda lab: (probs[lab], lab == ks.target_class)), probs[ks.target_class] / total

    def value_label(self, prediction: str, ks: ClaimsDerived) -> str | None:
        return ks.target_class if ks.claims.claims_class_value == "target_class" else prediction

    def values(
        self, lines: Mapping[int, Mapping[str, Any]], full_mask: int, prediction: str, ks: ClaimsDerived
    ) -> dict[int, float]:
        lab = self.value_label(prediction, ks)
        return {m: float(rec["label_probs"].get(lab) or 0.0) for m, rec in lines.items()}

    def target_probability(self, prediction: str, probability: float | None, ks: ClaimsDerived) -> float:  # always a number here
        """The file's probability (of the target class), else 1/0 from the label."""
        return probability if probability is not None else float(prediction == ks.target_class)

    def correct(self, prediction: str, outcome: str, ks: ClaimsDerived) -> float | None:
        o = str(outcome or "").strip().lower()
        return float(prediction == o) if o in ks.labels else None

    def mentions(self, prediction: str) -> list[str]:
        return [rf"\b{re.escape(prediction)}\b"]

    def instance_metric(self, prediction: str, outcome: str, probability: float | None, ks: ClaimsDerived) -> float | None:
        """The instance's term of the Brier score (Eq. 6): (p - o)^2, o = 1 for the target class."""
        o = str(outcome or "").strip().lower()
        if o not in ks.labels:
            return None
        return (self.target_probability(prediction, probability, ks) - float(o == ks.target_class)) ** 2

    def repred_error(
        self,
        original: str,
        original_probability: float | None,
        repredicted: str,
        repredicted_probability: float | None,
        ks: ClaimsDerived,
    ) -> float | None:
        """Eq. 12 on the probability of the originally predicted class: P(target) when the
        original prediction is the target class, else 1 - P(target) (two labels). The seed
        takes the petitioner's probability, which its legal agents put at 0.65-0.85; for a
        prediction of the other class that probability is near 0 and the relative error
        would divide by it, while the predicted class's probability is at least 1/2."""

        def p_of_original(pred: str, prob: float | None) -> float:
            p = self.target_probability(pred, prob, ks)
            return p if original == ks.target_class else 1.0 - p

        return relative_error(p_of_original(repredicted, repredicted_probability), p_of_original(original, original_probability))


class Regression(TaskKind):
    name = "regression"
    answer_fields = ("value",)
    metric_name = "relative_error"
    repred_metric_name = "relative_error"

    def parse(self, text: Any, ks: ClaimsDerived, items: Sequence[str] | None = None) -> str:
        return repr(parse_number(text))

    def answer_instruction(self, ks: ClaimsDerived, items: Sequence[str] | None) -> str:
        return "Answer with one number (>= 0), digits only, nothing else."

    def prediction_format(self, ks: ClaimsDerived) -> str:
        return "one number (>= 0), digits only"

    def agent_schema(self, ks: ClaimsDerived) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["predicted_value", "prediction_rationale"],
            "properties": {
                "predicted_value": {"type": "number", "minimum": 0},
                "prediction_rationale": {"type": "string", "minLength": self.min_rationale_chars},
            },
        }

    def coalition_answer(
        self, text: str, top_logprobs: list[dict[str, Any]], ks: ClaimsDerived, items: Sequence[str] | None
    ) -> dict[str, Any]:
        return {"value": parse_number(text)}

    def task_type(self, ks: ClaimsDerived) -> str:
        return "the value"

    def batch_field(self, ks: ClaimsDerived, items: Sequence[str] | None) -> tuple[str, str]:
        return "value", "one number (>= 0)"

    def insufficient(
        self, ks: ClaimsDerived, items: Sequence[str] | None, default_value: float | None
    ) -> tuple[str, dict[str, Any]]:
        """The seed's 'Salary -> position median': the instance's value of
        claims_default_column, else claims_default_value."""
        if default_value is None:
            raise StudyConfigError(
                "setting 'claims_default_value' (or 'claims_default_column') is not set: a regression under "
                "claims_coalition_prompt: seed needs the value to answer with insufficient claims"
            )
        return f"{float(default_value):g}", {"value": float(default_value)}

    def final_prediction(self, parsed: Mapping[str, Any], ks: ClaimsDerived) -> tuple[str | None, float | None]:
        return repr(float(parsed["value"])), None

    def values(
        self, lines: Mapping[int, Mapping[str, Any]], full_mask: int, prediction: str, ks: ClaimsDerived
    ) -> dict[int, float]:
        return {m: float(rec["value"]) for m, rec in lines.items()}

    def mentions(self, prediction: str) -> list[str]:
        """The number as digits, with or without thousands separators (and a '.0')."""
        x = float(prediction)
        forms = {f"{x:g}", f"{x:,.0f}", f"{x:.0f}"} if x == int(x) else {f"{x:g}", f"{x:,}"}
        return [rf"(?<![\d.,]){re.escape(f)}(?![\d,]|\.\d)" for f in forms]

    def instance_metric(self, prediction: str, outcome: str, probability: float | None, ks: ClaimsDerived) -> float | None:
        try:
            y = parse_number(outcome)
        except PredictionError:
            return None
        return relative_error(float(prediction), y)

    def repred_error(
        self,
        original: str,
        original_probability: float | None,
        repredicted: str,
        repredicted_probability: float | None,
        ks: ClaimsDerived,
    ) -> float | None:
        return relative_error(float(repredicted), float(original))


class Ranking(TaskKind):
    name = "ranking"
    answer_fields = ("ranking",)
    items_needed = True
    metric_name = "spearman"
    repred_metric_name = "kendall_distance"
    min_rationale_chars = 1000

    def parse(self, text: Any, ks: ClaimsDerived, items: Sequence[str] | None = None) -> str:
        r = parse_ranking(text, items)
        if not ks.min_items <= len(r) <= ks.max_items:
            raise PredictionError(f"a ranking has {ks.min_items}-{ks.max_items} items, not {len(r)}")
        return json.dumps(r)

    def items(self, canonical: str) -> list[str] | None:
        """The items in a neutral order (sorted by name), so that a prompt listing them does
        not reveal the predicted order."""
        return sorted(json.loads(canonical), key=str.lower)

    def answer_instruction(self, ks: ClaimsDerived, items: Sequence[str] | None) -> str:
        return (
            "Rank these items from BEST to WORST: "
            + ", ".join(items or [])
            + ". Answer with every item once, separated by ' > ', nothing else."
        )

    def prediction_format(self, ks: ClaimsDerived) -> str:
        return "every item of the task ranked from BEST to WORST, separated by ' > '"

    def agent_schema(self, ks: ClaimsDerived) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["ranking", "ranking_rationale"],
            "properties": {
                "ranking": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": ks.min_items,
                    "maxItems": ks.max_items,
                    "uniqueItems": True,
                },
                "ranking_rationale": {"type": "string", "minLength": self.min_rationale_chars},
            },
        }

    def coalition_answer(
        self, text: str, top_logprobs: list[dict[str, Any]], ks: ClaimsDerived, items: Sequence[str] | None
    ) -> dict[str, Any]:
        return {"ranking": parse_ranking(text, items)}

    def task_type(self, ks: ClaimsDerived) -> str:
        return "the ranking"

    def batch_field(self, ks: ClaimsDerived, items: Sequence[str] | None) -> tuple[str, str]:
        return "ranking", "a JSON list of every item once, from BEST to WORST: " + ", ".join(items or [])

    def batch_text(self, value: Any, items: Sequence[str] | None) -> str:
        """A JSON list of item names (or a ' > ' string), as the single query's ' > '
        answer; a list whose names hold a separator stays JSON (parse_ranking reads both)."""
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise PredictionError(f"{json.dumps(value)[:60]} is not a list of item names")
        if any(re.search(r">|,|;|\n", x) for x in value):
            return json.dumps(value)
        return " > ".join(value)

    def insufficient(
        self, ks: ClaimsDerived, items: Sequence[str] | None, default_value: float | None
    ) -> tuple[str, dict[str, Any]]:
        """The seed's 'Stock -> preserve order': the items in the order the prompt lists them."""
        return "keep the items in the order listed", {"ranking": list(items or [])}

    def final_prediction(self, parsed: Mapping[str, Any], ks: ClaimsDerived) -> tuple[str | None, float | None]:
        return json.dumps(list(parsed["ranking"])), None

    def values(
        self, lines: Mapping[int, Mapping[str, Any]], full_mask: int, prediction: str, ks: ClaimsDerived
    ) -> dict[int, float]:
        """Eq. 11: 1 - rho(r(S), r_N), r_N the full coalition's ranking (so v(N) = 0)."""
        r_full = lines[full_mask]["ranking"]
        return {m: 1.0 - spearman(rec["ranking"], r_full) for m, rec in lines.items()}

    def mentions(self, prediction: str) -> list[str]:
        """The predicted order written out: the items joined by '>' (or ',')."""
        items = json.loads(prediction)
        return [r"\s*(?:>|,)\s*".join(re.escape(i) for i in items)]

    def instance_metric(self, prediction: str, outcome: str, probability: float | None, ks: ClaimsDerived) -> float | None:
        pred = json.loads(prediction)
        try:
            truth = parse_ranking(outcome, pred)
        except PredictionError:
            return None
        return spearman(pred, truth)

    def repred_error(
        self,
        original: str,
        original_probability: float | None,
        repredicted: str,
        repredicted_probability: float | None,
        ks: ClaimsDerived,
    ) -> float | None:
        return kendall_distance(json.loads(original), json.loads(repredicted))


KINDS: dict[str, TaskKind] = {k.name: k for k in (Classification(), Regression(), Ranking())}
