"""Which CUDA-graph engine serves a model: padded graphs (engines/cuda_graphs.py) or, for a decoder embedder,
graphs over packed batches (engines/packed_graphs.py). One function, `with_graphs`, used by serve's engine, the
in-process server and the ceiling."""

from __future__ import annotations

from typing import Any

from infertune.engines import varlen


def with_graphs(emb: Any, mode: str = "auto", max_tokens: int = 16384) -> tuple[Any, str]:
    """`emb` wrapped in CUDA graphs when `mode` is on/auto/padded/packed and it can be, else unchanged; and why,
    in words. A decoder's batches also run packed (padding-free) unless `mode` is padded; an encoder's only when
    `mode` is packed. `on` or `packed` where graphs cannot run is an error (the user asked for them)."""
    if mode == "off":
        return emb, "CUDA graphs off (--cuda-graphs off)"
    from infertune.engines.cuda_graphs import GraphedEmbedder, why_not

    why = why_not(emb)
    if why is not None:
        if mode in ("on", "packed"):
            from infertune.errors import InfertuneError

            raise InfertuneError(f"--cuda-graphs {mode}: {why}")
        return emb, f"no CUDA graphs: {why}"
    # a decoder (or any model with --cuda-graphs packed): padding-free batches, graphs over packed shapes
    if mode != "padded" and varlen.why_not(emb, encoders=mode == "packed") is None:
        from infertune.engines.packed_graphs import PackedGraphEmbedder

        return PackedGraphEmbedder(emb, max_tokens), (
            f"CUDA graphs over packed batches (padding-free, FlashAttention varlen): each shape up to "
            f"{max_tokens} tokens captured once, checked against eager (--cuda-graphs padded: padded batches)")
    return GraphedEmbedder(emb, max_tokens), ("CUDA graphs: each bucketed batch shape up to "
                                              f"{max_tokens} padded tokens captured once, checked against eager")


def tuned_engine(emb: Any, candidate: Any, device: str) -> Any:
    """What `tune` measures for a candidate on a GPU: the engine `serve` would run from its artifact (CUDA graphs
    where they apply; an encoder's batches packed when the candidate says batches=packed), else `emb` as is."""
    from infertune.engines.cuda_graphs import why_not

    if device != "cuda" or why_not(emb) is not None:
        return emb
    return with_graphs(emb, candidate.cuda_graphs, candidate.batching.size)[0]
