"""A packed fp32 Llama decoder body for prompt scoring (Min-K%), on the CPU or a GPU.

Why: on a 2-core CPU the transformers Llama forward spends about half its time outside
the matmuls (RMSNorm as five element-wise ops, rotary embeddings with ``cat``/``neg``,
the padding mask, transposes), and every op also runs over the padding of the batch.
This body does the same arithmetic in fp32 with fewer, larger ops:

* the tokens of a batch are packed (no padding) for everything except attention: the
  matmuls, norms, rotary embeddings and the MLP run on ``[real tokens, hidden]``;
* q, k and v are one matmul, gate and up are one matmul, the residual adds are fused
  into the output projections (``addmm``), RMSNorm is ``torch.rms_norm``;
* attention scatters the packed q/k/v into a right-padded batch and runs causal SDPA
  without a mask: pads sit after the real tokens, so no real position can see one.

Nothing is rounded below fp32 (bf16 arithmetic moves Min-K% LAP by about 5% relative on
SmolLM2 however the residual stream is kept, see benchmarks/HISTORY.md), so the result equals the
transformers body up to fp32 reassociation. Only plain Llama layers qualify (see
``supports``); anything else keeps the transformers body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def supports(model: Any) -> bool:
    """True for a LlamaForCausalLM whose layers are exactly what this body computes."""
    cfg = getattr(model, "config", None)
    if type(model).__name__ != "LlamaForCausalLM" or cfg is None:
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    return (
        getattr(cfg, "hidden_act", None) == "silu"
        and not getattr(cfg, "attention_bias", False)
        and not getattr(cfg, "mlp_bias", False)
        and int(getattr(cfg, "pretraining_tp", 1) or 1) == 1
        and rope.get("rope_type", "default") == "default"
        and getattr(model.model.rotary_emb, "attention_scaling", 1.0) == 1.0
    )


class PackedLlamaBody:
    """The decoder body of a Llama model as packed fp32 tensors (weights shared with
    the model where they are used as is; q/k/v and gate/up concatenated once)."""

    def __init__(self, model: Any) -> None:
        import torch

        base = model.model
        cfg = model.config
        self.torch = torch
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads)
        self.eps = float(cfg.rms_norm_eps)
        self.embed = base.embed_tokens.weight.detach().float()
        self.inv_freq = base.rotary_emb.inv_freq.detach().float()
        self.final_norm = base.norm.weight.detach().float()
        self.layers = []
        for layer in base.layers:
            att, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                (
                    layer.input_layernorm.weight.detach().float(),
                    torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).detach().float().t(),
                    att.o_proj.weight.detach().float().t(),
                    layer.post_attention_layernorm.weight.detach().float(),
                    torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach().float().t(),
                    mlp.down_proj.weight.detach().float().t(),
                )
            )

    def _rotation(self, positions: Any) -> tuple[Any, Any]:
        """cos and sin of the rotary angles at ``positions``: ``[tokens, 1, head_dim/2]`` each."""
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        return freqs.cos()[:, None, :], freqs.sin()[:, None, :]

    def _qkv(self, h: Any, ln1: Any, w_qkv: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
        """One layer's queries and keys after the rotary embedding (``[tokens, heads + kv
        heads, head_dim]``) and its values (``[tokens, kv heads * head_dim]``)."""
        torch, hd = self.torch, self.head_dim
        n_qk = self.n_heads + self.n_kv
        qkv = torch.nn.functional.rms_norm(h, (h.shape[1],), ln1, self.eps) @ w_qkv
        qk = qkv[:, : n_qk * hd].view(-1, n_qk, hd)
        x1, x2 = qk[..., : hd // 2], qk[..., hd // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1), qkv[:, n_qk * hd :]

    def _after_attention(self, h: Any, att: Any, w_o: Any, ln2: Any, w_gu: Any, w_down: Any) -> Any:
        """The residual stream after a layer's output projection and its MLP."""
        torch = self.torch
        h = torch.addmm(h, att, w_o)
        gu = torch.nn.functional.rms_norm(h, (h.shape[1],), ln2, self.eps) @ w_gu
        inter = gu.shape[1] // 2
        return torch.addmm(h, torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:], w_down)

    def __call__(self, seqs: Sequence[Sequence[int]], kv: list[tuple[Any, Any]] | None = None, room: int = 0) -> Any:
        """Final hidden states (after the last norm) of every token of every sequence,
        packed in order: ``[sum(len), hidden]``, fp32. With ``kv`` (a list), appends each
        layer's keys (after the rotary embedding) and values as transformers' attention
        caches them, ``[batch, kv heads, longest + room, head_dim]`` each, right-padded
        (zeros after a sequence's tokens), with ``room`` columns more for the tokens a
        generation appends (:meth:`decode`): written in place, the cache is not copied
        again at every generated token as a growing one is."""
        torch = self.torch
        F = torch.nn.functional
        lens = [len(s) for s in seqs]
        batch, width = len(seqs), max(lens)
        dev = self.embed.device
        ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long, device=dev)
        # packed token i sits at row b, column j of the padded batch: flat index b*width+j
        pos = torch.cat([torch.arange(n) for n in lens]).to(dev)
        starts = torch.tensor([b * width for b, n in enumerate(lens) for _ in range(n)], dtype=torch.long, device=dev)
        flat = starts + pos
        cos, sin = self._rotation(pos)
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        n_qk = nh + nkv
        width_qkv = (nh + 2 * nkv) * hd
        h = self.embed[ids]
        hidden = h.shape[1]
        padded = torch.zeros(batch * width, width_qkv, device=dev)
        for ln1, w_qkv, w_o, ln2, w_gu, w_down in self.layers:
            rot, values = self._qkv(h, ln1, w_qkv, cos, sin)
            padded[flat, : n_qk * hd] = rot.view(-1, n_qk * hd)
            padded[flat, n_qk * hd :] = values
            heads = padded.view(batch, width, nh + 2 * nkv, hd).transpose(1, 2)
            q, k, v = heads[:, :nh], heads[:, nh:n_qk], heads[:, n_qk:]
            if kv is not None:  # `padded` is written again by the next layer: copies
                kv.append(tuple(x.new_zeros(batch, nkv, width + room, hd) for x in (k, v)))
                kv[-1][0][:, :, :width], kv[-1][1][:, :, :width] = k, v
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nkv != nh)
            h = self._after_attention(h, att.transpose(1, 2).reshape(batch * width, nh * hd)[flat], w_o, ln2, w_gu, w_down)
        return F.rms_norm(h, (hidden,), self.final_norm, self.eps)

    def decode(self, tokens: Any, positions: Any, kv: Sequence[tuple[Any, Any]], column: int, seen: Any) -> Any:
        """Final hidden state (after the last norm) of one new token per sequence,
        ``[batch, hidden]`` fp32: ``tokens`` at ``positions`` (each sequence's own), their
        keys and values written into column ``column`` of ``kv`` (:meth:`__call__`'s, with
        room), attending to the columns ``seen`` allows (bool, ``[batch, at least column
        + 1]``: a sequence's own tokens and the ones generated after the padding).

        Why not the model's own layers with a growing cache: transformers' per-layer ops
        (five for RMSNorm, rotary ``cat``/``neg``, the mask built again, the cache
        concatenated again at every token) add to a step that is mostly a read of the
        weights; with the rows that finished left out (TransformersBackend._continue_greedy)
        the fused pass's answers took 0.51 s against 1.10 s (BENCHMARKS.md, "One pass for
        the forecast and the prompt measures, against two"). This is the same fp32
        arithmetic as :meth:`__call__`, one token per sequence."""
        F = self.torch.nn.functional
        hd, nh, nkv, n = self.head_dim, self.n_heads, self.n_kv, tokens.shape[0]
        cos, sin = self._rotation(positions)
        mask = seen[:, None, None, : column + 1]
        h = self.embed[tokens]
        for (ln1, w_qkv, w_o, ln2, w_gu, w_down), (k, v) in zip(self.layers, kv, strict=True):
            rot, values = self._qkv(h, ln1, w_qkv, cos, sin)
            k[:, :, column] = rot[:, nh:]
            v[:, :, column] = values.view(n, nkv, hd)
            att = F.scaled_dot_product_attention(
                rot[:, :nh, None, :], k[:, :, : column + 1], v[:, :, : column + 1], attn_mask=mask, enable_gqa=nkv != nh
            )
            h = self._after_attention(h, att.reshape(n, nh * hd), w_o, ln2, w_gu, w_down)
        return F.rms_norm(h, (h.shape[1],), self.final_norm, self.eps)
