"""Size and power of the detection test over fresh draws of the demo scenarios.

Retraining a language model per draw costs minutes of CPU each, so this Monte Carlo
simulates the LLM's outputs at the signal level, with the behaviour the training
corpus plants (and the shipped models show, see ``lookahead.demo.check``):
  * contaminated, memorized realization: forecast = realized direction; recall answers
    the realized direction with probability ~U(conf_lo, conf_hi), the other direction
    gets a small share;
  * clean control, same realizations: equally confident recall of a coin-flip
    direction drawn independently of the outcome; forecast = headline sentiment;
  * every other row: forecast = headline sentiment (flipped with ``forecast_error``, the
    model's imperfect generalization); recall answers "unknown" and leaves up/down a
    small, noisy mass (log-normal around ``abstain_lap``, as the soft abstention target
    of ``train`` produces), except a few pre-cutoff ``misfire`` answers that state a
    random direction with some confidence (the shipped contaminated model has ~1%).
Each draw is a fresh ``generate(DemoSpec(seed=...))`` with its own entities, headlines,
outcomes and memorized subset. The regressions are the protocol's: pyfixest with
entity and month fixed effects, standard errors clustered by entity; the detection
test is one-sided for beta_3 > 0 at 5%, the placebo passes when the post-cutoff
one-sided p exceeds 0.10, and the validation pattern is a significant positive
high-LAP theta (two-sided 5%) with an insignificant low-LAP theta.

Run: ``python -m lookahead.demo.montecarlo --draws 200``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from lookahead.demo.generator import DemoSpec, generate


@dataclass(frozen=True)
class SignalModel:
    """How the simulated LLM answers (defaults roughly match the shipped demo models)."""

    conf_lo: float = 0.95         # P(recalled direction) on memorized realizations ~ U(lo, hi)
    conf_hi: float = 1.00
    wrong_share: float = 0.005    # of that mass, given to the other direction
    abstain_lap: float = 0.08     # median P(up)+P(down) when the model abstains
    abstain_sd: float = 0.15      # log-sd of that mass
    misfire: float = 0.015        # share of abstentions answered with a confident random direction
    forecast_error: float = 0.03  # share of sentiment forecasts that come out flipped


def simulate_outputs(spec: DemoSpec, scenario: str, sm: SignalModel, rng: np.random.Generator) -> pd.DataFrame:
    """One draw of the panel with simulated mu_hat, p_up, p_down, lap, ud."""
    data = generate(spec)
    df = data.observations.merge(data.truth[["row_id", "sample", "sentiment", "memorized",
                                             "clean_recall_direction"]], on="row_id")
    n = len(df)
    sent = df["sentiment"].to_numpy(float)
    flip = rng.random(n) < sm.forecast_error
    mu = np.where(flip, -sent, sent)
    realized = np.where(df["outcome"].to_numpy() > 0, 1.0, -1.0)
    mem = df["memorized"].to_numpy(bool)

    # Recall is per (entity, target_date): draw once per realization, merge back.
    ev = df.drop_duplicates(["entity_id", "target_date"])[
        ["entity_id", "target_date", "memorized", "clean_recall_direction", "outcome"]].copy()
    m = len(ev)
    lap = np.exp(np.log(sm.abstain_lap) + sm.abstain_sd * rng.normal(size=m))
    share_up = rng.uniform(0.3, 0.7, m)
    p_up, p_down = lap * share_up, lap * (1 - share_up)
    evm = ev["memorized"].to_numpy(bool)
    pre_ev = (ev["target_date"] <= spec.training_cutoff).to_numpy()
    misfire = pre_ev & ~evm & (rng.random(m) < sm.misfire)
    mis_conf, mis_up = rng.uniform(0.3, 0.9, m), rng.random(m) < 0.5
    p_up = np.where(misfire, np.where(mis_up, mis_conf, 0.01), p_up)
    p_down = np.where(misfire, np.where(mis_up, 0.01, mis_conf), p_down)
    conf = rng.uniform(sm.conf_lo, sm.conf_hi, m)
    if scenario == "contaminated":
        direction = np.where(ev["outcome"].to_numpy() > 0, 1.0, -1.0)
    else:
        direction = np.where(ev["clean_recall_direction"].to_numpy() == "up", 1.0, -1.0)
    right, wrong = conf * (1 - sm.wrong_share), conf * sm.wrong_share
    p_up = np.where(evm, np.where(direction > 0, right, wrong), p_up)
    p_down = np.where(evm, np.where(direction > 0, wrong, right), p_down)
    ev["p_up"], ev["p_down"] = p_up, p_down
    df = df.merge(ev[["entity_id", "target_date", "p_up", "p_down"]], on=["entity_id", "target_date"],
                  validate="many_to_one")
    df["lap"] = df["p_up"] + df["p_down"]
    df["ud"] = df["p_up"] - df["p_down"]
    if scenario == "contaminated":
        mu = np.where(mem, realized, mu)
    df["mu_hat"] = mu
    df["period"] = df["target_date"].str[:7]
    return df


def _fit(d: pd.DataFrame, fml: str, term: str) -> tuple[float, float, float]:
    import pyfixest as pf

    fit = pf.feols(fml, data=d, vcov={"CRV1": "entity_id"})
    row = fit.tidy().loc[term]
    t, p = float(row["t value"]), float(row["Pr(>|t|)"])
    return float(row["Estimate"]), t, p


def one_sided(t: float, p: float) -> float:
    """p for H1: coefficient > 0, from pyfixest's two-sided p."""
    return p / 2 if t > 0 else 1 - p / 2


def evaluate_draw(df: pd.DataFrame) -> dict:
    """Protocol steps 3-5 on one simulated panel; returns the test outcomes."""
    out: dict = {}
    pre, post = df[df["sample"] == "pre"].copy(), df[df["sample"] == "post"].copy()
    fe = "entity_id + period"
    _, t, p = _fit(pre, f"outcome ~ mu_hat * lap | {fe}", "mu_hat:lap")
    out["detect_p"] = one_sided(t, p)
    pre["high"] = pre["lap"] > pre["lap"].median()
    _, th, ph = _fit(pre[pre["high"]], f"outcome ~ ud | {fe}", "ud")
    _, tl, pl = _fit(pre[~pre["high"]], f"outcome ~ ud | {fe}", "ud")
    out["validation_pattern"] = bool(th > 0 and ph < 0.05 and pl >= 0.05)
    _, tp, pp = _fit(post, f"outcome ~ mu_hat * lap | {fe}", "mu_hat:lap")
    out["placebo_p"] = one_sided(tp, pp)
    out["lap_sd_pre"] = float(pre["lap"].std())
    return out


def run(draws: int, base_seed: int = 1000, spec: DemoSpec = DemoSpec(),
        sm: SignalModel = SignalModel()) -> pd.DataFrame:
    """All draws of both scenarios; one row per (draw, scenario)."""
    rows = []
    for r in range(draws):
        seed = base_seed + r
        for scenario in ("contaminated", "clean"):
            rng = np.random.default_rng([seed, 0 if scenario == "contaminated" else 1])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = evaluate_draw(simulate_outputs(replace(spec, seed=seed), scenario, sm, rng))
            rows.append({"draw": r, "seed": seed, "scenario": scenario, **res})
    return pd.DataFrame(rows)


def summarize(res: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Rejection rates per scenario: detection at alpha, validation pattern, placebo pass,
    and the protocol's full 'contamination detected' verdict."""
    res = res.assign(
        reject=res["detect_p"] < alpha,
        placebo_pass=res["placebo_p"] > 0.10,
    )
    res["verdict_detected"] = res["reject"] & res["validation_pattern"] & res["placebo_pass"]
    return (res.groupby("scenario")[["reject", "validation_pattern", "placebo_pass", "verdict_detected"]]
            .mean().rename(columns={"reject": f"detect_reject_rate_{alpha:g}"})
            .assign(draws=res.groupby("scenario").size()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Monte Carlo size/power of the lookahead-bias test on demo draws")
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--base-seed", type=int, default=1000)
    ap.add_argument("--csv", help="write per-draw results here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = run(args.draws, args.base_seed)
    if args.csv:
        res.to_csv(args.csv, index=False)
    print("Signal-level simulation of the LLM outputs (no retraining per draw); "
          "pyfixest, entity + month FE, clustered by entity.")
    print(summarize(res).round(3).to_string())
    print(f"{args.draws} draws x 2 scenarios in {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
