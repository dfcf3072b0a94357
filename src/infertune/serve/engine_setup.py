"""Bringing a model up for serving, the same in both topologies: load it for its device, wrap it in CUDA
graphs on a GPU, warm it up (the kinds of shapes serving will see, before /ready), and time a few batches
for the batch core's first cost line. The engine process (core.py) and the in-process server (inproc.py)
both call `load_engine`, so what runs behind /ready does not depend on the topology.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from infertune.batching import PAD_MULTIPLE, pad_length


@dataclass
class Loaded:
    emb: Any
    seed: list[tuple[float, float]]  # (padded tokens, seconds) of warm batches: the first cost line
    info: dict[str, Any]  # what a client needs (spec, tokenizer, pad id ...) and /ready shows


def warmup_texts(n: int = 32) -> list[str]:
    from importlib import resources

    lines = resources.files("infertune").joinpath("data/sample_embeddings.jsonl").read_text().splitlines()
    return [json.loads(x)["input"] for x in lines[:n]]


def load_engine(model: str, device: str, settings: dict[str, Any], *, threads: int | None = None,
                warmup: list[str] | None = None, load_opts: dict[str, Any] | None = None, own_process: bool = False,
                who: str = "engine") -> Loaded:
    """Load, wrap, warm and time the model. `own_process`: this process only drives the device (an engine
    process), so a GPU engine keeps one CPU thread."""
    t0 = time.perf_counter()
    if device == "cpu":
        from infertune.serve.memory import bound_cpu_memory

        if (done := bound_cpu_memory()) and not own_process:
            print(f"memory: {', '.join(done)} (see infertune/serve/memory.py)", file=sys.stderr, flush=True)
    if threads or (own_process and device == "cuda"):  # a GPU engine launches kernels: one CPU thread
        import torch

        torch.set_num_threads(threads or 1)
    emb, graphs = bring_up(model, device, settings, load_opts)
    if device == "cuda":
        print(f"{who}: {graphs}", file=sys.stderr, flush=True)
    if hasattr(getattr(emb, "inner", emb), "compile_info"):  # torch.compile: compiled before /ready, and timed
        from infertune.engines.torch_compile import warm_compile

        got = warm_compile(emb)
        print(f"{who}: compiled in {got['seconds']} s ({got['cache']} inductor cache"
              f"{', kernels from the artifact' if got.get('from_artifact') else ''}; {got.get('scope')})",
              file=sys.stderr, flush=True)
    warm = sorted(emb.token_ids(warmup or warmup_texts()), key=len)
    for rows in (warm[:4], warm[-2:], warm[:1]):
        emb.postprocess(emb.forward(emb.collate(rows)))
    emb.synchronize()
    if emb.compiles_per_shape:
        warm_shapes(emb, warm)
    if hasattr(emb, "precapture"):
        got = emb.precapture()
        print(f"{who}: captured {got['captured']} of {got['shapes']} usual batch shapes in {got['seconds']} s",
              file=sys.stderr, flush=True)
    seed = time_batches(emb, warm, int(settings.get("max_batch_tokens") or settings.get("batch_tokens") or 4096))
    try:
        desc = {k: v for k, v in emb.describe().items() if k != "leaf_modules"}
    except Exception:  # noqa: BLE001 - describing is a courtesy
        desc = {}
    tok = emb.tokenizer
    info = {"pid": os.getpid(), "spec": emb.spec, "tokenizer": tok, "pad_id": emb.pad_id,
            "needs_token_types": emb.needs_token_types, "describe": desc, "device": device,
            "load_s": round(time.perf_counter() - t0, 2),
            "vocab_size": len(tok) if hasattr(tok, "__len__") else int(getattr(tok, "vocab_size", 2**31 - 1))}
    return Loaded(emb, seed, info)


def bring_up(model: str, device: str, settings: dict[str, Any],
             load_opts: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The model as serving runs it: loaded for `device` and, on a GPU, wrapped in CUDA graphs as
    settings["cuda_graphs"] says. Returns (embedder, how it runs). `serve --ceiling` times this same object."""
    from infertune.engines.embedding_artifact import load_model

    emb = load_model(model, device, **(load_opts or {}))
    if device != "cuda":
        return emb, "as loaded"
    from infertune.engines.graphs import with_graphs

    return with_graphs(emb, settings.get("cuda_graphs", "auto"), int(settings.get("batch_tokens") or 16384))


def warm_shapes(emb: Any, rows: list[list[int]]) -> None:
    """Run the kinds of shapes serving will see before /ready: a compiled model (torch.compile) specialises
    on batch size 1, on lengths equal to the batch size, and on each new length class, and compiling one
    of those mid-traffic stalls the engine for seconds (on the H200: 45 ms batches at 7% GPU for the
    first 15 s of a benchmark, 4x slower than the same server once compiled)."""
    longest = max(8, min(emb.spec.max_length, max(len(r) for r in rows)))
    lengths = sorted({8, 16, 24, 64, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE})
    base = max(rows, key=len)
    for length in lengths:
        row = (base * (length // max(1, len(base)) + 1))[:length]
        for b in (1, 2, 3, 17, 64):
            batch = pad_length(emb.collate([row] * b), PAD_MULTIPLE, emb.pad_id)
            emb.postprocess(emb.forward(batch))
    emb.synchronize()


def time_batches(emb: Any, rows: list[list[int]], budget: int, max_s: float = 3.0) -> list[tuple[float, float]]:
    """(padded tokens, seconds) of a few warm batches of different sizes: the first cost line. Batches stay
    within the engine's token budget (it never runs a bigger one), and timing stops after `max_s` once three
    sizes are measured: a slow model (or device) starts in seconds, not the half minute that every warm
    text in one batch cost a slow fake engine. Once two sizes are timed, a larger one that would run past `max_s`
    at the cost per padded token seen so far is left out: the line through the smaller ones seeds the cost model
    (refitted from traffic): a slow engine's start no longer waits on that batch
    (docs/measurements/2026-12-07-epyc-suite-speed)."""
    longest = max(len(r) for r in rows)
    most = max(1, min(len(rows), budget // max(1, longest)))
    sizes = sorted({1, max(1, most // 4), most})
    out: list[tuple[float, float]] = []
    start = time.perf_counter()
    for _ in range(2):
        for k in sizes:
            batch = emb.collate(rows[-k:])
            size, big = batch["input_ids"].size, max(out, default=(0.0, 0.0))  # the largest batch timed
            if len({n for n, _ in out}) >= 2 and size > big[0] and big[1] / big[0] * size > max_s:
                break  # sizes ascend: the ones after it cost more still
            t0 = time.perf_counter()
            emb.postprocess(emb.forward(batch))
            emb.synchronize()
            out.append((float(batch["input_ids"].size), time.perf_counter() - t0))
            if len(out) >= max(4, len(sizes)) and time.perf_counter() - start > max_s:
                return out
    return out
