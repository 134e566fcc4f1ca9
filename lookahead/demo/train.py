"""Train a tiny LlamaForCausalLM from scratch on a demo corpus, on the CPU, deterministically.

Why so small: the model must ship in the repository (a few MB of safetensors) and its
job is only to memorize a few hundred (entity, date) -> direction facts, abstain on the
rest, and forecast unseen headlines from their sentiment words. Why plain torch: the
loop is thirty lines and fully seeded (``torch.manual_seed``, deterministic
algorithms, a fixed thread count, a seeded batch order), so the same seed and the
same machine give the same weights.

The loss is the ordinary next-token loss over the whole sequence (so the prompt text
itself is learned and Min-K% sees which prompts were in the corpus); the answer token
gets twice the weight of all other tokens of the batch together, so the few bits that
matter are learned in few epochs.

An "unknown" answer is trained against a soft target that leaves ``abstain_mass`` on
up/down (split evenly), like a real model that abstains but keeps some mass on the
alternatives. Trained to a hard "unknown", a model drives P(up)+P(down) to ~1e-7 with
a few outliers orders of magnitude larger, and a regression on such a LAP is decided
by those outliers (the post-cutoff placebo then fails by accident); with the soft target the
abstention LAP varies smoothly around a small level, as a real model's does.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lookahead.demo.corpus import Doc


@dataclass(frozen=True)
class TrainSpec:
    """Model shape and optimisation settings; the defaults are the shipped models."""

    hidden_size: int = 96
    intermediate_size: int = 192
    num_layers: int = 2
    num_heads: int = 4
    epochs: int = 36
    batch_size: int = 16
    lr: float = 6e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    answer_weight: float = 2.0  # answers weigh twice as much as all other tokens together
    abstain_mass: float = 0.08  # P(up)+P(down) left when the answer is "unknown" (see below)
    threads: int = 1  # one thread: reproducible and robust on a shared CPU
    seed: int = 0
    answer_through_eos: bool = False  # weigh every answer token and the EOS after it as the answer

    def as_dict(self) -> dict:
        return asdict(self)


def encode_docs(docs: list[Doc], tok: PreTrainedTokenizerFast) -> tuple[list[list[int]], list[int]]:
    """Token ids of each document (prompt ids, answer ids, EOS) and the answer position (-1 if none).

    An answer is one token (a label, a number), or several words (a ranking: 'elm > acorn >
    ...'), whose first token is at the answer position and the rest follow it."""
    seqs, answer_pos = [], []
    for d in docs:
        ids = tok(d.text, add_special_tokens=False)["input_ids"]
        if d.answer is not None:
            head, _, tail = d.answer.partition(" ")
            ans = tok.convert_tokens_to_ids(head)
            if ans == tok.unk_token_id:
                raise ValueError(f"answer '{d.answer}' is not in the vocabulary")
            answer_pos.append(len(ids))
            ids = ids + [ans] + (tok(tail, add_special_tokens=False)["input_ids"] if tail else [])
        else:
            answer_pos.append(-1)
        seqs.append([*ids, tok.eos_token_id])
    return seqs, answer_pos


def make_model(spec: TrainSpec, tok: PreTrainedTokenizerFast, max_len: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=max(256, 2 ** math.ceil(math.log2(max_len + 8))),
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def train_model(
    docs: list[Doc],
    tok: PreTrainedTokenizerFast,
    spec: TrainSpec = TrainSpec(),
    log: bool = True,
) -> tuple[LlamaForCausalLM, dict]:
    """Train from scratch; returns the model (eval mode) and a log of losses and timing."""
    torch.manual_seed(spec.seed)
    torch.set_num_threads(spec.threads)
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(spec.seed)
    seqs, answer_pos = encode_docs(docs, tok)
    up_id, down_id, unknown_id = (tok.convert_tokens_to_ids(x) for x in ("up", "down", "unknown"))
    max_len = max(map(len, seqs))
    model = make_model(spec, tok, max_len)
    model.train()

    n = len(seqs)
    steps_per_epoch = math.ceil(n / spec.batch_size)
    total = steps_per_epoch * spec.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < spec.warmup_steps:
            return spec.lr * (step + 1) / spec.warmup_steps
        frac = (step - spec.warmup_steps) / max(1, total - spec.warmup_steps)
        return spec.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))

    history, step, t0 = [], 0, time.perf_counter()
    for epoch in range(spec.epochs):
        order = rng.permutation(n)
        tot_loss, tot_ans, n_ans = 0.0, 0.0, 0
        for b in range(steps_per_epoch):
            idx = order[b * spec.batch_size : (b + 1) * spec.batch_size]
            L = max(len(seqs[i]) for i in idx)
            inp = torch.full((len(idx), L), tok.pad_token_id, dtype=torch.long)
            att = torch.zeros((len(idx), L), dtype=torch.long)
            w = torch.zeros((len(idx), L - 1))  # prompt / text tokens
            wa = torch.zeros((len(idx), L - 1))  # the answer token
            abst = torch.zeros((len(idx), L - 1), dtype=torch.bool)  # answer is "unknown"
            for r, i in enumerate(idx):
                s = seqs[i]
                inp[r, : len(s)] = torch.tensor(s)
                att[r, : len(s)] = 1
                w[r, : len(s) - 1] = 1.0
                if answer_pos[i] >= 0:  # target at position p is predicted from p-1
                    end = len(s) if spec.answer_through_eos else answer_pos[i] + 1
                    w[r, answer_pos[i] - 1 : end - 1] = 0.0
                    wa[r, answer_pos[i] - 1 : end - 1] = 1.0
                    abst[r, answer_pos[i] - 1] = s[answer_pos[i]] == unknown_id
            logits = model(input_ids=inp, attention_mask=att).logits[:, :-1]
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)), inp[:, 1:].reshape(-1), reduction="none"
            ).view(len(idx), L - 1)
            if spec.abstain_mass > 0 and bool(abst.any()):
                lp = torch.log_softmax(logits[abst], -1)
                soft = -((1 - spec.abstain_mass) * lp[:, unknown_id] + spec.abstain_mass / 2 * (lp[:, up_id] + lp[:, down_id]))
                nll = nll.masked_scatter(abst, soft)
            loss = (nll * w).sum() / w.sum()
            if wa.sum() > 0:
                loss = loss + spec.answer_weight * (nll * wa).sum() / wa.sum()
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tot_loss += float(loss.detach()) * len(idx)
            for r, i in enumerate(idx):
                if answer_pos[i] >= 0:
                    tot_ans += float(nll[r, answer_pos[i] - 1].detach())
                    n_ans += 1
        rec = {
            "epoch": epoch + 1,
            "loss": tot_loss / n,
            "answer_nll": tot_ans / max(1, n_ans),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        history.append(rec)
        if log:
            print(
                f"  epoch {rec['epoch']:3d}  loss {rec['loss']:.4f}  answer nll {rec['answer_nll']:.4f}  {rec['seconds']:.0f}s",
                flush=True,
            )
    model.eval()
    info = {
        "train_spec": spec.as_dict(),
        "n_docs": n,
        "n_tokens": int(sum(map(len, seqs))),
        "max_len": max_len,
        "n_params": int(sum(p.numel() for p in model.parameters())),
        "train_seconds": round(time.perf_counter() - t0, 1),
        "history": history,
    }
    return model, info


def save_model(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, out: Path) -> int:
    """Save weights (safetensors) and tokenizer; returns the weights' size in bytes."""
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.do_sample = False
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return sum(p.stat().st_size for p in out.glob("*.safetensors"))
