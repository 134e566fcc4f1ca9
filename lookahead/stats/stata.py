"""A Stata do-file with the protocol's reghdfe commands, for users who have Stata.

The protocol runs its estimation in Stata (``stata-mp -b do ...``). The package
estimates the same specifications with pyfixest under reghdfe's small-sample
convention; this module writes the equivalent do-file (and can export the panels as
.dta) so that a Stata user can reproduce every coefficient table with reghdfe/esttab.

The one-sided p for beta_3 > 0 is ``ttail(e(df_r), t)``, which equals the protocol's
p/2 when t > 0 and 1 - p/2 otherwise."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lookahead.safe_output import strip_controls
from lookahead.stats.fe_regression import CLUSTER_COLUMNS, newey_west_default_lag
from lookahead.stats.protocol import StatsSections

STATA_COLUMNS = (
    "row_id",
    "entity_id",
    "entity_num",
    "period_num",
    "text_date",
    "target_date",
    "outcome",
    "mu_hat",
    "ud",
    "lap",
    "high_lap",
)


def stata_string(value: str) -> str:
    """A path (a study's outputs_dir or results_dir) as a Stata string literal.

    The one way a setting reaches the do-file: Stata would expand `$name` and a backquote
    as macros inside "...", so both are escaped with a backslash; a double quote or a
    control character (a line break would end the command and start another) cannot be
    carried and raises ValueError; the settings loader refuses both in a path
    (lookahead/untrusted.py), so only a path built outside a study meets it."""
    if '"' in value or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{value!r} cannot be written into the Stata do-file (a double quote or a control character)")
    return '"' + value.replace("$", "\\$").replace("`", "\\`") + '"'


def _vce(settings: StatsSections) -> str:
    col = CLUSTER_COLUMNS[settings.protocol.cluster]
    return "vce(robust)" if col is None else f"cluster({col})"


def _sample_block(
    sample: str, panel_dir: str, results_dir: str, settings: StatsSections, single_entity: bool, n_obs: int | None
) -> list[str]:
    lines = [
        "",
        f"* ---------------- {sample}-cutoff sample" + (" (placebo, protocol step 5)" if sample == "post" else ""),
        f"use {stata_string(f'{panel_dir}/panel_{sample}')}, clear",
        "eststo clear",
    ]
    if single_entity:
        lag = settings.protocol.nw_lag if settings.protocol.nw_lag is not None else newey_west_default_lag(n_obs or 0)
        lines += [
            "* Single entity: no entity fixed effects, Newey-West (protocol). Rows are",
            "* consecutive in (target_date, text_date, row_id) order, as the package does.",
            "sort target_date text_date row_id",
            "gen long _t = _n",
            "tsset _t",
            f"eststo val_pooled: newey outcome ud i.period_num, lag({lag}) force",
            f"eststo val_high: newey outcome ud i.period_num if high_lap == 1, lag({lag}) force",
            f"eststo val_low: newey outcome ud i.period_num if high_lap == 0, lag({lag}) force",
            f"eststo detection: newey outcome c.mu_hat##c.lap i.period_num, lag({lag}) force",
            "* High- minus low-LAP theta: 1.high_lap#c.ud",
            f"eststo val_diff: newey outcome c.ud##i.high_lap i.period_num#i.high_lap, lag({lag}) force",
        ]
    else:
        opts = f"absorb(entity_num period_num) {_vce(settings)}"
        lines += [
            "* Validation (step 3): pooled, high- and low-LAP halves",
            f"eststo val_pooled: reghdfe outcome ud, {opts}",
            f"eststo val_high: reghdfe outcome ud if high_lap == 1, {opts}",
            f"eststo val_low: reghdfe outcome ud if high_lap == 0, {opts}",
            "* Detection (step 4): beta_3 is c.mu_hat#c.lap",
            f"eststo detection: reghdfe outcome c.mu_hat##c.lap, {opts}",
            "* High- minus low-LAP theta (1.high_lap#c.ud), entity x half and period x half FE",
            "eststo val_diff: reghdfe outcome c.ud##i.high_lap, "
            f"absorb(entity_num#high_lap period_num#high_lap) {_vce(settings)}",
        ]
    lines += [
        "local t3 = _b[c.mu_hat#c.lap] / _se[c.mu_hat#c.lap]",
        "local p1 = ttail(e(df_r), `t3')",
        f'display "{sample}: beta_3 = " _b[c.mu_hat#c.lap] "  t = " `t3\' "  one-sided p (beta_3 > 0) = " `p1\'',
        f"esttab val_pooled val_high val_low detection using {stata_string(f'{results_dir}/stata_{sample}.csv')}, ///",
        "    replace csv b(%9.6f) se(%9.6f) t(%9.3f) p(%9.4f) ///",
        "    scalars(N N_clust num_singletons r2 r2_within) ///",
        '    mtitles("pooled" "high_lap" "low_lap" "detection")',
        f"esttab val_diff using {stata_string(f'{results_dir}/stata_{sample}_difference.csv')}, ///",
        "    replace csv b(%9.6f) se(%9.6f) t(%9.3f) p(%9.4f) scalars(N N_clust r2)",
    ]
    return lines


def stata_do_file(
    settings: StatsSections,
    panel_dir: str = "outputs",
    results_dir: str = "results",
    has_post: bool = True,
    single_entity: bool = False,
    n_obs: int | None = None,
) -> str:
    """The do-file text. ``single_entity`` switches to ``newey`` as the package does."""
    lines = [
        "* Lookahead-bias test: the protocol's regressions in Stata (reghdfe + esttab).",
        "* Generated by lookahead.stats.stata; the package's pyfixest results use the same",
        "* small-sample correction (CRV1: G/(G-1)*(N-1)/(N-K), FE nested in the cluster",
        "* not counted in K), so coefficients and standard errors should agree.",
        "* Run: stata-mp -b do <this file>",
        "version 16",
        "set more off",
        "capture which reghdfe",
        "if _rc ssc install reghdfe",
        "capture which ftools",
        "if _rc ssc install ftools",
        "capture which esttab",
        "if _rc ssc install estout",
        f"capture mkdir {stata_string(results_dir)}",
    ]
    lines += _sample_block("pre", panel_dir, results_dir, settings, single_entity, n_obs)
    if has_post:
        lines += _sample_block("post", panel_dir, results_dir, settings, single_entity, n_obs)
    else:
        lines += ["", "* No post-cutoff rows: the placebo (step 5) is infeasible; steps 1-4 only."]
    return "\n".join(lines) + "\n"


def export_stata_panels(
    panel_pre: pd.DataFrame,
    panel_post: pd.DataFrame | None,
    panel_dir: str | os.PathLike[str] = "outputs",
    extra_columns: Sequence[str] = (),
) -> list[Path]:
    """Write outputs/panel_pre.dta (and panel_post.dta) with the columns the do-file uses.

    Written to a temporary name and renamed, so a crash never leaves a half file."""
    out_dir = Path(panel_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, panel in (("pre", panel_pre), ("post", panel_post)):
        if panel is None or len(panel) == 0:
            continue
        cols = [c for c in (*STATA_COLUMNS, *extra_columns) if c in panel.columns]
        frame = panel[cols].copy()
        dates = {}
        for c in ("text_date", "target_date"):
            if c in frame:
                frame[c] = pd.to_datetime(frame[c])
                dates[c] = "td"
        for c in ("row_id", "entity_id"):
            if c in frame:  # text from the data: no control byte reaches the panel (lookahead.safe_output)
                frame[c] = frame[c].astype(str).map(strip_controls)
        for c in frame.columns:
            if c not in dates and c not in ("row_id", "entity_id"):
                frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
        path = out_dir / f"panel_{name}.dta"
        tmp = out_dir / f".panel_{name}.dta.tmp"
        frame.to_stata(tmp, write_index=False, convert_dates=dates, version=118)
        os.replace(tmp, path)
        written.append(path)
    return written


def write_stata_do_file(
    path: str | os.PathLike[str],
    settings: StatsSections,
    panel_pre: pd.DataFrame | None = None,
    panel_post: pd.DataFrame | None = None,
    panel_dir: str = "outputs",
    results_dir: str = "results",
) -> Path:
    """Write the do-file to ``path`` (atomically) and return it.

    With the panels given, a single-entity panel gets the newey commands and the
    placebo block is left out when there are no post-cutoff rows."""
    single = False
    n_obs = None
    if panel_pre is not None and "entity_num" in panel_pre.columns:
        single = panel_pre["entity_num"].nunique() == 1
        n_obs = len(panel_pre)
    has_post = panel_post is None or len(panel_post) > 0
    text = stata_do_file(settings, panel_dir, results_dir, has_post, single, n_obs)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
    return p
