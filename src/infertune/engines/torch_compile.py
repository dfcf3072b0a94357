"""torch.compile over the eager model (inductor; dynamic shapes so mixed lengths compile once).

Options:
- `mode`: inductor's default, "max-autotune-no-cudagraphs", or "reduce-overhead" (inductor's own CUDA graphs;
  sequence lengths are bucketed to multiples of 64 so captured graphs are reused).
- `scope`: "regional" (the default where the model is a stack of identical blocks: each block is compiled, and
  the one compiled code serves every block, so a 28-layer decoder compiles like a 1-layer one) or "full" (the
  whole model in one graph; a few % more fusion at the block edges, minutes more compile).

On a GPU the compiled model is then served like the eager one: packed or padded batches, each bucketed shape
captured once in a CUDA graph and checked against the uncompiled model (engines/cuda_graphs.py). The compile
itself is reused (engines/compile_cache.py): inductor's cache lives in ~/.cache/infertune/inductor, and the
artifact carries the compiled kernels, so `serve` of a tuned artifact does not compile from scratch."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.batching import pad_length
from infertune.config import Candidate
from infertune.engines.base import Embedder
from infertune.engines.torch_eager import TorchEager, TorchEmbedder, build_model
from infertune.models.embedding import EmbeddingSpec, load_tokenizer

MIN_BLOCKS = 4  # a stack this deep is compiled block by block (regional); shallower models compile whole


class CompiledEmbedder(TorchEmbedder):
    bucket = 0  # pad sequence length up to a multiple of this (CUDA graphs want few shapes)
    compiles_per_shape = True  # a server warms the shapes it will see before taking traffic

    def collate(self, ids: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        batch = super().collate(ids)
        return pad_length(batch, self.bucket, self.pad_id) if self.bucket else batch

    compile_info: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["compiled"] = {"mode": self.candidate.option("mode", "default"), "dynamic": True, "bucket": self.bucket,
                         **self.compile_info, "compile_s": compile_seconds()}
        return d

    def save(self, path: Path) -> dict[str, Any]:
        """The weights and recipe (TorchEmbedder.save), and the kernels compiled for them (compile_cache.py)."""
        from infertune.engines import compile_cache

        saved = super().save(path)
        return {**saved, **(compile_cache.save(path) or {})}


def warm_compile(emb: Any) -> dict[str, Any]:
    """Compile `emb` now (one synthetic batch through the path serving takes: packed or padded, in or out of CUDA
    graphs), so the compile is paid, timed and charged where it belongs (preparing the engine), not inside the
    first measured pass or the first request. Returns the `compile` record: seconds, cold or warm cache, key."""
    from torch._dynamo.utils import counters

    t0 = time.perf_counter()
    before = compile_seconds()
    hits0, miss0 = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
    if not (hasattr(emb, "settle_packing") and emb.settle_packing()):  # a packed engine compiles in its check
        texts = ["The first batch compiles the model: " + "word " * n for n in (5, 40, 90, 20)]
        emb.forward(emb.collate(emb.token_ids(texts)))
    emb.synchronize()
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits0
    misses = counters["inductor"]["fxgraph_cache_miss"] - miss0
    wall = round(time.perf_counter() - t0, 2)
    cache = "warm" if hits and not misses else "cold" if misses and not hits else "partial" if hits else "none"
    info = getattr(emb, "inner", emb).compile_info
    rec = {"seconds": wall, "compile_s": round(compile_seconds() - before, 2), "cache": cache,
           "fx_graph_cache": {"hits": hits, "misses": misses},
           **{k: info.get(k) for k in ("cache_key", "scope", "from_artifact")}}
    rec["cold_s" if cache in ("cold", "partial") else "warm_s"] = wall
    info["first_compile"] = rec
    return rec


def compile_seconds() -> float:
    """Seconds this process spent compiling so far (dynamo and inductor, wherever the first runs happened:
    a forward, a CUDA-graph warm-up); a warm cache shows here as a short compile."""
    from torch._dynamo.utils import compilation_time_metrics

    return round(sum(compilation_time_metrics.get("_compile.compile_inner", ())), 2)


def blocks(model: Any) -> Any:
    """The model's stack of identical blocks (the longest ModuleList of one class), or None."""
    import torch

    best = None
    for _, m in model.named_modules():
        if (isinstance(m, torch.nn.ModuleList) and len(m) >= MIN_BLOCKS and len({type(b) for b in m}) == 1
                and (best is None or len(m) > len(best))):
            best = m
    return best


def compile_model(model: Any, mode: str | None, scope: str) -> tuple[Any, str]:
    """`model` compiled as `scope` says (regional where it has a block stack); returns (callable, scope used).
    Regional compilation compiles each block in place, so the model object itself is returned."""
    import torch

    dynamic = mode != "reduce-overhead"
    stack = blocks(model) if scope == "regional" else None
    if stack is None:
        return torch.compile(model, dynamic=dynamic, mode=mode), "full"
    for block in stack:
        block.compile(dynamic=dynamic, mode=mode)
    return model, f"regional ({len(stack)} x {type(stack[0]).__name__})"


class TorchCompile(TorchEager):
    name = "torch-compile"

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        from infertune.engines import compile_cache

        info = compile_cache.setup(spec, candidate, device, workdir)
        model = build_model(spec, candidate, device)
        mode = candidate.option("mode")
        if mode == "default":
            mode = None  # inductor's default; "max-autotune-no-cudagraphs" gains a few % for minutes of autotuning
        scope = candidate.option("scope", "regional")
        compiled, used = compile_model(model, mode, scope)
        # the uncompiled model checks the compiled one (graphs, packing); regional compiles in place, so its
        # eager twin is the same object run with dynamo off
        base = model if compiled is not model else _EagerView(model)
        emb = CompiledEmbedder(spec, load_tokenizer(spec), compiled, candidate, device)
        emb.compile_info = {**info, "scope": used}
        if mode == "reduce-overhead":
            emb.bucket = 64
        emb.base_model = base
        return emb


class _EagerView:
    """The model with its compiled blocks' original forwards: `model(**kw)` runs eagerly (dynamo disabled)."""

    def __init__(self, model: Any):
        self.model = model
        self.config = getattr(model, "config", None)

    def __call__(self, *args: Any, **kw: Any) -> Any:
        import torch

        with torch.compiler.set_stance("force_eager"):
            return self.model(*args, **kw)

    def parameters(self):
        return self.model.parameters()
