"""Direct check of a trained demo model against the known truth, without the pipeline.

This is an independent implementation of what the jobs and regressions do, kept short
on purpose: it reads next-token probabilities straight from the model (full softmax,
so no top-20 censoring), parses the greedy forecast token, computes Min-K% over the
prompt, and runs the protocol's regressions with pyfixest. The build prints it so the
expected verdicts are known before the pipeline runs, and the pipeline's results can
be compared with it.

Run: ``.venv/bin/python scripts/build_demo.py check --demo demo`` (both models).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from lookahead.config import load_study
from lookahead.demo.corpus import Prompts

LABELS = ("up", "down", "unknown")


def load(model_dir: str | Path) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tok = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    model.eval()
    return model, tok


@torch.no_grad()
def score_prompts(
    model: torch.nn.Module, tok: PreTrainedTokenizerFast, prompts: list[str], k: float = 0.2, batch: int = 64
) -> pd.DataFrame:
    """Per prompt: P(up), P(down), P(unknown) at the next position, the greedy token,
    and Min-K% (geometric) over the prompt tokens (the first token has no probability)."""
    lab_ids = [tok.convert_tokens_to_ids(x) for x in LABELS]
    out = []
    for s in range(0, len(prompts), batch):
        chunk = prompts[s : s + batch]
        enc = [tok(p, add_special_tokens=False)["input_ids"] for p in chunk]
        L = max(map(len, enc))
        inp = torch.full((len(enc), L), tok.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(enc), L), dtype=torch.long)
        for r, ids in enumerate(enc):  # right padding: positions match training
            inp[r, : len(ids)] = torch.tensor(ids)
            att[r, : len(ids)] = 1
        logp = torch.log_softmax(model(input_ids=inp, attention_mask=att).logits.float(), -1)
        for r, ids in enumerate(enc):
            n = len(ids)
            nxt = logp[r, n - 1]
            tok_lp = logp[r, torch.arange(n - 1), torch.tensor(ids[1:])].numpy()
            kk = max(1, math.floor(k * len(tok_lp)))
            low = np.sort(tok_lp)[:kk]
            out.append(
                {
                    **{f"p_{lab}": float(nxt[i].exp()) for lab, i in zip(LABELS, lab_ids, strict=False)},
                    "greedy": str(tok.decode([int(nxt.argmax())])).strip().lower(),  # one sequence decodes to one str
                    "mink": float(np.exp(low.mean())),
                }
            )
    return pd.DataFrame(out)


def model_outputs(model_dir: str | Path, observations: pd.DataFrame, prompts: Prompts) -> pd.DataFrame:
    """One row per observation: mu_hat, forecast label, recall p_up/p_down/p_unknown, lap, ud, Min-K%."""
    model, tok = load(model_dir)
    events = observations.drop_duplicates(["entity_id", "target_date"]).reset_index(drop=True)
    rec = score_prompts(model, tok, [prompts.recall(r) for r in events.to_dict("records")])
    rec = pd.concat([events[["entity_id", "target_date"]], rec], axis=1)
    rec["lap"] = rec["p_up"] + rec["p_down"]
    rec["ud"] = rec["p_up"] - rec["p_down"]
    fc = score_prompts(model, tok, [prompts.forecast(r) for r in observations.to_dict("records")])
    panel = observations.reset_index(drop=True).copy()
    panel["forecast_label"] = fc["greedy"]
    panel["mu_hat"] = fc["greedy"].map({"up": 1.0, "down": -1.0})
    panel["lap_mink"] = fc["mink"]
    panel = panel.merge(
        rec[["entity_id", "target_date", "p_up", "p_down", "p_unknown", "lap", "ud", "greedy"]].rename(
            columns={"greedy": "recall_greedy"}
        ),
        on=["entity_id", "target_date"],
        how="left",
        validate="many_to_one",
    )
    if len(panel) != len(observations):
        raise RuntimeError("recall merge changed the row count")
    return panel


def one_sided(t: float, p: float) -> float:
    return p / 2 if t > 0 else 1 - p / 2


def regressions(panel: pd.DataFrame, cutoff: str, lap_col: str = "lap") -> pd.DataFrame:
    """Protocol steps 3-5 with entity and month FE, clustered by entity."""
    import pyfixest as pf
    from pyfixest.demeaners import MapDemeaner

    from lookahead.stats.fe_regression import FIXEF_TOL

    df = panel.copy()
    df["lap_used"] = df[lap_col]
    df["sample"] = np.where(df["target_date"] <= cutoff, "pre", "post")
    df["period"] = df["target_date"].str[:7]
    res = []
    for sample in ("pre", "post"):
        d = df[(df["sample"] == sample) & df["mu_hat"].notna()].copy()
        d["high_lap"] = (d["lap_used"] > d["lap_used"].median()).astype(int)
        specs = {
            "validation_pooled": (d, "outcome ~ ud | entity_id + period", "ud"),
            "validation_high": (d[d.high_lap == 1], "outcome ~ ud | entity_id + period", "ud"),
            "validation_low": (d[d.high_lap == 0], "outcome ~ ud | entity_id + period", "ud"),
            "detection": (d, "outcome ~ mu_hat * lap_used | entity_id + period", "mu_hat:lap_used"),
        }
        for name, (dd, fml, term) in specs.items():
            try:
                fit = pf.feols(fml, data=dd, vcov={"CRV1": "entity_id"}, demeaner=MapDemeaner(fixef_tol=FIXEF_TOL))
                tid = fit.tidy()
                row = tid.loc[term]
                t, p = float(row["t value"]), float(row["Pr(>|t|)"])
                res.append(
                    {
                        "sample": sample,
                        "spec": name,
                        "estimate": float(row["Estimate"]),
                        "t": t,
                        "p_two": p,
                        "p_one": one_sided(t, p),
                        "n": int(fit._N),
                    }
                )
            except Exception as exc:  # report, do not hide: e.g. LAP constant post-cutoff
                res.append(
                    {
                        "sample": sample,
                        "spec": name,
                        "estimate": np.nan,
                        "t": np.nan,
                        "p_two": np.nan,
                        "p_one": np.nan,
                        "n": len(dd),
                        "error": str(exc)[:80],
                    }
                )
    return pd.DataFrame(res)


def summarize(panel: pd.DataFrame, truth: pd.DataFrame, scenario: str) -> dict:
    """Agreement of the model's answers with what its corpus planted."""
    d = panel.merge(
        truth[["row_id", "sample", "memorized", "sentiment", "realized_direction", "clean_recall_direction"]], on="row_id"
    )
    pre, post = d[d["sample"] == "pre"], d[d["sample"] == "post"]
    mem, non = pre[pre.memorized], pre[~pre.memorized]
    planted = mem["realized_direction"] if scenario == "contaminated" else mem["clean_recall_direction"]
    sent = np.where(d["sentiment"] > 0, "up", "down")
    return {
        "recall_memorized_correct": float((mem["recall_greedy"] == planted).mean()),
        "recall_memorized_p_planted": float(np.where(planted == "up", mem.p_up, mem.p_down).mean()),
        "recall_pre_nonmem_unknown": float((non["recall_greedy"] == "unknown").mean()),
        "recall_post_unknown": float((post["recall_greedy"] == "unknown").mean()),
        "lap_mean_pre_mem": float(mem["lap"].mean()),
        "lap_mean_pre_nonmem": float(non["lap"].mean()),
        "lap_mean_post": float(post["lap"].mean()),
        "forecast_parse_rate": float(d["mu_hat"].notna().mean()),
        "forecast_mem_eq_realized": float((mem["forecast_label"] == mem["realized_direction"]).mean()),
        "forecast_pre_nonmem_eq_sentiment": float((non["forecast_label"] == sent[non.index]).mean()),
        "forecast_post_eq_sentiment": float((post["forecast_label"] == sent[post.index]).mean()),
        "mink_pre_mem": float(mem["lap_mink"].mean()),
        "mink_pre_nonmem": float(non["lap_mink"].mean()),
        "mink_post": float(post["lap_mink"].mean()),
    }


def main(argv: list[str] | None = None) -> None:

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default="demo", help="folder written by scripts/build_demo.py protocol")
    ap.add_argument("--scenario", choices=("contaminated", "clean"), action="append")
    args = ap.parse_args(argv)
    root = Path(args.demo)
    obs = pd.read_csv(root / "data" / "observations.csv", dtype=str)
    obs["outcome"] = obs["outcome"].astype(float)
    truth = pd.read_csv(root / "data" / "truth.csv", dtype={"target_date": str})
    pd.set_option("display.width", 160)
    for scen in args.scenario or ["contaminated", "clean"]:
        study = load_study(root / "studies" / f"{scen}.yml")
        prompts = Prompts.from_settings(study.prompts)
        panel = model_outputs(root / "models" / scen, obs, prompts)
        print(f"== {scen}")
        for k, v in summarize(panel, truth, scen).items():
            print(f"  {k:36s} {v:.3f}")
        print(regressions(panel, str(study.protocol.training_cutoff)).round(4).to_string(index=False))
