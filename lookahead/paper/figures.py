"""The report's figures (matplotlib, Agg backend: no display needed in dbt or CI).

- LAP histograms before vs after the training cutoff (protocol step 2 sanity check).
- The bootstrap distribution of the out-of-sample interaction coefficient with the
  in-sample estimate (red, solid) and the 95th percentile (blue, dotted): paper Figure III.
- Forecast accuracy by LAP decile, pre vs post: memorization shows as accuracy rising
  with LAP before the cutoff and flat after it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("MPLCONFIGDIR", "/tmp/mpl")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

#: How the accuracy figures form their deciles, in their titles and captions: the report's
#: key figure, the paper section's and the comparison's all form them this way, so two of
#: them with other numbers differ by measure (each names its own), never by rule.
DECILE_RULE = "deciles formed within each sample, pre and post"
#: A legend sits outside the axes, right of them, so it never covers the data.
LEGEND_OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}


def _save(fig: plt.Figure, path: str | os.PathLike[str]) -> Path:
    """Write via a temp name and rename, so a reader never sees half a PNG."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.stem + ".tmp" + p.suffix)
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, p)
    return p


def lap_histograms(pre: pd.DataFrame, post: pd.DataFrame, column: str, path: str | os.PathLike[str], label: str = "LAP") -> Path:
    """Overlaid density histograms of LAP in-sample vs out-of-sample, on common bins."""
    a = pd.to_numeric(pre[column], errors="coerce").dropna().to_numpy()
    b = pd.to_numeric(post[column], errors="coerce").dropna().to_numpy()
    both = np.concatenate([a, b]) if len(a) + len(b) else np.array([0.0, 1.0])
    bins = np.histogram_bin_edges(both, bins=40).tolist()  # the edges as floats, as Axes.hist takes them
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(a):
        ax.hist(a, bins=bins, density=True, alpha=0.55, color="tab:red", label=f"pre-cutoff (N={len(a):,}, mean={a.mean():.3g})")
    if len(b):
        ax.hist(
            b, bins=bins, density=True, alpha=0.55, color="tab:blue", label=f"post-cutoff (N={len(b):,}, mean={b.mean():.3g})"
        )
    ax.set_xlabel(label)
    ax.set_ylabel("density")
    ax.set_title(f"{label}: before vs after the training cutoff")
    ax.legend(frameon=False, **LEGEND_OUTSIDE)
    return _save(fig, path)


def bootstrap_figure(
    draws: np.ndarray, in_sample_estimate: float, path: str | os.PathLike[str], p_value: float | None = None
) -> Path:
    """Paper Figure III: histogram of bootstrap coefficients, in-sample estimate, 95th percentile."""
    d = np.asarray(draws, dtype=float)
    d = d[np.isfinite(d)]
    p95 = float(np.percentile(d, 95))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(d, bins=60, color="0.7", edgecolor="white")
    ax.axvline(
        in_sample_estimate, color="red", linestyle="-", linewidth=2, label=f"in-sample estimate = {in_sample_estimate:.4g}"
    )
    ax.axvline(p95, color="blue", linestyle=":", linewidth=2, label=f"95th percentile = {p95:.4g}")
    ax.set_xlabel(r"bootstrap coefficient on LLM$^{std}$ $\times$ LAP$^{std}$ (out-of-sample)")
    ax.set_ylabel("count")
    t = f"Pairs bootstrap, {len(d):,} draws"
    if p_value is not None:  # printed as the report prints it (fmt_p): one p everywhere
        from lookahead.stats.verdict import fmt_p

        t += f"; one-sided p {fmt_p(p_value, len(d))}"
    ax.set_title(t)
    ax.legend(frameon=False, **LEGEND_OUTSIDE)
    return _save(fig, path)


def accuracy_by_decile(
    df: pd.DataFrame, lap: str, llm: str = "mu_hat", outcome: str = "outcome", n_bins: int = 10
) -> pd.DataFrame:
    """Directional accuracy (sign of forecast == sign of outcome, non-zero forecasts) by LAP decile."""
    d = df[[lap, llm, outcome]].apply(pd.to_numeric, errors="coerce").dropna()
    d = d[(d[llm] != 0) & (d[outcome] != 0)]
    if len(d) < n_bins:
        return pd.DataFrame(columns=["decile", "lap_mean", "accuracy", "n"])
    d = d.assign(decile=pd.qcut(d[lap].rank(method="first"), n_bins, labels=False) + 1)
    d = d.assign(hit=(np.sign(d[llm]) == np.sign(d[outcome])).astype(float))
    g = d.groupby("decile")
    return pd.DataFrame(
        {
            "decile": g.size().index,
            "lap_mean": g[lap].mean().to_numpy(),
            "accuracy": g["hit"].mean().to_numpy(),
            "n": g.size().to_numpy(),
        }
    )


def accuracy_figure(
    pre: pd.DataFrame,
    post: pd.DataFrame,
    lap: str,
    path: str | os.PathLike[str],
    llm: str = "mu_hat",
    outcome: str = "outcome",
    label: str = "LAP",
) -> Path:
    """Accuracy by LAP decile (DECILE_RULE), pre (red circles) vs post (blue triangles);
    `label` names the measure in the title and the axis, so the figure reads apart from
    another accuracy figure drawn on another measure."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for df, name, color, marker in ((pre, "pre-cutoff", "tab:red", "o"), (post, "post-cutoff", "tab:blue", "^")):
        acc = accuracy_by_decile(df, lap, llm, outcome)
        if len(acc):
            ax.plot(acc["decile"], acc["accuracy"], marker=marker, color=color, label=name)
    ax.axhline(0.5, color="0.5", linestyle="--", linewidth=1)
    ax.set_xlabel(f"{label} decile ({DECILE_RULE})")
    ax.set_ylabel("directional accuracy")
    ax.set_xticks(range(1, 11))
    ax.set_title(f"Forecast accuracy by {label} decile")
    ax.legend(frameon=False, **LEGEND_OUTSIDE)
    return _save(fig, path)
