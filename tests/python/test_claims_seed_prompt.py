"""The seed's coalition query (seed 002, Appendix D "Shapley Prediction Prompt") and the
coalition's value, against the seed's text and equations written out here:

* the prompt carries both RULES verbatim, with the task kind's insufficient-claims
  default (0.5; the study's value; the listed order); the legacy prompt is unchanged;
* v(empty set) is that default and is never asked: the Shapley values are Eq. 2 over the
  game whose empty coalition is the default, computed here by enumerating all n! orders,
  whatever a stored line says of the empty set;
* classification's v(S) is the probability the model states, parsed like every answer
  (a label word or a number above 1 is re-asked, then a failure); the token option reads
  the label's exact probability from the whole next-token distribution, where the top-20
  rule censors a label outside the top 20 (shown on the demo's model);
* the job over a real HTTP server (the real `openai` client): the seed prompt sent, the
  empty coalition never sent, a bad stated probability re-asked.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from completion_server import serve_completions
from scipy import stats
from test_claims_kinds import CLAIMS, ROOT, _job, _pred, _shapley_by_orders, _study, _write_lines

from lookahead.claims.prompts import coalition_prompt
from lookahead.claims.tables import build
from lookahead.claims.tasks import KINDS, ClaimsDerived, PredictionError, parse_probability
from lookahead.config import load_study
from lookahead.settings_sections import ClaimsSettings

RULE_1 = "(1) Use ONLY provided claims - NO external knowledge"
KS = ClaimsDerived(ClaimsSettings.with_defaults(claims_labels=["up", "down"], claims_target_class="up"))


def _seed(tmp_path: Path, kind: str, preds: list[dict], **kw) -> Path:
    """A study of ``kind`` under the seed prompt (the default, set here explicitly)."""
    return _study(tmp_path, kind, preds, claims_coalition_prompt="seed", **kw)


# ----------------------------------------------------------------------------- the prompt


def test_seed_prompt_has_both_rules_and_the_kinds_default():
    text = coalition_prompt("Will Omega win?", ["a fact", "another fact"], "OUT", "0.5")
    assert RULE_1 in text and "(2) If claims insufficient: 0.5," in text
    assert "CLAIMS:\n1. a fact\n2. another fact\n\nOUTPUT: OUT" in text
    assert "Predict the answer using ONLY these claims." in text and "Will Omega win?" in text
    assert text.startswith("Make prediction from claims.")
    # each kind's RULE 2: the seed's Legal -> 0.5, Salary -> position median, Stock -> preserve order
    assert KINDS["classification"].insufficient(KS, None, None) == ("0.5", {"label_probs": {"up": 0.5, "down": 0.5}})
    assert KINDS["regression"].insufficient(KS, None, 18e6) == ("1.8e+07", {"value": 18e6})
    items = ["Ash", "Birch", "Elm"]
    assert KINDS["ranking"].insufficient(KS, items, None) == ("keep the items in the order listed", {"ranking": items})
    # the legacy prompt, kept to reproduce earlier runs, is the earlier text exactly
    assert coalition_prompt("T", ["a", "b"], "I", "0.5", "legacy") == "T\nUse only these claims:\n- a\n- b\nI"
    assert coalition_prompt("T", [], "I", None, "legacy") == "T\nUse only these claims:\n- (no claims)\nI"


def test_stated_probability_parsed_and_validated():
    kind = KINDS["classification"]
    assert kind.value_answer("0.63", [], KS, None) == {"label_probs": {"up": 0.63, "down": pytest.approx(0.37)}}
    assert kind.value_answer("0 . 5", [], KS, None)["label_probs"]["up"] == 0.5  # a word-level tokenizer's 0.5
    for bad in ("up", "1.2", "63%", "", "about one half"):
        with pytest.raises(PredictionError):
            kind.value_answer(bad, [], KS, None)
    assert parse_probability(".25") == 0.25 and parse_probability("1") == 1.0
    # the token option reads the exact log-probabilities it is given, nothing else
    tok = ClaimsDerived(ClaimsSettings.with_defaults(claims_labels=["up", "down"], claims_coalition_value="token"))
    got = kind.value_answer("up", [], tok, None, {"up": math.log(0.3), "down": math.log(0.6)})
    assert got["label_probs"] == {"up": pytest.approx(0.3), "down": pytest.approx(0.6)}
    assert kind.value_instruction(tok, None) == "Answer with exactly one word: up or down."
    assert "probability" in kind.value_instruction(KS, None) and kind.value_top_logprobs(KS) == 0


# ----------------------------------------------------------------------------- v(empty set) is the default


def _game_phi(n: int, v_nonempty, v_empty: float) -> np.ndarray:
    return _shapley_by_orders(n, lambda s: v_empty if not s else v_nonempty(s))


def _reg(s: frozenset) -> float:
    return 10e6 + 8e6 * (0 in s) + 2e6 * (1 in s) + 1e6 * (1 in s and 2 in s) + 0.5e6 * (3 in s)


def test_regression_v_empty_is_the_stated_constant(tmp_path):
    """The stored answer for the empty set (999) is not read: v(empty) = claims_default_value."""
    study = _seed(tmp_path, "regression", [_pred("r1", "21500000", "20000000")], claims_default_value=15e6)
    _write_lines(study, lambda iid, s: {"value": _reg(s) if s else 999.0})
    t = build(load_study(study))
    inst = t["instance_leakage"].iloc[0]
    assert inst["status"] == "ok" and inst["v_empty"] == 15e6 and inst["v_all"] == _reg(frozenset(range(4)))
    phi = _game_phi(4, _reg, 15e6)
    got = t["claims"].sort_values("claim_id")["shapley"].astype(float).to_numpy()
    assert np.allclose(got, phi, atol=1e-6)
    leaked = np.array([1.0, 0, 0, 1])  # the A4 and A5 claims (leaked by category)
    assert inst["shapley_dclr"] == pytest.approx(float((np.abs(phi) * leaked).sum() / np.abs(phi).sum()), abs=1e-12)


def test_regression_v_empty_from_the_named_column(tmp_path):
    """claims_default_column: each instance's own value (the position's median), over the constant."""
    preds = [
        {**_pred("r1", "21500000", "20000000"), "position_median": "12000000"},
        {**_pred("r2", "9000000", "8000000"), "position_median": "7,500,000"},
    ]
    study = _seed(tmp_path, "regression", preds, claims_default_column="position_median", claims_default_value=1.0)
    _write_lines(study, lambda iid, s: {"value": _reg(s)})
    t = build(load_study(study))
    inst = t["instance_leakage"].set_index("instance_id")
    assert inst.loc["r1", "v_empty"] == 12e6 and inst.loc["r2", "v_empty"] == 7.5e6
    got = t["claims"][t["claims"]["instance_id"] == "r2"].sort_values("claim_id")["shapley"].astype(float).to_numpy()
    assert np.allclose(got, _game_phi(4, _reg, 7.5e6), atol=1e-6)


def test_regression_without_a_default_is_refused_in_one_line(tmp_path):
    from lookahead.errors import StudyConfigError

    study = _seed(tmp_path, "regression", [_pred("r1", "21500000", "20000000")])
    _write_lines(study, lambda iid, s: {"value": _reg(s)})
    with pytest.raises(StudyConfigError, match="claims_default_value"):
        build(load_study(study))


def test_classification_v_empty_is_one_half(tmp_path):
    """v_class(S) = P(target | S) (Eq. 11), P(target | empty) = 0.5 by RULE 2."""

    def p_up(s: frozenset) -> float:
        return 0.2 + 0.6 * (0 in s) + 0.1 * (1 in s)

    study = _seed(tmp_path, "classification", [_pred("c1", "up", "up", 3)])
    _write_lines(study, lambda iid, s: {"label_probs": {"up": p_up(s), "down": 1 - p_up(s)}} if s else {"label_probs": {}})
    t = build(load_study(study))
    inst = t["instance_leakage"].iloc[0]
    assert inst["v_empty"] == 0.5
    got = t["claims"].sort_values("claim_id")["shapley"].astype(float).to_numpy()
    assert np.allclose(got, _game_phi(3, p_up, 0.5), atol=1e-12)
    assert got.sum() == pytest.approx(p_up(frozenset(range(3))) - 0.5)  # efficiency against the default


def test_ranking_v_empty_is_the_input_order(tmp_path):
    """v_rank(S) = 1 - rho(r(S), r_N) (Eq. 11); the empty set keeps the listed (input) order."""
    items = ["Ash", "Birch", "Cedar", "Elm"]
    pred = "Elm > Ash > Cedar > Birch"
    full = ["Elm", "Ash", "Cedar", "Birch"]

    def order(s: frozenset) -> list[str]:
        if 0 in s:
            return full
        return ["Cedar", *[i for i in items if i != "Cedar"]] if 1 in s else items

    def v(r: list[str]) -> float:
        return 1.0 - stats.spearmanr([full.index(x) for x in items], [r.index(x) for x in items]).statistic

    study = _seed(tmp_path, "ranking", [_pred("k1", pred, pred, 3)])
    _write_lines(study, lambda iid, s: {"ranking": order(s) if s else list(reversed(items))})
    t = build(load_study(study))
    inst = t["instance_leakage"].iloc[0]
    assert inst["v_empty"] == pytest.approx(v(items)) and inst["v_all"] == pytest.approx(0.0)
    got = t["claims"].sort_values("claim_id")["shapley"].astype(float).to_numpy()
    assert np.allclose(got, _game_phi(3, lambda s: v(order(s)), v(items)), atol=1e-12)


def test_lines_of_the_other_prompt_are_not_read(tmp_path):
    """A study reads only the lines asked under its own prompt and value reading: the
    legacy study finds none of the seed study's lines (values pending)."""
    study = _seed(tmp_path, "classification", [_pred("c1", "up", "up", 3)])
    _write_lines(study, lambda iid, s: {"label_probs": {"up": 0.9, "down": 0.1}})
    v = yaml.safe_load(study.read_text())
    v["claims_coalition_prompt"] = "legacy"
    study.write_text(yaml.safe_dump(v))
    inst = build(load_study(study))["instance_leakage"].iloc[0]
    assert inst["status"] == "values pending"


# ----------------------------------------------------------------------------- the token option: exact, never censored


def test_token_value_is_the_exact_label_probability_where_top20_censors():
    """On a demo model that answers numbers (the regression demo's), the label words are
    rarely among its top 20 next tokens: the top-20 rule censors them to None, while
    label_logprobs gives each label's exact probability from the full softmax, checked
    here against the model's logits."""
    torch = pytest.importorskip("torch")
    from lookahead.backends.transformers_backend import TransformersBackend
    from lookahead.claims import demo_kinds
    from lookahead.scoring import label_probability

    model_dir = ROOT / "demo" / "claims" / "kinds_models" / "leaky"
    backend = TransformersBackend("demo-claims-kinds-leaky", model_path=str(model_dir))
    prompts = [i.prompt(i.claims) for i in demo_kinds.demo_instances("regression")[:6]]
    gens = backend.generate(prompts, 1, 20)
    exact = backend.label_logprobs(prompts, {"up": "up", "down": "down"})
    censored = 0
    tok, model = backend.tokenizer, backend.model
    for p, g, ex in zip(prompts, gens, exact, strict=True):
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            soft = torch.softmax(model(input_ids=ids).logits[0, -1].double(), -1)
        for e in ex:
            want = float(soft[tok.convert_tokens_to_ids(e["label"])])
            assert math.exp(e["logprob"]) == pytest.approx(want, rel=1e-4)  # float64 against float32 logits
            top = label_probability([{"token": t.token, "logprob": t.logprob} for t in g.top_logprobs], e["label"])
            censored += top is None
    assert censored > 0  # the case the exact reading exists for


def test_token_value_refused_on_a_backend_without_exact_scoring(tmp_path):
    study = _seed(tmp_path, "classification", [_pred("c1", "up", "up", 2)], claims_coalition_value="token")
    res = _job(study, timeout=300)
    assert res.returncode != 0
    assert "setting 'claims_coalition_value': token needs a backend that scores labels exactly" in res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr


# ----------------------------------------------------------------------------- the job over HTTP


def test_value_job_sends_the_seed_prompt_and_never_the_empty_set(tmp_path):
    """Classification, stated value: every prompt is the seed's, with both rules; the
    empty coalition is not asked (2^3 - 1 queries); a label word where a probability is
    due is re-asked with the error named; the stored v(S) are the stated numbers."""
    prompts: list[str] = []
    lock = threading.Lock()

    def answer(prompt: str) -> str:
        claims = prompt.split("CLAIMS:", 1)[1].split("OUTPUT:", 1)[0]
        if "guard" in claims and "YOUR PREVIOUS ANSWER WAS INVALID" not in prompt:
            return "up"  # not a probability: re-asked
        return str(0.5 + 0.25 * ("record contract" in claims) - 0.125 * ("scored" in claims))

    def record(prompt: str) -> None:
        with lock:
            prompts.append(prompt)

    srv = serve_completions(answer, record)
    try:
        study = _seed(tmp_path, "classification", [_pred("c1", "up", "up", 3)])
        v = yaml.safe_load(study.read_text())
        v.update(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", batch_size=2)
        study.write_text(yaml.safe_dump(v))
        res = _job(study, timeout=300)
    finally:
        srv.shutdown()
    assert res.returncode == 0, res.stdout + res.stderr
    first = [p for p in prompts if "YOUR PREVIOUS ANSWER WAS INVALID" not in p]
    assert len(first) == 7 and all(RULE_1 in p and "(2) If claims insufficient: 0.5," in p for p in first)
    assert all("CLAIMS:\n(none)" not in p for p in prompts)  # the empty set never asked
    retries = [p for p in prompts if "YOUR PREVIOUS ANSWER WAS INVALID" in p]
    assert len(retries) == 4 and all("is not a number" in p for p in retries)  # the 4 coalitions holding 'guard'
    t = build(load_study(study))
    phi = _game_phi(3, lambda s: 0.5 + 0.25 * (0 in s) - 0.125 * (1 in s), 0.5)
    got = t["claims"].sort_values("claim_id")["shapley"].astype(float).to_numpy()
    assert np.allclose(got, phi, atol=1e-12)
    assert [c for c, _ in CLAIMS[:3]] == t["claims"].sort_values("claim_id")["claim_text"].tolist()
