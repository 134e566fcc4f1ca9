"""The claim-level section of REPORT.md: the summary per agent and task, the headline
figures and a figure of Shapley value per claim (leaked claims marked).

Called by ``lookahead report`` with a read-only connection; empty when the claim models
were not built or hold no instances (no predictions input configured)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd

os.environ.setdefault("MPLCONFIGDIR", "/tmp/mpl")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURE = "figures/claims_shapley.png"
MAX_INSTANCES = 6
COLORS = {"leaked": "#c0392b", "not_leaked": "#2e86c1", "unverifiable": "#999999"}


def _exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    q = "select count(*) from information_schema.tables where table_name = ?"
    return bool(con.execute(q, [name]).fetchone()[0])


def _f(x: object) -> str:
    return "" if x is None or (isinstance(x, float) and pd.isna(x)) or x is pd.NA else f"{float(x):.3f}"


def shapley_figure(claims: pd.DataFrame, inst: pd.DataFrame, path: Path) -> Path:
    """One panel per instance (the most leakage-weighted first): a bar per claim, its
    Shapley value; red = leaked, blue = not leaked, grey = unverifiable; leaked bars
    hatched too, so the marking survives grey-scale printing."""
    scored = inst[inst["status"] == "ok"].copy()
    scored["order"] = pd.to_numeric(scored["shapley_dclr"], errors="coerce").fillna(-1)
    pick = scored.sort_values(["order", "instance_id"], ascending=[False, True]).head(MAX_INSTANCES)
    n = max(1, len(pick))
    fig, axes = plt.subplots(n, 1, figsize=(8, 1.7 * n + 0.6), squeeze=False)
    for ax, r in zip(axes[:, 0], pick.itertuples()):
        c = claims[(claims["instance_id"] == r.instance_id) & (claims["agent"] == r.agent)].sort_values("claim_id")
        vals = pd.to_numeric(c["shapley"], errors="coerce").fillna(0.0).to_numpy()
        states = c["leakage_state"].astype(str).tolist()
        bars = ax.bar(range(len(vals)), vals, color=[COLORS.get(s, "#999999") for s in states])
        for b, s in zip(bars, states):
            if s == "leaked":
                b.set_hatch("//")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels([f"{i}\n{cat}" for i, cat in zip(c["claim_id"], c["category"])], fontsize=7)
        ax.set_ylabel("Shapley", fontsize=8)
        ax.set_title(f"{r.instance_id} ({r.agent}): Shapley-DCLR {_f(r.shapley_dclr)}, OLR {_f(r.olr)}", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k], hatch="//" if k == "leaked" else None) for k in COLORS]
    fig.legend(handles, list(COLORS), loc="upper right", fontsize=8, ncol=3)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)
    return path


def claims_section(con: duckdb.DuckDBPyConnection, results_dir: Path) -> str:
    if not (_exists(con, "instance_leakage") and _exists(con, "claims")):
        return ""
    inst = con.sql("select * from instance_leakage").df()
    if inst.empty:
        return ""
    claims = con.sql("select * from claims").df()
    summ = con.sql("select * from claims_summary order by agent, task").df()
    md = ["", "## Claim-level leakage (OLR, Shapley-DCLR, TimeSPEC)", "",
          "Rationales split into atomic claims, each dated against the corpus and weighted by its Shapley "
          "value for the task kind's v(S) (seed 002 Eq. 11; docs/claims.md). Unverifiable claims counted as not leaked; "
          "the `_unverifiable_leaked` columns of `instance_leakage` count them as leaked. "
          "Tables: `claims`, `instance_leakage`, `claims_summary`, `claims_rejects`.", "",
          "| agent | task | instances | scored | claims | OLR | OLR (unverif. leaked) | Shapley-DCLR | "
          "DCLR (unverif. leaked) | top-1 | top-3 | task metric | accuracy |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summ.itertuples():
        md.append(f"| {r.agent} | {r.task} | {r.n_instances} | {r.n_scored} | {r.n_claims} | {_f(r.olr)} | "
                  f"{_f(r.olr_unverifiable_leaked)} | {_f(r.shapley_dclr)} | {_f(r.shapley_dclr_unverifiable_leaked)} | "
                  f"{_f(r.top1_leakage)} | {_f(r.top3_leakage)} | {r.task_metric_name} {_f(r.task_metric)} | "
                  f"{_f(r.accuracy)} |")
    status = inst["status"].value_counts().to_dict()
    md += ["", "Instance status: " + ", ".join(f"{k}: {v}" for k, v in sorted(status.items())) + ".", ""]
    gap = pd.to_numeric(inst["efficiency_gap"], errors="coerce").abs().max()
    if pd.notna(gap):
        md += [f"Efficiency check: max |sum of Shapley values - (v_all - v_empty)| = {gap:.2e}.", ""]
    if (inst["status"] == "ok").any():
        shapley_figure(claims, inst, Path(results_dir) / FIGURE)
        md += [f"![Shapley value per claim, leaked claims red and hatched]({FIGURE})", ""]
    if _exists(con, "claims_repredict"):
        md += repredict_lines(con.sql("select * from claims_repredict order by agent, instance_id").df(), summ)
    return "\n".join(md)


def repredict_lines(rp: pd.DataFrame, summ: pd.DataFrame) -> list[str]:
    """The re-prediction check (seed 002 Table 5): per agent, then per instance."""
    if rp.empty:
        return []
    name = str(rp["repred_metric_name"].iloc[0])
    md = ["### Re-prediction check (does the prediction follow from its rationale?)", "",
          f"The claim model predicts again from the task input and the rationale cleaned of its explicit "
          f"prediction (docs/claims.md). Error: {name} (seed 002 Table 5; 0 = the same prediction).", "",
          "| agent | task | re-predicted | mean error |", "|---|---|---|---|"]
    for r in summ.itertuples():
        md.append(f"| {r.agent} | {r.task} | {r.n_repredicted} | {_f(r.repred_error)} |")
    md += ["", "| instance | agent | prediction | re-prediction | error |", "|---|---|---|---|---|"]
    for r in rp.itertuples():
        md.append(f"| {r.instance_id} | {r.agent} | {r.prediction} | {r.repredicted} | {_f(r.repred_error)} |")
    return md + [""]
