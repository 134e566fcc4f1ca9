"""The verdict's declarations: the decision rule is rendered from its clauses, and the
clause each verdict applies is read from them, not cut out of the sentence."""

from __future__ import annotations

from lookahead.pages.sections import RULE_CLAUSE
from lookahead.stats.verdict import (
    CONTAMINATION,
    DECISION_CLAUSES,
    DECISION_RULE,
    MIXED,
    NO_EVIDENCE,
    UNDERPOWERED,
    VERDICTS,
)

#: The protocol's rule as seeds/000 ("Final report", item 6) states it, copied by hand: the
#: known truth the rendered sentence must equal, character for character.
PROTOCOL_RULE = (
    "Contamination detected: beta_3 > 0 (one-sided p < 0.05) with the validation pattern "
    "present and the placebo passing. No evidence of contamination: beta_3 indistinguishable "
    'from zero with LAP showing meaningful variation (otherwise report "underpowered"). '
    "Mixed/invalid: validation fails or placebo fails — explain which."
)


def test_the_rule_rendered_from_its_clauses_is_the_protocols_sentence() -> None:
    assert DECISION_RULE == PROTOCOL_RULE
    assert list(DECISION_CLAUSES) == [CONTAMINATION, NO_EVIDENCE, MIXED]


def test_each_verdict_applies_its_clause_of_the_protocols_sentence() -> None:
    assert set(RULE_CLAUSE) == set(VERDICTS)
    assert RULE_CLAUSE[CONTAMINATION] == (
        "Contamination detected: beta_3 > 0 (one-sided p < 0.05) with the validation pattern "
        "present and the placebo passing."
    )
    no_evidence = (
        "No evidence of contamination: beta_3 indistinguishable from zero with LAP showing "
        'meaningful variation (otherwise report "underpowered").'
    )
    assert RULE_CLAUSE[NO_EVIDENCE] == no_evidence
    assert RULE_CLAUSE[UNDERPOWERED] == no_evidence  # the protocol states it in that clause
    assert RULE_CLAUSE[MIXED] == "Mixed/invalid: validation fails or placebo fails — explain which."
    # every clause is a sentence of the rule, and together they are the rule
    assert " ".join(dict.fromkeys(RULE_CLAUSE[v] for v in (CONTAMINATION, NO_EVIDENCE, MIXED))) == PROTOCOL_RULE
