"""The paper analysis on data that cannot identify it skips tables with a note.

A sparse daily panel (every date a singleton) would make pyfixest's demeaner abort the
process, and a constant post-cutoff LAP cannot be standardized; neither may fail the
build, since the protocol's verdict ("underpowered") must still be reported."""

import numpy as np

from lookahead.paper import analysis as A
from lookahead.paper import tables as T
from lookahead.paper.synthetic import make_panel


def test_all_singleton_dates_skip_tables_with_notes():
    pre = make_panel(n_rows=120, n_entities=10, n_dates=120, seed=1, sample="pre")
    pre["period_num"] = np.arange(len(pre))  # every date appears once
    res = A.run_paper_analysis(pre, None, T.PaperSections.with_defaults(lap_measure="mink"), draws=0)
    assert "table2" not in res.tables
    assert any("Table II not estimated" in n and "singleton" in n for n in res.notes)


def test_constant_post_lap_skips_table5_with_a_note():
    pre = make_panel(n_rows=600, n_entities=20, n_dates=30, seed=2, sample="pre")
    post = make_panel(n_rows=300, n_entities=20, n_dates=30, seed=3, sample="post")
    post["lap"] = post["lap_mink"] = 0.01
    res = A.run_paper_analysis(pre, post, T.PaperSections.with_defaults(lap_measure="mink"), draws=50)
    assert "table2" in res.tables and "table5" not in res.tables
    assert any("Table V not estimated" in n and "no variation" in n for n in res.notes)
    assert res.bootstrap is None


def test_near_constant_confidence_is_not_estimable_not_a_number():
    """p(first token) with sd ~1e-5 gave Table IV coefficients of -571 and 844: noise
    divided by ~0. Below the stated absolute rule its columns are skipped with the reason."""
    pre = make_panel(n_rows=600, n_entities=20, n_dates=30, seed=4, sample="pre")
    rng = np.random.default_rng(0)
    pre["first_token_prob"] = 0.9 + rng.normal(0, 1e-5, len(pre))
    tab = T.table4(pre, T.PaperSections.with_defaults(lap_measure="mink"))
    assert len(tab.columns) == 2  # only the stated-confidence pair
    assert any(n.startswith("p(first token) not estimable (its sd 1e-05 is below 0.001") for n in tab.notes)


def test_dropped_term_prints_not_estimable_in_paper_tables():
    """LAP constant within entity is absorbed by the entity fixed effects: its cell reads
    "not estimable (collinear)", not a blank or a number."""
    from lookahead.paper import render

    pre = make_panel(n_rows=600, n_entities=20, n_dates=30, seed=5, sample="pre")
    pre["lap_mink"] = pre["entity_num"].astype(float) / 20 + 0.1
    res = A.run_paper_analysis(pre, None, T.PaperSections.with_defaults(lap_measure="mink"), draws=0)
    long = A.paper_long_table(res)
    _, body = render.table_cells(long, "table2")
    lap_row = next(row for row in body if row[0] == "LAP")
    assert lap_row[1] == "" and lap_row[2] == "not estimable (collinear)"
