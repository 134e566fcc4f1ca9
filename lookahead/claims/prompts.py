"""Every prompt of the claim pipeline, in one place (seed 002, Appendix D).

The backends take one user text (wrapped in the chat template when the study asks), so
the seed's system and user prompts are joined into one text. The coalition prompt is
also what the demo's claim models are trained on (lookahead.claims.demo), so the demo
and the scoring job cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from lookahead.claims.schema import CATEGORIES, CATEGORY_NAMES

TEMPORAL_CONSTRAINT = (
    "CRITICAL TEMPORAL CONSTRAINT: You may ONLY use information available BEFORE {cutoff_date}. "
    "This is a strict knowledge cutoff. Do not use any information, events, decisions, or "
    "developments from after this date."
)

AGENTS = ("superforecasting", "temporal_hint")


def label_instruction(labels: Sequence[str]) -> str:
    return "Answer with exactly one word: " + " or ".join(labels) + "."


def rationale_prompt(agent: str, task_input: str, t_ref: str, prediction_format: str, evidence: Sequence[str] = ()) -> str:
    """The Superforecasting agent (no date in the prompt), its Temporal Hint variant
    (the seed's TEMPORAL_CONSTRAINT_BLOCK prepended) and TimeSPEC's generator (the
    constraint plus retrieved pre-t_ref documents). ``prediction_format`` is the task
    kind's (lookahead.claims.tasks.TaskKind.prediction_format)."""
    if agent not in (*AGENTS, "timespec"):
        raise ValueError(f"agent '{agent}' is not one of {', '.join((*AGENTS, 'timespec'))}")
    head = ""
    if agent in ("temporal_hint", "timespec"):
        head = TEMPORAL_CONSTRAINT.format(cutoff_date=t_ref) + "\n\n"
    ev = ""
    if evidence:
        ev = "EVIDENCE (documents published before the cutoff):\n" + "\n".join(f"- {e}" for e in evidence) + "\n\n"
    return (
        f"{head}You are an expert forecaster. Base the analysis on SPECIFIC, VERIFIABLE facts "
        "with dates and numbers. Do NOT recall actual outcomes.\n\n"
        f"{ev}TASK: {task_input}\n\n"
        "First write 'Rationale:' followed by the facts and reasoning (at least three sentences), "
        f"then a final line 'Prediction:' followed by {prediction_format}."
    )


def extraction_prompt(task_description: str, event_description: str, reference_date: str, rationale: str) -> str:
    """Appendix D.3 claim extraction, verbatim apart from the JSON field list, which
    names exactly the fields of lookahead.claims.schema.EXTRACTION_SCHEMA."""
    cats = ", ".join(f"[{c}] {CATEGORY_NAMES[c]}" for c in CATEGORIES)
    return (
        "Extract all factual claims from the given rationale. Extraction must be: (1) Comprehensive - "
        "capture ALL factual assertions, (2) Faithful - only information in rationale, no additions, "
        "(3) Self-contained - each claim understandable alone, (4) Atomic - one verifiable fact per claim.\n\n"
        "CLAIM CATEGORIES:\nGroup A (Temporally Verifiable): [A1] Discrete Event (specific event occurred), "
        "[A2] State/Measurement (quantity at specific time), [A3] Publication (content from document), "
        "[A4] Outcome (target event result - always leaked), [A5] Consequential (post-target event - always "
        "leaked)\nGroup B (Non-Applicable): [B1] Background/General Knowledge, [B2] Definitional/Logical\n\n"
        "EXCLUDE: Predictions, judgments, analysis, speculation, confidence statements.\n\n"
        'TEMPORAL REFERENCES: Handle strictly - "2023" -> 2023-12-31, "Q3 2023" -> 2023-09-30, '
        '"March 2023" -> 2023-03-31.\n\n'
        'OUTPUT: JSON object {"claims": [...]}, each claim having: claim_id, claim_text, original_text, '
        f"temporal_reference (or null), claim_category (one of {', '.join(CATEGORIES)}; {cats}), "
        "category_reasoning. Output only the JSON.\n\n"
        f"Context: {task_description}\nTarget Event: {event_description}\nReference Date: {reference_date}\n\n"
        f"RATIONALE TO ANALYZE:\n{rationale}"
    )


def extraction_retry_prompt(first_prompt: str, bad_answer: str, error: str) -> str:
    """A retry after an invalid answer. At temperature 0 the same prompt gives the same
    answer, so the retry names the error (a new prompt, hence a new cache key)."""
    return (
        f"{first_prompt}\n\nYOUR PREVIOUS ANSWER WAS INVALID ({error}). Previous answer:\n"
        f"{bad_answer[:1500]}\n\nAnswer again with ONLY a JSON object of the form "
        + json.dumps(
            {
                "claims": [
                    {
                        "claim_id": 1,
                        "claim_text": "...",
                        "original_text": "...",
                        "temporal_reference": None,
                        "claim_category": "B1",
                        "category_reasoning": "...",
                    }
                ]
            }
        )
    )


def answer_retry_prompt(first_prompt: str, bad_answer: str, error: str) -> str:
    """A re-ask after an answer that does not parse (a value that is not a number, a
    ranking with missing or repeated items): the first prompt plus the error, so that the
    greedy answer can change (a new prompt, hence a new cache key of its own)."""
    return (
        f"{first_prompt}\n\nYOUR PREVIOUS ANSWER WAS INVALID ({error}). Previous answer: "
        f"{bad_answer[:300]!r}\nAnswer again, exactly as instructed above, with nothing else."
    )


#: The coalition prompts (setting ``claims_coalition_prompt``): the seed's Shapley
#: Prediction prompt, and the earlier one kept to reproduce earlier runs.
COALITION_PROMPTS = ("seed", "legacy")


def coalition_prompt(
    task_input: str,
    claims: Sequence[str],
    instruction: str,
    insufficient: str | None = None,
    form: str = "seed",
    task_type: str = "the answer",
) -> str:
    """The characteristic-function query v(S): the task input and ONLY the claims of S,
    then the task kind's answer instruction (lookahead.claims.tasks); the parsed answer
    gives v(S).

    ``form`` seed (the default) is the seed's Shapley Prediction prompt (Appendix D), its
    system and user texts joined, the tool call replaced by the answer instruction (the
    OUTPUT line): RULES (1) only the provided claims, no external knowledge, (2) with
    insufficient claims, ``insufficient`` (the task kind's default: 0.5, a value such as
    the position's median, the input order), (3) only the answer. ``legacy`` is the
    earlier prompt (the claims as a list, then the instruction), kept so earlier runs
    can be reproduced (setting ``claims_coalition_prompt``)."""
    if form == "legacy":
        listed = "\n".join(f"- {c}" for c in claims) if claims else "- (no claims)"
        return f"{task_input}\nUse only these claims:\n{listed}\n{instruction}"
    if form != "seed":
        raise ValueError(f"coalition prompt '{form}' is not one of {', '.join(COALITION_PROMPTS)}")
    numbered = "\n".join(f"{k}. {c}" for k, c in enumerate(claims, 1)) if claims else "(none)"
    return (
        "Make prediction from claims. Answer IMMEDIATELY with no explanation.\n"
        "RULES: (1) Use ONLY provided claims - NO external knowledge, "
        f"(2) If claims insufficient: {insufficient if insufficient is not None else 'the default'}, "
        "(3) Output ONLY the answer - NO reasoning text.\n"
        f"Predict {task_type} using ONLY these claims.\n\n{task_input}\n\nCLAIMS:\n{numbered}\n\n"
        f"OUTPUT: {instruction}"
    )


def batched_coalition_prompt(
    task_input: str,
    claims: Sequence[str],
    sets: Sequence[Sequence[int]],
    field: str,
    what: str,
    insufficient: str,
) -> str:
    """Many coalitions in one query: the seed's Batched Shapley Prompt (Appendix D, the
    Claim ID Reference System; setting ``claims_coalition_batch``), its system and user
    texts joined. The instance's claims are listed once as ``[1]``, ``[2]``, ...; each
    SET names the 1-based IDs of its claims (``sets``); the answer is a JSON array of
    one object per SET, ``{"set": k, <field>: ...}``, ``field`` and ``what`` the task
    kind's (lookahead.claims.tasks.TaskKind.batch_field: the seed's "p" for
    classification). RULES (1)-(3) of the single coalition prompt come first, so a set
    with insufficient claims is answered with RULE 2's default, as each single query is;
    the empty set is that default and is never listed."""
    listed = "\n".join(f"[{k}] {c}" for k, c in enumerate(claims, 1))
    asked = "\n".join(f"SET {j}: [{', '.join(str(i) for i in s)}]" for j, s in enumerate(sets, 1))
    return (
        "Output predictions as JSON array. No explanation.\n"
        "RULES: (1) Use ONLY provided claims - NO external knowledge, "
        f"(2) If claims insufficient: {insufficient}, "
        "(3) Output ONLY the JSON array - NO reasoning text.\n"
        f"{task_input}\n\nCLAIMS (reference by ID):\n{listed}\n\n"
        "Predict for each SET using ONLY claims with listed IDs. Empty set = default value.\n"
        f"{asked}\n\n"
        f'OUTPUT: JSON array with exactly {len(sets)} objects, one per SET: "set" its number, "{field}" {what}.\n'
        f'Format: [{{"set": 1, "{field}": ...}}, {{"set": 2, "{field}": ...}}, ...]'
    )


def batch_retry_prompt(first_prompt: str, errors: Sequence[str]) -> str:
    """A re-ask of the sets of a batched answer that were missing or invalid: their own
    (smaller) batched prompt plus the errors, by the new SET numbers."""
    return (
        f"{first_prompt}\n\nYOUR PREVIOUS ANSWER WAS INVALID ({'; '.join(errors)[:600]}).\n"
        "Answer again, exactly as instructed above, with nothing else."
    )


def clean_rationale(rationale: str, mentions: Sequence[str]) -> str:
    """Appendix B.1 step 1: the rationale without its explicit prediction: the text from
    the last 'Prediction:' marker on, and every sentence matching one of ``mentions``
    (the task kind's patterns of the predicted label, value or order), are removed;
    the reasoning and evidence stay."""
    import re

    marker = list(re.finditer(r"prediction\s*:", rationale or "", re.IGNORECASE))
    text = (rationale or "")[: marker[-1].start()] if marker else (rationale or "")
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    keep = [x for x in sentences if x and not any(re.search(p, x, re.IGNORECASE) for p in mentions)]
    return " ".join(keep)


def repredict_prompt(task_input: str, cleaned_rationale: str, instruction: str) -> str:
    """Appendix B.1 step 2: the task input and the cleaned rationale, then the task
    kind's answer instruction (the coalition prompt's, so answers parse the same way)."""
    return f"{task_input}\nRationale: {cleaned_rationale or '(empty)'}\n{instruction}"


def support_prompt(claim_text: str, doc_title: str, doc_body: str, published_at: str) -> str:
    """Support judgment of one BM25 candidate (stands in for the seed's search + date
    extraction): does this dated document state the claim?"""
    return (
        f"Document published {published_at}:\nTitle: {doc_title}\n{doc_body[:3000]}\n\n"
        f"Claim: {claim_text}\n\nDoes the document state or directly support the claim? "
        "Answer with exactly one word: yes or no."
    )


def aggregator_prompt(
    task_input: str,
    valid_claims: Sequence[str],
    instruction: str,
    insufficient: str | None = None,
    form: str = "seed",
    task_type: str = "the answer",
) -> str:
    """TimeSPEC phase 5 when the model writes no text (``claims_timespec_draft:
    predictions``): closed world, validated claims only. It is the coalition prompt over
    the validated claims, so the aggregator answers exactly as v(S) is measured."""
    return coalition_prompt(task_input, valid_claims, instruction, insufficient, form, task_type)


def synthesis_prompt(
    task_input: str, t_ref: str, valid_claims: Sequence[tuple[str, str, str | None]], prediction_format: str
) -> str:
    """TimeSPEC phase 5 when the model writes text (``claims_timespec_draft: generate``):
    the seed's Aggregator Prompt (Appendix D.2), system and user joined. Each validated
    claim is listed with its category and, when a document dated it, its date (the seed's
    "[A2] Kevin Durant averaged 26.0 PPG (verified: 2019-04-15)"); ``valid_claims`` holds
    (category, claim text, verified date or None). Submit_final_prediction becomes the
    agents' 'Rationale:' / 'Prediction:' answer, so the final answer is parsed and
    checked against the task's schema as every agent's is, and its rationale is the text
    the claim pipeline extracts and scores (docs/claims.md, "TimeSPEC scoring")."""
    listed = (
        "\n".join(f"[{cat}] {text}" + (f" (verified: {when})" if when else "") for cat, text, when in valid_claims)
        if valid_claims
        else "(no validated claims)"
    )
    return (
        "You are analyst performing final synthesis. CRITICAL: Use ONLY facts from CASE INPUT and VALIDATED "
        "CLAIMS. Do NOT introduce ANY new information from your own knowledge.\n"
        "TASK: Synthesize validated claims into final prediction.\n\n"
        f"# FINAL SYNTHESIS TASK\nInput: {task_input}\nKnowledge Cutoff: {t_ref}\n\n"
        "## CLAIM CATEGORIES\n"
        "Group A (Temporally Verifiable): [A1] Discrete Event, [A2] State/Measurement, [A3] Publication\n"
        "Group B (Background): [B1] General Knowledge, [B2] Definitional\n\n"
        f"## VALIDATED CLAIMS\n{listed}\n\n"
        "Synthesize into final prediction. Cite SPECIFIC facts from validated claims only.\n"
        "First write 'Rationale:' followed by the facts and reasoning, "
        f"then a final line 'Prediction:' followed by {prediction_format}."
    )
