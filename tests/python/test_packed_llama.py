"""The packed fp32 Llama body equals transformers' own Llama forward (fast, default suite).

The independent implementation is transformers' LlamaForCausalLM itself, on a small
randomly initialised config (no download, well under a second): grouped-query
attention, prompts of different lengths in one batch (the padding the packed body
removes), one-token prompts. The real SmolLM2 comparison against the per-text reference
loop is in test_mink_reference.py (slow tier: it loads the 135M model).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from lazy_module import lazy_module

from lookahead.backends.fused_llama import PackedLlamaBody, supports
from lookahead.backends.transformers_backend import TransformersBackend
from lookahead.scoring import mink_lap

torch = lazy_module("torch")  # imported by the first test that runs, not at collection
transformers = lazy_module("transformers")


def tiny_llama(**overrides):
    cfg = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        **overrides,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # weights away from the init's near-zero scale, norms not all 1
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


SEQS = [[5, 17, 3, 88, 42, 9, 60, 1, 2, 33, 71], [7, 7, 8], [90], [11, 12, 13, 14, 15, 16]]


def reference_logprobs(model, seq):
    """Per sequence, as the reference loop: one forward, log_softmax, gather."""
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([seq])).logits[0].double(), -1)
    return [lp[i, t].item() for i, t in enumerate(seq[1:])]


def test_packed_body_equals_transformers_hidden_states():
    model = tiny_llama()
    assert supports(model)
    body = PackedLlamaBody(model)
    with torch.inference_mode():
        packed = body(SEQS)
        assert packed.shape == (sum(map(len, SEQS)), 48)
        row = 0
        for s in SEQS:
            ref = model.model(input_ids=torch.tensor([s])).last_hidden_state[0]
            torch.testing.assert_close(packed[row : row + len(s)], ref, rtol=1e-4, atol=1e-5)
            row += len(s)


class Tok:  # ids are the text: "5 17 3" -> [5, 17, 3] (the model needs no real tokenizer)
    bos_token = None
    pad_token_id = 0
    eos_token_id = 0

    def encode(self, text, add_special_tokens=True):
        return [int(x) for x in text.split()]

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, [int(i) for i in ids]))


def test_backend_default_body_is_packed_and_matches_the_per_text_loop():
    model = tiny_llama()
    be = TransformersBackend("tiny", model=model, tokenizer=Tok(), batch_size=3)
    prompts = [" ".join(map(str, s)) for s in SEQS]
    got = be.prompt_logprobs(prompts)
    assert isinstance(be._mink_bodies["float32"], PackedLlamaBody)
    unpacked = TransformersBackend(
        "tiny", model=model, tokenizer=Tok(), batch_size=3, mink_body_dtype="float32_transformers"
    ).prompt_logprobs(prompts)
    for s, lps, other in zip(SEQS, got, unpacked, strict=False):
        ref = reference_logprobs(model, s)
        assert [t.token_id for t in lps] == s and lps[0].logprob is None
        assert [t.logprob for t in lps[1:]] == pytest.approx(ref, abs=1e-4)
        assert [t.logprob for t in other[1:]] == pytest.approx(ref, abs=1e-4)
        if ref:  # Min-K% LAP at K=0.2: exp(mean of the lowest max(1, floor(0.2 n)))
            m = max(1, len(ref) // 5)
            assert mink_lap([t.logprob for t in lps]) == pytest.approx(math.exp(sum(sorted(ref)[:m]) / m), rel=1e-3)


def greedy_by_recompute(model, seq, n):
    """The reference answer: each next token from a full forward over the prompt and the
    tokens so far (no cache, one sequence, transformers' own layers)."""
    out = []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([seq + out])).logits[0, -1].argmax()))
    return out


def test_the_one_pass_answer_is_the_greedy_answer_as_rows_finish_at_different_tokens():
    """generate_scored decodes from the packed pass's cache with the finished rows left
    out; each row's answer must be what a cache-free greedy loop gives, cut at its
    end-of-sequence token, with rows of one batch finishing at different steps."""
    model = tiny_llama()
    n = 6
    ref = [greedy_by_recompute(model, s, n) for s in SEQS]
    # the end-of-sequence token: the one that ends the rows' answers at the most different steps
    ends = {}
    for tok in {t for r in ref for t in r}:
        ends[tok] = [r.index(tok) + 1 if tok in r else n for r in ref]
    eos = max(ends, key=lambda t: (len(set(ends[t])), -sum(ends[t])))
    assert len(set(ends[eos])) >= 3, ends[eos]  # rows stop at three or more different steps

    class EosTok(Tok):  # generate pads the rows that finished first: pads are special
        eos_token_id = eos

        def decode(self, ids, skip_special_tokens=False):
            return " ".join(str(int(i)) for i in ids if not (skip_special_tokens and int(i) == self.pad_token_id))

    be = TransformersBackend("tiny", model=model, tokenizer=EosTok(), batch_size=3)
    assert be.fused_scoring()
    prompts = [" ".join(map(str, s)) for s in SEQS]
    one = be.generate_scored(prompts, n, 3)
    two = be.generate(prompts, n, 3)
    for r, stop, (g, _), h in zip(ref, ends[eos], one, two, strict=True):
        want = EosTok().decode(r[:stop], skip_special_tokens=True)
        assert g.response_text == want == h.response_text
        assert [t.token_id for t in g.top_logprobs] == [t.token_id for t in h.top_logprobs]


@pytest.mark.parametrize("overrides", [{"attention_bias": True}, {"mlp_bias": True}, {"hidden_act": "gelu"}])
def test_layers_the_packed_body_does_not_compute_keep_the_transformers_body(overrides):
    model = tiny_llama(**overrides)
    assert not supports(model)


def test_only_a_bf16_body_changes_the_mink_key():
    from lookahead.config import Study, load_study, resolve
    from lookahead.keys import task_params

    demo = load_study().vars  # the default study, with one setting changed at a time
    plain = task_params(Study(vars=resolve({}, demo)), "mink")
    for value in ("float32", "float32_transformers"):
        assert task_params(Study(vars=resolve({"mink_body_dtype": value}, demo)), "mink") == plain
    bf16 = task_params(Study(vars=resolve({"mink_body_dtype": "bfloat16"}, demo)), "mink")
    assert bf16 == {**plain, "mink_body_dtype": "bfloat16"}


@pytest.mark.parametrize("task", ["forecast", "recall", "mink"])
def test_device_changes_no_key_and_no_result(task):
    """A study moved from the CPU to a GPU asks nothing again and its build stays current:
    the device is in no query's key and not in the settings hash."""
    from lookahead.config import Study, load_study, resolve
    from lookahead.keys import task_params

    demo = load_study().vars
    cpu, gpu = Study(vars=resolve({}, demo)), Study(vars=resolve({"device": "cuda"}, demo))
    assert gpu.backend.device == "cuda"
    assert task_params(gpu, task) == task_params(cpu, task)
    assert gpu.settings_hash == cpu.settings_hash


@pytest.mark.parametrize("task", ["forecast", "recall", "mink"])
def test_reduced_weights_dtype_joins_every_key(task):
    from lookahead.config import Study, load_study, resolve
    from lookahead.keys import task_params

    demo = load_study().vars
    plain = task_params(Study(vars=resolve({}, demo)), task)
    assert task_params(Study(vars=resolve({"dtype": "float32"}, demo)), task) == plain
    for dtype in ("bfloat16", "float16"):
        assert task_params(Study(vars=resolve({"dtype": dtype}, demo)), task) == {**plain, "dtype": dtype}


# ------------------------------------------------------------------ device: cuda
# The GPU tier runs where torch sees a CUDA GPU (the benchmarks' GPU machine); the CPU
# suite checks that asking for one without a GPU is a one-line setting error.
needs_cuda = pytest.mark.gpu  # tests/conftest.py skips it without a CUDA GPU


@needs_cuda
@pytest.mark.parametrize("body", ["float32", "float32_transformers"])
def test_cuda_device_gives_the_cpu_answers(body):
    """Min-K% log-probs, recall's top-k and a short greedy answer on the GPU equal the
    CPU's (fp32 on both: the key leaves the device out)."""
    prompts = [" ".join(map(str, s)) for s in SEQS]
    cpu = TransformersBackend(
        "tiny", model=tiny_llama(), tokenizer=Tok(), batch_size=3, matmul_precision="highest", mink_body_dtype=body
    )
    gpu = TransformersBackend("tiny", model=tiny_llama(), tokenizer=Tok(), batch_size=3, device="cuda", mink_body_dtype=body)
    assert next(gpu.model.parameters()).is_cuda and gpu.matmul_precision == "highest"
    for a, b in zip(cpu.prompt_logprobs(prompts), gpu.prompt_logprobs(prompts), strict=False):
        assert [t.token_id for t in a] == [t.token_id for t in b]
        assert [t.logprob for t in b[1:]] == pytest.approx([t.logprob for t in a[1:]], abs=1e-4)
    for a, b in zip(cpu.generate(prompts, 1, 5), gpu.generate(prompts, 1, 5), strict=False):
        assert a.response_text == b.response_text
        assert [t.token_id for t in a.top_logprobs] == [t.token_id for t in b.top_logprobs]
        assert [t.logprob for t in b.top_logprobs] == pytest.approx([t.logprob for t in a.top_logprobs], abs=1e-4)
    assert [g.response_text for g in cpu.generate(prompts, 3, 0)] == [g.response_text for g in gpu.generate(prompts, 3, 0)]


def test_cuda_device_without_a_gpu_is_a_setting_error():
    from lookahead.config import StudyConfigError

    if torch.cuda.is_available():  # asked here, not in a skipif mark: that would import torch at collection
        pytest.skip("a CUDA GPU is here")

    with pytest.raises(StudyConfigError, match=r"^setting 'device': 'cuda', but torch sees no CUDA GPU here"):
        TransformersBackend("tiny", model=tiny_llama(), tokenizer=Tok(), device="cuda")
    lazy = TransformersBackend("tiny", model_path="/nonexistent", tokenizer=Tok(), device="cuda")
    with pytest.raises(StudyConfigError, match="setting 'device'"):
        lazy.prompt_logprobs(["5 17 3"])  # before any weight is looked for


def test_unknown_device_is_a_setting_error():
    from lookahead.config import StudyConfigError

    with pytest.raises(StudyConfigError, match=r"setting 'device': 'gpu' is not one of cpu, cuda"):
        TransformersBackend("tiny", model=tiny_llama(), tokenizer=Tok(), device="gpu")


def test_device_default_is_the_cpu_and_min_k_runs_in_float32_arithmetic_on_it():
    """On the CPU the default precision is 'medium' only where it is still float32 here:
    on CPUs with bf16 units (AMX, AVX512-BF16) it rounds matmul inputs to bf16, which
    moved SmolLM2's LAP by up to 2.3% relative. Checked against a larger product than the
    probe's, through another call (torch.mm), against float64."""
    import torch

    from lookahead.backends.transformers_backend import FP32_PROBE_TOLERANCE, cpu_precision, float32_matmul_precision

    a, b = torch.rand(128, 512) - 0.5, torch.rand(512, 96) - 0.5
    with float32_matmul_precision(torch, "medium"):
        got = torch.mm(a, b)
    err = float((got.double() - a.double() @ b.double()).abs().max() / (a.double().abs() @ b.double().abs()).max())
    assert cpu_precision() == ("medium" if err <= FP32_PROBE_TOLERANCE else "highest")
    be = TransformersBackend("tiny", model=tiny_llama(), tokenizer=Tok())
    assert be.device == "cpu" and be.matmul_precision == cpu_precision() and be.fused_scoring()
    low = TransformersBackend("tiny", model=tiny_llama(), tokenizer=Tok(), matmul_precision="high")
    assert low.matmul_precision == "high" and not low.fused_scoring()  # the forecast's pass stays fp32


def test_making_the_backend_imports_no_torch_the_precision_probe_waits_for_first_use():
    """The CPU's precision probe runs torch; a preflight that makes the backend only to read
    the tokenizer must not pay torch's import for it."""
    import subprocess
    import sys

    code = (
        "import sys; from lookahead.backends.transformers_backend import TransformersBackend as B; "
        "b = B('demo/models/contaminated'); print('torch' in sys.modules, b.matmul_precision in ('highest', 'medium'))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True).stdout.split()
    assert out == ["False", "True"]


def test_a_lower_matmul_precision_joins_the_min_k_key_and_asks_in_two_passes():
    from llm_jobs.fused import why_not
    from lookahead.config import Study, load_study, resolve
    from lookahead.keys import task_params

    demo = load_study().vars
    plain = task_params(Study(vars=resolve({"backend": "transformers"}, demo)), "mink")
    assert "matmul_precision" not in plain
    assert task_params(Study(vars=resolve({"backend": "transformers", "matmul_precision": "highest"}, demo)), "mink") == plain
    medium = Study(vars=resolve({"backend": "transformers", "matmul_precision": "medium"}, demo))
    assert task_params(medium, "mink") == {**plain, "matmul_precision": "medium"}
    assert task_params(medium, "forecast") == task_params(Study(vars=resolve({"backend": "transformers"}, demo)), "forecast")
    # a backend the setting does not reach (lookahead.backends.MATMUL_PRECISION_BACKENDS): one query
    vllm = task_params(Study(vars=resolve({"backend": "vllm"}, demo)), "mink")
    assert task_params(Study(vars=resolve({"backend": "vllm", "matmul_precision": "medium"}, demo)), "mink") == vllm

    class Ctx:
        study = medium

    assert why_not(Ctx()) == "backend 'transformers': matmul_precision 'medium' is not the forecast's"


@pytest.mark.parametrize("chunk", [4, 7])
def test_logit_chunks_shorter_than_a_cache_block_keep_every_logprob(chunk):
    """The head runs on chunks of ``logit_chunk`` rows and the log-softmax on cache-sized
    blocks within each; with a small vocabulary (97 ids: a block of thousands of rows) the
    block is longer than its chunk, and it must stop at the chunk's end (the demo's 745-id
    vocabulary with 512-row chunks once read targets past it)."""
    model = tiny_llama()
    prompts = [" ".join(map(str, s)) for s in SEQS]
    whole = TransformersBackend("tiny", model=model, tokenizer=Tok(), batch_size=4).prompt_logprobs(prompts)
    chunked = TransformersBackend("tiny", model=model, tokenizer=Tok(), batch_size=4, logit_chunk=chunk).prompt_logprobs(prompts)
    for a, b in zip(whole, chunked, strict=True):
        assert [t.token_id for t in a] == [t.token_id for t in b]
        assert [t.logprob for t in b[1:]] == pytest.approx([t.logprob for t in a[1:]], abs=1e-5)
