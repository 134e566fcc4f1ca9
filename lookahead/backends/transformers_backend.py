"""The embedded backend: a transformers causal LM, no server, on the CPU or one GPU.

It runs the shipped demo models and any local model directory or GGUF file
(``gguf_file=``; transformers dequantises it), on the CPU by default or on one CUDA GPU
(``device: cuda``). Everything is batched because the processor is the bottleneck:
prompts are sorted by length so batches carry little padding, and prompt
log-probabilities are computed from the final hidden states in chunks, taking the
log-softmax only at the real (non-pad) positions, so the [batch, length, vocab] logits
tensor is never materialised.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lookahead.backends.base import (
    FULL_MATMUL_PRECISION,
    Backend,
    Generation,
    TokenLogprob,
    chat_prompt,
    prompt_token_ids,
    reduced_matmul_precision,
)
from lookahead.backends.fused_llama import PackedLlamaBody
from lookahead.backends.fused_llama import supports as supports_packed
from lookahead.config import StudyConfigError, check_setting
from lookahead.settings_sections import BackendSettings

# Architectures whose logits are exactly lm_head(final hidden state): the chunked path
# is exact for them. Others (logit soft-capping, scaling) use the plain full forward.
_PLAIN_HEAD = {
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "GPT2LMHeadModel",
    "GPTNeoXForCausalLM",
    "PhiForCausalLM",
    "Phi3ForCausalLM",
    "OPTForCausalLM",
    "SmolLM3ForCausalLM",
}
# The decoder body (every layer before the output head) Min-K% runs; the head,
# log-softmax and gather are fp32 from the upcast hidden states in every case.
#   float32             the packed fp32 body (lookahead/backends/fused_llama.py) for plain
#                       Llama models, transformers' own body otherwise: equal to the fp32
#                       per-text loop up to fp32 reassociation (Min-K% LAP within 2e-5)
#   float32_transformers  transformers' own fp32 body, unpacked (the previous default)
#   bfloat16            a bf16 copy of transformers' body: faster, but moves Min-K% LAP
#                       by about 5-15% relative on SmolLM2 (benchmarks/HISTORY.md)
# The packed body or bf16 copy is built on the first Min-K% query (the loaded weights
# stay as they are for recall and forecasts). The allowed values are declared in
# lookahead/study_settings.yml (mink_body_dtype).
MINK_BODY_DTYPE = "float32"
# Where the model runs (study setting ``device``; allowed values declared in
# lookahead/study_settings.yml).
DEVICE = "cpu"
# Min-K% and the fused pass's prompt half run in float32 arithmetic on every device, so a
# LAP is the same number on every machine (up to fp32 reassociation: 2e-5 relative): at
# FULL_MATMUL_PRECISION (lookahead.backends.base says why not lower), except on a CPU whose
# 'medium' a probe finds still fp32 (cpu_precision), where it runs oneDNN's faster fp32
# kernels (largest relative error 9.8e-7 against float64; BENCHMARKS.md, "Min-K% on the
# CPU"). A study's matmul_precision overrides it and, below float32, joins the Min-K% key
# (lookahead.keys). Recall (generate) always runs at torch's default precision.
#: The largest relative error a matmul may show against float64 and still count as fp32:
#: fp32 sums of a few hundred products err by about 1e-7 here, bf16 inputs by about 1e-3.
FP32_PROBE_TOLERANCE = 1e-5


@contextlib.contextmanager
def float32_matmul_precision(torch: Any, precision: str) -> Iterator[None]:
    """torch's float32 matmul precision set for the block, its own setting restored after."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


@functools.cache
def cpu_precision() -> str:
    """The CPU's default matmul precision: 'medium' when it is still float32 arithmetic on
    this CPU (a probe of a matmul and a linear layer against float64, a few ms), else
    'highest'. Why probe rather than read CPU flags: whether torch's kernels round to bf16
    depends on torch's build as much as on the CPU."""
    import torch

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 32, 256, generator=g), torch.randn(64, 256, generator=g)
    with float32_matmul_precision(torch, "medium"):
        got = (x @ w.T, torch.nn.functional.linear(x, w))
    exact = x.double() @ w.double().T
    scale = float((x.double().abs() @ w.double().abs().T).max())
    err = max(float((g_.double() - exact).abs().max()) for g_ in got) / scale
    return "medium" if err <= FP32_PROBE_TOLERANCE else FULL_MATMUL_PRECISION


LOGPROB_FLOOR = -1000.0  # -inf is not JSON; exp(-1000) is 0.0 in double precision anyway
# The bytes of logits the log-softmax and the vocabulary moments work on at a time: a
# block of rows that stays in a core's cache across their dozen passes (log-sum-exp,
# gather, centring, exp, two weighted sums). Over a 512-row chunk ([512, 49,152] fp32,
# 100 MB) each pass went to memory: on 8-row blocks (1.5 MB) a chunk's head, log-softmax
# and moments took 0.26 s instead of 0.85 s on 2 threads (the head alone 0.37 s), with
# every number equal to the bit (benchmarks/bench_logit_blocks.py; BENCHMARKS.md).
CACHE_BLOCK_BYTES = 3 * 2**19


def _cache_rows(vocab: int) -> int:
    """Rows of [rows, vocab] fp32 logits in CACHE_BLOCK_BYTES (at least one)."""
    return max(1, CACHE_BLOCK_BYTES // (4 * vocab))


def _resolve_location(model_id: str, model_path: str | None, gguf_file: str | None) -> tuple[str, str | None]:
    """(directory or hub id, gguf file name or None) from the study settings."""
    path = model_path or model_id
    if gguf_file:
        g = Path(gguf_file)
        if g.is_absolute() or len(g.parts) > 1:
            return str(g.parent), g.name
        return path, gguf_file
    if str(path).lower().endswith(".gguf"):
        p = Path(path)
        return str(p.parent), p.name
    return str(path), None


@contextlib.contextmanager
def _gguf_parsed_once(readers: dict[str, Any]) -> Iterator[None]:
    """While transformers loads from a GGUF file: the file parsed once and kept in
    ``readers`` (the backend's, dropped once the weights are in), and gguf's tensor-name
    map built once per architecture.

    Why: transformers (5.x) parses the whole file again for the tokenizer, the config and
    the weights (four parses in all), and builds the name map again for each of the
    model's submodules; loading SmolLM2-135M's tokenizer, config and weights took a job
    process 30.3 s that way and 14.7 s this way (BENCHMARKS.md, "Loading a GGUF model").
    Both are reads: the parsed file is only read, the map is a pure function of its
    arguments, and the loaded weights and tokenizer are the same (tests/python/
    test_gguf_load.py, benchmarks/bench_gguf_load.py)."""
    import gguf as gguf_module

    gguf: Any = gguf_module  # its two functions are replaced for the load, then put back
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    def reader(path: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # another mode than a plain read: not ours to share
            return reader_class(path, *args, **kwargs)
        key = os.fspath(path)
        if key not in readers:
            readers[key] = reader_class(path)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


class TransformersBackend(Backend):
    """transformers on the CPU or one CUDA GPU. Options: model_path, gguf_file, batch_size,
    torch_threads, dtype ('float32' | 'bfloat16'), logit_chunk, matmul_precision
    ('highest' | 'high' | 'medium'), mink_body_dtype (see MINK_BODY_DTYPE), device
    ('cpu' | 'cuda', see DEVICE);
    or ready ``model``/``tokenizer`` objects.

    torch, the tokenizer and the model load on first use, so a rerun whose answers are
    all cached (raw prompts) imports none of them and never loads the weights."""

    name = "transformers"
    supports_logprobs = True
    #: The vocabulary moments cost 1.02-1.16x the log-probs alone, in the same pass
    #: (BENCHMARKS.md, "Four prompt measures from one pass"), so every Min-K% line carries
    #: them and adding Min-K%++ later asks nothing again (docs/measures.md).
    free_extras = ("vocab_moments",)

    def __init__(self, model_id: str, **options: Any) -> None:
        super().__init__(model_id, **options)
        s = BackendSettings.with_defaults(**options)
        self._torch_threads = s.torch_threads
        self.batch_size = int(s.batch_size)
        self.logit_chunk = int(options.get("logit_chunk") or 512)
        self.device = str(check_setting("device", s.device) or DEVICE)  # the declared choices
        self._precision_setting = s.matmul_precision  # the study's; None = the device's default
        self._dtype_name = str(s.dtype or "float32")
        self.mink_body_dtype = str(s.mink_body_dtype or MINK_BODY_DTYPE)
        self._mink_bodies: dict[str, Any] = {}  # mink_body_dtype -> the body built for it
        self._location, self._gguf = _resolve_location(model_id, s.model_path, s.gguf_file)
        self._model: Any = options.get("model")  # a model handed in, else loaded on first use
        if self._model is not None:
            self._model.eval()
            if self.device != DEVICE:
                _ = self._torch  # the one-line error when the device is missing
                self._model.to(self.device)
        self._tokenizer = options.get("tokenizer")
        if self._tokenizer is None and self._gguf is None and not os.path.exists(self._location):
            raise FileNotFoundError(f"setting 'model_path': '{self._location}' does not exist (no model hub here)")
        self._token_cache: dict[int, str] = {}
        self._gguf_readers: dict[str, Any] = {}  # the GGUF file parsed once (_gguf_parsed_once)

    # ------------------------------------------------------------------ loading
    # torch, transformers, the tokenizer and the weights load on first use: a rerun whose
    # answers are all cached renders raw prompts (no chat template) and computes keys
    # without any of them, so it never pays their import (about 4 s here).

    @property
    def _torch(self) -> Any:
        import torch

        if self.device == "cuda" and not torch.cuda.is_available():
            raise StudyConfigError(
                "setting 'device': 'cuda', but torch sees no CUDA GPU here "
                f"(torch {torch.__version__}); set device: cpu or run on a GPU machine"
            )
        if self._torch_threads and torch.get_num_threads() != int(self._torch_threads):
            torch.set_num_threads(int(self._torch_threads))
        return torch

    @property
    def dtype(self) -> Any:
        return getattr(self._torch, self._dtype_name)

    @contextlib.contextmanager
    def _loading(self) -> Iterator[None]:
        """The context every load from the model's files runs in: a GGUF file is parsed
        once for the tokenizer, the config and the weights (_gguf_parsed_once), and the
        parse is dropped once the weights are in (loaded, or handed in), when nothing
        left to load needs it."""
        if not self._gguf:
            yield
            return
        with _gguf_parsed_once(self._gguf_readers):
            yield
        if self._model is not None:
            self._gguf_readers.clear()

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            _ = self._torch  # apply the thread setting before any kernel runs
            kw = {"gguf_file": self._gguf} if self._gguf else {}
            with self._loading():
                self._tokenizer = AutoTokenizer.from_pretrained(self._location, **kw)
        return self._tokenizer

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        if tok.pad_token_id is not None:
            return int(tok.pad_token_id)
        return int(tok.eos_token_id) if tok.eos_token_id is not None else 0

    # ------------------------------------------------------------------ loading

    @property
    def model(self) -> Any:
        if self._model is None:
            from transformers import AutoModelForCausalLM

            kw = {"gguf_file": self._gguf} if self._gguf else {}
            with self._loading():
                self._model = AutoModelForCausalLM.from_pretrained(self._location, dtype=self.dtype, **kw)
            self._model.to(self.device).eval()
        return self._model

    # ------------------------------------------------------------------ prompts

    def render_prompt(self, user_text: str, use_chat_template: bool) -> str:
        """The user text inside the model's chat template (generation prompt added), when
        asked and the tokenizer has one; otherwise the text itself (no tokenizer needed)."""
        return chat_prompt(self.tokenizer, user_text) if use_chat_template else user_text

    def encode(self, prompt: str) -> list[int]:
        """Token ids as the model sees the prompt: the tokenizer's special tokens are added
        unless the text already starts with the BOS token (a rendered chat template)."""
        return prompt_token_ids(self.tokenizer, prompt)

    def count_tokens(self, prompt: str) -> int:
        return len(self.encode(prompt))

    def context_length(self) -> int | None:
        """max_position_embeddings of the model config (read without loading the weights)."""
        config = getattr(self._model, "config", None)
        if config is None:
            try:
                from transformers import AutoConfig

                kw = {"gguf_file": self._gguf} if self._gguf else {}
                with self._loading():
                    config = AutoConfig.from_pretrained(self._location, **kw)
            except (OSError, ValueError):
                return None
        n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        return int(n) if n else None

    def _token_text(self, token_id: int) -> str:
        """Decoded text of one token (cached: Min-K% decodes every prompt token)."""
        tid = int(token_id)
        text = self._token_cache.get(tid)
        if text is None:
            text = self._token_cache[tid] = self.tokenizer.decode([tid])
        return text

    def _batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices grouped into batches of similar length (longest first)."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def _right_padded(self, seqs: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        torch = self._torch
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1
        return ids.to(self.device), mask.to(self.device)

    # ------------------------------------------------------------------ queries

    def _top_k(self, logits_row: Any, k: int) -> list[TokenLogprob]:
        lp = self._torch.log_softmax(logits_row.float(), dim=-1)
        vals, idx = lp.topk(k)
        return [
            TokenLogprob(int(t), self._token_text(int(t)), max(float(v), LOGPROB_FLOOR))
            for v, t in zip(vals.tolist(), idx.tolist(), strict=False)
        ]

    def generate(self, prompts: Sequence[str], max_tokens: int, top_logprobs: int) -> list[Generation]:
        """Greedy answers with the top-k log-probs (raw model distribution) at the first
        generated position. max_tokens=1 (recall) is one batched forward pass."""
        torch = self._torch
        seqs = [self.encode(p) for p in prompts]
        out: list[Generation | None] = [None] * len(prompts)
        with torch.inference_mode():
            for batch in self._batches([len(s) for s in seqs]):
                if max_tokens == 1:
                    last_logits = self._last_position_logits([seqs[i] for i in batch])
                    for row, i in enumerate(batch):
                        step = last_logits[row]
                        top = self._top_k(step, top_logprobs) if top_logprobs > 0 else []
                        greedy = int(step.argmax())
                        text = self.tokenizer.decode([greedy], skip_special_tokens=True)
                        out[i] = Generation(prompts[i], text, top)
                else:
                    gens = self._generate_batch([seqs[i] for i in batch], max_tokens, top_logprobs)
                    for (text, top), i in zip(gens, batch, strict=False):
                        out[i] = Generation(prompts[i], text, top)
        return [g for g in out if g is not None]

    def label_token_ids(self, label: str) -> list[int]:
        """Every vocabulary id whose decoded text, stripped and lowercased, is `label`
        stripped and lowercased: the protocol's matching rule applied to the whole
        vocabulary instead of the top-20 (cached per label)."""
        want = label.strip().lower()
        cache = self.__dict__.setdefault("_label_ids", {})
        if want not in cache:
            n = len(self.tokenizer)
            cache[want] = [t for t in range(n) if self._token_text(t).strip().lower() == want]
        return list(cache[want])

    def label_logprobs(self, prompts: Sequence[str], labels: Mapping[str, str]) -> list[list[dict[str, Any]]]:
        """Exact log P(label | prompt) for each prompt and label (role -> label text).

        A label that some vocabulary tokens spell (label_token_ids) gets the log of the sum of
        their probabilities in the full next-token distribution (method `vocabulary`): the
        top-20 rule without the top-20 limit. A label no single token spells is scored by
        teacher forcing (method `teacher_forced`): the sum of the log-probs of its tokens
        after the prompt, the tokens being those of encode(prompt + label) beyond the
        longest common prefix with encode(prompt) (BPE can merge across the boundary), the
        label written as the model would emit it (a leading space after text,
        lookahead.prompts.emitted_form)."""
        from lookahead.prompts import emitted_form

        torch = self._torch
        seqs = [self.encode(p) for p in prompts]
        vocab = {role: self.label_token_ids(label) for role, label in labels.items()}
        out: list[list[dict[str, Any]]] = [[] for _ in prompts]
        with torch.inference_mode():
            for batch in self._batches([len(s) for s in seqs]):
                last = self._last_position_logits([seqs[i] for i in batch])
                lps = torch.log_softmax(last.double(), dim=-1)
                for row, i in enumerate(batch):
                    for role, label in labels.items():
                        ids = vocab[role]
                        if ids:
                            lp = float(torch.logsumexp(lps[row, ids], dim=0))
                            out[i].append({"role": role, "label": label, "logprob": lp, "method": "vocabulary", "token_ids": ids})
            for i, prompt in enumerate(prompts):
                for role, label in labels.items():
                    if vocab[role]:
                        continue
                    text = (" " if emitted_form(prompt) == "leading space" else "") + label
                    full = self.encode(prompt + text)
                    common = 0
                    while common < min(len(full), len(seqs[i])) and full[common] == seqs[i][common]:
                        common += 1
                    common = max(common, 1)
                    ids_t = torch.tensor([full], dtype=torch.long, device=self.device)
                    logits = self.model(input_ids=ids_t).logits[0].double()
                    lp_all = torch.log_softmax(logits, dim=-1)
                    lp = float(sum(lp_all[j - 1, full[j]] for j in range(common, len(full))))
                    out[i].append(
                        {
                            "role": role,
                            "label": label,
                            "logprob": lp,
                            "method": "teacher_forced",
                            "token_ids": list(full[common:]),
                        }
                    )
        return out

    def _last_position_logits(self, seqs: Sequence[Sequence[int]]) -> Any:
        """Next-token logits after each full prompt, [batch, vocab] (right padding)."""
        torch = self._torch
        ids, mask = self._right_padded(seqs)
        last = mask.sum(1) - 1
        rows = torch.arange(len(seqs), device=self.device)
        model = self.model
        if type(model).__name__ in _PLAIN_HEAD:  # head only at the last real position
            hidden = getattr(model, model.base_model_prefix)(input_ids=ids, attention_mask=mask).last_hidden_state
            return model.get_output_embeddings()(hidden[rows, last]).float()
        return model(input_ids=ids, attention_mask=mask).logits[rows, last].float()

    def _left_padded(self, seqs: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        torch = self._torch
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _gen_config(self, **kw: Any) -> Any:
        from transformers import GenerationConfig

        eos = self.tokenizer.eos_token_id
        return GenerationConfig(pad_token_id=self.pad_id, eos_token_id=eos, **kw)

    def _generate_batch(
        self, seqs: Sequence[Sequence[int]], max_tokens: int, top_logprobs: int
    ) -> list[tuple[str, list[TokenLogprob]]]:
        ids, mask = self._left_padded(seqs)
        cfg = self._gen_config(do_sample=False, max_new_tokens=max_tokens, output_logits=True, return_dict_in_generate=True)
        res = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        first = res.logits[0]
        new = res.sequences[:, ids.shape[1] :]
        return [
            (
                self.tokenizer.decode(new[r], skip_special_tokens=True),
                self._top_k(first[r], top_logprobs) if top_logprobs > 0 else [],
            )
            for r in range(len(seqs))
        ]

    def prompt_logprobs(self, prompts: Sequence[str], vocab_moments: bool = False) -> list[list[TokenLogprob]]:
        """log P(token_n | tokens_<n) for every prompt token; the first is None. With
        ``vocab_moments``, each entry after the first also carries the mean and variance
        of log p over the vocabulary at its position (Min-K%++), from the same logits.

        Batched over length-sorted prompts with right padding (pads sit after the real
        tokens, so causal attention keeps real positions exact)."""
        seqs = [self.encode(p) for p in prompts]
        out: list[list[TokenLogprob] | None] = [None] * len(prompts)
        with self._scoring_precision():
            self._prompt_logprobs_into(seqs, out, vocab_moments)
        return [o for o in out if o is not None]

    @property
    def matmul_precision(self) -> str:
        """Min-K%'s float32 matmul precision: the study's, else the device's default (on the
        CPU found by a probe that imports torch, so asked when first needed, not when the
        backend is made: a preflight that only reads the tokenizer never imports torch)."""
        if self._precision_setting is not None:
            return str(self._precision_setting)
        return cpu_precision() if self.device == "cpu" else FULL_MATMUL_PRECISION

    def _scoring_precision(self) -> contextlib.AbstractContextManager[None]:
        """Prompt scoring at the study's matmul_precision (the Min-K% job's, and the fused
        pass's prompt half, so both write the same line), torch's own setting restored after."""
        return float32_matmul_precision(self._torch, self.matmul_precision)

    def _prompt_entries(
        self, seq: Sequence[int], lps: Sequence[float], moments: Sequence[tuple[float, float]] | None
    ) -> list[TokenLogprob]:
        """One prompt's entries: its first token without a log-prob, then each later token's
        floored log-prob (and its position's vocabulary moments when computed)."""
        entries = [TokenLogprob(int(seq[0]), self._token_text(seq[0]), None)]
        entries += [
            TokenLogprob(int(t), self._token_text(t), max(v, LOGPROB_FLOOR), *(moments[j] if moments is not None else ()))
            for j, (t, v) in enumerate(zip(seq[1:], lps, strict=False))
        ]
        return entries

    def _prompt_logprobs_into(
        self, seqs: list[list[int]], out: list[list[TokenLogprob] | None], vocab_moments: bool = False
    ) -> None:
        torch = self._torch
        with torch.inference_mode():
            for batch in self._batches([len(s) for s in seqs]):
                bseqs = [seqs[i] for i in batch]
                moments: list[list[tuple[float, float]]] | None = [] if vocab_moments else None
                lps = self._batch_token_logprobs(bseqs, moments)
                for row, i in enumerate(batch):
                    out[i] = self._prompt_entries(seqs[i], lps[row], moments[row] if moments is not None else None)

    def _moments(self, lp: Any) -> tuple[Any, Any]:
        """Mean and variance of log p under p over the last axis (log-softmaxed `lp`,
        overwritten); the variance centred, so a peaked distribution loses no digits to
        cancellation. One vocabulary-sized allocation (p): the two weighted sums are dot
        products and the centring works in place, because at 49,152 entries a position
        each extra pass over memory cost more than the arithmetic."""
        vecdot = self._torch.linalg.vecdot
        p = lp.exp()
        mu = vecdot(p, lp)
        return mu, vecdot(p, lp.sub_(mu.unsqueeze(-1)).square_())

    def _batch_token_logprobs(
        self,
        seqs: Sequence[Sequence[int]],
        moments: list[list[tuple[float, float]]] | None = None,
        fused: dict[str, Any] | None = None,
    ) -> list[list[float]]:
        """Per sequence, the log-probs of tokens 2..n (floats); with `moments` (a list),
        appends per sequence the (vocab_mean, vocab_var) of each of those positions. With
        `fused` (a dict; only on the packed body, :meth:`fused_scoring`), also the same
        pass's next-token logits after each full prompt (``fused["last"]``, [batch,
        vocab] fp32) and its keys and values (``fused["kv"]``, with ``fused["room"]``
        columns more), which the answer continues from (:meth:`generate_scored`)."""
        torch = self._torch
        ids, mask = self._right_padded(seqs)
        target_mask = mask[:, 1:].bool()
        targets = ids[:, 1:][target_mask]
        model = self.model
        if type(model).__name__ in _PLAIN_HEAD:
            # The padding mask is passed although right pads cannot reach real tokens under
            # causal attention: measured here, SDPA without a mask was slower, not faster.
            body = self._mink_base(model)
            if isinstance(body, PackedLlamaBody):
                kv: list[tuple[Any, Any]] | None = [] if fused is not None else None
                room = int(fused.get("room", 0)) if fused is not None else 0
                packed = body(seqs, kv, room)  # [sum(len), hidden]: every token of every sequence
                starts = [0]
                for s in seqs[:-1]:
                    starts.append(starts[-1] + len(s))
                keep = torch.cat([torch.arange(a, a + len(s) - 1) for a, s in zip(starts, seqs, strict=False)]).to(self.device)
                h = packed[keep].to(self.dtype)
                if fused is not None:
                    ends = torch.tensor([a + len(s) - 1 for a, s in zip(starts, seqs, strict=False)], device=self.device)
                    fused["last"] = model.get_output_embeddings()(packed[ends].to(self.dtype)).float()
                    fused["kv"] = kv
            else:
                hidden = body(input_ids=ids, attention_mask=mask).last_hidden_state
                h = hidden[:, :-1][target_mask].to(self.dtype)
            head = model.get_output_embeddings()
            flat = torch.empty(h.shape[0], dtype=torch.float32, device=self.device)
            if moments is not None:
                mu_flat, var_flat = torch.empty_like(flat), torch.empty_like(flat)
            for a in range(0, h.shape[0], self.logit_chunk):
                logits = head(h[a : a + self.logit_chunk]).float()
                # The head runs on the whole chunk (one matmul reads its weights once), the
                # log-softmax, gather and moments on row blocks that stay in the CPU's cache
                # (_cache_rows): they are a dozen passes over memory, each row's result the
                # same to the bit whichever rows sit beside it.
                step = _cache_rows(logits.shape[1])
                for b in range(0, logits.shape[0], step):
                    block = logits[b : b + step]
                    r = slice(a + b, a + b + block.shape[0])  # a block never runs past its chunk
                    lse = torch.logsumexp(block, dim=-1)
                    flat[r] = block.gather(1, targets[r, None]).squeeze(1) - lse
                    if moments is not None:
                        mu_flat[r], var_flat[r] = self._moments(block.sub_(lse[:, None]))
        else:
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            lp = torch.log_softmax(logits, dim=-1)
            flat = lp.gather(2, ids[:, 1:, None]).squeeze(2)[target_mask]
            if moments is not None:
                mu, var = self._moments(lp)
                mu_flat, var_flat = mu[target_mask], var[target_mask]
        if moments is not None:
            pairs = list(zip(mu_flat.tolist(), var_flat.tolist(), strict=False))
            pos = 0
            for s in seqs:
                moments.append(pairs[pos : pos + len(s) - 1])
                pos += len(s) - 1
        values = flat.tolist()
        res, pos = [], 0
        for s in seqs:
            n = len(s) - 1
            res.append(values[pos : pos + n])
            pos += n
        return res

    def fused_scoring(self) -> bool:
        """Whether one pass can score a prompt's tokens and answer it
        (:meth:`generate_scored`): when Min-K% runs the packed fp32 body (a plain Llama
        model in float32 weights, mink_body_dtype float32), whose keys and values the
        answer continues from. Elsewhere (another architecture, reduced weights, a bf16
        body) the answer and the scores come from two passes, as each is asked alone.
        Loads the model."""
        fp32 = reduced_matmul_precision(self._precision_setting) is None  # the forecast's arithmetic
        return fp32 and isinstance(self._mink_base(self.model), PackedLlamaBody)

    def generate_scored(
        self, prompts: Sequence[str], max_tokens: int, top_logprobs: int, vocab_moments: bool = False
    ) -> list[tuple[Generation, list[TokenLogprob]]]:
        """One forward pass over each prompt gives its token log-probs (as
        :meth:`prompt_logprobs`, with the vocabulary moments when asked) and the next-token
        distribution after it; the greedy answer continues from that pass's keys and
        values (:meth:`generate`'s answer, the top-k at its first position), so the prompt
        is read once, not once per task. Only where :meth:`fused_scoring` holds.

        Precision, decided here (docs/backends.md): the prompt pass is Min-K%'s, the packed
        fp32 body in float32 arithmetic (the only kind :meth:`fused_scoring` allows), so the
        Min-K% line equals the one the Min-K% job writes alone; the first answer token's
        distribution comes from the same pass (its log-probs differ from
        :meth:`generate`'s by fp32 reassociation alone), and the answer's later tokens run
        through the same packed body, one token per row still answering
        (:meth:`_continue_greedy`), in float32 arithmetic at torch's default precision, as
        :meth:`generate` runs them."""
        torch = self._torch
        seqs = [self.encode(p) for p in prompts]
        out: list[tuple[Generation, list[TokenLogprob]] | None] = [None] * len(prompts)
        with torch.inference_mode():
            for batch in self._batches([len(s) for s in seqs]):
                bseqs = [seqs[i] for i in batch]
                moments: list[list[tuple[float, float]]] | None = [] if vocab_moments else None
                fused: dict[str, Any] = {"room": max(max_tokens - 1, 0)}
                with self._scoring_precision():
                    lps = self._batch_token_logprobs(bseqs, moments, fused)
                answers = self._continue_greedy(bseqs, fused["kv"], fused["last"], max_tokens, top_logprobs)
                for row, i in enumerate(batch):
                    text, top = answers[row]
                    entries = self._prompt_entries(seqs[i], lps[row], moments[row] if moments is not None else None)
                    out[i] = (Generation(prompts[i], text, top), entries)
        return [o for o in out if o is not None]

    def _continue_greedy(
        self, seqs: Sequence[Sequence[int]], kv: list[tuple[Any, Any]], first: Any, max_tokens: int, top_logprobs: int
    ) -> list[tuple[str, list[TokenLogprob]]]:
        """Greedy decoding of up to `max_tokens` tokens after each prompt, from the prompt
        pass's next-token logits `first` and its right-padded keys and values `kv` (with
        room for the answer): each step runs the packed body on the last token of every
        row still answering, at its own position (:meth:`PackedLlamaBody.decode`), the
        padding masked out; a row stops at the end-of-sequence token (as transformers'
        generate does) and leaves the batch.

        Why rows leave: a step reads every weight whatever the rows, but its matmuls,
        attention and element-wise ops still grow with them, and a forecast batch is
        mostly one-word answers with a few longer ones: a batch's longer answers decode
        alone."""
        torch = self._torch
        body = self._mink_base(self.model)
        head = self.model.get_output_embeddings()
        n = len(seqs)
        lens = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=self.device)
        width = int(lens.max())
        cols = torch.arange(kv[0][0].shape[2], device=self.device)[None, :]
        seen = (cols < lens[:, None]) | (cols >= width)  # a row's own tokens, then the answer's
        eos = self.tokenizer.eos_token_id
        eos_ids = torch.tensor(eos if isinstance(eos, list) else [eos], device=self.device)
        tops = [self._top_k(first[r], top_logprobs) if top_logprobs > 0 else [] for r in range(n)]
        tok = first.argmax(-1)
        steps = [tok]
        live = torch.arange(n, device=self.device)  # the rows still answering, in kv's order
        for t in range(1, max_tokens):
            going = ~torch.isin(tok[live], eos_ids)
            if not bool(going.any()):
                break
            if not bool(going.all()):  # the finished rows leave the batch (and its cache)
                live = live[going]
                kv = [(k[going], v[going]) for k, v in kv]
                seen = seen[going]
            hidden = body.decode(tok[live], lens[live] + (t - 1), kv, width + t - 1, seen)
            tok = torch.full_like(tok, self.pad_id)
            tok[live] = head(hidden.to(self.dtype)).float().argmax(-1)
            steps.append(tok)
        ids = torch.stack(steps, dim=1).tolist()
        out = []
        for r in range(n):
            row = ids[r]
            cut = next((j + 1 for j, t in enumerate(row) if t in eos_ids.tolist()), len(row))
            out.append((self.tokenizer.decode(row[:cut], skip_special_tokens=True), tops[r]))
        return out

    def _mink_base(self, model: Any) -> Any:
        """The decoder body Min-K% runs (see MINK_BODY_DTYPE): the packed fp32 body, the
        model's own body, or a bf16 copy of it (built once per value)."""
        body_dtype = self.mink_body_dtype
        if body_dtype in self._mink_bodies:
            return self._mink_bodies[body_dtype]
        base = getattr(model, model.base_model_prefix)
        wanted = getattr(self._torch, "float32" if body_dtype.startswith("float32") else body_dtype)
        if body_dtype == "float32" and self._dtype_name == "float32" and supports_packed(model):
            body = PackedLlamaBody(model)
        elif next(base.parameters()).dtype == wanted:
            body = base
        else:
            import copy

            body = copy.deepcopy(base).to(wanted).eval()
        self._mink_bodies[body_dtype] = body
        return body

    def sample(self, prompts: Sequence[str], n: int, seed: int, max_tokens: int) -> list[list[str]]:
        """n answers per prompt at temperature 1 (no top-k/top-p cut), seeded per prompt
        so a prompt's samples do not depend on which other prompts ran with it."""
        torch = self._torch
        cfg = self._gen_config(
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_tokens,
            num_return_sequences=n,
        )
        res: list[list[str]] = []
        with torch.inference_mode():
            for p in prompts:
                torch.manual_seed(seed)
                ids = torch.tensor([self.encode(p)], dtype=torch.long, device=self.device)
                seq = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
                new = seq[:, ids.shape[1] :]
                res.append([self.tokenizer.decode(r, skip_special_tokens=True) for r in new])
        return res
