"""A grid of generated studies for the report's consistency checker (report_checker.py).

Each study is a pair of panels shaped like panel_pre / panel_post, generated with a known
truth: strong, weak or no memorization (the forecast and the recalled direction follow
the realized shock on high-LAP rows), a negative beta_3 (high-LAP forecasts point the
wrong way), a collapsed post-cutoff LAP, censored recall, all forecasts unparsed, 1, 5, 30
or 200 entities, no post-cutoff rows, and Min-K% or recall LAP rescaled from 1e-9 to 1e3.
`render_study` runs the shipped regressions and verdict, writes the CSVs REPORT.md is
rendered from (the sample and LAP tables computed from the panels as the dbt models do)
and renders REPORT.md with lookahead.pages.report.render. Nothing here is tuned to the demo."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

#: entities -> (periods, rows per entity and period): about 500-1,500 pre-cutoff rows
SHAPES = {1: (20, 4), 5: (24, 4), 20: (10, 2), 30: (12, 3), 200: (6, 1)}


@dataclass(frozen=True)
class StudySpec:
    name: str
    memorization: float = 1.0  # share of high-LAP rows whose answers are memorized
    sign: float = 1.0  # -1: memorized forecasts point the wrong way
    entities: int = 30
    post: str = "normal"  # normal | collapsed | none
    censored: bool = False  # recall labels censored in every row
    unparsed: bool = False  # no forecast maps to a label
    measure: str = "recall"  # recall | mink
    scale: float = 1.0  # LAP (and recall U-D) multiplied by this
    seed: int = 0


def grid() -> list[StudySpec]:
    base = [
        StudySpec("strong", 1.0),
        StudySpec("weak", 0.25),
        StudySpec("none", 0.0),
        StudySpec("negative_beta3", 1.0, sign=-1.0),
        StudySpec("collapsed_post", 1.0, post="collapsed"),
        StudySpec("no_post_rows", 1.0, post="none"),
        StudySpec("censored", 0.0, censored=True),
        StudySpec("unparsed", 1.0, unparsed=True),
    ]
    sizes = [StudySpec(f"{m}_{e}_entities", mem, entities=e) for e in (1, 5, 200) for m, mem in (("strong", 1.0), ("none", 0.0))]
    scales = [
        StudySpec(f"{measure}_{m}_scale_{s:g}", mem, measure=measure, scale=s)
        for measure in ("recall", "mink")
        for s in (1e-9, 1e-3, 1e3)
        for m, mem in (("strong", 1.0), ("none", 0.0))
    ]
    return base + sizes + scales


def _sample(rng, spec: StudySpec, start_period: int, post: bool) -> pd.DataFrame:
    n_periods, per_cell = SHAPES[spec.entities]
    if post:
        n_periods = max(n_periods // 2, 3)
    idx = [(e, t) for e in range(spec.entities) for t in range(start_period, start_period + n_periods) for _ in range(per_cell)]
    df = pd.DataFrame(idx, columns=["entity_num", "period_num"])
    n = len(df)
    df["row_id"] = [f"r{'b' if post else 'a'}{i:06d}" for i in range(n)]
    day = (df["period_num"] * 30).to_numpy() + rng.permutation(n) % 28
    df["target_date"] = pd.Timestamp("2018-01-01") + pd.to_timedelta(day, "D")
    ent = rng.normal(0, 0.5, spec.entities)[df["entity_num"]]
    per = rng.normal(0, 0.5, start_period + n_periods + 1)[df["period_num"]]
    shock = rng.normal(size=n)
    df["outcome"] = ent + per + shock
    up = shock > 0
    lap = rng.uniform(0.0, 1.0 if not post or spec.post == "normal" else 0.3, n)
    mem = 0.0 if post else spec.memorization
    recalls = (lap > 0.5) & (rng.uniform(size=n) < (lap - 0.5) * 2 * mem)
    s = np.where(recalls, np.where(up == (spec.sign > 0), 0.95, 0.05), rng.uniform(size=n))
    p_up, p_down = lap * s, lap * (1 - s)
    mu = np.where(recalls, np.where(up == (spec.sign > 0), 1.0, -1.0), rng.choice([-1.0, 1.0], n))
    df["mu_hat"] = np.nan if spec.unparsed else mu
    cens = spec.censored or (post and spec.post == "collapsed")
    df["up_censored"] = cens
    df["down_censored"] = cens
    if cens:
        p_up, p_down = np.zeros(n), np.zeros(n)
    df["p_up"], df["p_down"] = p_up, p_down
    recall_lap = p_up + p_down
    # Min-K%: a log-probability-like score, growing with recall
    lap_col = spec.scale * (1.0 + recall_lap + rng.normal(0, 0.05, n)) if spec.measure == "mink" else spec.scale * recall_lap
    df["lap"] = lap_col
    df["ud"] = spec.scale * (p_up - p_down) if spec.measure == "recall" else p_up - p_down
    df["high_lap"] = (df["lap"] > df["lap"].median()).astype(int)
    df["approximated"] = False
    return df


def panels(spec: StudySpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng([spec.seed, zlib.crc32(spec.name.encode())])
    n_periods, _ = SHAPES[spec.entities]
    pre = _sample(rng, spec, 0, post=False)
    if spec.post == "none":
        return pre, pre.iloc[0:0].copy()
    return pre, _sample(rng, spec, n_periods, post=True)


def _describe(pre: pd.DataFrame, post: pd.DataFrame) -> pd.DataFrame:
    both = pd.concat([pre, post], ignore_index=True)
    unparsed = int(both["mu_hat"].isna().sum())
    rows = [
        ("input rows", len(both)),
        ("rejected rows", 0),
        ("valid rows", len(both)),
        ("pre-cutoff rows", len(pre)),
        ("post-cutoff rows", len(post)),
        ("entities", both["entity_num"].nunique()),
        ("periods", both["period_num"].nunique()),
        ("rows without a forecast", 0),
        ("rows with an unparsed forecast", unparsed),
    ]
    return pd.DataFrame(rows, columns=["metric", "value"])


def _lap_distribution(pre: pd.DataFrame, post: pd.DataFrame, measure: str) -> pd.DataFrame:
    rows = []
    for sample, df in (("pre", pre), ("post", post)):
        x = pd.to_numeric(df["lap"], errors="coerce").dropna()
        q = x.quantile([0.25, 0.5, 0.75]) if len(x) else pd.Series([np.nan] * 3, index=[0.25, 0.5, 0.75])
        rows.append(
            {
                "measure": measure,
                "sample": sample,
                "n": len(x),
                "mean": x.mean(),
                "sd": x.std(ddof=1),
                "min": x.min(),
                "p25": q[0.25],
                "median": q[0.5],
                "p75": q[0.75],
                "max": x.max(),
                "is_selected_measure": True,
            }
        )
    return pd.DataFrame(rows)


def render_study(spec: StudySpec, out: Path, draws: int = 99, data: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> str:
    """Regressions, verdict, CSVs and REPORT.md for one study (its panels, or `data`:
    (pre, post) a test reshaped); returns the report text."""
    from lookahead.config import load_study
    from lookahead.pages.report import render
    from lookahead.stats.protocol import StatsSections, run_protocol
    from lookahead.stats.verdict import verdict_frame

    settings = StatsSections.with_defaults(cluster="entity", lap_measure=spec.measure, wild_bootstrap_draws=draws)
    pre, post = data if data is not None else panels(spec)
    res = run_protocol(pre, post if len(post) else None, settings)
    verdict = verdict_frame(res, pre, post, settings)
    out.mkdir(parents=True, exist_ok=True)
    # the report reads the study the build recorded (settings_json), as lookahead.pages.report does
    recorded = load_study(
        overrides={
            "study_name": spec.name,
            "model_id": "generated",
            "training_cutoff": "2021-12-31",
            "data_path": "generated",
            "period_frequency": "month",
            "lap_measure": spec.measure,
            "high_lap_rule": "pooled_median",
            "mink_k": 0.2,
            "mink_mean": "arithmetic",
        }
    )
    study = pd.DataFrame([{"study_name": spec.name, "settings_json": recorded.settings_json()}])
    tables = {
        "study_settings": study,
        "regression_results": res,
        "verdict": verdict,
        "sample_description": _describe(pre, post),
        "lap_distribution": _lap_distribution(pre, post, spec.measure),
    }
    for name, df in tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
    from lookahead.pages.data import derived_tables

    for name, df in derived_tables(pre, post).items():  # the figures' and hit-rate tables
        df.to_csv(out / f"{name}.csv", index=False)
    for (spec_name, sample), part in res.groupby(["spec", "sample"]):
        part.to_csv(out / f"regression_{spec_name}_{sample}.csv", index=False)
    text, _ = render(out)
    (out / "REPORT.md").write_text(text, encoding="utf-8")
    return text


def with_seed(spec: StudySpec, seed: int) -> StudySpec:
    return replace(spec, seed=seed)


def main() -> None:
    """Render the grid with whichever `lookahead` is importable and run the checker:
    `python tests/python/study_grid.py OUT_DIR [--check-only]` prints one line per study
    and the totals (the count before/after a change to the renderer); --check-only reads
    the reports already in OUT_DIR."""
    import sys

    from report_checker import check

    out = Path(sys.argv[1])
    check_only = "--check-only" in sys.argv  # read reports rendered before
    studies = failing = problems = 0
    for spec in grid():
        d = out / spec.name
        try:
            text = (d / "REPORT.md").read_text(encoding="utf-8") if check_only else render_study(spec, d)
            found = check(text, d)
        except Exception as exc:  # an old renderer may crash on a study: that counts
            found = [f"rendering failed: {type(exc).__name__}: {exc}"]
        studies += 1
        failing += bool(found)
        problems += len(found)
        print(f"{spec.name}: {len(found)} problem(s)" + "".join(f"\n    - {p}" for p in found))
    print(f"TOTAL: {failing} of {studies} studies with problems; {problems} problems")


if __name__ == "__main__":
    main()
