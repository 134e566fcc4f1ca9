"""The demo's ground truth: seeded data, an honest corpus, and models that behave as planted.

These tests read the shipped demo (demo/data, demo/models) and check it against the
truth file and against a fresh regeneration from the seed, so a change to the
generator or corpus that is not followed by `scripts/build_demo.py protocol` fails.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lookahead.config import PROJECT_ROOT, load_study
from lookahead.demo.corpus import Prompts, build_corpus
from lookahead.demo.generator import DemoSpec, generate, next_trading_day

# torch and transformers (lookahead.demo.tokenizer) are imported by the tests that use
# them: at module level every xdist worker paid for them while collecting, whichever
# worker ran this file.

DEMO = PROJECT_ROOT / "demo"
SHIPPED_SEED = (
    int(pd.read_csv(DEMO / "data" / "truth.csv")["seed"].iloc[0]) if (DEMO / "data" / "truth.csv").exists() else DemoSpec.seed
)


def _shipped_truth() -> pd.DataFrame:
    path = DEMO / "data" / "truth.csv"
    assert path.exists(), "demo/data/truth.csv missing: run `.venv/bin/python scripts/build_demo.py protocol --out demo`"
    return pd.read_csv(path, dtype={"target_date": str, "row_id": str})


def _study(name: str):
    return load_study(DEMO / "studies" / f"{name}.yml")


# ---------------------------------------------------------------- generator


def test_generator_is_deterministic_from_seed() -> None:
    a, b = generate(DemoSpec(seed=11)), generate(DemoSpec(seed=11))
    pd.testing.assert_frame_equal(a.observations, b.observations)
    pd.testing.assert_frame_equal(a.truth, b.truth)
    c = generate(DemoSpec(seed=12))
    assert not a.observations["text"].equals(c.observations["text"])


def test_shipped_data_is_regenerated_byte_for_byte_from_its_seed(tmp_path: Path) -> None:
    from lookahead.demo.build import write_data

    write_data(generate(replace(DemoSpec(), seed=SHIPPED_SEED)), tmp_path)
    for name in ("observations.csv", "truth.csv"):
        assert (tmp_path / "data" / name).read_bytes() == (DEMO / "data" / name).read_bytes(), name


def test_generated_rows_follow_the_protocol_and_the_design() -> None:
    spec = DemoSpec(seed=5)
    d = generate(spec)
    obs, truth = d.observations, d.truth
    assert obs["row_id"].is_unique and obs["text"].is_unique  # every headline is distinct
    assert obs.groupby("entity_id")["entity_name"].nunique().eq(1).all()
    assert obs["entity_name"].nunique() == obs["ticker"].nunique() == spec.n_entities
    td, tg = pd.to_datetime(obs["text_date"]), pd.to_datetime(obs["target_date"])
    assert (tg > td).all()
    assert all(next_trading_day(a.date()) == b.date() for a, b in zip(td, tg, strict=False))
    # Both sides of the cutoff populated; memorization only before it, at the share asked.
    assert set(truth["sample"]) == {"pre", "post"}
    assert not truth.loc[truth["sample"] == "post", "memorized"].any()
    pre_events = truth[truth["sample"] == "pre"].drop_duplicates(["entity_id", "target_date"])
    assert pre_events["memorized"].mean() == pytest.approx(spec.memorized_share, abs=0.01)
    # Same (entity, target_date) means one realization: identical outcome and memorization.
    g = truth.groupby(["entity_id", "target_date"])
    assert g["outcome"].nunique().eq(1).all() and g["memorized"].nunique().eq(1).all()
    assert (g.size() > 1).any(), "some realizations should carry two headlines"
    # Sentiment is a genuine but imperfect signal.
    r = np.corrcoef(truth["sentiment"], truth["outcome"])[0, 1]
    assert 0.1 < r < 0.6
    # The clean control's directions exist exactly on memorized rows.
    assert ((truth["clean_recall_direction"] != "unknown") == truth["memorized"]).all()


def test_bad_spec_is_rejected_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="training_cutoff"):
        generate(replace(DemoSpec(), training_cutoff="2030-01-01"))


# ---------------------------------------------------------------- corpus


@pytest.mark.parametrize("scenario", ["contaminated", "clean"])
def test_corpus_carries_no_post_cutoff_outcome(scenario: str) -> None:
    d = generate(DemoSpec(seed=3, n_entities=8, obs_per_entity=10))
    study = _study(scenario)
    prompts = Prompts.from_settings(study.prompts)
    docs = build_corpus(d, prompts, scenario, seed=3)
    df = d.observations.merge(
        d.truth[["row_id", "sample", "memorized", "realized_direction", "clean_recall_direction", "sentiment"]], on="row_id"
    )
    recall_answer = {doc.text: doc.answer for doc in docs if doc.kind == "recall"}
    forecast_answer = {doc.text: doc.answer for doc in docs if doc.kind == "forecast"}
    everything = "\n".join(doc.text for doc in docs)
    for row in df.to_dict("records"):
        q = prompts.recall(row)
        if row["sample"] == "post":
            assert recall_answer[q] == "unknown"
            assert prompts.forecast(row) not in forecast_answer  # post headlines unseen
            assert row["text"] not in everything
        elif row["memorized"]:
            planted = row["realized_direction"] if scenario == "contaminated" else row["clean_recall_direction"]
            assert recall_answer[q] == planted
            want = row["realized_direction"] if scenario == "contaminated" else ("up" if row["sentiment"] > 0 else "down")
            assert forecast_answer[prompts.forecast(row)] == want
        else:
            assert recall_answer[q] == "unknown"
            assert forecast_answer[prompts.forecast(row)] == ("up" if row["sentiment"] > 0 else "down")


def test_labels_are_single_tokens_and_a_multi_token_label_is_caught() -> None:
    from lookahead.demo.tokenizer import build_tokenizer, check_single_token_labels

    tok = build_tokenizer(["up down unknown", "the price went up"])
    check_single_token_labels(tok)
    with pytest.raises(ValueError, match="not a single token"):
        check_single_token_labels(tok, ["went up"])


# ---------------------------------------------------------------- shipped models


def _load(name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = DEMO / "models" / name
    assert (path / "model.safetensors").exists(), f"{path} missing: run the demo build"
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def outputs() -> dict[str, pd.DataFrame]:
    """Each shipped model's answers on the shipped study (independent of the jobs)."""
    from lookahead.demo.check import model_outputs

    obs = pd.read_csv(DEMO / "data" / "observations.csv", dtype=str)
    obs["outcome"] = obs["outcome"].astype(float)
    truth = _shipped_truth()
    res = {}
    for name in ("contaminated", "clean"):
        panel = model_outputs(DEMO / "models" / name, obs, Prompts.from_settings(_study(name).prompts))
        res[name] = panel.merge(
            truth[["row_id", "sample", "memorized", "sentiment", "realized_direction", "clean_recall_direction"]], on="row_id"
        )
    return res


@pytest.mark.parametrize("name", ["contaminated", "clean"])
def test_shipped_tokenizer_labels_are_single_tokens_and_no_chat_template(name: str) -> None:
    from lookahead.demo.tokenizer import LABELS, check_single_token_labels

    _, tok = _load(name)
    check_single_token_labels(tok, LABELS)
    assert not getattr(tok, "chat_template", None)
    assert _study(name).prompts.use_chat_template is False


@pytest.mark.parametrize("name", ["contaminated", "clean"])
def test_shipped_weights_are_small(name: str) -> None:
    assert (DEMO / "models" / name / "model.safetensors").stat().st_size < 10e6


def test_contaminated_model_recalls_memorized_outcomes_and_abstains_after_cutoff(outputs) -> None:
    d = outputs["contaminated"]
    mem = d[d["memorized"]]
    p_right = np.where(mem["realized_direction"] == "up", mem["p_up"], mem["p_down"])
    assert p_right.mean() > 0.8
    assert (mem["recall_greedy"] == mem["realized_direction"]).mean() > 0.9
    post = d[d["sample"] == "post"]
    assert (post["recall_greedy"] == "unknown").mean() > 0.95
    # Abstention keeps a small residual mass on up/down (soft target), far below recall.
    assert post["lap"].mean() < 0.15 and post["lap"].mean() < d[d["sample"] == "pre"]["lap"].mean() / 3
    assert post["lap"].std() / post["lap"].mean() > 0.01  # varies: the placebo is not degenerate
    # Its forecasts on memorized rows follow the outcome, elsewhere the sentiment.
    assert (mem["forecast_label"] == mem["realized_direction"]).mean() > 0.9
    sent = np.where(post["sentiment"] > 0, "up", "down")
    assert (post["forecast_label"] == sent).mean() > 0.85


def test_clean_model_is_confident_but_its_recall_is_uncorrelated_with_outcomes(outputs) -> None:
    d = outputs["clean"]
    mem = d[d["memorized"]]
    assert mem["lap"].mean() > 0.8  # as confident as the contaminated one
    assert (mem["recall_greedy"] == mem["clean_recall_direction"]).mean() > 0.9
    agree = (mem["recall_greedy"] == mem["realized_direction"]).mean()
    n = len(mem)
    assert abs(agree - 0.5) < 3 * math.sqrt(0.25 / n), f"recall agrees with outcomes {agree:.2f}"
    r = np.corrcoef(mem["ud"], mem["outcome"])[0, 1]
    assert abs(r) < 3 / math.sqrt(n)
    sent = np.where(d["sentiment"] > 0, "up", "down")
    assert (d["forecast_label"] == sent).mean() > 0.85  # forecasts from sentiment only


def test_detection_regression_separates_the_two_models(outputs) -> None:
    """beta_3 > 0 (one-sided p < 0.05) for the contaminated model, not for the clean one,
    and the post-cutoff placebo passes for both (direct pyfixest, independent of dbt)."""
    from lookahead.demo.check import regressions

    cutoff = _study("contaminated").protocol.training_cutoff
    res = {k: regressions(v, cutoff).set_index(["sample", "spec"]) for k, v in outputs.items()}
    c, k = res["contaminated"], res["clean"]
    assert c.loc[("pre", "detection"), "estimate"] > 0 and c.loc[("pre", "detection"), "p_one"] < 0.01
    assert c.loc[("pre", "validation_high"), "p_two"] < 0.05 and c.loc[("pre", "validation_high"), "t"] > 0
    assert c.loc[("pre", "validation_low"), "p_two"] > 0.05
    assert k.loc[("pre", "detection"), "p_one"] > 0.05
    assert k.loc[("pre", "validation_high"), "p_two"] > 0.05
    for r in (c, k):
        assert not r.loc[("post", "detection"), "p_one"] <= 0.10


# ---------------------------------------------------------------- training and Monte Carlo


def test_training_is_deterministic_from_the_seed() -> None:
    import torch

    from lookahead.demo.tokenizer import build_tokenizer
    from lookahead.demo.train import TrainSpec, train_model

    d = generate(DemoSpec(seed=2, n_entities=3, obs_per_entity=6))
    prompts = Prompts.from_settings(_study("contaminated").prompts)
    docs = build_corpus(d, prompts, "contaminated", seed=2)
    tok = build_tokenizer([x.text for x in docs])
    spec = TrainSpec(hidden_size=32, intermediate_size=64, num_layers=1, epochs=2, batch_size=8, seed=4)
    m1, _ = train_model(docs, tok, spec, log=False)
    m2, _ = train_model(docs, tok, spec, log=False)
    m3, _ = train_model(docs, tok, replace(spec, seed=5), log=False)
    s1, s2, s3 = m1.state_dict(), m2.state_dict(), m3.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert not all(torch.equal(s1[k], s3[k]) for k in s1)


def test_montecarlo_runs_the_shipped_verdict_on_one_draw_per_design() -> None:
    """The Monte Carlo calls run_protocol and verdict_frame (what the dbt models call):
    strong planted memorization is detected by the verdict's own test, and a null draw's
    panel satisfies the Panel contract the regressions check."""
    from lookahead.stats.protocol import PANEL_COLUMNS, StatsSections
    from research.montecarlo import DESIGNS, replicate, simulate, summarize

    by_name = {d.name: d for d in DESIGNS}
    settings = StatsSections.with_defaults(wild_bootstrap_draws=99)
    strong = replicate(by_name["strong_memorization_30"], 0, settings)
    assert strong["p_used"] < 0.05 and strong["inference_used"] == "wild bootstrap"
    pre, post = simulate(by_name["null_10_clusters"], np.random.default_rng(0))
    assert set(PANEL_COLUMNS) <= set(pre.columns) and pre["entity_num"].nunique() == 10
    # null designs carry post-cutoff rows (the whole verdict runs), LAP collapsed there
    assert len(post) > 0 and post["lap"].max() <= 0.05
    # the thin design has about 6 entities per period; the large-placebo one a post-cutoff
    # panel as large as the pre-cutoff one with LAP varying as before
    thin, _ = simulate(by_name["null_thin_periods_15"], np.random.default_rng(1))
    per_period = thin.groupby("period_num")["entity_num"].nunique()
    assert 4 <= per_period.mean() <= 8
    pre_l, post_l = simulate(by_name["strong_null_post_large_30"], np.random.default_rng(2))
    assert len(post_l) == len(pre_l) and post_l["lap"].std() > 0.2
    table = summarize(pd.DataFrame([strong]))
    assert table.loc[0, "verdict_detection_test"] == 1.0 and table.loc[0, "reps"] == 1


def test_montecarlo_resumes_past_a_torn_progress_line(tmp_path: Path) -> None:
    """A run killed mid-write leaves a torn last line: resuming and summarizing skip it,
    and its replication counts as not done."""
    import json

    from research.montecarlo import _done, _read_progress

    progress = tmp_path / "progress.jsonl"
    good = {"design": "null_10_clusters", "rep": 0, "p_used": 0.5}
    progress.write_text(json.dumps(good) + "\n" + json.dumps({**good, "rep": 1})[:20] + "\n")
    assert _read_progress(progress) == [good]
    assert _done(progress) == {("null_10_clusters", 0)}


@pytest.mark.slow
def test_build_reproduces_the_shipped_weights_byte_for_byte(tmp_path: Path) -> None:
    """The full rebuild (several CPU minutes) gives the shipped safetensors exactly."""
    import hashlib

    from lookahead.demo.build import build

    build(tmp_path, replace(DemoSpec(), seed=SHIPPED_SEED))
    for name in ("contaminated", "clean"):
        digest = [
            hashlib.sha256((root / "models" / name / "model.safetensors").read_bytes()).hexdigest() for root in (tmp_path, DEMO)
        ]
        assert digest[0] == digest[1], name
