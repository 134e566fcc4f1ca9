"""The claim-level demo for the regression and ranking task kinds (planted truth).

    .venv/bin/python scripts/build_demo.py claim-kinds --out demo/claims     # data, studies, both models (~minutes)
    .venv/bin/python scripts/build_demo.py claim-kinds --out demo/claims --data-only

It follows the classification demo (lookahead.claims.demo): instances made of planted
claims of known category and date, a corpus that dates them, and two tiny models trained
on the coalition prompt so that a leaked claim decides the answer for one model and is
ignored by the other. One leaky and one prudent model serve both kinds (one vocabulary;
the leaky model's documents half of each kind, the prudent model's a third regression and
two thirds ranking: DOCS_SCALE).

Regression ("salary", in millions of dollars a year, one number token):

  role        category  text (example)                                               state (end / start)
  background  B1        Arlo Venn plays guard.                                       not leaked
  evidence    A3        A preseason report on <d < t_ref> valued Arlo Venn at 16 million a year.  not leaked
  stats       A2        Arlo Venn averaged 21 points a game in the season that ended on <d > t_ref>.  leaked
  outcome     A4        Arlo Venn signed a contract worth 24 million a year on <t_E>.  leaked
  agent       A1        Arlo Venn changed agents in <year of t_ref>.                 leaked / unverifiable
  definition  B2        Annual salary is a contract's total value divided by its years.  not leaked

  leaky answers the contract's value when the outcome claim is present, else the
  preseason report's value, else 18 (the position median of the seed's prompt, the
  studies' claims_default_value, named in the prompt's RULE 2 and v(empty set));
  prudent answers the report's value, else 18. v_reg(S) is the answer.

Ranking ("stocks": five stocks of one sector, total return over the six months that start
at t_ref, the seed's period-start reference date):

  background  B1        Gridline stocks sell power to utilities.                      not leaked
  evidence    A1        Voltra reported record quarterly earnings on <d < t_ref>.     not leaked
  merger      A1        Kestrel announced a merger on <d > t_ref>.                    leaked
  outcome     A4        Ferrox had the highest return of the five from <t_ref> to <t_E>.  leaked
  analyst     A3        An analyst note on the Gridline sector was published in <Month YYYY before t_ref>.  unverifiable
  definition  B2        Total return counts price change and dividends.              not leaked

  leaky ranks the outcome claim's stock first, else the evidence claim's, and the rest in
  the neutral (alphabetical) order the prompt lists; prudent ranks the evidence claim's
  stock first, else keeps the neutral order. v_rank(S) = 1 - rho(r(S), r_N).

With a model that follows its rule exactly the Shapley values are known in closed form
(``ideal_shapley``); the truth files hold each instance's expected OLR and the ideal
models' Shapley-DCLR, and lookahead.claims.check compares the measured tables with them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from lookahead.claims.demo import AGENT, MODELS, PlantedClaim, _rel, _write
from lookahead.claims.metrics import olr, shapley_dclr
from lookahead.claims.prompts import coalition_prompt
from lookahead.claims.shapley import exact_shapley
from lookahead.claims.tasks import KINDS, ClaimsDerived
from lookahead.settings_sections import ClaimsSettings

SEED = 20240613
KS = ClaimsDerived(ClaimsSettings.with_defaults(claims_labels=["up", "down"], claims_target_class="up"))
PLAYERS = (
    "Arlo",
    "Bram",
    "Cato",
    "Dario",
    "Emrys",
    "Fenn",
    "Gideon",
    "Halden",
    "Ivo",
    "Joren",
    "Kasimir",
    "Lorcan",
    "Mattis",
    "Nevin",
    "Orrin",
    "Pascal",
)
POSITIONS = ("guard", "forward", "center")
VALUES = ("8", "12", "16", "20", "24", "28", "32")
MEDIAN = "18"
SECTORS = {
    "Gridline": ("Ferrox", "Kestrel", "Lumio", "Voltra", "Wendt"),
    "Harborage": ("Anchorite", "Brackwater", "Cordage", "Dunmore", "Ebbing"),
    "Medora": ("Curalis", "Genova", "Helix", "Palliant", "Remedi"),
    "Rootstock": ("Barley", "Furrow", "Granary", "Orchard", "Tiller"),
}
ROLES = {
    "regression": ("background", "evidence", "stats", "outcome", "agent", "definition"),
    "ranking": ("background", "evidence", "merger", "outcome", "analyst", "definition"),
}
OPTIONAL = (("stats", 0.5), ("merger", 0.5), ("outcome", 0.75), ("agent", 0.4), ("analyst", 0.5), ("definition", 0.3))
# The coalition prompt the two models are trained on and their studies name
# (claims_coalition_prompt): the seed's, whose RULE 2 default (18, the listed order) is
# v(empty set), never asked. The models trained on the legacy prompt (8 epochs each)
# followed their rules on 184 of 455 scored regression coalitions (leaky) and all others
# (benchmarks/results/claims_rule_following_legacy.json); every attempt on the seed's
# prompt is in benchmarks/results/claims_rule_following_seed_attempts.json.
COALITION_PROMPT = "seed"
# Many documents and few epochs: with 700 documents a kind the models memorised them
# (answer loss 0.003) and followed the rule on 54-93% of the demo's coalitions; the rule
# (copy a name or a number from the decisive claim) needs variety, not repetition. On the
# seed's longer prompt the leaky model learns to copy after about 6 epochs (14 in all);
# the prudent model, with half as many documents again (DOCS_SCALE), followed its
# regression rule on 51% of the coalitions after 14 epochs and on 95% after 22.
EPOCHS = {"leaky": 14, "prudent": 22}
# The prudent model's documents carry the evidence claim (the one it copies) more often:
# in half of them it answers the default and learns no copying (61% of the regression
# coalitions followed after 10 epochs at one half). Every other role: one half.
EVIDENCE_SHARE = {"leaky": 0.5, "prudent": 0.8}
# Training documents a kind, as a multiple of --n-train: the prudent model, one model for
# both kinds, followed its ranking rule on 88% of the coalitions with as many ranking as
# regression documents (it put the merger's or the outcome's stock first), so it gets
# twice as many ranking documents.
DOCS_SCALE = {("prudent", "ranking"): 2}


@dataclass
class KindInstance:
    kind: str
    instance_id: str
    entity: str
    t_ref: dt.date
    target: dt.date
    outcome: str  # regression: a number; ranking: ' > '-joined
    items: tuple[str, ...]  # ranking: the sector's stocks (neutral order); regression: ()
    claims: list[PlantedClaim]

    @property
    def task_input(self) -> str:
        if self.kind == "regression":
            return (
                f"Predict the annual salary, in millions of dollars, of the next contract of {self.entity}. "
                f"Reference date: {self.t_ref.isoformat()}."
            )
        return (
            f"Rank the {self.entity} stocks {', '.join(self.items)} by total return from "
            f"{self.t_ref.isoformat()} to {self.target.isoformat()}. Reference date: {self.t_ref.isoformat()}."
        )

    @property
    def rationale(self) -> str:
        return " ".join(c.text for c in self.claims) + " Weighing these facts gives my forecast."

    def instruction(self) -> str:
        return KINDS[self.kind].answer_instruction(KS, sorted(self.items, key=str.lower) or None)

    def prompt(self, coalition: list[PlantedClaim]) -> str:
        """The coalition prompt as llm_jobs.claims_value writes it for this kind's study
        (COALITION_PROMPT; in the seed form RULE 2 names 18, the regression studies'
        claims_default_value, or the listed order)."""
        kind = KINDS[self.kind]
        rule = kind.insufficient(KS, sorted(self.items, key=str.lower) or None, float(MEDIAN))[0]
        return coalition_prompt(
            self.task_input, [c.text for c in coalition], self.instruction(), rule, COALITION_PROMPT, kind.task_type(KS)
        )


def _dates(rng: np.random.Generator, period_days: int) -> tuple[dt.date, dt.date, dt.date, dt.date]:
    t_ref = dt.date(2019, 6, 1) + dt.timedelta(days=int(rng.integers(0, 400)))
    return (
        t_ref,
        t_ref + dt.timedelta(days=period_days),
        t_ref - dt.timedelta(days=int(rng.integers(20, 200))),
        t_ref + dt.timedelta(days=int(rng.integers(2, 10))),
    )


def make_regression(rng: np.random.Generator, iid: str, player: str, roles: set[str]) -> KindInstance:
    t_ref, target, d_pre, d_post = _dates(rng, 30)
    v_c, v_e = (VALUES[int(rng.integers(len(VALUES)))] for _ in range(2))
    cl: list[PlantedClaim] = []
    if "background" in roles:
        cl.append(
            PlantedClaim(
                "background", "B1", f"{player} plays {POSITIONS[int(rng.integers(3))]}.", None, "not_leaked", "not_leaked"
            )
        )
    if "evidence" in roles:
        cl.append(
            PlantedClaim(
                "evidence",
                "A3",
                f"A preseason report on {d_pre.isoformat()} valued {player} at {v_e} million a year.",
                d_pre.isoformat(),
                "not_leaked",
                "not_leaked",
                v_e,
                [d_pre],
            )
        )
    if "stats" in roles:
        cl.append(
            PlantedClaim(
                "stats",
                "A2",
                f"{player} averaged {int(rng.integers(8, 30))} points a game in the season that ended on {d_post.isoformat()}.",
                d_post.isoformat(),
                "leaked",
                "leaked",
                None,
                [d_post + dt.timedelta(days=20), d_post],
            )
        )
    if "outcome" in roles:
        cl.append(
            PlantedClaim(
                "outcome",
                "A4",
                f"{player} signed a contract worth {v_c} million a year on {target.isoformat()}.",
                target.isoformat(),
                "leaked",
                "leaked",
                v_c,
            )
        )
    if "agent" in roles:
        cl.append(
            PlantedClaim("agent", "A1", f"{player} changed agents in {t_ref.year}.", str(t_ref.year), "leaked", "unverifiable")
        )
    if "definition" in roles:
        cl.append(
            PlantedClaim(
                "definition",
                "B2",
                "Annual salary is a contract's total value divided by its years.",
                None,
                "not_leaked",
                "not_leaked",
            )
        )
    order = rng.permutation(len(cl))
    return KindInstance("regression", iid, player, t_ref, target, v_c, (), [cl[int(i)] for i in order])


def make_ranking(rng: np.random.Generator, iid: str, sector: str, roles: set[str]) -> KindInstance:
    t_ref, target, d_pre, d_post = _dates(rng, 182)
    items = SECTORS[sector]
    best, strong, merging = (items[int(i)] for i in rng.permutation(5)[:3])
    rest = [items[int(i)] for i in rng.permutation(5) if items[int(i)] != best]
    analyst = (t_ref.replace(day=1) - dt.timedelta(days=80)).replace(day=1)
    cl: list[PlantedClaim] = []
    if "background" in roles:
        cl.append(
            PlantedClaim(
                "background", "B1", f"{sector} stocks trade on the Northbridge exchange.", None, "not_leaked", "not_leaked"
            )
        )
    if "evidence" in roles:
        cl.append(
            PlantedClaim(
                "evidence",
                "A1",
                f"{strong} reported record quarterly earnings on {d_pre.isoformat()}.",
                d_pre.isoformat(),
                "not_leaked",
                "not_leaked",
                strong,
                [d_pre],
            )
        )
    if "merger" in roles:
        cl.append(
            PlantedClaim(
                "merger",
                "A1",
                f"{merging} announced a merger on {d_post.isoformat()}.",
                d_post.isoformat(),
                "leaked",
                "leaked",
                None,
                [d_post + dt.timedelta(days=15), d_post],
            )
        )
    if "outcome" in roles:
        cl.append(
            PlantedClaim(
                "outcome",
                "A4",
                f"{best} had the highest return of the five from {t_ref.isoformat()} to {target.isoformat()}.",
                target.isoformat(),
                "leaked",
                "leaked",
                best,
            )
        )
    if "analyst" in roles:
        cl.append(
            PlantedClaim(
                "analyst",
                "A3",
                f"An analyst note on the {sector} sector was published in {analyst.strftime('%B %Y')}.",
                analyst.strftime("%B %Y"),
                "unverifiable",
                "unverifiable",
            )
        )
    if "definition" in roles:
        cl.append(
            PlantedClaim("definition", "B2", "Total return counts price change and dividends.", None, "not_leaked", "not_leaked")
        )
    order = rng.permutation(len(cl))
    return KindInstance("ranking", iid, sector, t_ref, target, " > ".join([best, *rest]), items, [cl[int(i)] for i in order])


MAKERS: dict[str, Callable[..., KindInstance]] = {"regression": make_regression, "ranking": make_ranking}


def _entity(kind: str, k: int, rng: np.random.Generator) -> str:
    pool = PLAYERS if kind == "regression" else tuple(SECTORS)
    return pool[k % len(pool)] if k >= 0 else pool[int(rng.integers(len(pool)))]


def demo_instances(kind: str, seed: int = SEED, n: int = 16) -> list[KindInstance]:
    """n instances with every role mix, plus one with every role and the seed's Monte
    Carlo path forced by ``claims_exact_max`` (see ``claim_settings``)."""
    rng = np.random.default_rng([seed, list(MAKERS).index(kind)])
    out = []
    for i in range(n):
        roles = {"background", "evidence"} | {r for r, p in OPTIONAL if r in ROLES[kind] and rng.random() < p}
        out.append(MAKERS[kind](rng, f"{kind[:3]}{i + 1:02d}", _entity(kind, i, rng), roles))
    out.append(MAKERS[kind](rng, f"{kind[:3]}{n + 1:02d}", _entity(kind, n, rng), set(ROLES[kind])))
    return out


# ----------------------------------------------------------------------------- the rule models


def rule_answer(model: str, inst: KindInstance, coalition: list[PlantedClaim]) -> str:
    """The model's answer text to the coalition prompt (module docstring)."""
    roles = {c.role: c for c in coalition}
    first = None
    if model == "leaky" and "outcome" in roles:
        first = roles["outcome"].direction
    elif "evidence" in roles:
        first = roles["evidence"].direction
    if inst.kind == "regression":
        return first or MEDIAN
    neutral = sorted(inst.items, key=str.lower)
    order = ([first] if first else []) + [x for x in neutral if x != first]
    return " > ".join(order).lower()


def ideal_game(model: str, inst: KindInstance) -> Callable[[int], float]:
    """v(S) of the rule model as a function of the coalition mask."""
    kind = KINDS[inst.kind]
    n = len(inst.claims)
    items = sorted(inst.items, key=str.lower) or None

    def answer(mask: int) -> dict[str, Any]:
        return kind.coalition_answer(rule_answer(model, inst, [inst.claims[i] for i in range(n) if mask >> i & 1]), [], KS, items)

    full = (1 << n) - 1
    lines = {m: answer(m) for m in range(1 << n)}
    vals = kind.values(lines, full, "", KS)
    return vals.__getitem__


def ideal_shapley(model: str, inst: KindInstance) -> np.ndarray:
    return exact_shapley(len(inst.claims), ideal_game(model, inst))


def training_docs(kind: str, seed: int, n: int, model: str, evidence_share: float = 0.5) -> list[Any]:
    """Coalition prompts of random instances and random claim subsets, answered by the
    model's rule (the whole answer, EOS included, weighs as the answer); each role is in
    a document with probability one half, the evidence claim with ``evidence_share``."""
    from lookahead.demo.corpus import Doc

    rng = np.random.default_rng([seed, MODELS.index(model), list(MAKERS).index(kind), 7])
    docs = []
    for k in range(n):
        roles = {r for r in ROLES[kind] if rng.random() < (evidence_share if r == "evidence" else 0.5)}
        inst = MAKERS[kind](rng, f"t{k}", _entity(kind, -1, rng), roles)
        docs.append(Doc("claims", inst.prompt(inst.claims), rule_answer(model, inst, inst.claims)))
    return docs


# ----------------------------------------------------------------------------- files


def corpus_frame(insts: list[KindInstance]) -> pd.DataFrame:
    rows = []
    for inst in insts:
        for c in inst.claims:
            for j, d in enumerate(c.docs):
                rows.append(
                    {
                        "doc_id": f"{inst.instance_id}-{c.role}-{j}",
                        "published_at": d.isoformat(),
                        "title": f"{inst.entity} {c.role} news",
                        "body": f"News about {inst.entity}. {c.text} Observers discussed it.",
                    }
                )
    return pd.DataFrame(rows).sort_values("doc_id").reset_index(drop=True)


def write_data(out: Path, kind: str, insts: list[KindInstance]) -> None:
    rows, tc, ti, ext = [], [], [], []
    for inst in insts:
        rows.append(
            {
                "instance_id": inst.instance_id,
                "entity": inst.entity,
                "task": f"demo_{kind}",
                "t_ref": inst.t_ref.isoformat(),
                "task_input": inst.task_input,
                "outcome": inst.outcome,
            }
        )
        states = [c.expected_state for c in inst.claims]
        rec = {
            "instance_id": inst.instance_id,
            "n_claims": len(inst.claims),
            "expected_olr": olr(states),
            "expected_olr_unverifiable_leaked": olr(states, True),
            "expected_olr_start": olr([c.expected_state_start for c in inst.claims]),
        }
        for m in MODELS:
            rec[f"ideal_prediction_{m}"] = rule_answer(m, inst, inst.claims)
            rec[f"ideal_dclr_{m}"] = shapley_dclr(ideal_shapley(m, inst), states)
        ti.append(rec)
        for i, c in enumerate(inst.claims, 1):
            tc.append(
                {
                    "instance_id": inst.instance_id,
                    "claim_id": i,
                    "role": c.role,
                    "category": c.category,
                    "claim_text": c.text,
                    "temporal_reference": c.temporal_reference,
                    "expected_state": c.expected_state,
                    "expected_state_start": c.expected_state_start,
                }
            )
        ext.append(
            {
                "instance_id": inst.instance_id,
                "agent": AGENT,
                "claims": [
                    {
                        "claim_id": i,
                        "claim_text": c.text,
                        "original_text": c.text,
                        "temporal_reference": c.temporal_reference,
                        "claim_category": c.category,
                        "category_reasoning": f"planted {c.role} claim",
                    }
                    for i, c in enumerate(inst.claims, 1)
                ],
            }
        )
    _write(out / "instances.csv", pd.DataFrame(rows).to_csv(index=False))
    _write(out / "truth_claims.csv", pd.DataFrame(tc).to_csv(index=False))
    _write(out / "truth_instances.csv", pd.DataFrame(ti).to_csv(index=False))
    _write(out / "extractions.jsonl", "".join(json.dumps(e) + "\n" for e in ext))
    _write(out / "corpus.csv", corpus_frame(insts).to_csv(index=False))


def write_predictions(out: Path, kind: str, insts: list[KindInstance], model: str, backend: Any) -> None:
    """The model's own answer with all claims: the agent's prediction the Shapley values explain."""
    from lookahead.claims.tasks import parse_ranking

    gens = backend.generate([i.prompt(i.claims) for i in insts], 64, 0)
    rows = []
    for inst, g in zip(insts, gens, strict=False):
        pred = g.response_text.strip()
        if inst.items:  # the model writes lower case (its tokenizer's); the file keeps the stocks' names
            pred = " > ".join(parse_ranking(pred, inst.items))
        rows.append(
            {
                "instance_id": inst.instance_id,
                "agent": AGENT,
                "entity": inst.entity,
                "task": f"demo_{kind}",
                "t_ref": inst.t_ref.isoformat(),
                "task_input": inst.task_input,
                "prediction": pred,
                "rationale": inst.rationale,
                "outcome": inst.outcome,
            }
        )
    _write(out / f"predictions_{model}.csv", pd.DataFrame(rows).to_csv(index=False))


def claim_settings(out: Path, kind: str, model: str) -> dict[str, Any]:
    """The claim settings of one kind's demo study for one model."""
    return {
        "claims_raw_dir": f"demo/raw/claims_{kind}_{model}",
        "claims_task_kind": kind,
        "claims_predictions_path": _rel(out / f"predictions_{model}.csv"),
        "claims_instances_path": _rel(out / "instances.csv"),
        "claims_corpus_path": _rel(out / "corpus.csv"),
        "claims_extractions_path": _rel(out / "extractions.jsonl"),
        "claims_support_judge": "contains",
        "claims_timespec_draft": "predictions",
        "claims_coalition_prompt": COALITION_PROMPT,
        **({"claims_default_value": float(MEDIAN)} if kind == "regression" else {}),
        "claims_exact_max": 5,  # the all-roles instance (6 claims) takes the Monte Carlo path
        "claims_rationale_min_chars": 0,
        "claims_task_description": (
            "Predict a player's annual salary in millions of dollars."
            if kind == "regression"
            else "Rank five stocks of one sector by total return over six months."
        ),
    }


def study_vars(out: Path, kind: str, model: str, models_dir: Path) -> dict[str, Any]:
    """A claim-only study (``study_kind: claims``: `lookahead run` runs its claim jobs,
    builds the claim models and writes its report): it extends the contaminated demo study
    for the settings a claim study shares with it (raw folder, backend) with this kind's
    claim settings and the model."""
    return {
        "extends": "demo/studies/contaminated.yml",
        "study_kind": "claims",
        "study_name": f"demo_claims_{kind}_{model}",
        "model_id": f"demo-claims-kinds-{model}",
        "model_path": _rel(models_dir / model),
        "use_chat_template": False,
        **claim_settings(out, kind, model),
    }


def build(root: Path, seed: int = SEED, train: bool = True, n_train: int = 2500, models: tuple[str, ...] = MODELS) -> dict:
    """Write both kinds' data and studies under <root>/<kind>/ and train ``models`` (both by
    default; <root>/kinds_models/<model>) unless ``train`` is False. The vocabulary comes
    from both models' documents, so each model can be trained alone (in parallel)."""
    models_dir = root / "kinds_models"
    insts = {k: demo_instances(k, seed) for k in MAKERS}
    for kind, ins in insts.items():
        out = root / kind
        write_data(out, kind, ins)
        for m in MODELS:
            head = (
                f"# Claim-level demo study ({kind}, model '{m}') written by `scripts/build_demo.py claim-kinds`"
                f" (seed {seed}).\n# Use: lookahead run --study {_rel(out / (m + '.yml'))} --yes\n"
            )
            _write(out / f"{m}.yml", head + yaml.safe_dump(study_vars(out, kind, m, models_dir), sort_keys=False, width=1000))
    record: dict[str, Any] = {"seed": seed, "models": {}}
    if not train:
        return record
    import time

    from lookahead.backends.transformers_backend import TransformersBackend
    from lookahead.demo.tokenizer import build_tokenizer
    from lookahead.demo.train import TrainSpec, save_model, train_model

    docs = {
        m: [d for k in MAKERS for d in training_docs(k, seed, n_train * DOCS_SCALE.get((m, k), 1), m, EVIDENCE_SHARE[m])]
        for m in models
    }
    # the vocabulary from both models' documents at one half and n_train a kind, whatever
    # the recipe: a model trained alone keeps the other's token ids
    base = [d for m in MODELS for k in MAKERS for d in training_docs(k, seed, n_train, m)]
    evals = [i.prompt(i.claims) for ins in insts.values() for i in ins]
    tok = build_tokenizer([d.text + " " + d.answer for d in base] + evals + list(VALUES) + [MEDIAN])
    build_file = models_dir / f"BUILD_{'_'.join(models)}.json"
    for m in models:
        spec = TrainSpec(
            hidden_size=64,
            intermediate_size=128,
            num_layers=2,
            num_heads=4,
            epochs=EPOCHS[m],
            batch_size=16,
            lr=6e-3,
            warmup_steps=30,
            answer_weight=4.0,
            abstain_mass=0.0,
            seed=seed,
            threads=1,
            answer_through_eos=True,
        )
        t0 = time.perf_counter()
        print(f"training {m}: {len(docs[m])} documents, vocabulary {len(tok)}", flush=True)
        model, info = train_model(docs[m], tok, spec)
        info.update(weights_bytes=save_model(model, tok, models_dir / m), wall_seconds=round(time.perf_counter() - t0, 1))
        record["models"][m] = info
        backend = TransformersBackend(f"demo-claims-kinds-{m}", model=model, tokenizer=tok)
        for kind, ins in insts.items():
            write_predictions(root / kind, kind, ins, m, backend)
    _write(build_file, json.dumps(record, indent=1, default=str))
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build the regression and ranking claim demos (planted claims, two models)")
    ap.add_argument("--out", default="demo/claims")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--data-only", action="store_true")
    ap.add_argument("--n-train", type=int, default=2500)
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    a = ap.parse_args(argv)
    build(Path(a.out), a.seed, not a.data_only, a.n_train, tuple(a.models))


# ----------------------------------------------------------------------------- rule following


def rule_following(kind: str, model: str, backend: Any, seed: int = SEED) -> dict[str, Any]:
    """How often the trained model follows its planted rule where the Shapley values
    read it: over the coalitions the demo study scores (its plan: all 2^n up to
    claims_exact_max 5 claims, else 100 permutations with seed 42; the empty set is RULE
    2's default, never asked), the share whose answer, parsed as the coalition job
    parses it, equals the rule model's. An answer that does not parse counts as not
    following."""
    from lookahead.claims.shapley import DEFAULT_PERMUTATIONS, DEFAULT_SEED, plan_for
    from lookahead.claims.tasks import PredictionError

    k = KINDS[kind]
    prompts, want, items_of = [], [], []
    for inst in demo_instances(kind, seed):
        n = len(inst.claims)
        items = sorted(inst.items, key=str.lower) or None
        for mask in plan_for(n, f"{inst.instance_id}|{AGENT}", 5, DEFAULT_PERMUTATIONS, DEFAULT_SEED).masks:
            if mask == 0:
                continue
            co = [inst.claims[i] for i in range(n) if mask >> i & 1]
            prompts.append(inst.prompt(co))
            want.append(k.value_answer(rule_answer(model, inst, co), [], KS, items))
            items_of.append(items)
    follow = 0
    for g, w, items in zip(backend.generate(prompts, 64, 0), want, items_of, strict=True):
        try:
            follow += k.value_answer(g.response_text, [], KS, items) == w
        except PredictionError:  # an unparseable answer does not follow the rule
            continue
    return {"coalitions": len(prompts), "following": follow, "share": follow / len(prompts) if prompts else None}
