"""How far the claim demos' trained models follow their planted rules (no pipeline).

    .venv/bin/python benchmarks/claims_rule_following.py --out benchmarks/results/claims_rule_following.json
    .venv/bin/python benchmarks/claims_rule_following.py --kinds-models DIR --kinds-prompt seed --only-kinds

For the regression and ranking demos (lookahead.claims.demo_kinds) and the classification
demo (lookahead.claims.demo), each model is asked the coalition prompt it was trained on
(``--kinds-prompt`` / ``--classification-prompt``, default: the builders' COALITION_PROMPT)
for every coalition of every demo instance, greedy, and:

* rule following: over the coalitions the demo study scores (its Shapley plan, the empty
  set left out), the share whose parsed answer equals the rule model's
  (``demo_kinds.rule_following``; for classification on the seed's prompt
  ``demo.rule_following``, the stated P(up) equal to the rule's 1, 0 or 0.5; on the legacy prompt the more probable label of
  the top-20 first-token reading, as the token value reads it, against the rule's label,
  and on the equal-odds coalitions a normalised P(up) within 0.5 +/- 0.1);
* regression and ranking: the model's mean Shapley-DCLR over the 17 instances from its own
  v(S) on all 2^n coalitions (exact; v(empty set) the rule's default in the seed form,
  the model's answer in the legacy form, as the study's value job does), beside the
  ideal rule model's (``ideal_shapley``). Unparseable answers are counted and read as the
  default.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from lookahead.claims import demo as cdemo
from lookahead.claims import demo_kinds as dk
from lookahead.claims.metrics import shapley_dclr
from lookahead.claims.shapley import exact_shapley
from lookahead.claims.tasks import KINDS, PredictionError


def _backend(name: str, path: Path) -> Any:
    from lookahead.backends.transformers_backend import TransformersBackend

    return TransformersBackend(name, model_path=str(path), use_chat_template=False)


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def kind_dclr(kind: str, model: str, backend: Any) -> dict[str, Any]:
    """The model's Shapley-DCLR per instance from its own v(S) on every coalition."""
    k = KINDS[kind]
    insts = dk.demo_instances(kind)
    asks: list[tuple[int, int]] = []
    prompts: list[str] = []
    for j, inst in enumerate(insts):
        n = len(inst.claims)
        for mask in range(1 << n):
            if mask == 0 and dk.COALITION_PROMPT == "seed":
                continue  # RULE 2's default, never asked
            asks.append((j, mask))
            prompts.append(inst.prompt([inst.claims[i] for i in range(n) if mask >> i & 1]))
    answers = dict(zip(asks, (g.response_text for g in backend.generate(prompts, 64, 0)), strict=True))
    per, unparsed = [], 0
    for j, inst in enumerate(insts):
        n = len(inst.claims)
        items = sorted(inst.items, key=str.lower) or None
        default = k.coalition_answer(dk.rule_answer(model, inst, []), [], dk.KS, items)
        lines = {}
        for mask in range(1 << n):
            text = answers.get((j, mask))
            if text is None:
                lines[mask] = default
                continue
            try:
                lines[mask] = k.value_answer(text, [], dk.KS, items)
            except PredictionError:
                unparsed += 1
                lines[mask] = default
        vals = k.values(lines, (1 << n) - 1, "", dk.KS)
        states = [c.expected_state for c in inst.claims]
        measured = shapley_dclr(exact_shapley(n, vals.__getitem__), states)
        ideal = shapley_dclr(dk.ideal_shapley(model, inst), states)
        per.append({"instance_id": inst.instance_id, "dclr": _r(measured), "ideal_dclr": _r(ideal)})
    # the mean over the instances whose Shapley-DCLR is defined (None: every phi is 0)
    m = float(np.mean([p["dclr"] for p in per if p["dclr"] is not None]))
    i = float(np.mean([p["ideal_dclr"] for p in per if p["ideal_dclr"] is not None]))
    return {
        "mean_dclr": round(m, 4),
        "ideal_mean_dclr": round(i, 4),
        "gap": round(abs(m - i), 4),
        "unparsed_answers": unparsed,
        "asked": len(prompts),
        "instances": per,
    }


def classification_following(model: str, backend: Any) -> dict[str, Any]:
    if cdemo.COALITION_PROMPT == "seed":
        return cdemo.rule_following(model, backend)
    from lookahead.claims.prompts import coalition_prompt, label_instruction
    from lookahead.scoring import label_probability

    prompts, want = [], []
    for inst, co in cdemo.scored_coalitions():
        prompts.append(
            coalition_prompt(inst.task_input, [c.text for c in co], label_instruction(cdemo.LABELS), None, cdemo.COALITION_PROMPT)
        )
        want.append(cdemo.rule_answer(model, co))
    decided = dec_follow = odds = odds_follow = 0
    for g, w in zip(backend.generate(prompts, 1, 20), want, strict=True):
        up = label_probability(g.top_logprobs, "up") or 0.0
        down = label_probability(g.top_logprobs, "down") or 0.0
        p = up / (up + down) if up + down > 0 else 0.5
        if w is None:
            odds += 1
            odds_follow += abs(p - 0.5) <= 0.1
        else:
            decided += 1
            dec_follow += ("up" if p >= 0.5 else "down") == w
    total = decided + odds
    return {
        "coalitions": total,
        "following": dec_follow + odds_follow,
        "share": round((dec_follow + odds_follow) / total, 4) if total else None,
        "decided": {"coalitions": decided, "following": dec_follow},
        "equal_odds": {"coalitions": odds, "within_0.1": odds_follow},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds-models", default="demo/claims/kinds_models")
    ap.add_argument("--kinds-prompt", choices=("seed", "legacy"), default=dk.COALITION_PROMPT)
    ap.add_argument("--classification-models", default="demo/claims/models")
    ap.add_argument("--classification-prompt", choices=("seed", "legacy"), default=cdemo.COALITION_PROMPT)
    ap.add_argument("--only-kinds", action="store_true", help="skip the classification demo")
    ap.add_argument("--out", help="write the JSON here (else stdout)")
    a = ap.parse_args(argv)
    dk.COALITION_PROMPT = a.kinds_prompt
    cdemo.COALITION_PROMPT = a.classification_prompt
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "machine": platform.processor() or platform.machine(),
        "kinds": {"models": a.kinds_models, "coalition_prompt": a.kinds_prompt, "results": {}},
    }
    for m in dk.MODELS:
        be = _backend(f"demo-claims-kinds-{m}", Path(a.kinds_models) / m)
        for kind in dk.MAKERS:
            rf = dk.rule_following(kind, m, be)
            res["kinds"]["results"][f"{kind}/{m}"] = {"rule_following": rf, "dclr": kind_dclr(kind, m, be)}
            print(kind, m, rf, res["kinds"]["results"][f"{kind}/{m}"]["dclr"]["mean_dclr"], flush=True)
    if not a.only_kinds:
        res["classification"] = {"models": a.classification_models, "coalition_prompt": a.classification_prompt, "results": {}}
        for m in cdemo.MODELS:
            be = _backend(f"demo-claims-{m}", Path(a.classification_models) / m)
            res["classification"]["results"][m] = classification_following(m, be)
            print("classification", m, res["classification"]["results"][m], flush=True)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(res, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
