"""The effective cutoff's statistics against known truths and independent computations.

* LAP by month: n, mean and trimmed mean against pandas and scipy; the entity-bootstrap
  interval's coverage of the true monthly mean in a simulation (at least 90% of nominal).
* The break: the estimator against a brute-force row-level least-squares fit with a linear
  trend and a step dummy (numpy lstsq per candidate month); its error on simulated series
  with a known break; the null bootstrap test's size on series with no break (the clean
  control's case: no month named); a steady decline reported as one, not as a break; Bai
  (1997)'s interval constant against its published value; the break interval's coverage
  of the true month. research/cutoff_trend_sim.py runs the larger simulation
  (benchmarks/results/cutoff_trend_sim.json).

The simulation is small (fixed seeds, one process) so the default suite stays fast."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lookahead.stats import cutoff as C

MONTHS = pd.date_range("2021-01-01", periods=12, freq="MS")


def simulate(
    rng: np.random.Generator,
    n_entities: int = 30,
    per_month: float = 1.7,
    break_after: int | None = 5,
    fall: float = 0.35,
    entity_sd: float = 0.1,
    noise_sd: float = 0.2,
    base: float = 0.5,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows (entity_id, target_date, lap) and the true monthly means: LAP = base (+ fall
    up to month `break_after`) + entity effect + noise; a Poisson number of rows per
    entity-month (some cells empty, as in real panels)."""
    truth = np.full(len(MONTHS), base)
    if break_after is not None:
        truth[: break_after + 1] += fall
    rows = []
    u = rng.normal(0, entity_sd, n_entities)
    for e in range(n_entities):
        for j, m in enumerate(MONTHS):
            for _ in range(rng.poisson(per_month)):
                day = int(rng.integers(1, 28))
                rows.append((f"E{e:03d}", m + pd.Timedelta(days=day - 1), truth[j] + u[e] + rng.normal(0, noise_sd)))
    return pd.DataFrame(rows, columns=["entity_id", "target_date", "lap"]), truth


def frames(df: pd.DataFrame, stated: str = "2021-06-30", draws: int = 199, seed: int = 1):
    return C.measure_frames(df, [("recall", "lap")], "recall", stated, draws=draws, seed=seed)


def test_monthly_table_matches_pandas_and_scipy():
    df, _ = simulate(np.random.default_rng(3))
    lbp, eff = frames(df)
    df["month"] = df["target_date"].dt.to_period("M").dt.to_timestamp().dt.date
    g = df.groupby("month")["lap"]
    want = pd.DataFrame(
        {
            "n": g.size(),
            "mean": g.mean(),
            "sd": g.std(),
            "trimmed_mean": g.apply(lambda x: stats.trim_mean(x, 0.1)),
            "n_entities": df.groupby("month")["entity_id"].nunique(),
        }
    )
    got = lbp.set_index("month")
    assert list(got.index) == list(want.index)
    for col in want.columns:
        np.testing.assert_allclose(got[col].astype(float), want[col].astype(float), rtol=1e-12)
    assert (got["ci_low"] < got["mean"]).all() and (got["mean"] < got["ci_high"]).all()
    assert list(got["after_stated_cutoff"]) == [m > pd.Timestamp("2021-06-30").date() for m in got.index]
    # the effective cutoff records the draws of this entity bootstrap, which it does not run
    assert (eff["bootstrap_draws"] == 199).all() and (got["bootstrap_draws"] == 199).all()


def test_bootstrap_interval_matches_a_loop_over_resampled_entities():
    """The vectorised interval equals a plain loop that rebuilds each draw's rows."""
    df, _ = simulate(np.random.default_rng(5), n_entities=12)
    lbp, _ = frames(df, draws=99, seed=7)
    entities = sorted(df["entity_id"].unique())
    w = C.entity_draws(len(entities), 99, 7)
    df["month"] = df["target_date"].dt.to_period("M").dt.to_timestamp().dt.date
    means = []
    for draw in w:
        parts = [df[df["entity_id"] == e] for e, k in zip(entities, draw, strict=False) for _ in range(int(k))]
        means.append(pd.concat(parts).groupby("month")["lap"].mean())
    boot = pd.DataFrame(means)
    np.testing.assert_allclose(lbp["ci_low"], boot.quantile(0.025).to_numpy(), rtol=1e-10)
    np.testing.assert_allclose(lbp["ci_high"], boot.quantile(0.975).to_numpy(), rtol=1e-10)


def test_bootstrap_interval_coverage():
    """In 120 simulated panels the 95% entity-bootstrap interval covers the true monthly
    mean in at least 90% of nominal (85.5%) of (panel, month) cases."""
    rng = np.random.default_rng(20240611)
    hits = total = 0
    for _ in range(120):
        df, truth = simulate(rng, break_after=None, entity_sd=0.15)
        lbp, _ = frames(df, draws=299, seed=int(rng.integers(1 << 30)))
        hits += int(((lbp["ci_low"] <= truth) & (truth <= lbp["ci_high"])).sum())
        total += len(lbp)
    coverage = hits / total
    print(f"entity-bootstrap 95% interval coverage: {coverage:.3f} over {total} monthly means")
    assert coverage >= 0.9 * C.LEVEL


def brute_force_break(df: pd.DataFrame) -> int:
    """The row-level least-squares fit with a linear trend and one step, written
    independently: for each candidate month k, regress LAP on a constant, the month number
    and 1{month <= k} by lstsq; keep the smallest residual sum of squares among the fits
    whose step is a fall (LAP higher up to k)."""
    m = (df["target_date"].dt.year * 12 + df["target_date"].dt.month).to_numpy()
    months = np.unique(m)
    seg = C.min_segment(len(months))
    y = df["lap"].to_numpy()
    best, best_k = np.inf, -1
    for k in range(seg - 1, len(months) - seg):
        step = (m <= months[k]).astype(float)
        x = np.column_stack([np.ones_like(step), m.astype(float), step])
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        ssr = float(np.sum((y - x @ coef) ** 2))
        if coef[2] > 0 and ssr < best:
            best, best_k = ssr, k
    return best_k


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_break_matches_brute_force_least_squares(seed):
    rng = np.random.default_rng(seed)
    df, _ = simulate(rng, break_after=int(rng.integers(2, 9)), fall=float(rng.uniform(0.02, 0.3)))
    _, eff = frames(df)
    k = brute_force_break(df)
    months = sorted(df["target_date"].dt.to_period("M").dt.to_timestamp().unique())
    row = eff.iloc[0]
    if row["status"] == C.BREAK:
        assert pd.Timestamp(row["break_month"]) == months[k]
    before = df[df["target_date"] < months[k] + pd.offsets.MonthBegin(1)]["lap"]
    after = df[df["target_date"] >= months[k] + pd.offsets.MonthBegin(1)]["lap"]
    assert row["mean_before"] == pytest.approx(before.mean(), rel=1e-12)
    assert row["fall_sd"] == pytest.approx((before.mean() - after.mean()) / before.std(), rel=1e-10)


def test_break_error_on_series_with_a_known_break():
    """Known break month drawn in months 2..8 of 12, fall of 1 sd of the noise: the
    estimate is exact in most series and never more than a month off on average; the
    interval covers the true month in at least 90% of nominal."""
    rng = np.random.default_rng(34)
    errors, covered, breaks = [], 0, 0
    for _ in range(60):
        k = int(rng.integers(2, 9))
        df, _ = simulate(rng, break_after=k, fall=0.2)
        _, eff = frames(df, stated=str((MONTHS[k] + pd.offsets.MonthEnd(0)).date()), seed=int(rng.integers(1 << 30)))
        row = eff.iloc[0]
        if row["status"] != C.BREAK:
            errors.append(np.nan)
            continue
        breaks += 1
        est = pd.Timestamp(row["break_month"])
        errors.append(abs((est.year - MONTHS[k].year) * 12 + est.month - MONTHS[k].month))
        covered += bool(row["stated_in_interval"])
    err = np.array(errors, dtype=float)
    found = err[np.isfinite(err)]
    print(
        f"break found in {breaks}/60; exact {np.mean(found == 0):.3f}; mean abs error "
        f"{found.mean():.3f} months; interval coverage {covered / breaks:.3f}"
    )
    assert breaks >= 57
    assert np.mean(found == 0) >= 0.8 and found.mean() <= 0.5
    assert covered / breaks >= 0.9 * C.LEVEL


def test_no_break_names_no_month():
    """Series with no break (the clean case): the null bootstrap test holds its size, and
    a series without a break names no month and no interval."""
    rng = np.random.default_rng(11)
    rows = []
    for _ in range(60):
        df, _ = simulate(rng, break_after=None)
        rows.append(frames(df, seed=int(rng.integers(1 << 30)))[1].iloc[0])
    eff = pd.DataFrame(rows)
    false_breaks = float((eff["status"] == C.BREAK).mean())
    print(f"no-break series called a break: {false_breaks:.3f}")
    assert false_breaks <= 0.12
    quiet = eff[eff["status"] != C.BREAK]
    assert len(quiet) and quiet["break_month"].isna().all() and quiet["interval_low_month"].isna().all()
    assert quiet["stated_in_interval"].isna().all()


def test_constant_lap_and_too_few_months():
    df = pd.DataFrame(
        {"entity_id": ["A", "B"] * 6, "target_date": pd.to_datetime([f"2021-{m:02d}-10" for m in range(1, 13)]), "lap": 0.3}
    )
    eff = frames(df)[1].iloc[0]
    assert eff["status"] == C.NO_FALL and pd.isna(eff["break_month"])
    eff2 = frames(df.iloc[:2])[1].iloc[0]
    assert eff2["status"] == C.TOO_FEW


def test_scale_free():
    """Min-K% LAP is of order 1e-6: the month found and the fall in sd do not move."""
    df, _ = simulate(np.random.default_rng(8), break_after=6, fall=0.3)
    a = frames(df)[1].iloc[0]
    df["lap"] = df["lap"] * 2.7e-6
    b = frames(df)[1].iloc[0]
    assert a["break_month"] == b["break_month"] and a["p_fall"] == b["p_fall"]
    assert a["fall_sd"] == pytest.approx(b["fall_sd"], rel=1e-9)


def test_warning_names_the_month():
    row = {
        "status": C.BREAK,
        "stated_in_interval": False,
        "break_month": "2021-12-01",
        "interval_low_month": "2021-11-01",
        "interval_high_month": "2021-12-01",
        "interval_level": 0.95,
    }
    text = C.cutoff_warning(row, "2021-06-30", "recall LAP")
    assert "2021-06-30" in text and "2021-11 to 2021-12" in text and "end of 2021-12" in text
    assert C.cutoff_warning({**row, "stated_in_interval": True}, "2021-12-31", "recall LAP") == ""
    assert C.cutoff_warning({"status": C.NO_FALL}, "2021-12-31", "recall LAP") == ""


def test_report_warns_in_the_verdict_paragraph_and_renders_the_section(tmp_path):
    """From a simulated build's marts (written as the CSVs the report reads): a stated cutoff
    three months before the break gets the warning naming the break month; at the break,
    no warning; the section's tables carry the marts' numbers."""
    from lookahead.config import load_study
    from lookahead.pages.cutoff import cutoff_section, verdict_warning

    df, _ = simulate(np.random.default_rng(21), break_after=5, fall=0.3)  # knowledge through 2021-06
    for stated, warned in (("2021-03-31", True), ("2021-06-30", False)):
        lbp, eff = C.measure_frames(df, [("recall", "lap")], "recall", stated, draws=99)
        assert eff.iloc[0]["status"] == C.BREAK and str(eff.iloc[0]["break_month"]) == "2021-06-01"
        lbp.to_csv(tmp_path / "lap_by_period.csv", index=False)
        eff.to_csv(tmp_path / "effective_cutoff.csv", index=False)
        study = load_study(overrides={"training_cutoff": stated, "lap_measure": "recall"})
        text = verdict_warning(tmp_path, study)
        assert bool(text) == warned
        if warned:
            assert f"stated training cutoff ({stated}) lies outside" in text and "end of 2021-06" in text
        section = cutoff_section(tmp_path, study)
        assert "| `recall` (verdict) | break | 2021-06 |" in section
        assert ("**no**" in section) == warned
        first = lbp.iloc[0]
        assert f"| {first['month_label']} | pre | {int(first['n'])} |" in section


def test_steady_decline_is_not_a_break():
    """LAP falling linearly by 1 noise sd over 12 months with no break (older texts better
    memorized): at most 15% of 40 series are called a break, and most are reported as a
    steady decline with a negative slope; a month-permutation test of a mean shift called
    every such series a break."""
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(40):
        df, _ = simulate(rng, break_after=None)
        j = df["target_date"].dt.month.to_numpy() - 1
        df["lap"] = df["lap"] - 0.2 * j / 11
        rows.append(frames(df, seed=int(rng.integers(1 << 30)))[1].iloc[0])
    eff = pd.DataFrame(rows)
    print(
        f"linear decline: break {np.mean(eff['status'] == C.BREAK):.3f}, steady decline {np.mean(eff['status'] == C.DECLINE):.3f}"
    )
    assert np.mean(eff["status"] == C.BREAK) <= 0.15  # size 5%: 15% is 3 Monte Carlo SEs above
    decl = eff[eff["status"] == C.DECLINE]
    assert len(decl) >= 30 and (decl["trend_per_month"] < 0).all() and decl["break_month"].isna().all()
    assert decl["trend_per_month"].mean() == pytest.approx(-0.2 / 11, rel=0.25)


def test_bai_interval_constant_is_the_published_one():
    """Bai (1997): the 95% interval uses 11.03 and the 90% one 7.7 (the quantiles of the
    argmax of a two-sided Brownian motion with drift); the code's constant and its
    distribution function agree with both."""
    assert pytest.approx(11.03, abs=0.005) == C.BAI_C
    assert C._bai_c(0.95) == pytest.approx(11.03, abs=0.01)
    assert C._bai_c(0.90) == pytest.approx(7.7, abs=0.02)
