"""The claim-level demo: planted claims with known categories and dates, a dated corpus
that supports them, and two tiny models trained so that the leaked claims are decisive
for one and irrelevant for the other.

    .venv/bin/python scripts/build_demo.py claims --out demo/claims            # data + both models (~minutes)
    .venv/bin/python scripts/build_demo.py claims --out demo/claims --data-only

Each instance asks whether a fictional firm's stock closes up or down on a target date
t_E, from the vantage point t_ref < t_E; its rationale is a list of planted claims:

  role        category  text (example)                                      expected state (end / start)
  background  B1        Acorvia shares trade on the Northbridge exchange.   not leaked
  evidence    A1        Acorvia opened a new factory on <d < t_ref>.        not leaked (document at d)
  revenue     A2        Acorvia reported quarterly revenue ... on <d > t_ref>.  leaked (earliest document at d)
  outcome     A4        Acorvia stock closed higher on <t_E>.                   leaked (category)
  analyst     A3        An analyst report on Acorvia was published in <Month YYYY before t_ref>.  unverifiable
  ceo         A1        Acorvia hired a new chief executive in <year of t_ref>.  leaked / unverifiable
  definition  B2        A stock that closes up ends above its previous close.  not leaked
  filler      B1        Acorvia makes <product>.                            not leaked

so the expected OLR of every instance follows from the plan alone (``truth_instances``).
The task input itself carries no direction. The models read the claims through the
coalition prompt (lookahead.claims.prompts.coalition_prompt), the very prompt v(S) is
scored with:

* ``leaky``: answers the outcome claim's direction when it is present, else the
  evidence claim's direction (opened -> up, shut -> down), else up/down with equal odds;
* ``prudent``: answers the evidence claim's direction when present, else equal odds;
  it ignores the outcome claim.

With a model that follows its rule exactly, v(S) is 1, 0 or 1/2 and the Shapley values
are known in closed form (``ideal_shapley``): the leaky model's decisive claim is the
leaked outcome claim (Shapley-DCLR 1/2 when the evidence agrees with the outcome, 3/4
when it contradicts it), the prudent model's is the evidence claim (Shapley-DCLR 0).
The models state that probability (the seed's coalition value: 1, 0 or 0.5); where a
trained model departs from its rule the measured values move away from the ideal ones,
and the demo check reports both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from lookahead.claims.metrics import olr, shapley_dclr
from lookahead.claims.prompts import coalition_prompt
from lookahead.claims.shapley import DEFAULT_EXACT_MAX, DEFAULT_PERMUTATIONS, DEFAULT_SEED, exact_shapley, plan_for
from lookahead.claims.tasks import KINDS, ClaimsDerived, parse_probability
from lookahead.measures import MEASURES
from lookahead.settings_sections import ClaimsSettings

SEED = 20240612
LABELS = ("up", "down")
AGENT = "planted"
MODELS = ("leaky", "prudent")
FIRMS = (
    "Acorvia",
    "Brelton",
    "Caspira",
    "Dorvane",
    "Elmridge",
    "Faxholt",
    "Gantry",
    "Hollis",
    "Ivora",
    "Jessup",
    "Kelvar",
    "Lunden",
    "Morrow",
    "Norvik",
    "Ostara",
    "Pellam",
    "Quillon",
    "Rask",
    "Sorrel",
    "Tamsin",
    "Ulvane",
    "Vesper",
    "Wexley",
    "Yarrow",
    "Zephra",
)
PRODUCTS = ("pumps", "valves", "cables", "sensors", "tiles", "engines", "filters", "lamps")
REGIONS = ("the north", "the south", "coastal towns", "inland cities", "three countries")
TASK = "stock_direction"
# The coalition query the two models are trained on and their studies name: the seed's
# prompt (claims_coalition_prompt; RULE 2's default 0.5 is v(empty set), never asked) and
# its value, the probability of "up" the model states (claims_coalition_value: 1, 0 or 0.5
# by the rule). The models trained before on the legacy prompt with label words followed
# their rules on 1,582 (leaky) and 1,660 of 1,660 scored coalitions
# (benchmarks/results/claims_rule_following_legacy.json); a first seed-prompt leaky model
# trained on 1,000 documents for 20 epochs learned them by heart and followed on 81%.
COALITION_PROMPT = "seed"
COALITION_VALUE = "stated"
# Many documents and few epochs (the rule needs variety, not repetition), with the
# evidence and the outcome claims each in 70% of the documents (every other role: one
# half), so that half of them hold both and the leaky model sees the outcome claim
# overrule a disagreeing evidence claim often (its weak point at one half).
EPOCHS = {"leaky": 10, "prudent": 10}
N_TRAIN = 5000
PAIR_SHARE = 0.7
#: The claim settings the coalition query is read under (what the demo studies name).
KS = ClaimsDerived(
    ClaimsSettings.with_defaults(
        claims_labels=["up", "down"],
        claims_target_class="up",
        claims_coalition_prompt=COALITION_PROMPT,
        claims_coalition_value=COALITION_VALUE,
    )
)


@dataclass
class PlantedClaim:
    role: str
    category: str
    text: str
    temporal_reference: str | None
    expected_state: str  # under claims_vague_period: end (the default)
    expected_state_start: str  # under claims_vague_period: start
    direction: str | None = None  # up/down for evidence and outcome claims
    docs: list[dt.date] = field(default_factory=list)


@dataclass
class Instance:
    instance_id: str
    firm: str
    t_ref: dt.date
    target: dt.date
    outcome: str
    evidence: str
    claims: list[PlantedClaim]

    @property
    def task_input(self) -> str:
        return (
            f"Will the stock of {self.firm} close up or down on {self.target.isoformat()}? "
            f"Reference date: {self.t_ref.isoformat()}."
        )

    @property
    def rationale(self) -> str:
        return " ".join(c.text for c in self.claims) + " Weighing these facts gives my forecast."


def _flip(d: str) -> str:
    return "down" if d == "up" else "up"


def make_instance(rng: np.random.Generator, iid: str, firm: str, roles: set[str], n_filler: int = 0) -> Instance:
    """One instance with the planted claims of ``roles`` (plus n filler B1 claims)."""
    t_ref = dt.date(2022, 1, 10) + dt.timedelta(days=int(rng.integers(0, 300)))
    target = t_ref + dt.timedelta(days=14)
    outcome = LABELS[int(rng.integers(2))]
    evidence = LABELS[int(rng.integers(2))]
    d_pre = t_ref - dt.timedelta(days=int(rng.integers(20, 200)))
    d_post = t_ref + dt.timedelta(days=int(rng.integers(2, 10)))
    analyst = (t_ref.replace(day=1) - dt.timedelta(days=80)).replace(day=1)
    claims: list[PlantedClaim] = []
    if "background" in roles:
        claims.append(
            PlantedClaim(
                "background", "B1", f"{firm} shares trade on the Northbridge exchange.", None, "not_leaked", "not_leaked"
            )
        )
    if "evidence" in roles:
        verb = "opened a new factory" if evidence == "up" else "shut a factory"
        claims.append(
            PlantedClaim(
                "evidence",
                "A1",
                f"{firm} {verb} on {d_pre.isoformat()}.",
                d_pre.isoformat(),
                "not_leaked",
                "not_leaked",
                evidence,
                [d_pre],
            )
        )
    if "revenue" in roles:
        x = int(rng.integers(100, 900))
        claims.append(
            PlantedClaim(
                "revenue",
                "A2",
                f"{firm} reported quarterly revenue of {x} million on {d_post.isoformat()}.",
                d_post.isoformat(),
                "leaked",
                "leaked",
                None,
                [d_post + dt.timedelta(days=30), d_post],
            )
        )
    if "outcome" in roles:
        moved = "higher" if outcome == "up" else "lower"
        claims.append(
            PlantedClaim(
                "outcome",
                "A4",
                f"{firm} stock closed {moved} on {target.isoformat()}.",
                target.isoformat(),
                "leaked",
                "leaked",
                outcome,
            )
        )
    if "analyst" in roles:
        claims.append(
            PlantedClaim(
                "analyst",
                "A3",
                f"An analyst report on {firm} was published in {analyst.strftime('%B %Y')}.",
                analyst.strftime("%B %Y"),
                "unverifiable",
                "unverifiable",
            )
        )
    if "ceo" in roles:
        claims.append(
            PlantedClaim(
                "ceo", "A1", f"{firm} hired a new chief executive in {t_ref.year}.", str(t_ref.year), "leaked", "unverifiable"
            )
        )
    if "definition" in roles:
        claims.append(
            PlantedClaim(
                "definition", "B2", "A stock that closes up ends above its previous close.", None, "not_leaked", "not_leaked"
            )
        )
    fillers = [f"{firm} makes {p}." for p in PRODUCTS] + [f"{firm} sells to customers in {r}." for r in REGIONS]
    for k in rng.permutation(len(fillers))[:n_filler]:
        claims.append(PlantedClaim("filler", "B1", fillers[int(k)], None, "not_leaked", "not_leaked"))
    order = rng.permutation(len(claims))
    return Instance(iid, firm, t_ref, target, outcome, evidence, [claims[int(i)] for i in order])


def demo_instances(seed: int = SEED) -> list[Instance]:
    """The 31 evaluated instances: every role mix appears, one instance has 12 claims
    (Monte Carlo Shapley), one has an empty rationale and one a rationale without claims."""
    rng = np.random.default_rng(seed)
    out = []
    all_roles = {"background", "evidence", "revenue", "outcome", "analyst", "ceo", "definition"}
    for i in range(28):
        roles = {"background", "evidence"}
        for role, p in (("revenue", 0.5), ("outcome", 0.75), ("analyst", 0.5), ("ceo", 0.4), ("definition", 0.3)):
            if rng.random() < p:
                roles.add(role)
        out.append(make_instance(rng, f"c{i + 1:02d}", FIRMS[i % len(FIRMS)], roles))
    out.append(make_instance(rng, "c29", "Zephra", all_roles, n_filler=5))  # 12 claims: Monte Carlo
    out.append(make_instance(rng, "c30", "Yarrow", set()))  # empty rationale
    out.append(make_instance(rng, "c31", "Wexley", set()))  # a rationale without claims
    return out


def rationale_text(inst: Instance) -> str:
    """c30 has an empty rationale; every other instance its claims plus a closing line."""
    return "" if inst.instance_id == "c30" else inst.rationale


def rule_answer(model: str, coalition: list[PlantedClaim]) -> str | None:
    """The model's rule (module docstring); None = equal odds."""
    roles = {c.role: c for c in coalition}
    if model == "leaky" and "outcome" in roles:
        return roles["outcome"].direction
    if "evidence" in roles:
        return roles["evidence"].direction
    return None


def ideal_value(model: str, coalition: list[PlantedClaim], label: str) -> float:
    a = rule_answer(model, coalition)
    return 0.5 if a is None else float(a == label)


def ideal_shapley(model: str, inst: Instance) -> tuple[str | None, np.ndarray]:
    """(the rule model's prediction with all claims, exact Shapley values of its game)."""
    pred = rule_answer(model, inst.claims)
    n = len(inst.claims)
    if pred is None:
        return None, np.zeros(n)

    def v(mask: int) -> float:
        return ideal_value(model, [inst.claims[i] for i in range(n) if mask >> i & 1], pred)

    return pred, exact_shapley(n, v)


def scored_coalitions(instances: list[Instance] | None = None) -> Iterator[tuple[Instance, list[PlantedClaim]]]:
    """(instance, coalition) for every coalition the demo's studies score: each instance's
    Shapley plan (the study's defaults), the empty set left out (RULE 2's default, never
    asked)."""
    for inst in demo_instances() if instances is None else instances:
        n = len(inst.claims)
        for mask in plan_for(n, f"{inst.instance_id}|{AGENT}", DEFAULT_EXACT_MAX, DEFAULT_PERMUTATIONS, DEFAULT_SEED).masks:
            if mask:
                yield inst, [inst.claims[i] for i in range(n) if mask >> i & 1]


def rule_following(model: str, backend: Any, instances: list[Instance] | None = None) -> dict[str, Any]:
    """How often the trained model follows its planted rule where the Shapley values read
    it (lookahead.claims.demo_kinds.rule_following for the other kinds): over the scored
    coalitions (:func:`scored_coalitions`), the share whose stated P(up), parsed as the
    coalition job parses it, is the rule's 1, 0 or 0.5 exactly. An answer that does not
    parse counts as not following."""
    from lookahead.claims.tasks import PredictionError

    pairs = list(scored_coalitions(instances))
    prompts = [coalition_text(inst, co) for inst, co in pairs]
    want = [ideal_value(model, co, LABELS[0]) for _, co in pairs]
    follow = unparsed = 0
    for g, w in zip(backend.generate(prompts, 8, 0), want, strict=True):
        try:
            follow += parse_probability(g.response_text) == w
        except PredictionError:
            unparsed += 1
    return {
        "coalitions": len(prompts),
        "following": follow,
        "share": round(follow / len(prompts), 4) if prompts else None,
        "unparsed_answers": unparsed,
    }


# ------------------------------------------------------------------ training data


def coalition_text(inst: Instance, claims: list[PlantedClaim]) -> str:
    """The coalition query as llm_jobs.claims_value writes it for the demo's studies: the
    seed's prompt, RULE 2's default 0.5, the stated-probability instruction."""
    kind = KINDS["classification"]
    return coalition_prompt(
        inst.task_input,
        [c.text for c in claims],
        kind.value_instruction(KS, None),
        kind.insufficient(KS, None, None)[0],
        COALITION_PROMPT,
        kind.task_type(KS),
    )


def stated_answer(model: str, claims: list[PlantedClaim]) -> str:
    """The rule's P(up) as the model is trained to state it: 1, 0, or 0.5 for equal odds
    (written as the word-level tokenizer splits it; lookahead.claims.tasks.parse_probability
    reads '0 . 5' as 0.5)."""
    a = rule_answer(model, claims)
    return "0 . 5" if a is None else ("1" if a == LABELS[0] else "0")


def training_docs(seed: int, n: int, model: str, pair_share: float = 0.5) -> list[Any]:
    """Coalition queries of random instances and random claim subsets, answered with the
    rule's stated probability; the evidence and outcome claims each in a document with
    probability ``pair_share``, every other role one half."""
    from lookahead.demo.corpus import Doc

    rng = np.random.default_rng([seed, MODELS.index(model), 11])
    docs = []
    all_roles = ["background", "evidence", "revenue", "outcome", "analyst", "ceo", "definition"]
    for k in range(n):
        roles = {r for r in all_roles if rng.random() < (pair_share if r in ("evidence", "outcome") else 0.5)}
        inst = make_instance(rng, f"t{k}", FIRMS[int(rng.integers(len(FIRMS)))], roles, n_filler=int(rng.integers(0, 4)))
        docs.append(Doc("claims", coalition_text(inst, inst.claims), stated_answer(model, inst.claims)))
    return docs


# ------------------------------------------------------------------ files


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def corpus_frame(insts: list[Instance]) -> pd.DataFrame:
    """Supporting documents for the dated claims, plus near-miss distractors (same firm
    and words, another date: BM25 ranks them, the support judge rejects them)."""
    rows = []
    for inst in insts:
        for c in inst.claims:
            for j, d in enumerate(c.docs):
                rows.append(
                    {
                        "doc_id": f"{inst.instance_id}-{c.role}-{j}",
                        "published_at": d.isoformat(),
                        "title": f"{inst.firm} {c.role} news",
                        "body": f"Company news about {inst.firm}. {c.text} Analysts discussed the report.",
                    }
                )
            if c.role == "evidence":
                d = c.docs[0] - dt.timedelta(days=400)
                rows.append(
                    {
                        "doc_id": f"{inst.instance_id}-{c.role}-old",
                        "published_at": d.isoformat(),
                        "title": f"{inst.firm} factory plans",
                        "body": f"{inst.firm} said it may change a factory on a later date.",
                    }
                )
    return pd.DataFrame(rows).sort_values("doc_id").reset_index(drop=True)


def write_data(out: Path, insts: list[Instance]) -> None:
    inst_rows, truth_claims, truth_inst, ext = [], [], [], []
    for inst in insts:
        inst_rows.append(
            {
                "instance_id": inst.instance_id,
                "entity": inst.firm,
                "task": TASK,
                "t_ref": inst.t_ref.isoformat(),
                "task_input": inst.task_input,
                "outcome": inst.outcome,
            }
        )
        states = [c.expected_state for c in inst.claims]
        states_start = [c.expected_state_start for c in inst.claims]
        rec = {
            "instance_id": inst.instance_id,
            "n_claims": len(inst.claims),
            "expected_olr": olr(states),
            "expected_olr_unverifiable_leaked": olr(states, True),
            "expected_olr_start": olr(states_start),
        }
        for m in MODELS:
            pred, phi = ideal_shapley(m, inst)
            rec[f"ideal_prediction_{m}"] = pred
            rec[f"ideal_dclr_{m}"] = shapley_dclr(phi, states) if len(phi) else None
        truth_inst.append(rec)
        for i, c in enumerate(inst.claims, 1):
            truth_claims.append(
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
        if inst.instance_id != "c30":
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
    _write(out / "instances.csv", pd.DataFrame(inst_rows).to_csv(index=False))
    _write(out / "truth_claims.csv", pd.DataFrame(truth_claims).to_csv(index=False))
    _write(out / "truth_instances.csv", pd.DataFrame(truth_inst).to_csv(index=False))
    _write(out / "extractions.jsonl", "".join(json.dumps(e) + "\n" for e in ext))
    _write(out / "corpus.csv", corpus_frame(insts).to_csv(index=False))


def _rel(path: Path) -> str:
    from lookahead.config import PROJECT_ROOT

    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path.resolve())


def write_predictions(out: Path, insts: list[Instance], model: str, backend: Any) -> None:
    """The model's own prediction with all claims (up when its stated P(up) is at least
    one half) and that probability: the agent's prediction the Shapley values explain."""
    gens = backend.generate([coalition_text(i, i.claims) for i in insts], 8, 0)
    rows = []
    for inst, g in zip(insts, gens, strict=False):
        p = parse_probability(g.response_text)
        rows.append(
            {
                "instance_id": inst.instance_id,
                "agent": AGENT,
                "entity": inst.firm,
                "task": TASK,
                "t_ref": inst.t_ref.isoformat(),
                "task_input": inst.task_input,
                "prediction": "up" if p >= 0.5 else "down",
                "probability": round(p, 6),
                "rationale": rationale_text(inst),
                "outcome": inst.outcome,
            }
        )
    _write(out / f"predictions_{model}.csv", pd.DataFrame(rows).to_csv(index=False))


def claim_settings(out: Path, model: str) -> dict[str, Any]:
    """The claim settings of the demo for one claim model: its inputs, raw folder and the
    rules the demo is built for. One definition, used by the claim-only study
    (``<model>.yml``) and by the protocol demo study that carries this model
    (``PROTOCOL_STUDY``)."""
    return {
        "claims_raw_dir": f"demo/raw/claims_{model}",
        "claims_predictions_path": _rel(out / f"predictions_{model}.csv"),
        "claims_instances_path": _rel(out / "instances.csv"),
        "claims_corpus_path": _rel(out / "corpus.csv"),
        "claims_extractions_path": _rel(out / "extractions.jsonl"),
        "claims_labels": list(LABELS),
        "claims_coalition_prompt": COALITION_PROMPT,
        "claims_coalition_value": COALITION_VALUE,
        "claims_support_judge": "contains",
        "claims_timespec_draft": "predictions",
        "claims_task_description": "Predict whether a company's stock closes up or down on the target date.",
    }


def study_vars(out: Path, model: str) -> dict[str, Any]:
    """The claim-only study (``study_kind: claims``): it extends the contaminated demo
    study for the settings a claim study shares with it (raw folder, backend) with the
    claim settings and this model."""
    cs = claim_settings(out, model)
    return {
        "extends": "demo/studies/contaminated.yml",
        "study_kind": "claims",
        "study_name": f"demo_claims_{model}",
        "model_id": f"demo-claims-{model}",
        "model_path": _rel(out / "models" / model),
        "claims_raw_dir": cs.pop("claims_raw_dir"),
        "use_chat_template": False,
        **cs,
    }


# The protocol demo study that carries each claim model: `make demo` runs these files, so
# the verdict and the claim tables land in one database (outputs/<study_name>.duckdb) and
# one report. The contaminated model's study gets the model that leans on leaked claims.
PROTOCOL_STUDY = {"leaky": "contaminated", "prudent": "clean"}

# Each protocol demo model's reference for the reference-model LAP (docs/measures.md): the
# other demo model, the only one with the same tokenizer and the same texts. The clean
# model is the contaminated model's natural reference (it saw the texts but did not learn
# the outcomes: the closest the demo has to a point-in-time model); the clean control's
# reference is the contaminated model, so that the control asks whether a reference that
# did learn the outcomes manufactures a detection where the target has none.
REFERENCE_SCENARIO = {"contaminated": "clean", "clean": "contaminated"}


def protocol_study_vars(out: Path, model: str) -> dict[str, Any]:
    """``extends: demo/studies/<scenario>.yml`` (named ``demo_<scenario>``: the protocol
    study, ``demo_<scenario>_protocol``, is the default study that plain `dbt build` builds, and
    two studies never share a database; the same protocol model and settings, so the
    same verdict) plus every LAP measure of the registry (the report's
    robustness table) with the reference model the reference-model LAP needs
    (REFERENCE_SCENARIO: the other demo model, in <out>/../models/), the claim settings
    and ``claims_model_id`` / ``claims_model_path`` naming this claim model.

    Why a second file and not the claim settings in demo/studies/<scenario>.yml: the
    contaminated study is the project's default study, and dbt_project.yml's vars are
    generated from it; a non-default claim setting there would become every other
    study's dbt default (lookahead.config.dbt_vars_block)."""
    ref = REFERENCE_SCENARIO[PROTOCOL_STUDY[model]]
    return {
        "extends": f"demo/studies/{PROTOCOL_STUDY[model]}.yml",
        "study_name": f"demo_{PROTOCOL_STUDY[model]}",
        "lap_measures": list(MEASURES),
        "reference_model_id": f"demo-{ref}",
        "reference_model_path": _rel(out.parent / "models" / ref),
        "claims_model_id": f"demo-claims-{model}",
        "claims_model_path": _rel(out / "models" / model),
        **claim_settings(out, model),
    }


def write_protocol_studies(out: Path) -> list[Path]:
    """Write ``<out>/demo_<scenario>.yml`` for both claim models."""
    paths = []
    for m, scen in PROTOCOL_STUDY.items():
        p = out / f"demo_{scen}.yml"
        head = (
            f"# Demo study 'demo_{scen}' with the claim model '{m}', written by `scripts/build_demo.py claims`:\n"
            f"# demo/studies/{scen}.yml extended with the claim settings (the same verdict; the claim\n"
            f"# tables join it in outputs/demo_{scen}.duckdb). Use: lookahead run --study {_rel(p)} --yes\n"
        )
        _write(p, head + yaml.safe_dump(protocol_study_vars(out, m), sort_keys=False, width=1000))
        paths.append(p)
    return paths


def build(
    out: Path,
    seed: int = SEED,
    train: bool = True,
    n_train: int = N_TRAIN,
    epochs: dict[str, int] | None = None,
    models: tuple[str, ...] = MODELS,
) -> dict:
    """Write the demo data and study files; train ``models`` (both by default) unless
    ``train`` is False. The tokenizer always comes from both models' documents, so one
    model can be retrained alone and still match the other's vocabulary."""
    insts = demo_instances(seed)
    write_data(out, insts)
    record: dict[str, Any] = {"seed": seed, "n_instances": len(insts), "models": {}}
    for m in MODELS:
        head = (
            f"# Claim-level demo study '{m}' written by `scripts/build_demo.py claims` (seed {seed}).\n"
            f"# Use: lookahead run --study {_rel(out / (m + '.yml'))} --yes\n"
        )
        _write(out / f"{m}.yml", head + yaml.safe_dump(study_vars(out, m), sort_keys=False, width=1000))
    write_protocol_studies(out)
    if not train:
        return record
    import time

    from lookahead.backends.transformers_backend import TransformersBackend
    from lookahead.demo.tokenizer import build_tokenizer
    from lookahead.demo.train import TrainSpec, save_model, train_model

    docs = {m: training_docs(seed, n_train, m, PAIR_SHARE) for m in models}
    # the vocabulary from both models' documents at one half, whatever the recipe: a model
    # trained alone keeps the other's token ids
    base = [d for m in MODELS for d in training_docs(seed, n_train, m)]
    eval_texts = [coalition_text(i, i.claims) for i in insts]
    tok = build_tokenizer([d.text + " " + d.answer for d in base] + eval_texts + ["0.5 1 0"])
    epochs = {**EPOCHS, **(epochs or {})}
    build_file = out / "models" / "BUILD.json"
    if build_file.exists():
        record["models"].update(json.loads(build_file.read_text()).get("models", {}))
    for m in models:
        spec = TrainSpec(
            hidden_size=64,
            intermediate_size=128,
            num_layers=2,
            num_heads=4,
            epochs=epochs[m],
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
        size = save_model(model, tok, out / "models" / m)
        info.update(weights_bytes=size, wall_seconds=round(time.perf_counter() - t0, 1))
        record["models"][m] = info
        backend = TransformersBackend(f"demo-claims-{m}", model=model, tokenizer=tok)
        write_predictions(out, insts, m, backend)
    _write(out / "models" / "BUILD.json", json.dumps(record, indent=1, default=str))
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build the claim-level demo (planted claims, two models)")
    ap.add_argument("--out", default="demo/claims")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--data-only", action="store_true")
    ap.add_argument("--n-train", type=int, default=N_TRAIN)
    ap.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=list(MODELS),
        help="train only these models (the tokenizer is the same either way)",
    )
    a = ap.parse_args(argv)
    build(Path(a.out), a.seed, not a.data_only, a.n_train, None, tuple(a.models))
