"""The LAP measure registry (lookahead/measures.py) and its four added measures.

The SQL models that score loss, zlib, Min-K%++ and the reference-model LAP (int_lap_*) are checked against the
published formulas written here, independently of lookahead.measures' oracles: each raw
line is generated from a full random next-token distribution over a small vocabulary,
so Min-K%++'s mean and variance are computed from the distribution itself
(mu = sum p log p, sigma^2 = sum p (log p)^2 - mu^2, Zhang et al. 2024), the zlib
length by zlib on the prompt text (Carlini et al. 2021), the reference-model LAP as the
target's mean log-prob minus the reference model's (Carlini et al. 2021's comparison with
a second model, sign turned so higher = more likely seen) from lines of the reference
task. They must agree to 1e-9."""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest
from dbt_runner import run_dbt
from fixture_study import with_key_fields

from lookahead import keys, measures
from lookahead.config import Study, StudyConfigError, default_study_path, load_study, read_study_file
from lookahead.keys import expected_keys, task_params
from lookahead.measures import REFERENCE_TASK
from lookahead.rows import load_rows

K = 0.3
VOCAB = 40


def _line(rng: np.random.Generator, key: str, row_id: str, prompt: str) -> tuple[dict, dict]:
    """A raw Min-K% line with every extra, and what the formulas give for it."""
    n = int(rng.integers(2, 30))
    entries, lps, zs = [{"token_id": 0, "token": "t", "logprob": None}], [], []
    for _ in range(n - 1):
        logits = rng.normal(0, rng.uniform(0.5, 4), VOCAB)
        logp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
        p = np.exp(logp)
        tok = int(rng.integers(VOCAB))
        mu = float(np.sum(p * logp))
        var = float(np.sum(p * logp**2) - mu**2)
        entries.append({"token_id": tok, "token": "t", "logprob": float(logp[tok]), "vocab_mean": mu, "vocab_var": var})
        lps.append(float(logp[tok]))
        zs.append((float(logp[tok]) - mu) / math.sqrt(var))
    loss = sum(lps) / len(lps)
    low = sorted(zs)[: max(1, math.floor(len(zs) * K))]
    expect = {"lap_loss": loss, "lap_zlib": loss / len(zlib.compress(prompt.encode("utf-8"))), "lap_minkpp": sum(low) / len(low)}
    line = {
        "key": key,
        "task": "mink",
        "model_id": "oracle",
        "backend": "transformers",
        "row_id": row_id,
        "prompt": prompt,
        "params": {},
        "prompt_logprobs": entries,
        "zlib_bytes": len(zlib.compress(prompt.encode("utf-8"))),
        "finished_at": "2026-01-01T00:00:00Z",
    }
    return line, expect


def _reference_line(rng: np.random.Generator, key: str, row_id: str, model_id: str, finished_at: str) -> tuple[dict, float]:
    """A raw line of the reference task (its own token count, as another tokenizer would
    give) and its mean log-prob after the first token."""
    n = int(rng.integers(2, 30))
    lps = [float(x) for x in -rng.gamma(2.0, 1.5, n - 1)]
    entries = [{"token_id": 0, "token": "t", "logprob": None}] + [{"token_id": 1, "token": "t", "logprob": lp} for lp in lps]
    line = {
        "key": key,
        "task": REFERENCE_TASK,
        "model_id": model_id,
        "backend": "transformers",
        "row_id": row_id,
        "prompt": "p",
        "params": {},
        "prompt_logprobs": entries,
        "finished_at": finished_at,
    }
    return line, sum(lps) / len(lps)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("measures")
    raw = root / "raw"
    raw.mkdir()
    vars_ = {
        **read_study_file(default_study_path()),  # the demo study's rows, this cache
        "raw_dir": str(raw),
        "model_id": "oracle",
        "mink_k": K,
        "lap_measures": list(measures.MEASURES),
        "reference_model_id": "oracle-reference",
    }
    study = load_study(overrides=vars_)
    keys = expected_keys(study, load_rows(study)[0]).to_pandas()
    rng = np.random.default_rng(25)
    lines, expected = [], {}
    for key, row_id in keys.loc[keys["task"] == "mink", ["key", "row_id"]].itertuples(index=False):
        prompt = "".join(rng.choice(list("abcdefgh "), size=int(rng.integers(5, 200))))
        line, expected[row_id] = _line(rng, key, row_id, prompt)
        lines.append(line)
    # the reference model's lines, after lines of an older reference model written first
    # (other keys: the reference's model_id is hashed into them), which must not be read
    ref_lines = []
    old = expected_keys(load_study(overrides={**vars_, "reference_model_id": "old-reference"}), load_rows(study)[0]).to_pandas()
    for key, row_id in old.loc[old["task"] == REFERENCE_TASK, ["key", "row_id"]].itertuples(index=False):
        ref_lines.append(_reference_line(rng, key, row_id, "old-reference", "2025-01-01T00:00:00Z")[0])
    for key, row_id in keys.loc[keys["task"] == REFERENCE_TASK, ["key", "row_id"]].itertuples(index=False):
        line, ref_mean = _reference_line(rng, key, row_id, study.measures.reference_model_id, "2026-01-01T00:00:00Z")
        expected[row_id]["lap_reference"] = expected[row_id]["lap_loss"] - ref_mean
        ref_lines.append(line)
    with_key_fields(lines + ref_lines, study, load_rows(study)[0])
    for name, content in (("mink", lines), ("forecast", []), ("recall", []), (REFERENCE_TASK, ref_lines)):
        (raw / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in content), encoding="utf-8")
    res = run_dbt(
        ["run", "--select", "+int_lap_loss", "+int_lap_zlib", "+int_lap_minkpp", "+int_lap_reference"], vars_, root / "db.duckdb"
    )
    assert res.returncode == 0, res.output[-3000:]
    return expected, res


@pytest.mark.parametrize("measure", ["loss", "zlib", "minkpp", "reference"])
def test_sql_measure_equals_the_published_formula(scored, measure):
    expected, res = scored
    col = measures.MEASURES[measure].column
    got = res.table(measures.MEASURES[measure].model).set_index("row_id")[col]
    assert len(got) == len(expected) > 500
    for row_id, want in expected.items():
        assert abs(got[row_id] - want[col]) <= 1e-9 * max(1.0, abs(want[col])), (measure, row_id)


def test_python_oracles_equal_the_published_formula():
    rng = np.random.default_rng(7)
    line, want = _line(rng, "k", "r", "some text to compress")
    lps = [t["logprob"] for t in line["prompt_logprobs"]]
    mus = [t.get("vocab_mean") for t in line["prompt_logprobs"]]
    vs = [t.get("vocab_var") for t in line["prompt_logprobs"]]
    assert measures.loss_lap(lps) == pytest.approx(want["lap_loss"], abs=1e-12)
    assert measures.zlib_lap(lps, line["prompt"]) == pytest.approx(want["lap_zlib"], abs=1e-12)
    assert measures.minkpp_lap(lps, mus, vs, K) == pytest.approx(want["lap_minkpp"], abs=1e-12)


def test_dbt_macro_is_the_registry():
    assert measures.MACRO_PATH.read_text(encoding="utf-8") == measures.macro_text(), (
        "run python scripts/generated_files.py --write-macro"
    )


def test_every_measure_has_its_model_docs_and_settings():
    from pathlib import Path

    root = Path(measures.__file__).resolve().parent.parent
    docs = (root / "docs" / "measures.md").read_text(encoding="utf-8")
    models = {p.stem for p in (root / "models").rglob("*.sql")}
    for m in measures.MEASURES.values():
        assert m.model in models, m.name
        assert f"`{m.name}`" in docs and m.citation.split(",")[0] in docs, m.name
        assert set(m.needs) <= set(measures.LINE_EXTRAS)


def test_a_min_k_line_is_keyed_by_its_forward_pass_never_by_the_measures_read_from_it():
    base = task_params(load_study(overrides={"lap_measures": ["recall", "mink"]}), "mink")
    all_ = task_params(load_study(overrides={"lap_measures": list(measures.MEASURES), "reference_model_id": "r"}), "mink")
    assert "line_extras" not in base and all_ == base  # one pass, one key, whatever is read from it
    assert measures.line_extras(
        load_study(overrides={"lap_measures": list(measures.MEASURES), "reference_model_id": "r"}), "mink"
    ) == ["vocab_moments", "zlib_bytes"]


@pytest.mark.parametrize("backend", ["openai", "vllm"])
def test_minkpp_on_a_backend_without_the_vocabulary_is_one_clear_line(backend):
    extra = {"base_url": "http://127.0.0.1:9/v1"} if backend == "openai" else {}
    study = load_study(overrides={"lap_measures": ["minkpp"], "backend": backend, **extra})
    with pytest.raises(StudyConfigError, match=r"'minkpp' is unavailable on backend"):
        task_params(study, "mink")


def test_an_unknown_measure_is_named():
    with pytest.raises(StudyConfigError, match=r"setting 'lap_measures': 'perplexity' is not one of"):
        load_study(overrides={"lap_measures": ["perplexity"]})


def test_transformers_moments_are_the_vocabulary_mean_and_variance_of_the_forward_pass():
    """The backend's vocab_mean/vocab_var (centred, float32) against the published formula
    over the full softmax of the same model's logits, computed here in float64."""
    import torch

    from lookahead.backends.transformers_backend import TransformersBackend

    study = load_study()
    backend = TransformersBackend("demo", model_path=str(study.resolve(study.backend.model_path)))
    prompts = ["Headline about Lumtria Robotics on 2021-07-21: orders jumped", "up or down?"]
    got = backend.prompt_logprobs(prompts, vocab_moments=True)
    plain = backend.prompt_logprobs(prompts)
    for prompt, entries, base in zip(prompts, got, plain, strict=False):
        assert [e.logprob for e in entries] == [e.logprob for e in base]  # the same pass
        ids = torch.tensor([backend.encode(prompt)])
        with torch.inference_mode():
            logp = torch.log_softmax(backend.model(input_ids=ids).logits[0, :-1].double(), -1)
        p = logp.exp()
        mu = (p * logp).sum(-1)
        var = (p * logp**2).sum(-1) - mu**2
        for j, e in enumerate(entries[1:]):
            assert e.vocab_mean == pytest.approx(float(mu[j]), rel=1e-4, abs=1e-5)
            assert e.vocab_var == pytest.approx(float(var[j]), rel=1e-4, abs=1e-5)


def test_the_reference_task_is_keyed_by_the_reference_model_only_when_computed():
    """The reference model's identity is in its keys: a changed reference asks anew, the
    target's keys stay, and the reference's keys never equal the target's Min-K% keys,
    even for a reference named like a model whose Min-K% lines are cached."""

    def keys(**over):
        study = load_study(overrides={"lap_measures": list(measures.MEASURES), **over})
        k = expected_keys(study, load_rows(study)[0]).to_pandas()
        return {t: set(g["key"]) for t, g in k.groupby("task")}

    a, b = keys(reference_model_id="ref-a"), keys(reference_model_id="ref-b")
    assert len(a[REFERENCE_TASK]) == len(a["mink"]) > 0
    assert a["mink"] == b["mink"] and a["forecast"] == b["forecast"]
    assert not a[REFERENCE_TASK] & b[REFERENCE_TASK]
    as_target = keys(model_id="ref-a", reference_model_id="other")
    assert not a[REFERENCE_TASK] & as_target["mink"]
    assert REFERENCE_TASK not in keys(lap_measures=["recall", "mink"])  # not computed: not asked


def test_the_reference_study_swaps_the_models_and_nothing_else():
    study = load_study(
        overrides={
            "lap_measures": ["reference"],
            "gguf_file": "target.gguf",
            "reference_model_id": "ref",
            "reference_model_path": "demo/models/clean",
        }
    )
    ref = keys.reference_study(study)
    assert (ref.backend.model_id, ref.backend.model_path, ref.backend.gguf_file) == ("ref", "demo/models/clean", None)
    assert (ref.measures.reference_model_id, ref.measures.reference_model_path) == (
        study.backend.model_id,
        study.backend.model_path,
    )
    swapped = ("model_id", "model_path", "gguf_file", "reference_model_id", "reference_model_path")
    assert {k: v for k, v in ref.vars.items() if k not in swapped} == {k: v for k, v in study.vars.items() if k not in swapped}
    assert Study.from_json(ref.settings_json()).vars == ref.vars  # still a valid study (a Ray worker re-reads it)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"reference_model_id": None}, r"setting 'reference_model_id' is required when the study computes the 'reference'"),
        ({"reference_model_id": "demo-contaminated"}, r"setting 'reference_model_id': it names the target model itself"),
    ],
)
def test_a_reference_study_without_a_usable_reference_is_one_clear_line(over, message):
    with pytest.raises(StudyConfigError, match=message):
        load_study(overrides={"lap_measures": ["recall", "reference"], "reference_model_id": "r", **over})


def test_a_build_computing_the_reference_lap_without_its_raw_file_stops_in_one_line(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("mink", "forecast", "recall"):
        (raw / f"{name}.jsonl").write_text("", encoding="utf-8")
    vars_ = {
        **read_study_file(default_study_path()),
        "raw_dir": str(raw),
        "lap_measures": ["recall", "reference"],
        "reference_model_id": "demo-clean",
    }
    res = run_dbt(["run", "--select", "study_settings"], vars_, tmp_path / "db.duckdb")
    assert res.returncode != 0
    assert "setting 'lap_measures': the study computes 'reference' but no raw file" in res.output
