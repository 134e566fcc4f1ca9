"""The pairs bootstrap: fast == naive (pyfixest refit) draw by draw, == an independent
dummies OLS on the resampled rows, reproducible from its seed, edge cases exact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from paper_reference import ols_dummies

from lookahead.paper import bootstrap as bs
from lookahead.paper import tables as T
from lookahead.paper.synthetic import make_panel
from lookahead.stats.fe_regression import RegressionInputError as PaperSpecError
from lookahead.stats.fe_regression import Term

S = T.PaperSections.with_defaults(lap_measure="mink")


def _data(df: pd.DataFrame) -> bs.BootstrapData:
    y, _, full = T.table5_terms(S)
    return bs.prepare(T.table5_inputs(df, S), y, full, S.fixed_effects)


@pytest.fixture(scope="module")
def oos() -> bs.BootstrapData:
    return _data(make_panel(n_rows=1500, n_entities=250, n_dates=60, delta=0.0, seed=3))


def test_fast_equals_naive_draw_by_draw(oos):
    naive = bs.naive_draws(oos, 12, seed=99)
    fast = bs.fast_draws(oos, 40, seed=99, batch=16)
    assert np.isfinite(naive).all()
    np.testing.assert_allclose(fast[:12], naive, rtol=0, atol=1e-8)
    # a later slice of the same stream: the baseline can start mid-stream
    np.testing.assert_allclose(fast[30:34], bs.naive_draws(oos, 4, seed=99, start=30), atol=1e-8)
    # batch size does not change any draw
    np.testing.assert_allclose(bs.fast_draws(oos, 40, seed=99, batch=7), fast, atol=1e-12)


def test_fast_equals_independent_dummies_ols_on_resampled_rows(oos):
    frame = pd.DataFrame(oos.Z, columns=["y", "a", "b", "ab"])
    frame["e"], frame["d"] = oos.fe
    rng = np.random.default_rng(5)
    fast = bs.fast_draws(oos, 3, seed=5, target=None)
    for b in range(3):
        idx = bs.draw_indices(rng, oos.n)
        ref = ols_dummies(frame.iloc[idx].reset_index(drop=True), "y", [["a"], ["b"], ["ab"]], ["e", "d"], None)
        np.testing.assert_allclose(fast[b], ref["beta"], atol=1e-8)


def test_sparse_panel_with_singletons_and_split_components():
    """Few rows per entity and date: resamples leave dates empty, create singleton groups
    and split the entity-date graph into several components."""
    df = make_panel(n_rows=90, n_entities=45, n_dates=30, delta=1.0, seed=8)
    data = _data(df)
    st = bs._structure(data)
    rng = np.random.default_rng(1)
    W = np.stack([np.bincount(bs.draw_indices(rng, data.n), minlength=data.n) for _ in range(30)], 1)
    Mc = st.row_to_cell @ W.astype(float)
    labels = bs._batch_components(st, Mc)
    used = (st.cell_to_keep @ Mc).T > 0
    n_comp = [len(np.unique(lab[u])) for lab, u in zip(labels, used, strict=False)]
    assert (~used).any(), "fixture should leave some dates empty"
    assert max(n_comp) > 1, "fixture should produce disconnected resamples"
    fast = bs.fast_draws(data, 30, seed=1)
    naive = bs.naive_draws(data, 30, seed=1)
    both = np.isfinite(fast) & np.isfinite(naive)
    assert both.sum() >= 20
    np.testing.assert_allclose(fast[both], naive[both], atol=1e-8)
    assert (np.isfinite(fast) == np.isfinite(naive)).all()


@pytest.mark.parametrize("rows,entities,dates", [(1500, 250, 60), (90, 45, 30), (4000, 20, 40)])
def test_dense_and_pairs_laplacian_give_the_same_draws(monkeypatch, rows, entities, dates):
    """The kept-FE Laplacian built by one dense product per draw (dense panels, where the
    list of cell pairs would not fit in memory) equals the cell-pairs build draw by draw,
    including sparse resamples with empty dates and split components; and both equal the
    pyfixest refit."""
    data = _data(make_panel(n_rows=rows, n_entities=entities, n_dates=dates, delta=1.0, seed=11))
    runs = {}
    for name, advantage in (("pairs", 1e-12), ("dense", 1e12)):
        monkeypatch.setattr(bs, "DENSE_PRODUCT_ADVANTAGE", advantage)
        data._structure = None
        runs[name] = bs.fast_draws(data, 24, seed=7, batch=8)
        assert data._structure.dense is (name == "dense")
    assert (np.isfinite(runs["pairs"]) == np.isfinite(runs["dense"])).all()
    ok = np.isfinite(runs["pairs"])
    assert ok.sum() >= 16
    np.testing.assert_allclose(runs["dense"][ok], runs["pairs"][ok], rtol=0, atol=1e-10)
    naive = bs.naive_draws(data, 6, seed=7)
    both = ok[:6] & np.isfinite(naive)
    np.testing.assert_allclose(runs["dense"][:6][both], naive[both], atol=1e-8)


def test_one_way_fixed_effect():
    df = make_panel(n_rows=300, n_entities=40, n_dates=10, seed=4)
    y, _, full = T.table5_terms(S)
    data = bs.prepare(T.table5_inputs(df, S), y, full, ["entity_num"])
    np.testing.assert_allclose(bs.fast_draws(data, 5, 2), bs.naive_draws(data, 5, 2), atol=1e-8)


def test_pvalue_reproduced_from_seed(oos):
    a = bs.pairs_bootstrap(oos, in_sample_estimate=0.01, draws=200, seed=7)
    b = bs.pairs_bootstrap(oos, in_sample_estimate=0.01, draws=200, seed=7)
    c = bs.pairs_bootstrap(oos, in_sample_estimate=0.01, draws=200, seed=8)
    np.testing.assert_array_equal(a.draws, b.draws)
    assert a.p_value == b.p_value == np.mean(a.draws >= 0.01)
    assert not np.array_equal(a.draws, c.draws)
    assert a.percentile_95 == pytest.approx(np.percentile(a.draws, 95))
    f = a.frame()
    assert len(f) == 200 and f["draw"].tolist() == list(range(1, 201))


def test_pvalue_rule():
    d = np.array([0.0, 0.1, 0.2, 0.3, np.nan])
    assert bs.bootstrap_pvalue(d, 0.2) == 0.5  # >= counts ties; NaN draws excluded
    assert bs.bootstrap_pvalue(d, 1.0) == 0.0


def test_bootstrap_centres_on_full_sample_estimate(oos):
    """Known truth: draws scatter around the out-of-sample estimate they resample."""
    full = bs.fast_draws(oos, 400, seed=3)
    frame = pd.DataFrame(oos.Z, columns=["y", "a", "b", "ab"])
    frame["e"], frame["d"] = oos.fe
    est = ols_dummies(frame, "y", [["a"], ["b"], ["ab"]], ["e", "d"], None)["beta"][2]
    assert abs(np.mean(full) - est) < 0.25 * np.std(full)


def test_bad_inputs_are_clear():
    df = make_panel(n_rows=50, n_entities=10, n_dates=5, seed=1)
    with pytest.raises(PaperSpecError, match="nosuch"):
        bs.prepare(df, "outcome", [Term("x", ("nosuch",))], ["entity_num"])
    data = bs.prepare(df, "outcome", [Term("x", ("mu_hat",))], ["entity_num", "period_num"])
    with pytest.raises(PaperSpecError, match="bootstrap_draws"):
        bs.pairs_bootstrap(data, 0.0, draws=0)


def test_single_date_and_no_fe_left():
    """One date: the date FE is the intercept and is dropped, as in the table fits."""
    df = make_panel(n_rows=200, n_entities=30, n_dates=1, seed=6)
    data = _data(df)
    assert len(data.fe) == 1
    np.testing.assert_allclose(bs.fast_draws(data, 5, 3), bs.naive_draws(data, 5, 3), atol=1e-8)
    res = bs.pairs_bootstrap(data, 0.0, draws=5, seed=3)
    assert res.method == "fast" and np.isfinite(res.draws).all()
