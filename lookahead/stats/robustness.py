"""beta_3 under every LAP measure the study computed: the report's robustness table.

The verdict reads only `lap_measure` (one measure named before the data are seen); this
table shows whether its beta_3 would survive the other measures the study asked for
(`lap_measures`), so a reader can judge robustness without anyone choosing the measure
after the fact (no measure shopping). Each row is the detection regression of the
protocol (outcome ~ mu_hat + lap + mu_hat:lap, the same fixed effects, cluster and
p-value rule as the verdict's beta_3) on the pre-cutoff panel with `lap` replaced by
that measure's column, and whether LAP varies by that measure's variation rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lookahead.measures import Measure
from lookahead.stats.fe_regression import fit_fe
from lookahead.stats.protocol import DETECTION_SPEC, ENTITY_FE, StatsSections, _requests, _sample_notes
from lookahead.stats.verdict import ALPHA_DETECTION, gather_facts, lap_min_sd, tests_of

ROBUSTNESS_COLUMNS = (
    "lap_measure",
    "label",
    "is_verdict_measure",
    "beta3",
    "t",
    "p_one_sided",
    "p_source",
    "p_draws",
    "n_obs",
    "lap_sd",
    "lap_min_sd",
    "lap_varies",
    "detects",
)


def _with_lap(panel: pd.DataFrame, column: str) -> pd.DataFrame:
    out = panel.copy()
    out["lap"] = pd.to_numeric(out[column], errors="coerce") if column in out.columns else np.nan
    return out


def robustness_frame(panel_pre: pd.DataFrame, measures: Sequence[Measure], settings: StatsSections) -> pd.DataFrame:
    """One row per measure: beta_3, its t and the p the verdict's rule would read."""
    rows = []
    for m in measures:
        s = settings.with_measure(m.name)
        pre = _with_lap(panel_pre, m.column)
        single = bool(pre[ENTITY_FE].nunique() == 1)
        req = next(r for r, _ in _requests("pre", s, _sample_notes(pre), single_entity=single) if r.spec == DETECTION_SPEC)
        results = fit_fe(pre, req)
        f = gather_facts(results, pre, None, s)
        b3 = tests_of(f)["beta3"]
        lap = pd.to_numeric(pre["lap"], errors="coerce").dropna()
        min_sd = lap_min_sd(s, lap)
        varies = bool(lap.nunique() > 1 and np.isfinite(f.lap_sd_pre) and f.lap_sd_pre >= min_sd)
        rows.append(
            {
                "lap_measure": m.name,
                "label": m.label,
                "is_verdict_measure": m.name == settings.measures.lap_measure,
                "beta3": b3.estimate,
                "t": b3.t,
                "p_one_sided": b3.p,
                "p_source": b3.source,
                "p_draws": b3.draws,
                "n_obs": f.beta3.n_obs,
                "lap_sd": f.lap_sd_pre,
                "lap_min_sd": min_sd,
                "lap_varies": varies,
                "detects": bool(np.isfinite(b3.estimate) and b3.estimate > 0 and np.isfinite(b3.p) and b3.p < ALPHA_DETECTION),
            }
        )
    return pd.DataFrame(rows, columns=list(ROBUSTNESS_COLUMNS))
