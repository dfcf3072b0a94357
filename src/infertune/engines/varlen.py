"""Padding-free ("packed") forward passes for decoder embedders: every text of a batch laid end to end in one
row, attention kept inside each text by cumulative lengths (`cu_seqlens`), as TEI and vLLM run embedders.

Why: a served window of mixed lengths (up to 512 tokens) padded to its longest row wastes compute; on the H200 a
Qwen3-Embedding shape at concurrency 64 ran 1.74 padded tokens per real one even with batches split by length
(docs/measurements/2026-11-30-h200-cuda-graphs), and splitting made batches small. Packed, a batch costs its real
tokens.

How, with parts PyTorch and transformers already have:
- attention: PyTorch's FlashAttention varlen kernel (`torch.ops.aten._flash_attention_forward` with cumulative
  lengths, causal), registered as a transformers attention implementation for the packed call only
  (`packed_attention`); transformers builds no mask for it and passes `cu_seq_lens_q/k` and `max_length_q/k`
  through to every layer. On a CPU (tests) the same function runs SDPA text by text.
- positions restart at 0 for every text (rotary embeddings), so each text sees the positions it would alone.
- pooling per text from the packed states: last token, first token, or mean (`pool_packed`).
Decoders by default (causal attention inside each text). Encoders (bidirectional, `is_causal` False on their
attention modules, zero token types) pack the same way, but only on request (`--cuda-graphs packed`) until
measured on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

NAME = "infertune_varlen"  # the attention implementation registered with transformers
POOLINGS = ("last", "cls", "mean", "mean_sqrt_len")
_registered = False


def _flash(q: Any, k: Any, v: Any, cu: Any, max_len: int, scale: float | None, causal: bool) -> Any:
    """Varlen attention on [T, H, D] tensors (FlashAttention through PyTorch; GQA heads native)."""
    import torch

    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, causal, False, scale=scale)
    return out[0]


def _reference(q: Any, k: Any, v: Any, cu: Any, max_len: int, scale: float | None, causal: bool) -> Any:
    """The same on any device: SDPA text by text (a CPU has no FlashAttention; the tests use this)."""
    import torch
    import torch.nn.functional as F

    out = torch.zeros_like(q)
    bounds = cu.tolist()
    groups = q.shape[1] // k.shape[1]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if b <= a:
            continue
        qs, ks, vs = (x[a:b].transpose(0, 1) for x in (q, k, v))  # [H, n, D]
        if groups > 1:
            ks, vs = ks.repeat_interleave(groups, 0), vs.repeat_interleave(groups, 0)
        out[a:b] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale).transpose(0, 1)
    return out


def _attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None,
               dropout: float = 0.0, **kw: Any) -> tuple[Any, None]:
    """transformers' attention interface: [1, H, T, D] in, [1, T, H, D] out."""
    cu, max_len = kw["cu_seq_lens_q"], int(kw["max_length_q"])
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # [T, H, D]
    q, k, v = (x if x.is_contiguous() else x.contiguous() for x in (q, k, v))
    run = _flash if q.is_cuda else _reference
    return run(q, k, v, cu, max_len, scaling, bool(getattr(module, "is_causal", True))).unsqueeze(0), None


def register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, _attention)
        _registered = True


@contextlib.contextmanager
def packed_attention(model: Any) -> Iterator[None]:
    """Run `model` with the varlen attention for the duration (the config is shared by all its layers)."""
    register()
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before


def why_not(emb: Any, encoders: bool = False) -> str | None:
    """None when `emb`'s model can run packed batches, else why not (one sentence). Encoders only when asked
    (`--cuda-graphs packed`): their packed path is not yet measured on a GPU."""
    spec = getattr(emb, "spec", None)
    if getattr(spec, "arch", None) != "decoder" and not encoders:
        return ("packing is on for decoders; an encoder keeps padded batches unless --cuda-graphs packed asks "
                "(not yet measured on a GPU)")
    if spec.pooling not in POOLINGS:
        return f"pooling {spec.pooling!r} is not computed from packed rows"
    model = getattr(emb, "model", None)
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "_attn_implementation", None) != "sdpa":
        return "the model does not use transformers' attention interface with SDPA"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention is not packed"
    import torch

    p = next(iter(model.parameters()), None)
    if p is not None and p.is_cuda and p.dtype not in (torch.float16, torch.bfloat16):
        return "FlashAttention needs fp16 or bf16 weights"
    return None


class Packed:
    """One batch laid out packed (numpy): `slots` sequences of which the first `n` are the texts, then one that
    holds the filler tokens up to `tokens`, then empty ones (FlashAttention skips them). The filler's positions
    wrap at `max_len`: a model with a position table (BERT: 512 rows) has no row past it, and a 4,096-token filler
    indexes out of bounds (decoders' rotary positions hide it)."""

    __slots__ = ("ids", "pos", "cu", "first", "last", "seg", "lens", "n")

    def __init__(self, ids: np.ndarray, mask: np.ndarray, pad_id: int, tokens: int | None = None,
                 slots: int | None = None, max_len: int = 512):
        lens = mask.sum(1).astype(np.int64)
        used = int(lens.sum())
        self.n = n = len(lens)
        tokens = max(used, tokens or used)
        slots = max(n + 1, slots or n + 1)
        keep = mask.astype(bool)
        self.ids = np.full(tokens, pad_id, dtype=np.int64)
        self.ids[:used] = ids[keep]  # row by row: each text's tokens in order (rows are right-padded or not)
        seq = np.zeros(slots, dtype=np.int64)
        seq[:n], seq[n] = lens, tokens - used
        cu = np.zeros(slots + 1, dtype=np.int64)
        np.cumsum(seq, out=cu[1:])
        self.cu = cu.astype(np.int32)
        self.pos = np.arange(tokens, dtype=np.int64) - np.repeat(cu[:-1], seq)
        self.pos[used:] %= max(1, max_len)
        self.first = cu[:-1].copy()
        self.last = np.maximum(cu[1:] - 1, 0)
        self.seg = np.repeat(np.arange(slots, dtype=np.int64), seq)
        self.lens = np.maximum(seq, 1).astype(np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": self.ids, "pos": self.pos, "cu": self.cu, "first": self.first, "last": self.last,
                "seg": self.seg, "lens": self.lens}


def run_packed(model: Any, pooling: str, t: dict[str, Any], max_len: int, token_types: bool = False) -> Any:
    """The pooled vector of every slot ([slots, H], float32) from packed tensors `t` (see Packed.arrays).
    `token_types`: the model takes token_type_ids (BERT); all zeros, given explicitly (its own default buffer
    is only max_position_embeddings long, shorter than a packed row)."""
    import torch

    kw: dict[str, Any] = {"token_type_ids": torch.zeros_like(t["ids"])[None]} if token_types else {}
    with packed_attention(model):
        hidden = model(input_ids=t["ids"][None], position_ids=t["pos"][None], cu_seq_lens_q=t["cu"],
                       cu_seq_lens_k=t["cu"], max_length_q=max_len, max_length_k=max_len, use_cache=False,
                       **kw).last_hidden_state[0]
    if pooling == "last":
        return hidden[t["last"]].float()
    if pooling == "cls":
        return hidden[t["first"]].float()
    sums = torch.zeros(t["lens"].shape[0], hidden.shape[1], device=hidden.device, dtype=torch.float32)
    sums.index_add_(0, t["seg"], hidden.float())
    n = t["lens"][:, None]
    return sums / (n.sqrt() if pooling == "mean_sqrt_len" else n)
