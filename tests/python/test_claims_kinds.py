"""The three task kinds (lookahead.claims.tasks) against independent code: Spearman and
Kendall distance from scipy, relative error and top-k by hand, Shapley values by
enumerating all n! orders, v(S) aggregated here from the stored answers; then the
coalition-value job for regression and ranking over a real HTTP server on 127.0.0.1
(the real `openai` client): malformed answers re-asked then recorded as failures, never
cached as values, and kill -9 then resume without asking again."""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from completion_server import serve_completions
from kill_job import kill_once_written
from scipy import stats

from lookahead.claims.tables import build
from lookahead.claims.tasks import KINDS, ClaimsDerived, PredictionError, kendall_distance, parse_number, parse_ranking, spearman
from lookahead.config import default_study_path, load_study, read_study_file
from lookahead.settings_sections import ClaimsSettings

ROOT = Path(__file__).resolve().parents[2]
KS = ClaimsDerived(ClaimsSettings.with_defaults(claims_labels=["up", "down"], claims_target_class="up"))


# ----------------------------------------------------------------------------- oracles


def _shapley_by_orders(n: int, v) -> np.ndarray:
    """Mean marginal contribution over all n! orders (Eq. 2 by definition)."""
    phi = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        s = frozenset()
        for i in order:
            phi[i] += v(s | {i}) - v(s)
            s = s | {i}
    return phi / len(orders)


def test_spearman_and_kendall_against_scipy():
    rng = np.random.default_rng(0)
    items = list("ABCDEFG")
    for n in (2, 3, 5, 7):
        for _ in range(30):
            a = list(rng.permutation(items[:n]))
            b = list(rng.permutation(items[:n]))
            ra = [a.index(x) for x in items[:n]]
            rb = [b.index(x) for x in items[:n]]
            assert spearman(a, b) == pytest.approx(stats.spearmanr(ra, rb).statistic, abs=1e-12)
            # without ties, tau = 1 - 2 * discordant share, so the distance is (1 - tau) / 2
            assert kendall_distance(a, b) == pytest.approx((1 - stats.kendalltau(ra, rb).statistic) / 2, abs=1e-12)
    assert kendall_distance(list("ABCDE"), list("EDCBA")) == 1.0 and spearman(list("ABC"), list("CBA")) == -1.0


def test_parse_and_malformed_answers():
    assert parse_number("21,250,000") == 21250000.0 and parse_number("$1500.5.") == 1500.5
    for bad in ("about twenty", "-3", "", "12 million", "nan"):
        with pytest.raises(PredictionError):
            parse_number(bad)
    items = ["Alpha", "Beta", "Gamma"]
    assert parse_ranking("beta > Alpha > GAMMA", items) == ["Beta", "Alpha", "Gamma"]
    assert parse_ranking('["Gamma", "Beta", "Alpha"]', items) == ["Gamma", "Beta", "Alpha"]
    assert parse_ranking("1. Gamma\n2. Alpha\n3. Beta", items) == ["Gamma", "Alpha", "Beta"]
    for bad, why in (("Alpha > Alpha > Beta", "repeats"), ("Alpha > Beta", "misses"), ("Alpha > Beta > Delta", "unknown")):
        with pytest.raises(PredictionError, match=why):
            parse_ranking(bad, items)
    with pytest.raises(PredictionError, match="2-10 items"):
        KINDS["ranking"].parse(json.dumps([f"s{i}" for i in range(11)]), KS)
    assert KINDS["regression"].parse("1,000", KS) == "1000.0"


def test_task_metrics_by_hand():
    assert KINDS["regression"].instance_metric("15.0", "20", None, KS) == pytest.approx(0.25)
    assert KINDS["regression"].instance_metric("15.0", "0", None, KS) is None
    assert KINDS["ranking"].instance_metric(json.dumps(list("ABC")), "A > C > B", None, KS) == pytest.approx(0.5)
    assert KINDS["classification"].instance_metric("up", "down", 0.8, KS) == pytest.approx(0.64)
    assert KINDS["classification"].repred_error("up", 0.8, "up", 0.6, KS) == pytest.approx(0.25)
    # a 'down' prediction: the error is on P(down) = 1 - P(up), 0.9 -> 0.7
    assert KINDS["classification"].repred_error("down", 0.1, "down", 0.3, KS) == pytest.approx(0.2 / 0.9)
    assert KINDS["ranking"].repred_error(json.dumps(list("ABCD")), None, json.dumps(list("BACD")), None, KS) == pytest.approx(
        1 / 6
    )


# ----------------------------------------------------------------------------- tables on hand-made answers

CLAIMS = [
    ("Omega signed a record contract on 2024-08-01.", "A4"),
    ("Omega scored 20 points a game.", "B1"),
    ("Omega plays guard.", "B1"),
    ("Omega won the title on 2024-09-01.", "A5"),
]


def _study(tmp_path: Path, kind: str, preds: list[dict], claims=CLAIMS, **kw) -> Path:
    sizes = [p.pop("_n", len(claims)) for p in preds]
    pd.DataFrame(preds).to_csv(tmp_path / "p.csv", index=False)
    with open(tmp_path / "ext.jsonl", "w") as fh:
        for p, n in zip(preds, sizes, strict=False):
            fh.write(
                json.dumps(
                    {
                        "instance_id": p["instance_id"],
                        "agent": p["agent"],
                        "claims": [
                            {
                                "claim_id": k,
                                "claim_text": t,
                                "original_text": t,
                                "temporal_reference": None,
                                "claim_category": c,
                                "category_reasoning": "test",
                            }
                            for k, (t, c) in enumerate(claims[:n], 1)
                        ],
                    }
                )
                + "\n"
            )
    demo = {k: x for k, x in read_study_file(default_study_path()).items() if k != "model_path"}
    v = {
        **demo,
        "study_name": f"claims_{kind}_test",
        "raw_dir": str(tmp_path / "raw"),
        "model_id": "kinds-test",
        "claims_predictions_path": str(tmp_path / "p.csv"),
        "claims_extractions_path": str(tmp_path / "ext.jsonl"),
        "claims_task_kind": kind,
        "claims_support_judge": "contains",
        # the tables' Shapley machinery on a given game, v(empty set) included: the legacy
        # prompt (the seed prompt's default v(empty set) has tests of its own)
        "claims_coalition_prompt": "legacy",
        "backend": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "api_mode": "completions",
        **kw,
    }
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump(v))
    return path


def _pred(iid: str, prediction: str, outcome: str, n: int = 4, task_input: str = "Predict Omega.") -> dict:
    return {
        "instance_id": iid,
        "agent": "a",
        "entity": "Omega",
        "task": "t",
        "t_ref": "2024-07-01",
        "task_input": task_input,
        "prediction": prediction,
        "rationale": "text",
        "outcome": outcome,
        "_n": n,
    }


def _write_lines(study: Path, answers, every_coalition: bool = False) -> None:
    """claims_value lines as the job writes them, one per coalition of the plan (or of
    all 2^n coalitions, as a run under a larger claims_exact_max would have left)."""
    from lookahead.claims.inputs import ClaimsResolved, load_predictions
    from lookahead.claims.shapley import plan_for
    from lookahead.claims.tables import claims_sha, instance_agent_id, instance_claims

    s = load_study(study)
    st = ClaimsResolved.from_study(s)
    raw = s.raw_dir
    raw.mkdir(parents=True, exist_ok=True)
    with open(raw / "claims_value.jsonl", "w") as fh:
        for r, ex in instance_claims(s, st, load_predictions(s, st)[0]):
            n = len(ex.claims)
            key = instance_agent_id(r["instance_id"], r["agent"])
            plan = plan_for(n, key, st.claims.claims_exact_max, st.claims.claims_mc_permutations, st.claims.claims_shapley_seed)
            for m in range(1 << n) if every_coalition else plan.masks:
                fh.write(
                    json.dumps(
                        {
                            "key": f"{r['instance_id']}-{m}",
                            "model_id": s.backend.model_id,
                            "instance_id": r["instance_id"],
                            "agent": r["agent"],
                            "claims_sha256": claims_sha(ex.claims),
                            "mask": m,
                            "task_kind": st.claims.claims_task_kind,
                            "params": {
                                "coalition_prompt": st.claims.claims_coalition_prompt,
                                "coalition_value": st.claims.claims_coalition_value,
                            },
                            **answers(r["instance_id"], frozenset(i for i in range(n) if m >> i & 1)),
                        }
                    )
                    + "\n"
                )


def _dclr(phi, leaked):
    w = np.abs(phi)
    return float((w * leaked).sum() / w.sum())


def _reg_value(s: frozenset) -> float:
    """A salary game: the leaked contract claim (0) dominates, stats (1) and position (2) interact."""
    return 10e6 + 8e6 * (0 in s) + 2e6 * (1 in s) + 1e6 * (1 in s and 2 in s) + 0.5e6 * (3 in s)


def test_regression_tables_against_independent_shapley(tmp_path):
    study = _study(tmp_path, "regression", [_pred("r1", "21500000", "20,000,000"), _pred("r2", "$12,000,000", "16000000", 3)])
    _write_lines(study, lambda iid, s: {"value": _reg_value(s)})
    t = build(load_study(study))
    inst = t["instance_leakage"].set_index("instance_id")
    claims = t["claims"]
    assert set(t["claims"]["task_kind"]) == {"regression"} and set(inst["task_kind"]) == {"regression"}
    for iid, n, truth, pred in (("r1", 4, 20e6, 21.5e6), ("r2", 3, 16e6, 12e6)):
        phi = _shapley_by_orders(n, _reg_value)
        got = claims[claims["instance_id"] == iid].sort_values("claim_id")
        assert np.allclose(got["shapley"].astype(float), phi, atol=1e-6)
        leaked = np.array([c in ("A4", "A5") for _, c in CLAIMS[:n]], dtype=float)
        assert inst.loc[iid, "shapley_dclr"] == pytest.approx(_dclr(phi, leaked), abs=1e-12)
        order = sorted(range(n), key=lambda i: (-abs(phi[i]), i))
        assert inst.loc[iid, "top3_leakage"] == pytest.approx(leaked[order[:3]].sum() / 3)
        assert inst.loc[iid, "v_all"] == _reg_value(frozenset(range(n)))
        assert abs(inst.loc[iid, "efficiency_gap"]) < 1e-9 * 1e7
        assert inst.loc[iid, "task_metric"] == pytest.approx(abs(pred - truth) / truth)
    summ = t["claims_summary"].iloc[0]
    assert summ["task_metric_name"] == "relative_error" and summ["brier"] is None
    assert summ["task_metric"] == pytest.approx((1.5 / 20 + 4 / 16) / 2)


def test_every_coalition_stored_gives_exact_shapley_under_a_monte_carlo_plan(tmp_path):
    """4 claims over claims_exact_max 3 with 4 permutations (at most 14 of the 16
    coalitions): the plan is Monte Carlo, but with all 16 values stored the table is
    Eq. 2 exactly, checked against all 4! orderings."""
    study = _study(tmp_path, "regression", [_pred("r1", "21500000", "20,000,000")], claims_exact_max=3, claims_mc_permutations=4)
    _write_lines(study, lambda iid, s: {"value": _reg_value(s)}, every_coalition=True)
    t = build(load_study(study))
    inst = t["instance_leakage"].set_index("instance_id")
    phi = _shapley_by_orders(4, _reg_value)
    got = t["claims"].sort_values("claim_id")
    assert inst.loc["r1", "shapley_method"] == "exact" and inst.loc["r1", "n_coalitions"] == 16
    assert np.allclose(got["shapley"].astype(float), phi, atol=1e-6) and (got["shapley_se"] == 0).all()
    assert inst.loc["r1", "shapley_dclr_se"] == 0 and inst.loc["r1", "shapley_dclr_ci_low"] == inst.loc["r1", "shapley_dclr"]
    leaked = np.array([c in ("A4", "A5") for _, c in CLAIMS[:4]], dtype=float)
    order = sorted(range(4), key=lambda i: (-abs(phi[i]), i))
    assert inst.loc["r1", "top5_leakage"] == pytest.approx(leaked[order].sum() / 5)  # 4 claims, divided by K = 5


ITEMS = ["Acorn", "Birch", "Cedar", "Dogwood", "Elm"]


def _rank_answer(s: frozenset) -> list[str]:
    """Neutral order, with the leaked claim (0) putting Elm first and the stats claim (1)
    putting Acorn last: a ranking that the claims move."""
    r = list(ITEMS)
    if 0 in s:
        r.remove("Elm")
        r.insert(0, "Elm")
    if 1 in s:
        r.remove("Acorn")
        r.append("Acorn")
    if 3 in s:
        r[1], r[2] = r[2], r[1]
    return r


M = 4  # Monte Carlo permutations of the ranking test


def test_ranking_tables_against_independent_shapley_and_monte_carlo(tmp_path):
    full = _rank_answer(frozenset(range(4)))
    study = _study(
        tmp_path,
        "ranking",
        [
            _pred("k1", json.dumps(full), " > ".join(reversed(full))),
            _pred("k2", " > ".join(full), json.dumps(full), 4, "Predict Omega again."),
        ],
        claims_exact_max=3,
        # 4 permutations ask for at most 4 * 3 + 2 = 14 of the 16 coalitions: Monte Carlo
        # (with more, a draw that asks all 16 is exact: test_claims_shapley_errors.py)
        claims_mc_permutations=M,
    )
    _write_lines(study, lambda iid, s: {"ranking": _rank_answer(s)})
    t = build(load_study(study))
    inst = t["instance_leakage"].set_index("instance_id")
    claims = t["claims"]

    def v(s):  # Eq. 11 written here: 1 - rho(r(S), r_N) with scipy's rho on ranks
        rs, rn = _rank_answer(s), _rank_answer(frozenset(range(4)))
        return 1 - stats.spearmanr([rs.index(x) for x in ITEMS], [rn.index(x) for x in ITEMS]).statistic

    exact = _shapley_by_orders(4, v)
    assert (inst["shapley_method"] == "monte_carlo").all()  # 4 claims > claims_exact_max 3
    from lookahead.claims.shapley import plan_for

    for iid in ("k1", "k2"):
        plan = plan_for(4, f"{iid}|a", 3, M, 42)
        marg = np.zeros((M, 4))
        for k, perm in enumerate(plan.permutations):
            s = frozenset()
            for i in perm:
                marg[k, i] = v(s | {i}) - v(s)
                s = s | {i}
        got = claims[claims["instance_id"] == iid].sort_values("claim_id")
        assert np.allclose(got["shapley"].astype(float), marg.mean(0), atol=1e-12)
        assert np.allclose(got["shapley_se"].astype(float), marg.std(0, ddof=1) / math.sqrt(M), atol=1e-12)
        assert np.all(np.abs(marg.mean(0) - exact) <= 4 * marg.std(0, ddof=1) / math.sqrt(M) + 1e-12)
        assert abs(inst.loc[iid, "efficiency_gap"]) < 1e-9 and inst.loc[iid, "v_all"] == 0
        # Shapley-DCLR's standard error by the delta method, written here from its definition
        leaked = (got["leakage_state"] == "leaked").to_numpy(dtype=float)
        phi = marg.mean(0)
        g = _dclr(phi, leaked)
        grad = np.sign(phi) * (leaked - g) / np.abs(phi).sum()
        se = float(np.std(marg @ grad, ddof=1) / math.sqrt(M))
        assert inst.loc[iid, "shapley_dclr"] == pytest.approx(g, abs=1e-12)
        assert inst.loc[iid, "shapley_dclr_se"] == pytest.approx(se, abs=1e-12)
        assert inst.loc[iid, "shapley_dclr_ci_low"] == pytest.approx(max(0.0, g - stats.norm.ppf(0.975) * se), abs=1e-12)
        assert inst.loc[iid, "shapley_dclr_ci_high"] == pytest.approx(min(1.0, g + stats.norm.ppf(0.975) * se), abs=1e-12)
    assert inst.loc["k1", "task_metric"] == pytest.approx(-1.0) and inst.loc["k2", "task_metric"] == 1.0
    assert t["claims_summary"].iloc[0]["task_metric_name"] == "spearman"


def test_classification_target_class_and_own_prediction(tmp_path):
    """An instance predicted 'down': v = P(up | S) by default, P(down | S) as the option;
    probabilities that do not sum to one make the two readings differ."""

    def probs(s):
        up = 0.2 + 0.5 * (0 in s) + 0.1 * (1 in s)
        return {"label_probs": {"up": up, "down": 0.7 - 0.5 * (0 in s)}}

    for mode, lab in (("target_class", "up"), ("own_prediction", "down")):
        sub = tmp_path / mode
        sub.mkdir()
        study = _study(sub, "classification", [_pred("c1", "down", "up", 3)], claims_class_value=mode)
        _write_lines(study, lambda iid, s: probs(s))
        t = build(load_study(study))
        phi = _shapley_by_orders(3, lambda s: probs(s)["label_probs"][lab])
        got = t["claims"].sort_values("claim_id")["shapley"].astype(float)
        assert np.allclose(got, phi, atol=1e-12)
        inst = t["instance_leakage"].iloc[0]
        assert inst["value_label"] == lab and inst["p_positive"] == 0.0 and inst["task_metric"] == 1.0


# ----------------------------------------------------------------------------- the job over HTTP


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prompts: list[str] = []
        self.delay_s = 0.0


LONG = " ".join(f"Omega averaged {k} points in season {2000 + k}." for k in range(30))  # > 1,000 characters


def _answer(prompt: str) -> str:
    if "RATIONALE TO ANALYZE:" in prompt:  # TimeSPEC's supervisor: one claim per sentence
        text = prompt.split("RATIONALE TO ANALYZE:\n", 1)[1]
        sents = [x.strip() for x in text.split(". ") if x.strip()][:3]
        return json.dumps(
            {
                "claims": [
                    {
                        "claim_id": k,
                        "claim_text": x,
                        "original_text": x,
                        "temporal_reference": None,
                        "claim_category": "A4" if "surged" in x else "B1",
                        "category_reasoning": "t",
                    }
                    for k, x in enumerate(sents, 1)
                ]
            }
        )
    if "# FINAL SYNTHESIS TASK" in prompt:  # TimeSPEC's aggregator: it restates a leaked claim from its own knowledge
        return (
            "Rationale: Birch makes boards. Elm surged after its rival failed. Weighing"
            + ", weighing" * 120
            + ".\nPrediction: Elm > Acorn > Birch > Cedar > Dogwood"
        )
    if "First write 'Rationale:'" in prompt:  # the agents' prompt (rationale job, TimeSPEC generator)
        if "ranked from BEST to WORST" in prompt:
            return (
                "Rationale: Elm surged after its rival failed. Birch makes boards.\nPrediction: Elm > Acorn > "
                "Birch > Cedar > Dogwood"
            )
        if "SHORT" in prompt:
            return "Rationale: Omega is good.\nPrediction: 20000000"
        if "NONUMBER" in prompt:
            return f"Rationale: {LONG}\nPrediction: a lot"
        return f"Rationale: {LONG}\nPrediction: $21,000,000"
    if "\nRationale: " in prompt:  # the re-prediction check
        if "Rank these items" in prompt:
            items = prompt.split("Rank these items from BEST to WORST: ", 1)[1].split(". Answer", 1)[0].split(", ")
            return " > ".join(items)
        return "19000000"
    if "Rank these items" in prompt:
        items = prompt.split("Rank these items from BEST to WORST: ", 1)[1].split(". Answer", 1)[0].split(", ")
        if "REPEATS" in prompt and "YOUR PREVIOUS ANSWER WAS INVALID" not in prompt:
            return " > ".join([items[0], *items[:-1]])  # first item twice, last missing
        if "Elm surged" in prompt.split("Use only these claims:", 1)[1]:
            items = ["Elm"] + [i for i in items if i != "Elm"]
        return " > ".join(items)
    claims = prompt.split("Use only these claims:", 1)[1]
    if "ALWAYS-BAD" in prompt or ("FLAKY" in prompt and "YOUR PREVIOUS ANSWER WAS INVALID" not in prompt):
        return "about twenty million"
    return str(10_000_000 + 8_000_000 * ("record contract" in claims) + 2_000_000 * ("scored" in claims))


def _server(state: State) -> ThreadingHTTPServer:
    def record(prompt: str) -> None:
        time.sleep(state.delay_s)
        with state.lock:
            state.prompts.append(prompt)

    return serve_completions(_answer, record)


@pytest.fixture()
def server():
    state = State()
    srv = _server(state)
    yield srv.server_address[1], state
    srv.shutdown()


def _http_study(tmp_path: Path, port: int, kind: str, preds: list[dict], claims=CLAIMS) -> Path:
    path = _study(tmp_path, kind, preds, claims)
    v = yaml.safe_load(path.read_text())
    v.update(base_url=f"http://127.0.0.1:{port}/v1", batch_size=2)
    path.write_text(yaml.safe_dump(v))
    return path


def _job(study: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    """The coalition job alone on ``study`` (the job process, as `lookahead jobs --only
    claims_value` starts it), its output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_value", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _raw(tmp_path: Path, name: str = "claims_value.jsonl") -> list[dict]:
    p = tmp_path / "raw" / name
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def test_regression_job_retries_then_records_failures(server, tmp_path):
    port, state = server
    study = _http_study(
        tmp_path,
        port,
        "regression",
        [
            _pred("ok", "20000000", "20000000", 2),
            _pred("flaky", "20000000", "19000000", 2, "FLAKY Omega."),
            _pred("bad", "20000000", "19000000", 2, "ALWAYS-BAD Omega."),
        ],
    )
    res = _job(study)
    assert res.returncode != 0 and "no complete answer" in (res.stdout + res.stderr)
    lines = _raw(tmp_path)
    assert sorted({r["instance_id"] for r in lines}) == ["flaky", "ok"] and len(lines) == 8
    assert all(isinstance(r["value"], float) for r in lines)
    assert {r["attempts"] for r in lines if r["instance_id"] == "flaky"} == {2}
    fails = _raw(tmp_path, "claims_value.failures.jsonl")
    assert len(fails) == 4 and all("not a number" in f["reason"] for f in fails)
    inst = build(load_study(study))["instance_leakage"].set_index("instance_id")
    assert inst.loc["ok", "status"] == "ok" and inst.loc["bad", "status"] == "values pending"
    assert inst.loc["ok", "v_all"] == 20_000_000 and inst.loc["ok", "shapley_dclr"] == pytest.approx(0.8)
    n = len(state.prompts)
    res = _job(study)  # only the failed coalitions are asked again
    asked = state.prompts[n:]
    assert len(asked) == 8 and all("ALWAYS-BAD" in p for p in asked) and len(_raw(tmp_path)) == 8


def test_ranking_job_rejects_repeated_items_then_kill9_resumes(server, tmp_path):
    port, state = server
    claims = [("Elm surged after its rival failed on 2020-03-01.", "A4"), ("Birch makes boards.", "B1")]
    preds = [
        _pred(
            f"s{i}",
            " > ".join(["Elm"] + [x for x in ITEMS if x != "Elm"]),
            " > ".join(ITEMS),
            2,
            f"Rank five stocks ({i}).{' REPEATS' if i == 0 else ''}",
        )
        for i in range(6)
    ]
    study = _http_study(tmp_path, port, "ranking", preds, claims)
    v = yaml.safe_load(study.read_text())
    v["batch_size"] = 1
    study.write_text(yaml.safe_dump(v))
    state.delay_s = 0.15
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    code = kill_once_written(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_value", "--study", str(study), "--yes"],
        tmp_path / "raw" / "claims_value.jsonl",
        5,
        env,
        120,
    )
    assert code == -signal.SIGKILL
    before = _raw(tmp_path)
    done, done_prompts = {r["key"] for r in before}, {r["prompt"] for r in before}
    assert 5 <= len(done) < 24
    n = len(state.prompts)
    state.delay_s = 0.0
    res = _job(study)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = _raw(tmp_path)
    assert len(lines) == 24 and len({r["key"] for r in lines}) == 24  # each coalition once
    assert not set(state.prompts[n:]) & done_prompts  # nothing answered is asked again
    first = [r for r in lines if r["instance_id"] == "s0"]
    assert all(r["attempts"] == 2 and len(set(r["ranking"])) == 5 for r in first)
    t = build(load_study(study))
    inst = t["instance_leakage"]
    assert (inst["status"] == "ok").all() and (inst["shapley_dclr"] == 1.0).all()
    rho = stats.spearmanr([1, 2, 3, 4, 0], [0, 1, 2, 3, 4]).statistic  # items A-E: predicted vs true rank
    assert np.allclose(inst["task_metric"].astype(float), rho)


def test_agents_follow_the_schema_and_timespec_ranks(server, tmp_path):
    """The rationale job for regression (Appendix D.1: a number >= 0 and a rationale of at
    least 400 characters, else a reject naming why) and TimeSPEC for a ranking: its
    leaked claim is dropped by the supervisor, the aggregator (the seed's prompt, the
    validated claims with their categories) writes the final rationale, and that
    rationale is scored like every agent's: an aggregator that restates the leaked claim
    from its own knowledge gets the OLR and Shapley-DCLR computed here from its text."""
    port, _state = server
    study = _http_study(tmp_path, port, "regression", [_pred("x", "1", "1")])
    v = yaml.safe_load(study.read_text())
    pd.DataFrame(
        [
            {
                "instance_id": iid,
                "entity": "Omega",
                "task": "t",
                "t_ref": "2024-07-01",
                "task_input": f"Predict Omega's salary.{tag}",
                "outcome": "20000000",
            }
            for iid, tag in (("good", ""), ("short", " SHORT"), ("nonum", " NONUMBER"))
        ]
    ).to_csv(tmp_path / "inst.csv", index=False)
    v.update(claims_instances_path=str(tmp_path / "inst.csv"), claims_predictions_path=None, claims_extractions_path=None)
    study.write_text(yaml.safe_dump(v))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_jobs.run_all",
            "--only",
            "claims_rationale (superforecasting)",
            "--study",
            str(study),
            "--yes",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    from lookahead.claims.inputs import load_predictions

    preds, rejects = load_predictions(load_study(study))
    assert list(preds["instance_id"]) == ["good"] and preds["prediction"].iloc[0] == "21000000.0"
    reasons = " | ".join(r["reason"] for r in rejects)
    assert "rationale has 14 characters; the task's schema asks for at least 400" in reasons
    assert "'a lot' is not a number" in reasons

    rank = tmp_path / "rank"
    rank.mkdir()
    study = _http_study(rank, port, "ranking", [_pred("x", json.dumps(ITEMS), json.dumps(ITEMS))])
    v = yaml.safe_load(study.read_text())
    pd.DataFrame(
        [
            {
                "instance_id": "s1",
                "entity": "sector",
                "task": "t",
                "t_ref": "2019-12-01",
                "task_input": "Rank five stocks by return from 2019-12-01 to 2020-06-01.",
                "outcome": "Elm > Cedar > Acorn > Birch > Dogwood",
            }
        ]
    ).to_csv(rank / "inst.csv", index=False)
    v.update(claims_instances_path=str(rank / "inst.csv"), claims_predictions_path=None, claims_extractions_path=None)
    study.write_text(yaml.safe_dump(v))
    res = subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_timespec", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    final = [r for r in _raw(rank, "claims_timespec.jsonl") if r.get("final")]
    assert len(final) == 1
    assert [c["claim_text"] for c in final[0]["validated_claims"]] == ["Birch makes boards."]  # the leaked claim dropped
    assert final[0]["claims"] is None  # the aggregator wrote its own rationale: extracted like every agent's
    # the aggregator's answer is the prediction, its text the final rationale
    assert json.loads(final[0]["prediction"]) == ["Elm", "Acorn", "Birch", "Cedar", "Dogwood"]
    assert final[0]["rationale"].startswith("Birch makes boards. Elm surged")
    synthesis = next(p for p in _state.prompts if "# FINAL SYNTHESIS TASK" in p)
    assert "## VALIDATED CLAIMS\n[B1] Birch makes boards.\n" in synthesis and "Elm surged" not in synthesis
    preds, _ = load_predictions(load_study(study))
    assert list(preds["agent"]) == ["timespec"]

    # TimeSPEC is scored like every agent: its final rationale extracted, dated, valued
    for job in ("claims_extract", "claims_value"):
        res = subprocess.run(
            [sys.executable, "-m", "llm_jobs.run_all", "--only", job, "--study", str(study), "--yes"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
    t = build(load_study(study))
    inst = t["instance_leakage"].set_index("agent").loc["timespec"]
    # expected, from the final rationale itself: the loopback extractor makes one claim of
    # each of the first three sentences, A4 (always leaked, Eq. 3) when it says "surged"
    sentences = [x.strip() for x in final[0]["rationale"].split(". ") if x.strip()][:3]
    leaked = np.array(["surged" in x for x in sentences], dtype=float)
    assert inst["status"] == "ok" and inst["n_claims"] == 3
    assert inst["olr"] == pytest.approx(leaked.mean(), abs=1e-12) and inst["olr"] > 0

    # Shapley values by all orders: the coalition answer puts Elm first only with the leaked claim
    full = ["Elm", "Acorn", "Birch", "Cedar", "Dogwood"]

    def v(s: frozenset) -> float:
        r = sorted(full)
        if any(leaked[i] for i in s):
            r = ["Elm"] + [x for x in r if x != "Elm"]
        return 1 - stats.spearmanr([r.index(x) for x in full], range(5)).statistic

    phi = _shapley_by_orders(3, v)
    dclr = float(np.abs(phi) @ leaked / np.abs(phi).sum())
    assert inst["shapley_dclr"] == pytest.approx(dclr, abs=1e-12) and dclr > 0
    assert inst["top1_leakage"] == 1.0


def test_repredict_job_and_table_regression_ranking(server, tmp_path):
    """The rationale is cleaned of its explicit prediction, the model asked again; the
    error is Eq. 12 (relative error) or Eq. 13 (relative Kendall distance), recomputed
    here; kill -9 mid-run and a rerun ask nothing twice."""
    port, state = server
    rationale = "Omega scored a lot. I expect 20,000,000 a year. Omega plays guard. Prediction: 20000000"
    preds = [{**_pred(f"r{i}", "20000000", "18000000", 2, f"Predict Omega ({i})."), "rationale": rationale} for i in range(8)]
    study = _http_study(tmp_path, port, "regression", preds)
    v = yaml.safe_load(study.read_text())
    v["batch_size"] = 1
    study.write_text(yaml.safe_dump(v))
    state.delay_s = 0.2
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_repredict", "--study", str(study), "--yes"]
    assert kill_once_written(argv, tmp_path / "raw" / "claims_repredict.jsonl", 3, env, 120) == -signal.SIGKILL
    before = _raw(tmp_path, "claims_repredict.jsonl")
    assert 3 <= len(before) < 8
    n = len(state.prompts)
    state.delay_s = 0.0
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    asked = state.prompts[n:]
    # at most the one query in flight at the kill is asked again; nothing answered is
    assert len(asked) <= 8 - len(before) + 1 and not set(asked) & {r["prompt"] for r in before}
    lines = _raw(tmp_path, "claims_repredict.jsonl")
    assert len({r["instance_id"] for r in lines}) == 8
    assert lines[0]["cleaned_rationale"] == "Omega scored a lot. Omega plays guard."
    t = build(load_study(study))
    rp = t["claims_repredict"]
    assert len(rp) == 8 and np.allclose(rp["repred_error"].astype(float), abs(19e6 - 20e6) / 20e6)
    summ = t["claims_summary"].iloc[0]
    assert summ["repred_metric_name"] == "relative_error" and summ["repred_error"] == pytest.approx(0.05)

    rank = tmp_path / "rank"
    rank.mkdir()
    pred = ["Elm", "Acorn", "Birch", "Cedar", "Dogwood"]
    study = _http_study(
        rank,
        port,
        "ranking",
        [
            {
                **_pred("k1", " > ".join(pred), json.dumps(ITEMS), 2),
                "rationale": "Elm is strong. So: Elm > Acorn > Birch > Cedar > Dogwood. Acorn is steady.",
            }
        ],
    )
    res = subprocess.run(
        [sys.executable, "-m", "llm_jobs.run_all", "--only", "claims_repredict", "--study", str(study), "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert _raw(rank, "claims_repredict.jsonl")[0]["cleaned_rationale"] == "Elm is strong. Acorn is steady."
    rp = build(load_study(study))["claims_repredict"].iloc[0]
    ra, rb = [pred.index(x) for x in ITEMS], list(range(5))  # re-predicted: the neutral order
    assert rp["repred_error"] == pytest.approx((1 - stats.kendalltau(ra, rb).statistic) / 2)
    assert rp["repred_metric_name"] == "kendall_distance"


def test_repredict_classification_reads_the_target_probability(tmp_path):
    """Under a token value, a stored re-prediction line written before exact scoring is
    read by its top log-probs: P(up) / (P(up) + P(down)); the error is relative to the
    file's probability of the target class."""
    study = _study(
        tmp_path, "classification", [{**_pred("c1", "up", "up", 2), "probability": 0.8}], claims_coalition_value="token"
    )
    s = load_study(study)
    raw = s.raw_dir
    raw.mkdir(parents=True)
    from lookahead.claims.inputs import sha

    top = [
        {"token": "up", "logprob": math.log(0.54)},
        {"token": " down", "logprob": math.log(0.36)},
        {"token": "the", "logprob": math.log(0.05)},
    ]
    (raw / "claims_repredict.jsonl").write_text(
        json.dumps(
            {
                "key": "k",
                "model_id": s.backend.model_id,
                "instance_id": "c1",
                "agent": "a",
                "task_kind": "classification",
                "rationale_sha256": sha("text"),
                "response_text": "up",
                "top_logprobs": top,
            }
        )
        + "\n"
    )
    rp = build(s)["claims_repredict"].iloc[0]
    assert rp["repredicted"] == "up" and rp["repredicted_probability"] == pytest.approx(0.6)
    assert rp["repred_error"] == pytest.approx(abs(0.6 - 0.8) / 0.8)
