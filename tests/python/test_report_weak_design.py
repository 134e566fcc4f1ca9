"""A weak design reads weak in the verdict paragraph, every p at the bootstrap's floor reads
one way, figure captions name their measure and decile rule, and a coefficient on a LAP
that barely varies is never printed as a test.

The 20-entity study is generated with known facts (study_grid.py): no memorization, a
Min-K% LAP scaled to about 1e-8 (prompts far outside the model's distribution), and two
of the 20 entities holding most rows, so that beta_3's regression has fewer than 10
effective clusters. The checker (report_checker.py, which imports nothing from the
renderer) must pass on it, and must fail on the wordings the report used to print."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from report_checker import check
from study_grid import StudySpec, panels, render_study
from verdict_cases import BASE, CASES, case_facts

from lookahead.pages.cells import coef_frame, publication_frame
from lookahead.pages.summary import MAX_WORDS, caveats, checklist, paragraph, weaknesses
from lookahead.stats.verdict import (
    collapsed_lap,
    evaluate,
    fmt_num,
    fmt_p,
    lap_out_of_distribution,
    p_floor,
)

WEAK = StudySpec("weak_20_entities", 0.0, entities=20, measure="mink", scale=1e-8)


def unbalanced(spec: StudySpec, heavy: int = 2, times: int = 8) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The study's panels with the rows of its first `heavy` entities repeated `times`
    more times (new row ids): a few clusters then carry most of the variation."""
    out = []
    for df in panels(spec):
        extra = [df[df["entity_num"] < heavy].assign(row_id=df["row_id"] + f"x{k}") for k in range(times)]
        out.append(pd.concat([df, *extra], ignore_index=True))
    return out[0], out[1]


@pytest.fixture(scope="module")
def weak(tmp_path_factory):
    out = tmp_path_factory.mktemp("weak_20")
    text = render_study(WEAK, out, data=unbalanced(WEAK))
    return text, out, pd.read_csv(out / "verdict.csv").iloc[0]


def _line(text: str) -> str:
    return re.search(r"^\*\*Verdict: .*$", text, re.M).group(0)


def test_the_20_entity_study_reads_true(weak):
    text, out, _ = weak
    assert check(text, out) == []


def test_its_verdict_paragraph_names_gstar_the_measure_and_the_placebo_ranked(weak):
    text, _, v = weak
    line = _line(text)
    # the known facts of the design, read from the verdict's columns
    assert v["n_clusters_pre"] == 20 and v["beta3_g_star"] < 10
    assert bool(v["few_effective_clusters"]) and bool(v["lap_out_of_distribution"])
    assert v["lap_mean_pre"] < 1e-6
    g_star = f"G* {fmt_num(float(v['beta3_g_star']), 3)} effective clusters of G 20"
    assert g_star in line
    assert "Min-K%" in line and "outside the model's distribution" in line
    assert line.index(g_star) < line.index("outside the model's distribution")
    # "**Verdict:" is the one word the line adds to the paragraph
    assert len(line.split()) <= MAX_WORDS + 1


# ---------------------------------------------------------------- each weakness, from facts


def _codes(f, cutoff=None) -> list[str]:
    return [c.code for c in weaknesses(evaluate(f), cutoff)]


OUTSIDE = {
    "stated_cutoff": "2023-06-30",
    "inside": False,
    "interval": "2021-11 to 2022-02",
    "status": "break",
    "break_month": "2021-12-01",
    "rerun_at": "2021-12-31",
}


def test_each_weakness_is_named_from_its_fact():
    assert _codes(BASE) == []
    assert _codes(BASE, {"stated_cutoff": "2021-12-31", "status": "steady decline"}) == ["no_break"]
    text = weaknesses(evaluate(BASE), OUTSIDE)[0].text
    assert "re-run with training_cutoff 2021-12-31" in text and "2021-11 to 2022-02" in text
    # G* under 10, and G* under half of G with G* >= 10
    assert _codes(BASE.with_columns(beta3_g_star=9.5)) == ["g_star"]
    assert _codes(BASE.with_columns(n_clusters_pre=60, beta3_g_star=25.0)) == ["g_star"]
    assert _codes(BASE.with_columns(n_clusters_pre=60, beta3_g_star=31.0)) == []
    ood = BASE.with_columns(lap_measure="mink", lap_mean_pre=1e-8)
    assert lap_out_of_distribution(ood) and _codes(ood) == ["out_of_distribution"]
    assert not lap_out_of_distribution(ood.with_columns(lap_mean_pre=0.02))
    assert not lap_out_of_distribution(BASE.with_columns(lap_mean_pre=1e-8))  # recall: no floor
    # a placebo without power on a No-evidence verdict (a detection says it in its finding)
    low = BASE.with_columns(beta3=0.01, beta3_t=0.3, beta3_p_one_sided=0.38, beta3_p_two_sided=0.76, placebo_mde_regression=5.0)
    assert evaluate(low).placebo == "passes_low_power" and _codes(low) == ["placebo_power"]


def test_weaknesses_are_ranked_and_the_least_drops_first():
    f = BASE.with_columns(
        beta3=0.01,
        beta3_t=0.3,
        beta3_p_one_sided=0.38,
        beta3_p_two_sided=0.76,
        placebo_mde_regression=5.0,
        beta3_g_star=4.2,
        lap_measure="mink",
        lap_mean_pre=1e-8,
        lap_min_sd_used=1e-12,
    )
    o = evaluate(f)
    found = caveats(o, {}, pd.DataFrame(), OUTSIDE)
    assert [c.code for c in found] == ["cutoff", "g_star", "out_of_distribution", "placebo_power"]
    text = paragraph(o, found)
    assert len(text.split()) <= MAX_WORDS
    assert "re-run with training_cutoff 2021-12-31" in text and "G* 4.2" in text
    kept = [c.text for c in found if c.text in text]
    assert kept == [c.text for c in found][: len(kept)]  # what is dropped comes off the end


# ---------------------------------------------------------------- one p format


@pytest.mark.parametrize("draws,floor", [(99, "0.01"), (999, "0.001"), (1999, "0.0005"), (10000, "0.0001"), (63999, "0.000016")])
def test_the_floor_is_a_short_true_bound(draws, floor):
    assert p_floor(draws) == floor and float(floor) >= 1 / (draws + 1)
    assert fmt_p(0.0, draws) == f"< {floor} (1/(B+1), B = {draws})"


# ---------------------------------------------------------------- the checker fails on the old wordings

OLD_CONTAMINATED = (
    "**Verdict: Contamination detected.** beta_3 = 0.7126 (t 4.429, one-sided p 0.001 by wild bootstrap "
    "(999 draws), N 318) > 0; validation pattern present; placebo passes (post-cutoff LAP collapsed, "
    "beta_3 not estimable).\n\n## Checklist\n\n| step | tested | estimate (t) | p the rule read | rule | result |\n"
    "|---|---|---|---|---|---|\n| 5. Placebo | post-cutoff beta_3 not > 0 | 3.308 (t 0.0634) | one-sided p "
    "0.4555 by wild bootstrap | one-sided p > 0.1 | passed (LAP collapsed) |\n"
)


@pytest.mark.parametrize(
    "text,problem",
    [
        (OLD_CONTAMINATED, "'not estimable' sentence beside an estimate: post-cutoff beta_3"),
        (
            "**Verdict: Underpowered.** x\n\n![Figure III (p < 9.999e-05 (1/(B+1), B = 10000))](b.png)\n",
            "a p in two formats: bound '9.999e-05'",
        ),
        ("**Verdict: Underpowered.** x\n\n| | (4) |\n|---|---:|\n| OOS bootstrap p-value | [0] |\n", "a bracketed zero '[0]'"),
        (
            "**Verdict: Underpowered.** x one-sided p < 0.001 (1/(B+1), B = 999); later p < 0.0010 (1/(B+1), B = 999)\n",
            "B = 999 floor printed as",
        ),
        (
            "**Verdict: Underpowered.** x\n\n![Accuracy by LAP decile, before and after the cutoff](a.png)\n",
            "figure caption without its measure",
        ),
        (
            "**Verdict: Underpowered.** x\n\n![Accuracy by LAP decile (recall LAP)](a.png)\n",
            "figure caption without its decile rule",
        ),
        (
            "**Verdict: Underpowered.** x\n\n![LAP before vs after the training cutoff](h.png)\n",
            "figure caption without its measure",
        ),
    ],
)
def test_the_checker_fails_on_each_old_wording(text, problem):
    found = check(text)
    assert any(problem in p for p in found), found


def test_the_checker_fails_on_a_not_informative_cell_with_a_p():
    text = (
        "**Verdict: Underpowered.** x\n\n## 5. Placebo\n\n| sample | mu_hat (t) | lap (t) | mu_hat:lap (t) | "
        "one-sided p (mu_hat:lap > 0) | wild bootstrap one-sided p | N | clusters | singletons dropped | R2 |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n| post-cutoff | 0.28 (0.07) | not informative (LAP sd 0.0019) "
        "| not informative (LAP sd 0.0019) | 0.4749 | 0.4615 | 305 | 30 | 0 | 0.271 |\n"
    )
    assert any("'not informative' beside p" in p for p in check(text))


# ---------------------------------------------------------------- a collapsed LAP is not a test


def test_a_collapsed_lap_reads_not_informative_in_the_paragraph_and_checklist():
    o = evaluate(case_facts("placebo_collapsed_lap_estimable"))
    assert collapsed_lap(o.facts) == {"post": 0.0019}
    assert "post-cutoff beta_3 not informative (LAP sd 0.0019)" in paragraph(o, [])
    row = next(r for r in checklist(o, {}, {}, {}) if r.step == "5. Placebo")
    assert row.estimate == "not informative (LAP sd 0.0019)" and row.p == ""
    flat = evaluate(case_facts("significant_beta3_little_lap_variation"))
    assert "beta_3 is not informative (LAP sd 0.008)" in paragraph(flat, [])
    assert "significant_beta3_little_lap_variation" in CASES


def test_a_collapsed_post_cutoff_lap_reads_not_informative_in_every_table(tmp_path):
    """A study whose post-cutoff LAP barely varies (sd about 1e-4, below the recall rule's
    0.01) but is not constant: the placebo regression has an estimate, and no table
    prints it as a test."""
    spec = StudySpec("post_lap_flat", 1.0)
    pre, post = panels(spec)
    rng = np.random.default_rng(3)
    post = post.assign(lap=0.05 + rng.normal(0, 1e-4, len(post)))
    text = render_study(spec, tmp_path, data=(pre, post))
    assert check(text, tmp_path) == []
    v = pd.read_csv(tmp_path / "verdict.csv").iloc[0]
    assert v["placebo_outcome"] == "passes_collapsed" and math.isfinite(v["placebo_beta3"])
    sd = fmt_num(float(v["lap_sd_post"]))
    res = pd.read_csv(tmp_path / "regression_results.csv")
    flat = {"post": float(v["lap_sd_post"])}
    post_row = coef_frame(
        res, [("post-cutoff", "detection", "post")], ["mu_hat", "lap", "mu_hat:lap"], one_sided="mu_hat:lap", flat=flat
    ).iloc[0]
    assert post_row["mu_hat:lap (t)"] == post_row["lap (t)"] == f"not informative (LAP sd {sd})"
    assert post_row["one-sided p (mu_hat:lap > 0)"] == "NA"
    pub = publication_frame(res, "detection", flat=flat)
    assert f"not informative (LAP sd {sd})" in set(pub["Post-cutoff (placebo)"])
    estimate = fmt_num(float(v["placebo_beta3"]))
    placebo = next(line for line in text.splitlines() if line.startswith("| post-cutoff |"))
    assert estimate not in placebo and f"not informative (LAP sd {sd})" in placebo
    assert f"not informative (LAP sd {sd})" in _line(text)
