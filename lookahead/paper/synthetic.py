"""A synthetic panel with the contract's columns and a known LLM x LAP effect.

Used by the tests (known truth, independent estimators) and by the bootstrap benchmark
(the paper's out-of-sample size, 9,942 rows, with realistic FE sizes: ~1,500 entities
of skewed size, as news coverage is, and ~250 trading dates)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def make_panel(
    n_rows: int = 9_942,
    n_entities: int = 1_500,
    n_dates: int = 250,
    delta: float = 2.0,
    gamma: float = 0.1,
    seed: int = 0,
    sample: str = "post",
    labels: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Rows with entity/date FE, mu_hat in the label values, LAP in (0, 1), and
    outcome = alpha_i + beta_t + gamma mu + delta mu (LAP - mean) + noise."""
    rng = np.random.default_rng(seed)
    size = rng.lognormal(0.0, 1.0, n_entities)
    ent = rng.choice(n_entities, size=n_rows, p=size / size.sum())
    date = rng.integers(0, n_dates, n_rows)
    values = np.array(sorted((labels or {"down": -1.0, "neutral": 0.0, "up": 1.0}).values()))
    mu = rng.choice(values, size=n_rows)
    lap = rng.beta(2.0, 20.0, n_rows)
    alpha = rng.normal(0, 1, n_entities)
    beta = rng.normal(0, 1, n_dates)
    y = alpha[ent] + beta[date] + gamma * mu + delta * mu * (lap - lap.mean()) + rng.normal(0, 2.0, n_rows)
    dates = pd.Timestamp("2023-09-01") + pd.to_timedelta(date, unit="D")
    ftp = np.clip(rng.beta(20, 1, n_rows), 0, 1)
    conf = np.round(np.clip(0.8 + rng.normal(0, 0.07, n_rows), 0, 1), 1)
    return pd.DataFrame(
        {
            "row_id": [f"r{i}" for i in range(n_rows)],
            "entity_id": [f"E{e}" for e in ent],
            "entity_num": ent,
            "target_date": dates,
            "period_num": date,
            "sample": sample,
            "outcome": y,
            "mu_hat": mu,
            "lap_mink": lap,
            "lap_recall": rng.uniform(0, 1, n_rows),
            "lap": lap,
            "first_token_prob": ftp,
            "stated_confidence": conf,
            "small": (rng.uniform(size=n_rows) < 0.2).astype(int),
        }
    )
