"""CUDA graphs for a served PyTorch embedding model: each batch shape, rounded up to a few buckets, is captured
once and then replayed, so a forward pass costs one graph launch instead of a Python call per kernel.

Why: in eager mode every forward is ~1,000 kernel launches for a 28-layer decoder (Qwen3-0.6B shape) and ~150 for
MiniLM, each a Python call. On the H200 the GPU finishes a 30-item batch of Qwen3-Embedding in about the time the
host needs to launch it, so the served rate was a third of the forward-only ceiling (session 9: 469 items/s at
concurrency 64 against 1,698). Measured here on a 2-core CPU, the same 28-layer forward with tiny matrices (so
nothing but dispatch) costs 24 ms per call.

How (all standard PyTorch, torch.cuda.CUDAGraph):
- shapes: rows rounded as the engine already rounds them (`bucket_rows`), widths to `bucket_width`; a filler row
  attends one pad token and its output is dropped; extra columns are masked out.
- the attention mask is built inside the graph from the 2D padding mask as a 4D boolean mask (causal for a
  decoder), which transformers passes to SDPA as is: no host sync in the forward, so it can be captured.
- every graph shares one memory pool (one engine thread replays one graph at a time; each result is copied out
  before the next replay).
- each shape is checked once, at capture, against the eager forward on the same batch (cosine of every row);
  a shape that does not capture or does not match runs eagerly from then on, and the first one that does not
  match turns graphs off with a log line. Nothing is answered from an unchecked graph.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from infertune.backends.torch_eager import TorchEmbedder
from infertune.batching import bucket_rows
from infertune.models.embedding import pool

log = logging.getLogger("infertune.serve")
MIN_COSINE = 0.9999  # a captured shape must give the eager forward's vectors (same kernels, same math)


def bucket_width(width: int, limit: int) -> int:
    """Sequence length rounded up to few sizes as rows are (multiples of 8 to 64, then <= 12.5% filler);
    never past `limit` rounded up to 8."""
    return min(max(8, bucket_rows(width)), -(-limit // 8) * 8)


def why_not(emb: Any) -> str | None:
    """None when `emb` can be served with CUDA graphs, else why not (one sentence)."""
    if type(emb) is not TorchEmbedder:
        return f"the {type(emb).__name__} engine runs its own way (graphs wrap PyTorch eager only)"
    if not str(emb.device).startswith("cuda"):
        return "CUDA graphs need a CUDA device"
    if emb.candidate.quant:
        return f"quantized weights ({emb.candidate.quant}) are served eagerly"
    attn = getattr(getattr(emb.model, "config", None), "_attn_implementation", None)
    if attn != "sdpa":
        return f"the model's attention is {attn!r}; graphs pass a 4D mask to SDPA"
    return None


class _Shape:
    __slots__ = ("graph", "ids", "mask", "out")

    def __init__(self, graph: Any, ids: Any, mask: Any, out: Any):
        self.graph, self.ids, self.mask, self.out = graph, ids, mask, out


class GraphedEmbedder(TorchEmbedder):
    """A TorchEmbedder on a GPU whose forward replays a captured graph per bucketed shape."""

    compiles_per_shape = True  # the engine warms the usual shapes before /ready

    def __init__(self, emb: TorchEmbedder, max_tokens: int = 1 << 17):
        super().__init__(emb.spec, emb.tokenizer, emb.model, emb.candidate, emb.device)
        self.pad_id, self.needs_token_types = emb.pad_id, emb.needs_token_types
        self.max_tokens = max_tokens  # bigger shapes run eagerly: launch cost is small next to their compute
        self.causal = emb.spec.arch == "decoder"
        self.shapes: dict[tuple[int, int], _Shape | None] = {}  # None: runs eagerly (did not capture or match)
        self.pool: Any = None
        self.on = True
        self.stats = {"captured": 0, "eager_shapes": 0, "replays": 0, "eager_batches": 0}

    # --- the forward that a graph records ----------------------------------------------------------------
    def _run(self, ids: Any, mask: Any) -> Any:
        import torch

        keys = mask.bool()[:, None, None, :]  # [R, 1, 1, W]: which positions hold tokens
        width = ids.shape[1]
        if self.causal:
            tri = torch.ones(width, width, dtype=torch.bool, device=ids.device).tril()
            m4 = keys & tri[None, None]
        else:
            m4 = keys.expand(ids.shape[0], 1, width, width)
        kw = {"input_ids": ids, "attention_mask": m4}
        if self.needs_token_types:
            kw["token_type_ids"] = torch.zeros_like(ids)
        hidden = self.model(**kw).last_hidden_state
        return pool(hidden, mask, self.spec.pooling)

    def padded(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's ids and 2D mask at its bucketed shape (filler rows attend one pad token)."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        rows, width = ids.shape
        shape = (bucket_rows(rows), bucket_width(width, max(width, self.spec.max_length)))
        if shape == (rows, width):
            return ids.astype(np.int64, copy=False), mask.astype(np.int64, copy=False)
        big_ids = np.full(shape, self.pad_id, dtype=np.int64)
        big_mask = np.zeros(shape, dtype=np.int64)
        big_ids[:rows, :width], big_mask[:rows, :width] = ids, mask
        big_mask[rows:, 0] = 1
        return big_ids, big_mask

    # --- serving -------------------------------------------------------------------------------------------
    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        rows = batch["input_ids"].shape[0]
        ids, mask = self.padded(batch)
        key = ids.shape
        if not self.on or key[0] * key[1] > self.max_tokens or self.shapes.get(key, 0) is None:
            self.stats["eager_batches"] += 1
            return super().forward(batch)
        shape = self.shapes.get(key)
        if shape is None:
            return self._first(key, batch, ids, mask)
        with torch.inference_mode():
            shape.ids.copy_(torch.from_numpy(ids))
            shape.mask.copy_(torch.from_numpy(mask))
            shape.graph.replay()
            out = shape.out[:rows].cpu().numpy()
        self.stats["replays"] += 1
        return out

    def _first(self, key: tuple[int, int], batch: dict[str, np.ndarray], ids: np.ndarray,
               mask: np.ndarray) -> np.ndarray:
        """First sight of a shape: answer eagerly, capture, and keep the graph only if it gives the same rows."""
        want = super().forward(batch)
        self.stats["eager_batches"] += 1
        try:
            shape = self._capture(ids, mask)
            shape.graph.replay()
            got = shape.out[: len(want)].cpu().numpy()
        except Exception as e:  # noqa: BLE001 - a shape that cannot be captured runs eagerly
            log.warning("CUDA graph capture failed for batch shape %s (it runs eagerly): %s: %s", key,
                        type(e).__name__, e)
            self.shapes[key] = None
            self.stats["eager_shapes"] += 1
            return want
        cos = _cosines(got, want)
        if not np.isfinite(cos).all() or cos.min() < MIN_COSINE:
            log.warning("CUDA graphs turned off: the graph for batch shape %s gave min cosine %.6f against the "
                        "eager forward (< %g); serving eagerly", key, float(np.nanmin(cos)), MIN_COSINE)
            self.on = False
            return want
        self.shapes[key] = shape
        self.stats["captured"] += 1
        return want

    def _capture(self, ids: np.ndarray, mask: np.ndarray) -> _Shape:
        import torch

        dev = torch.device(self.device)
        with torch.inference_mode():
            t_ids = torch.from_numpy(ids).to(dev)
            t_mask = torch.from_numpy(mask).to(dev)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture (cuBLAS workspaces, lazy inits)
                self._run(t_ids, t_mask)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._run(t_ids, t_mask)
            if self.pool is None:
                self.pool = graph.pool()
        return _Shape(graph, t_ids, t_mask, out)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["cuda_graphs"] = {"on": self.on, "shapes": len([s for s in self.shapes.values() if s is not None]),
                            "max_tokens": self.max_tokens, **self.stats}
        return d


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def with_graphs(emb: Any, mode: str = "auto") -> tuple[Any, str]:
    """`emb` wrapped in CUDA graphs when `mode` is on/auto and it can be, else unchanged; and why, in words.
    `on` where graphs cannot run is an error (the user asked for them)."""
    if mode == "off":
        return emb, "CUDA graphs off (--cuda-graphs off)"
    why = why_not(emb)
    if why is not None:
        if mode == "on":
            from infertune.errors import InfertuneError

            raise InfertuneError(f"--cuda-graphs on: {why}")
        return emb, f"no CUDA graphs: {why}"
    return GraphedEmbedder(emb), "CUDA graphs: each bucketed batch shape captured once, checked against eager"
