"""Backend parity (slow tier): the same recall and Min-K% queries on SmolLM2-135M-Instruct
give the same P(up), P(down), LAP and Min-K% LAP through transformers, vLLM offline and the
OpenAI route to a real `vllm serve` on 127.0.0.1.

All three run the same exported weights (scripts/export_smollm2_hf.py, bf16 on disk) in
float32 (weights upcast exactly), so what may differ is only kernel arithmetic: summation
order in matmuls/attention, vLLM's fused RMSNorm/SiLU and paged attention against
PyTorch's SDPA. In float32 that moves a log-probability by ~1e-5 to 1e-4 over 30 layers.
Tolerances, with a wide margin over what we measured here (docs/backends.md):
  TOKEN_LOGPROB_ATOL = 2e-3 on every per-token log-prob (Min-K% input) and top-20 logprob;
  PROB_ATOL = 1e-3 on P(up), P(down), P(unknown) and LAP = P(up) + P(down);
  MINK_RTOL = 2e-3 relative on Min-K% LAP (exp of a mean of log-probs, so a relative error
  equal to the mean log-prob error).
They are far below anything that matters to the test (LAP medians split at ~0.1 scale),
yet far above float32 noise, so a real plumbing error (a doubled BOS, an off-by-one in
prompt positions, logprobs taken after temperature, a lost top-k entry) fails them.

Needs .venv-vllm (bash scripts/make_vllm_env.sh); skipped with that reason otherwise.
Run with `make test-slow` or `pytest -m slow tests/python/test_backend_parity.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookahead.backends.vllm_serve import serve_vllm, vllm_env
from lookahead.config import load_study
from lookahead.scoring import label_probability, mink_lap

slow = pytest.mark.slow  # everything here but the first test needs .venv-vllm and minutes

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MODEL_DIR = ROOT / "outputs" / "models" / "smollm2-135m-instruct"
MODEL_ID = "smollm2-135m-instruct"

TOKEN_LOGPROB_ATOL = 2e-3
PROB_ATOL = 1e-3
MINK_RTOL = 2e-3

ENTITIES = [
    ("Apple Inc.", "AAPL", "2021-03-01"),
    ("Microsoft", "MSFT", "2020-11-09"),
    ("Tesla", "TSLA", "2022-01-27"),
    ("Exxon Mobil", "XOM", "2019-06-14"),
    ("Coca-Cola", "KO", "2023-08-02"),
    ("Nvidia", "NVDA", "2024-05-23"),
]
MINK_TEXTS = [
    "Apple shares rose 3% after the company reported record iPhone sales in the holiday quarter.",
    "Tesla recalled 135,000 vehicles over a touchscreen failure, regulators said on Tuesday.",
    "Exxon Mobil cut its capital spending plan for 2020 by 30 percent as oil prices collapsed.",
    "Coca-Cola agreed to buy the remaining stake in BodyArmor for $5.6 billion.",
    "The quick brown fox jumps over the lazy dog.",
    "Nvidia's data-center revenue tripled from a year earlier, beating analyst estimates.",
]
VLLM_OPTIONS = {"model_path": str(MODEL_DIR), "dtype": "float32", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 1024}


def recall_queries() -> list[str]:
    """The protocol's recall template of the default study, filled for a few entities."""
    p = load_study().prompts
    return [
        p.recall_template.format(
            target_date=d, outcome_description=p.outcome_description, entity_name=n, ticker=t, reference_period=p.reference_period
        )
        for n, t, d in ENTITIES
    ]


def queries() -> dict[str, Any]:
    return {"recall": recall_queries(), "mink": MINK_TEXTS, "use_chat_template": True, "top_logprobs": 20}


def test_vllm_backend_outside_its_venv_names_the_fix() -> None:
    """Fast: in the main venv (no vllm) the backend says how to get the vLLM environment."""
    import importlib.util

    from lookahead.backends.vllm_backend import VLLMBackend
    from lookahead.config import StudyConfigError

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is importable in this venv")
    with pytest.raises(StudyConfigError, match=r"'backend'.*make_vllm_env\.sh.*\.venv-vllm"):
        VLLMBackend("m", model_path=str(ROOT))


@pytest.fixture(scope="module")
def model_dir() -> Path:
    if not VLLM_PYTHON.exists():
        pytest.skip("backend parity needs the vLLM environment .venv-vllm: create it with `bash scripts/make_vllm_env.sh`")
    if not (MODEL_DIR / "model.safetensors").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "export_smollm2_hf.py"), str(MODEL_DIR)],
            check=True,
            env=vllm_env(),
            cwd=ROOT,
            timeout=600,
        )
    return MODEL_DIR


def _run_query_script(python: Path, backend: str, options: dict[str, Any], tmp: Path) -> dict[str, Any]:
    qfile, out = tmp / f"queries_{backend}.json", tmp / f"answers_{backend}.json"
    qfile.write_text(json.dumps(queries()), encoding="utf-8")
    proc = subprocess.run(
        [
            str(python),
            str(ROOT / "scripts" / "query_backend.py"),
            "--backend",
            backend,
            "--model-id",
            MODEL_ID,
            "--options",
            json.dumps(options),
            "--queries",
            str(qfile),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=vllm_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"{backend} run failed:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text(encoding="utf-8"))


def _query_script() -> Any:
    """scripts/query_backend.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("query_backend", ROOT / "scripts" / "query_backend.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def vllm_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server (what `vllm serve` runs) from .venv-vllm on loopback, float32."""
    log = tmp_path_factory.mktemp("serve") / "vllm_serve.log"
    try:
        with serve_vllm(model_dir, MODEL_ID, log, dtype="float32", eager=True) as (url, ready_s):
            print(f"\nvllm serve ready in {ready_s:.0f} s")
            yield url
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def answers(model_dir: Path, vllm_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("parity")
    run = _query_script().run

    res = {
        "transformers": run("transformers", MODEL_ID, {"model_path": str(model_dir), "dtype": "float32"}, queries()),
        "openai": run(
            "openai",
            MODEL_ID,
            {"base_url": vllm_server, "tokenizer_path": str(model_dir), "served_model": MODEL_ID, "timeout_s": 120},
            queries(),
        ),
    }
    res["vllm"] = _run_query_script(VLLM_PYTHON, "vllm", VLLM_OPTIONS, tmp)
    return res


def _recall_probs(gen: dict[str, Any]) -> dict[str, float | None]:
    return {lab: label_probability(gen["top_logprobs"], lab) for lab in ("up", "down", "unknown")}


@slow
@pytest.mark.vllm
@pytest.mark.parametrize("other", ["vllm", "openai"])
def test_recall_probabilities_agree(answers: dict[str, dict[str, Any]], other: str) -> None:
    ref, alt = answers["transformers"]["recall"], answers[other]["recall"]
    assert alt["prompts"] == ref["prompts"]  # the same chat-templated text was sent
    worst = 0.0
    for g_ref, g_alt in zip(ref["generations"], alt["generations"], strict=False):
        assert len(g_alt["top_logprobs"]) == 20
        p_ref, p_alt = _recall_probs(g_ref), _recall_probs(g_alt)
        for lab in ("up", "down", "unknown"):
            assert (p_ref[lab] is None) == (p_alt[lab] is None), (lab, g_ref["prompt"])
            if p_ref[lab] is not None:
                worst = max(worst, abs(p_ref[lab] - p_alt[lab]))
                assert p_alt[lab] == pytest.approx(p_ref[lab], abs=PROB_ATOL), lab
        lap_ref = (p_ref["up"] or 0) + (p_ref["down"] or 0)
        lap_alt = (p_alt["up"] or 0) + (p_alt["down"] or 0)
        assert lap_alt == pytest.approx(lap_ref, abs=PROB_ATOL)
        # the top-20 themselves: same leading token, same log-probs per token text
        top_ref = {t["token"]: t["logprob"] for t in g_ref["top_logprobs"]}
        top_alt = {t["token"]: t["logprob"] for t in g_alt["top_logprobs"]}
        shared = set(top_ref) & set(top_alt)
        assert len(shared) >= 18  # ties at rank 20 may swap the last entry
        for tok in shared:
            assert top_alt[tok] == pytest.approx(top_ref[tok], abs=TOKEN_LOGPROB_ATOL), tok
    print(f"\nparity recall transformers vs {other}: max |dP| = {worst:.2e}")
    # the test has teeth: at least one label carries real mass on this model
    assert any((_recall_probs(g)["up"] or 0) > 0.01 for g in ref["generations"])


@slow
@pytest.mark.vllm
@pytest.mark.parametrize("other", ["vllm", "openai"])
def test_mink_logprobs_and_lap_agree(answers: dict[str, dict[str, Any]], other: str) -> None:
    ref, alt = answers["transformers"]["mink"], answers[other]["mink"]
    worst_tok, worst_lap = 0.0, 0.0
    for row_ref, row_alt in zip(ref["logprobs"], alt["logprobs"], strict=False):
        assert [t["token_id"] for t in row_alt] == [t["token_id"] for t in row_ref]
        assert row_alt[0]["logprob"] is None and row_ref[0]["logprob"] is None
        for a, b in zip(row_ref[1:], row_alt[1:], strict=False):
            worst_tok = max(worst_tok, abs(a["logprob"] - b["logprob"]))
        assert [t["logprob"] for t in row_alt[1:]] == pytest.approx([t["logprob"] for t in row_ref[1:]], abs=TOKEN_LOGPROB_ATOL)
        for mean in ("geometric", "arithmetic"):
            l_ref = mink_lap([t["logprob"] for t in row_ref], 0.2, mean)
            l_alt = mink_lap([t["logprob"] for t in row_alt], 0.2, mean)
            assert l_alt == pytest.approx(l_ref, rel=MINK_RTOL)
            worst_lap = max(worst_lap, abs(l_alt / l_ref - 1))
    print(f"\nparity mink transformers vs {other}: max |dlogprob| = {worst_tok:.2e}, max rel dLAP = {worst_lap:.2e}")
