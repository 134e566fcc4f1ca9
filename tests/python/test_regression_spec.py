"""One specification type, one fit, one error vocabulary for the protocol and the paper
(docs/CONTRACTS.md, Regressions): a FitRequest means the same regression whichever side
fits it, and every regression fails with the same two exceptions and the same wording."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lookahead
from lookahead.paper.fit import fit_column
from lookahead.paper.synthetic import make_panel
from lookahead.stats.fe_regression import (
    FitRequest,
    NotEstimable,
    RegressionInputError,
    Term,
    fit_fe,
)

FE = ("entity_num", "period_num")


@pytest.fixture(scope="module")
def panel() -> pd.DataFrame:
    return make_panel(n_rows=3_000, n_entities=120, n_dates=60, seed=5)


def test_one_request_fits_the_same_regression_for_protocol_and_paper(panel):
    """The protocol's fit (formula strings, rows) and the paper's column (printed Terms,
    explicit products) of one FitRequest agree: estimates, SEs, N and clusters."""
    req = FitRequest(
        spec="detection",
        sample="pre",
        outcome="outcome",
        regressors=("mu_hat", "lap_mink", "mu_hat:lap_mink"),
        fixed_effects=FE,
        cluster="date",
    )
    rows = fit_fe(panel, req).set_index("term")
    named = fit_column(
        panel,
        FitRequest(
            spec="detection",
            sample="pre",
            outcome="outcome",
            fixed_effects=FE,
            cluster="date",
            regressors=(Term("LLM", ("mu_hat",)), Term("LAP", ("lap_mink",)), Term("LLM x LAP", ("mu_hat", "lap_mink"))),
        ),
    )
    same = fit_column(panel, req)  # strings read as Terms named by their formula
    for term, name in (("mu_hat", "LLM"), ("lap_mink", "LAP"), ("mu_hat:lap_mink", "LLM x LAP")):
        assert named.estimate[name] == pytest.approx(float(rows.loc[term, "estimate"]), rel=1e-8)
        assert named.std_error[name] == pytest.approx(float(rows.loc[term, "std_error"]), rel=1e-8)
        assert same.estimate[term] == named.estimate[name]
    assert named.n_obs == int(rows["n_obs"].iloc[0])
    assert named.n_clusters == int(rows["n_clusters"].iloc[0])


def test_one_error_vocabulary(panel):
    """Bad input raises RegressionInputError naming the column or setting; data that cannot
    identify a specification give NotEstimable (a RegressionInputError) in the paper and
    a NULL row in the protocol, both worded 'not estimable: <reason>'."""
    assert issubclass(NotEstimable, RegressionInputError)
    req = FitRequest(spec="s", sample="pre", outcome="outcome", regressors=("mu_hat",), fixed_effects=FE, cluster="date")
    empty = panel.assign(outcome=np.nan)
    with pytest.raises(NotEstimable, match=r"spec 's': not estimable: no rows"):
        fit_column(empty, req)
    row = fit_fe(empty, req)
    assert row["estimate"].isna().all()
    assert row["warning"].iloc[0].endswith("not estimable: no observations")
    with pytest.raises(RegressionInputError, match="setting 'paper_cluster': 'firm'"):
        fit_column(panel, FitRequest(spec="s", sample="pre", outcome="outcome", regressors=("mu_hat",), cluster="firm"))
    with pytest.raises(RegressionInputError, match=r"fit_fe reads formula strings.*fit_column"):
        fit_fe(panel, FitRequest(spec="s", sample="pre", outcome="outcome", regressors=(Term("LLM", ("mu_hat",)),)))


def test_the_package_declares_one_fit_and_one_not_estimable():
    """No second fit function or second not-estimable exception creeps back in."""
    root = Path(lookahead.__file__).parent
    fits, estimable = [], []
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        fits += [path.name for _ in re.finditer(r"^def fit_fe\(", text, flags=re.M)]
        estimable += [path.name for _ in re.finditer(r"^class \w*(Estimable|SpecError)\w*\(", text, flags=re.M)]
    assert fits == ["fe_regression.py"]
    assert estimable == ["fe_regression.py"]
