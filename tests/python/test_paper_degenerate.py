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
    res = A.run_paper_analysis(pre, None, T.PaperSettings(), draws=0)
    assert "table2" not in res.tables
    assert any("Table II not estimated" in n and "singleton" in n for n in res.notes)


def test_constant_post_lap_skips_table5_with_a_note():
    pre = make_panel(n_rows=600, n_entities=20, n_dates=30, seed=2, sample="pre")
    post = make_panel(n_rows=300, n_entities=20, n_dates=30, seed=3, sample="post")
    post["lap"] = post["lap_mink"] = 0.01
    res = A.run_paper_analysis(pre, post, T.PaperSettings(), draws=50)
    assert "table2" in res.tables and "table5" not in res.tables
    assert any("Table V not estimated" in n and "no variation" in n for n in res.notes)
    assert res.bootstrap is None
