"""The verdict's declarations: the decision rule is rendered from its clauses, and the
clause each verdict applies is read from them, not cut out of the sentence; the facts nest
one RegressionFact per test, and the verdict table's fact columns, derived from FACT_TESTS
and VerdictFacts, are the columns (and types) the dbt contract declares."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pandas as pd
import pytest
import yaml
from verdict_cases import case_facts

from lookahead.identity import IDENTITY_COLUMNS
from lookahead.pages.sections import RULE_CLAUSE
from lookahead.stats.fe_regression import RESULT_COLUMNS
from lookahead.stats.protocol import StatsSections
from lookahead.stats.verdict import (
    CONTAMINATION,
    DECISION_CLAUSES,
    DECISION_RULE,
    FACT_TESTS,
    MIXED,
    NO_EVIDENCE,
    RESULT_COLUMN,
    UNDERPOWERED,
    VERDICTS,
    RegressionFact,
    VerdictFacts,
    evaluate,
    fact_columns,
    facts_from_row,
    gather_facts,
    outcome_row,
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
        "Contamination detected: beta_3 > 0 (one-sided p < 0.05) with the validation pattern present and the placebo passing."
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


# ---------------------------------------------------------------- the verdict table's columns

CONTRACT = Path(__file__).resolve().parents[2] / "models" / "marts" / "results" / "_results__models.yml"


def contract_columns(model: str = "verdict") -> dict[str, str]:
    """Column -> data_type as the dbt contract of `model` declares them."""
    spec = yaml.safe_load(CONTRACT.read_text())
    (entry,) = [m for m in spec["models"] if m["name"] == model]
    return {c["name"]: c["data_type"] for c in entry["columns"]}


def table_columns() -> list[str]:
    """The columns the verdict_py model writes: the outcome's row and the build's identity."""
    row = outcome_row(evaluate(case_facts("contamination")))
    return [*row, *IDENTITY_COLUMNS, "result_status"]


def test_the_contract_declares_each_fact_column_with_the_type_its_field_has() -> None:
    """A fact column is declared once, in FACT_TESTS or VerdictFacts; the contract must
    carry it under the SQL type its field's kind maps to."""
    declared = contract_columns()
    facts = fact_columns()
    assert {c: declared.get(c) for c in facts} == facts


def test_the_contract_declares_exactly_the_columns_the_verdict_table_has() -> None:
    """A column added on one side only (a fact, an outcome column, an identity column)
    fails here, before a dbt build would stop on the contract."""
    written = table_columns()
    assert len(written) == len(set(written)), "a column written twice"
    declared = contract_columns()
    assert set(declared) - set(written) == set(), "declared in the contract, not written"
    assert set(written) - set(declared) == set(), "written, not declared in the contract"


def test_facts_nest_one_regression_per_test_and_round_trip_through_their_columns() -> None:
    """VerdictFacts holds one RegressionFact per test; its flat columns read back to the
    same facts, and every column lands on its own field."""
    assert [f.name for f in fields(VerdictFacts) if f.type == "RegressionFact"] == list(FACT_TESTS)
    f = case_facts("contamination")
    assert facts_from_row(f.columns()) == f
    # set every column to a distinct value and read each back where it was declared
    values = {}
    for i, (col, sql) in enumerate(fact_columns().items()):
        values[col] = {"double": i + 0.5, "bigint": i, "varchar": f"v{i}", "boolean": i % 2 == 0}[sql]
    g = VerdictFacts.from_columns(**values)
    assert g.columns() == values
    assert g.theta_low.g_star == values["theta_low_g_star"] and g.placebo.estimate == values["placebo_beta3"]
    with pytest.raises(TypeError, match="not a verdict fact column: theta_low_gstar"):
        f.with_columns(theta_low_gstar=3.0)


def test_gather_reads_each_test_from_its_own_regression_row() -> None:
    """gather_facts on a regression_results table whose every number names its row and
    column: each fact lands on the test whose (spec, sample, term) FACT_TESTS gives it,
    read from the column its RegressionFact field names."""
    numeric = [c for c in RESULT_COLUMNS if c not in ("spec", "sample", "term", "warning", "vcov")]
    tag = {c: j for j, c in enumerate(numeric)}
    results = pd.DataFrame(
        [
            {"spec": s.spec, "sample": s.sample, "term": s.term, **{c: 100.0 * (k + 1) + tag[c] for c in numeric}}
            for k, s in enumerate(FACT_TESTS.values())
        ]
    )
    panel = pd.DataFrame({"lap": [0.1, 0.5, 0.9], "outcome": [1.0, -1.0, 1.0], "mu_hat": [0.2, 0.3, 0.1]})
    f = gather_facts(results, panel, panel, StatsSections.with_defaults())
    checked = 0
    for k, (name, source) in enumerate(FACT_TESTS.items()):
        fact = getattr(f, name)
        for attr in source.columns:
            column = RegressionFact.__dataclass_fields__[attr].metadata.get(RESULT_COLUMN)
            if column in tag:
                assert getattr(fact, attr) == 100.0 * (k + 1) + tag[column], (name, attr)
                checked += 1
    assert checked >= 40
    # the thetas per sd come from the difference regression: its ud row is absent here
    assert f.theta_diff.estimate == 100.0 * (list(FACT_TESTS).index("theta_diff") + 1) + tag["estimate"]
