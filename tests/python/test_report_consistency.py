"""REPORT.md reads true over a grid of generated studies (study_grid.py), checked by a
mechanical reader that imports nothing from the renderer (report_checker.py); the reader
fails on the wordings the report used to print (quoted below from 9918f34's demo); the
p-value printer never lets rounding cross a threshold."""

from __future__ import annotations

import re

import pytest
from report_checker import check
from study_grid import grid, render_study
from verdict_cases import BASE

from lookahead.stats.verdict import (
    CONTAMINATION,
    MIXED,
    NO_EVIDENCE,
    UNDERPOWERED,
    decide,
    evaluate,
    fmt_p,
)

GRID = {s.name: s for s in grid()}
#: Known truths of the generated studies (the rule, not the wording): what any correct
#: renderer must reach on them.
EXPECTED = {
    "strong": CONTAMINATION,
    "none": NO_EVIDENCE,
    "unparsed": UNDERPOWERED,
    "censored": UNDERPOWERED,
    "no_post_rows": MIXED,
    "collapsed_post": CONTAMINATION,
}


@pytest.mark.parametrize("name", list(GRID))
def test_report_reads_true(name, tmp_path):
    text = render_study(GRID[name], tmp_path)
    assert check(text, tmp_path) == []
    if name in EXPECTED:
        # the decision once, in bold; Mixed/invalid names what failed beside it
        line = re.search(r"^\*\*Verdict: (.+?)\.\*\* (.*)$", text, re.M)
        assert re.fullmatch(rf"{re.escape(EXPECTED[name])}(?: \([a-z; ]+\))?", line.group(1)), line.group(0)
        assert not line.group(2).startswith(EXPECTED[name]), line.group(0)
    if name == "unparsed":
        assert "no pre-cutoff row has a parsed forecast" in text


# ---------------------------------------------------------------- the reader can fail

OLD_HEADLINE = (
    "**Verdict: Contamination detected.** Contamination detected: beta_3 = 0.7126 (t 4.429, "
    "one-sided p 0, wild bootstrap, N 318) > 0; validation pattern present: high-LAP theta 1.185 "
    "(t 13.89, p 0) exceeds low-LAP theta 19.22 (t 2.023, p 0.04404) by 0.8488 (t 6.047, "
    "one-sided p 0); the low-LAP theta is itself significant, but smaller; placebo passes: "
    "post-cutoff beta_3 3.308, one-sided p 0.4615 > 0.1, wild bootstrap.\n\n"
)
OLD_TABLES = (
    "## 3. Validation\n\n| sample | ud (t) | p (two-sided) | wild bootstrap p (two-sided) | N | clusters |"
    " singletons dropped | R2 |\n|---|---|---|---|---|---|---|---|\n"
    "| high LAP | 1.185 (13.9) | 2.385e-14 | 0 | 159 | 30 | 0 | 0.646 |\n"
    "| low LAP | 19.22 (2.02) | 0.0527 | 0.04404 | 158 | 30 | 1 | 0.25 |\n\n"
    "## 4. Detection\n\n| sample | mu_hat (t) | lap (t) | mu_hat:lap (t) | one-sided p (mu_hat:lap > 0) |"
    " wild bootstrap one-sided p | N | clusters | singletons dropped | R2 |\n|---|---|---|---|---|---|---|---|---|---|\n"
    "| pre-cutoff | 0.424 (3.72) | 0.01244 (0.0739) | 0.7126 (4.43) | 6.17e-05 | 0 | 318 | 30 | 0 | 0.412 |\n\n"
    "## 5. Placebo\n\n| sample | mu_hat (t) | lap (t) | mu_hat:lap (t) | one-sided p (mu_hat:lap > 0) |"
    " wild bootstrap one-sided p | N | clusters | singletons dropped | R2 |\n|---|---|---|---|---|---|---|---|---|---|\n"
    "| post-cutoff | 0.2839 (0.0748) | not estimable (post-cutoff LAP has no meaningful variation: sd 0.001858) "
    "| not estimable (post-cutoff LAP has no meaningful variation: sd 0.001858) | 0.4749 | 0.4615 | 305 | 30 | 0 | 0.271 |\n"
)


def test_reader_fails_on_the_old_demo_wording():
    problems = check(OLD_HEADLINE + OLD_TABLES)
    text = "\n".join(problems)
    assert "'exceeds' with 1.185 against 19.22" in text
    assert "'smaller' with low 19.22 against high 1.185" in text
    assert "a p-value printed as 0" in text
    assert "post-cutoff beta_3: sentence says '3.308'" in text
    assert "'not estimable' beside p" in text


@pytest.mark.parametrize(
    "sentence,problem",
    [
        (
            "**Verdict: No evidence of contamination.** No evidence of contamination: beta_3 = 0.1 (t 0.5, "
            "one-sided p 0.3, N 100) is indistinguishable from zero while LAP varies (sd 0.2).",
            "'indistinguishable from zero' without the p it read",
        ),
        (
            "**Verdict: Contamination detected.** Contamination detected: beta_3 = 0.1 (t 2, one-sided p "
            "0.05, N 100) > 0; placebo passes: post-cutoff beta_3 0.1, one-sided p 0.1 > 0.1.",
            "'p 0.1 > 0.1' does not hold",
        ),
        (
            "**Verdict: Contamination detected.** Contamination detected: beta_3 = 0.1 (t 3, one-sided p "
            "0.001 by wild bootstrap (999 draws), N 100) > 0; placebo passes: post-cutoff beta_3 -6 (t -2.1, "
            "one-sided p 0.97 by wild bootstrap (999 draws), above 0.1); it is significantly negative "
            "(two-sided p 0.04 by CRV1). With 30 clusters (fewer than 50) the tests read wild cluster "
            "bootstrap p-values (999 draws).",
            "reads a CRV1 p while the tests read the wild bootstrap",
        ),
        (
            "**Verdict: Underpowered.** Underpowered: beta_3 is not estimable — all variables are "
            "collinear; please reach out to the package authors!",
            "estimator-internal text",
        ),
    ],
)
def test_reader_fails_on_each_old_defect(sentence, problem):
    assert any(problem in p for p in check(sentence + "\n")), check(sentence + "\n")


# ---------------------------------------------------------------- p-values that cannot mislead


@pytest.mark.parametrize(
    "p,printed",
    [
        (0.049999, "0.049999"),
        (0.05, "0.05"),
        (0.0500001, "0.0500001"),
        (0.100001, "0.100001"),
        (0.1, "0.1"),
        (0.0999999, "0.0999999"),
        (0.01234567, "0.01235"),
        (0.4615, "0.4615"),
    ],
)
def test_p_prints_the_side_of_every_threshold(p, printed):
    assert fmt_p(p) == printed


def test_bootstrap_zero_is_a_bound_with_b():
    assert fmt_p(0.0, draws=999) == "< 0.001 (1/(B+1), B = 999)"
    assert fmt_p(0.0) == "0"  # an analytic p of exactly 0 is 0


def test_rule_and_printed_number_agree_at_the_threshold():
    v, reason = decide(BASE.with_columns(beta3_p_one_sided=0.049999))
    assert v == CONTAMINATION and "one-sided p 0.049999 by CRV1" in reason
    v, reason = decide(BASE.with_columns(placebo_p_one_sided=0.100001))
    assert "one-sided p 0.100001 by CRV1, above 0.1" in reason


def test_few_clusters_significantly_negative_names_the_wild_p():
    f = BASE.with_columns(
        beta3=-0.5,
        beta3_t=-4.0,
        beta3_p_one_sided=0.9999,
        beta3_p_two_sided=0.0002,
        beta3_p_wild_one_sided=0.97,
        beta3_p_wild_two_sided=0.03,
        n_clusters_pre=12,
        wild_draws=999,
    )
    o = evaluate(f)
    assert o.path == "null_negative"
    assert "significantly negative (two-sided p 0.03 by wild bootstrap (999 draws)" in decide(f)[1]
