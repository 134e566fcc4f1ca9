"""The claim-level demo's headline: measured figures against the planted truth.

    lookahead claims check --demo demo/claims \
        --db leaky=outputs/demo_claims_leaky.duckdb --db prudent=outputs/demo_claims_prudent.duckdb
    lookahead claims check --demo demo/claims/regression \
        --db leaky=outputs/demo_claims_regression_leaky.duckdb --db prudent=...

Prints, per demo model, the task kind, whether every OLR equals the planted truth, the
mean Shapley-DCLR next to the ideal rule model's, the efficiency check (relative to the
value scale, as the dbt test), the task metric and TimeSPEC's figures; exits 1 when OLR
differs from the truth, an efficiency gap exceeds 1e-9 or the DCLR ordering fails."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from lookahead.claims.demo import AGENT


def model_figures(db: Path, truth: pd.DataFrame, model: str) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        inst = con.sql("select * from instance_leakage").df()
        tables = "select count(*) from information_schema.tables where table_name = 'claims_repredict'"
        has_rp = con.execute(tables).fetchall()[0][0]
        rp = (
            con.sql("select * from claims_repredict").df()
            if has_rp
            else pd.DataFrame(columns=["agent", "repred_error", "repred_metric_name"])
        )
    finally:
        con.close()
    rp = rp[rp["agent"] == AGENT]
    planted = inst[(inst["agent"] == AGENT) & (inst["status"] == "ok")].set_index("instance_id")
    t = truth.loc[planted.index]
    olr_exact = int((planted["olr"].astype(float) == t["expected_olr"].astype(float)).sum())
    ideal = pd.to_numeric(t[f"ideal_dclr_{model}"], errors="coerce")
    ts = inst[inst["agent"] == "timespec"]
    scale = np.maximum(
        1.0,
        np.maximum(pd.to_numeric(inst["v_all"], errors="coerce").abs(), pd.to_numeric(inst["v_empty"], errors="coerce").abs()),
    )
    return {
        "kind": str(inst["task_kind"].iloc[0]) if "task_kind" in inst and len(inst) else "classification",
        "metric_name": str(planted["task_metric_name"].iloc[0]) if len(planted) else "",
        "metric": float(pd.to_numeric(inst.loc[inst["agent"] == AGENT, "task_metric"], errors="coerce").mean()),
        "rel_gap": float((pd.to_numeric(inst["efficiency_gap"], errors="coerce").abs() / scale).max()),
        "repred_name": str(rp["repred_metric_name"].iloc[0]) if len(rp) else "re-prediction error",
        "repred": float(pd.to_numeric(rp["repred_error"], errors="coerce").mean()) if len(rp) else float("nan"),
        "n_repred": len(rp),
        "n": len(planted),
        "olr_exact": olr_exact,
        "dclr": float(pd.to_numeric(planted["shapley_dclr"], errors="coerce").mean()),
        "dclr_ideal": float(ideal.mean()),
        "gap": float(pd.to_numeric(inst["efficiency_gap"], errors="coerce").abs().max()),
        "ts_n": int((ts["status"] == "ok").sum()),
        "ts_olr": float(pd.to_numeric(ts["olr"], errors="coerce").mean()) if len(ts) else float("nan"),
        "ts_dclr": float(pd.to_numeric(ts["shapley_dclr"], errors="coerce").mean()) if len(ts) else float("nan"),
    }


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default="demo/claims")
    ap.add_argument("--db", action="append", required=True, help="model=path of its DuckDB file")
    a = ap.parse_args(argv)
    truth = pd.read_csv(Path(a.demo) / "truth_instances.csv").set_index("instance_id")
    figs = {}
    for spec in a.db:
        model, path = spec.split("=", 1)
        if not Path(path).exists():
            print(
                f"error: database {path} of model '{model}' not found: build the claim models first (make demo-claims)",
                file=sys.stderr,
            )
            return 2
        try:
            figs[model] = model_figures(Path(path), truth, model)
        except duckdb.Error as exc:  # e.g. a build still holds the file's write lock
            print(f"error: database {path} of model '{model}' cannot be read: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
    ok = True
    kind = next(iter(figs.values()))["kind"]
    print(f"== Claim-level demo, {kind} (planted claims; docs/claims.md) ==")
    for model, f in figs.items():
        print(
            f"{model:8s}: OLR = planted truth on {f['olr_exact']}/{f['n']} instances; "
            f"mean Shapley-DCLR {f['dclr']:.3f} (ideal rule model {f['dclr_ideal']:.3f}); "
            f"max |efficiency gap| {f['gap']:.1e} ({f['rel_gap']:.1e} of the value scale); "
            f"{f['metric_name']} {f['metric']:.3f}; re-prediction {f['repred_name']} {f['repred']:.3f} "
            f"({f['n_repred']} instances); TimeSPEC: {f['ts_n']} instances, "
            f"OLR {f['ts_olr']:.3f}, Shapley-DCLR {f['ts_dclr']:.3f}"
        )
        ok &= f["olr_exact"] == f["n"] and f["rel_gap"] < 1e-9
    if "leaky" in figs and "prudent" in figs:
        ok &= figs["leaky"]["dclr"] > figs["prudent"]["dclr"] + 0.2
    print(
        "expected: OLR exact; Shapley-DCLR high for leaky, near 0 for prudent; TimeSPEC OLR 0 -> "
        + ("as expected" if ok else "NOT as expected")
    )
    return 0 if ok else 1
