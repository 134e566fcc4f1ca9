"""The protocol's regressions (steps 3-5) as specifications run through ``fit_fe``.

Step 3 validation:  outcome ~ ud | entity_num + period_num, pooled / high-LAP / low-LAP,
                    and outcome ~ ud + ud:high_lap | entity x half + period x half with ud
                    in sd units of its half, whose ud:high_lap coefficient is
                    theta_high - theta_low per sd of U-D, with a clustered test.
Step 4 detection:   outcome ~ mu_hat + lap + mu_hat:lap | entity_num + period_num;
                    beta_3 is mu_hat:lap, tested one-sided (H1: beta_3 > 0).
Step 5 placebo:     the same regressions on the post-cutoff sample. With no post-cutoff
                    rows the placebo is infeasible: steps 1-4 only, and the post rows
                    say so (the verdict then cannot be "Contamination detected").

Settings come from the one-row ``study_settings`` table (the dbt vars), so the
regressions use exactly the study's configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import pandas as pd

from lookahead.config import Study, check_section_names
from lookahead.errors import UserError
from lookahead.settings_sections import MeasuresSettings, ProtocolSettings
from lookahead.stats.fe_regression import (
    CLUSTER_COLUMNS,
    ENTITY_FE,
    NW_ORDER_COLUMNS,
    PERIOD_FE,
    RESULT_COLUMNS,
    FitRequest,
    RegressionInputError,
    _empty_rows,
    fit_fe,
)

OUTCOME = "outcome"
VALIDATION_TERMS = ("ud",)
DETECTION_TERMS = ("mu_hat", "lap", "mu_hat:lap")
BETA3 = "mu_hat:lap"
FIXED_EFFECTS = (ENTITY_FE, PERIOD_FE)

# spec name -> high_lap value selecting the subsample (None = pooled)
VALIDATION_SPECS: dict[str, int | None] = {
    "validation_pooled": None,
    "validation_high_lap": 1,
    "validation_low_lap": 0,
}
#: "Near zero on the low-LAP half" as a test: one regression of outcome on ud and
#: ud x high_lap with entity x half and period x half fixed effects, i.e. the two
#: half-sample regressions stacked, so the ud:high_lap coefficient is exactly
#: theta_high - theta_low and its clustered standard error counts the entities both
#: halves share. Tested one-sided (H1: theta_high > theta_low). ud is measured in sd
#: units of its own half: the halves are split on LAP, so U-D (bounded by LAP) varies
#: far less in the low half, and a theta per unit of U-D there is large even when the
#: low half barely moves the outcome; per sd, the comparison asks which half's recalled
#: direction predicts more.
DIFFERENCE_SPEC = "validation_difference"
DIFFERENCE_TERMS = ("ud", "ud:high_lap")
THETA_DIFF = "ud:high_lap"
ENTITY_HALF, PERIOD_HALF = "entity_half", "period_half"
DETECTION_SPEC = "detection"
#: Levels the decision reads the detection regression at: pre-cutoff beta_3 one-sided 5%
#: (detection), post-cutoff beta_3 one-sided 10% (the placebo passes above it; seeds/000).
#: Each sample's minimum detectable effect (column `mde`) is computed for its own level.
DETECTION_ALPHA = 0.05
PLACEBO_ALPHA = 0.10
SPECS = (*VALIDATION_SPECS, DIFFERENCE_SPEC, DETECTION_SPEC)
SAMPLES = ("pre", "post")

PANEL_COLUMNS = (OUTCOME, "ud", "mu_hat", "lap", "high_lap", ENTITY_FE, PERIOD_FE)


def protocol_columns(settings: StatsSections) -> list[str]:
    """Every panel column `run_protocol` reads: the regression columns, the cluster, the
    approximation flag and the Newey-West row order (a single-entity panel)."""
    cols = list(PANEL_COLUMNS)
    cluster_col = CLUSTER_COLUMNS[settings.protocol.cluster]
    return list(dict.fromkeys([*cols, *([cluster_col] if cluster_col else []), "approximated", *NW_ORDER_COLUMNS]))


class SettingsError(UserError, ValueError):
    """A missing or invalid setting in study_settings; the message names it."""


@dataclass(frozen=True)
class StatsSections:
    """The two generated sections the statistics read, as the study holds them: the
    protocol's (cluster, nw_lag, lap_min_sd and the wild bootstrap's draws, weights and
    seed, read by the verdict at every cluster count; lookahead/stats/wild.py) and the
    measures' (lap_measure, a registered measure whose variation rule decides how
    "meaningful LAP variation" is judged).

    Why the sections and not a copy of their fields: each setting keeps the one name,
    type and default lookahead/study_settings.yml declares, so a new setting or a changed
    default reaches the regressions without a second declaration here."""

    protocol: ProtocolSettings = field(default_factory=ProtocolSettings.with_defaults)
    measures: MeasuresSettings = field(default_factory=MeasuresSettings.with_defaults)

    @classmethod
    def with_defaults(cls, **given: Any) -> StatsSections:
        """The sections from the settings given by their study names (e.g. ``cluster``,
        ``wild_bootstrap_draws``), declared defaults for the rest; for code outside a study
        (tests, simulations). A name neither section declares raises TypeError."""
        check_section_names(given, ProtocolSettings, MeasuresSettings)
        return cls(ProtocolSettings.with_defaults(**given), MeasuresSettings.with_defaults(**given))

    def with_measure(self, lap_measure: str) -> StatsSections:
        """The same settings with the verdict's measure set to ``lap_measure`` (a name of
        the measures registry, whose names are the setting's allowed values)."""
        return replace(self, measures=replace(self.measures, lap_measure=cast(Any, lap_measure)))

    @classmethod
    def from_study(cls, study: Study) -> StatsSections:
        """From the one study object (its values checked by lookahead.config)."""
        return cls(study.protocol, study.measures)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> StatsSections:
        """From the ``study_settings`` table (one row; its settings_json is the study)."""
        return cls.from_study(study_from_frame(frame))


def study_from_frame(frame: pd.DataFrame) -> Study:
    """The study a build recorded in ``study_settings`` (which must hold exactly one row)."""
    if len(frame) != 1:
        raise SettingsError(f"table 'study_settings' must have exactly one row, has {len(frame)}")
    return Study.from_json(str(frame["settings_json"].iloc[0]))


def check_panel(panel: pd.DataFrame, name: str, settings: StatsSections) -> None:
    """Raise RegressionInputError naming the table and the missing columns."""
    needed = list(PANEL_COLUMNS)
    cluster_col = CLUSTER_COLUMNS[settings.protocol.cluster]
    if cluster_col and cluster_col not in needed:
        needed.append(cluster_col)
    missing = [c for c in needed if c not in panel.columns]
    if missing:
        raise RegressionInputError(
            f"table '{name}' lacks column(s) {missing} needed by the regressions (docs/CONTRACTS.md, Panel)"
        )


def any_approximated(panel: pd.DataFrame | None) -> bool:
    """True when any row came from the sampling fallback (column `approximated`)."""
    if panel is None or "approximated" not in panel.columns or len(panel) == 0:
        return False
    flags = panel["approximated"].astype("boolean")
    return bool(flags.fillna(False).any())


def _sample_notes(panel: pd.DataFrame) -> tuple[str, ...]:
    if any_approximated(panel):
        return ("approximated: probabilities from the sampling fallback (protocol)",)
    return ()


def _requests(
    sample: str, settings: StatsSections, notes: tuple[str, ...], single_entity: bool = False
) -> list[tuple[FitRequest, int | None]]:
    reqs: list[tuple[FitRequest, int | None]] = []
    for spec, subset in VALIDATION_SPECS.items():
        reqs.append(
            (
                FitRequest(
                    spec=spec,
                    sample=sample,
                    outcome=OUTCOME,
                    regressors=VALIDATION_TERMS,
                    fixed_effects=FIXED_EFFECTS,
                    cluster=settings.protocol.cluster,
                    nw_lag=settings.protocol.nw_lag,
                    notes=notes,
                    wild_terms=VALIDATION_TERMS if subset is not None else (),
                    wild=settings.protocol,
                ),
                subset,
            )
        )
    # one entity: its entity x half FE is the half dummy, absorbed by period x half
    diff_fe = (ENTITY_FE, PERIOD_HALF) if single_entity else (ENTITY_HALF, PERIOD_HALF)
    reqs.append(
        (
            FitRequest(
                spec=DIFFERENCE_SPEC,
                sample=sample,
                outcome=OUTCOME,
                regressors=DIFFERENCE_TERMS,
                fixed_effects=diff_fe,
                cluster=settings.protocol.cluster,
                one_sided_terms=(THETA_DIFF,),
                nw_lag=settings.protocol.nw_lag,
                notes=notes,
                wild_terms=(THETA_DIFF,),
                wild=settings.protocol,
            ),
            None,
        )
    )
    reqs.append(
        (
            FitRequest(
                spec=DETECTION_SPEC,
                sample=sample,
                outcome=OUTCOME,
                regressors=DETECTION_TERMS,
                fixed_effects=FIXED_EFFECTS,
                cluster=settings.protocol.cluster,
                one_sided_terms=(BETA3,),
                nw_lag=settings.protocol.nw_lag,
                notes=notes,
                wild_terms=(BETA3,),
                wild=settings.protocol,
                wild_two_sided_terms=(BETA3,),
                mde_alpha=PLACEBO_ALPHA if sample == "post" else DETECTION_ALPHA,
            ),
            None,
        )
    )
    return reqs


def with_halves(panel: pd.DataFrame) -> pd.DataFrame:
    """The panel for the difference regression: entity x half and period x half codes, and
    ud in sd units of its half (a half without U-D variation leaves it missing)."""
    out = panel.copy()
    hl = pd.to_numeric(out["high_lap"], errors="coerce")
    ud = pd.to_numeric(out["ud"], errors="coerce").astype(float)
    sd = ud.groupby(hl).transform("std")
    out["ud"] = ud / sd.where(sd > 0)
    for col, src in ((ENTITY_HALF, ENTITY_FE), (PERIOD_HALF, PERIOD_FE)):
        codes = pd.factorize(out[src], sort=True)[0].astype(float)
        codes[codes < 0] = np.nan
        out[col] = pd.array(np.where(hl.notna(), codes * 2 + hl.fillna(0), np.nan), dtype="Float64")
    return out


def run_sample(panel: pd.DataFrame, sample: str, settings: StatsSections) -> pd.DataFrame:
    """All five specifications on one sample ('pre' or 'post')."""
    check_panel(panel, f"panel_{sample}", settings)
    frames = []
    notes = _sample_notes(panel)
    single = panel[ENTITY_FE].nunique() == 1
    for req, subset in _requests(sample, settings, notes, single_entity=single):
        data = panel
        if subset is not None:
            hl = pd.to_numeric(panel["high_lap"], errors="coerce")
            data = panel.loc[hl == subset]
        elif req.spec == DIFFERENCE_SPEC:
            data = with_halves(panel)
        frames.append(fit_fe(data, req))
    return pd.concat(frames, ignore_index=True)


def infeasible_sample(sample: str, settings: StatsSections, why: str) -> pd.DataFrame:
    """Rows for a sample that cannot be estimated at all (e.g. no post-cutoff rows)."""
    frames = [_empty_rows(req, " + ".join(FIXED_EFFECTS), "not estimated", why) for req, _ in _requests(sample, settings, ())]
    return pd.concat(frames, ignore_index=True)


NO_POST_WARNING = "no post-cutoff rows: the placebo (step 5) is infeasible; steps 1-4 only (protocol)"


def run_protocol(panel_pre: pd.DataFrame, panel_post: pd.DataFrame | None, settings: StatsSections) -> pd.DataFrame:
    """Steps 3-5: validation and detection on pre, the same on post as placebo.

    Returns the regression_results table: one row per (spec, sample, term)."""
    out = [run_sample(panel_pre, "pre", settings)]
    if panel_post is None or len(panel_post) == 0:
        out.append(infeasible_sample("post", settings, NO_POST_WARNING))
    else:
        out.append(run_sample(panel_post, "post", settings))
    res = pd.concat(out, ignore_index=True)
    return res[list(RESULT_COLUMNS)]


def result_row(results: pd.DataFrame, spec: str, sample: str, term: str) -> dict[str, Any]:
    """The row for (spec, sample, term) as a dict with NaN for missing numbers."""
    sel = results[(results["spec"] == spec) & (results["sample"] == sample) & (results["term"] == term)]
    if sel.empty:
        return {c: math.nan for c in RESULT_COLUMNS}
    row = sel.iloc[0].to_dict()
    return {k: (math.nan if v is pd.NA else v) for k, v in row.items()}
