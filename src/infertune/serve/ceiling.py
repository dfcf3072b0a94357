"""The forward-only ceiling of a served model: how many items per second the device sustains when nothing
but the model runs (`infertune serve MODEL --ceiling`).

Texts are tokenized once up front, sorted by length and packed the way the server packs a full window
(the tuned token budget and the grown one the server uses under load, the item cap, lengths padded to a
multiple of 8; both budgets measured, interleaved, the faster reported), then the batches run back to back as the engine runs them (the next launched before the last is collected):
forward, post-process (normalise), device sync. Timed in rounds after a warm-up pass; the figure is
the median over rounds with min-max and n. Compare it with `infertune bench` against the server on the
same texts: the gap is what HTTP, JSON, tokenization and batching cost.
"""  # noqa: E501

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any


def forward_ceiling(model: str, device: str | None = None, texts: list[str] | None = None, *,
                    seconds: float = 3.0, rounds: int = 5, batch_tokens: int | None = None,
                    max_batch_items: int | None = None, progress: Any = None,
                    cuda_graphs: str | None = None, task: str | None = None) -> dict[str, Any]:
    """Measure the ceiling (`task`: as serve's --task, "embed" for a causal-LM checkpoint); returns items/s (median, min, max, n rounds) and how batches were formed."""  # noqa: E501
    from infertune.artifact import read_manifest
    from infertune.batching import ASYNC_DEPTH, PAD_MULTIPLE, pad_length, plan_batches, plan_packed
    from infertune.config import Batching
    from infertune.models.resolve import resolve_model
    from infertune.serve.config import ServeConfig, resolve_settings
    from infertune.serve.engine_setup import bring_up

    ref = resolve_model(model)
    manifest = read_manifest(ref.path) if ref.format == "artifact" else None
    settings = resolve_settings(ServeConfig(model=model, device=device, batch_tokens=batch_tokens,
                                            max_batch_items=max_batch_items, cuda_graphs=cuda_graphs), manifest)
    if texts is None:
        from infertune.workloads.texts import load_workload

        texts = load_workload(None).items
    # the server's engine, brought up as `serve` brings it up (the CUDA-graph wrapping included)
    emb, engine = bring_up(model, settings.device, settings.model_dump(), {"task": task} if task else None)
    # a packed engine decides whether it packs before we plan batches for it
    packed = emb.settle_packing() if hasattr(emb, "settle_packing") else False
    ids = sorted(emb.token_ids(texts), key=len)
    lengths = [len(x) if packed else -(-len(x) // PAD_MULTIPLE) * PAD_MULTIPLE for x in ids]
    # the server's two budgets: the tuned one, and the grown one it packs under load
    budgets = sorted({settings.batch_tokens, max(settings.max_batch_tokens, settings.batch_tokens)})
    plans = {}
    for size in budgets:
        if packed:  # padding-free batches cost their real tokens: as few as the budget allows
            plan = plan_packed(lengths, size, settings.max_batch_items)
        else:
            plan = plan_batches(lengths, Batching(kind="tokens", size=size, max_items=settings.max_batch_items),
                                settings.max_padding)
        plans[size] = [pad_length(emb.collate([ids[i] for i in b]), PAD_MULTIPLE, emb.pad_id) for b in plan]

    def one_pass(batches: list) -> float:
        """The batches back to back as the engine runs them: the next one launched before the last is collected
        (at most ASYNC_DEPTH in flight; synchronous where launches are)."""
        t0 = time.perf_counter()
        flight: deque = deque()
        for b in batches:
            flight.append(emb.launch(b))
            if len(flight) >= ASYNC_DEPTH:
                emb.postprocess(emb.collect(flight.popleft()))
        while flight:
            emb.postprocess(emb.collect(flight.popleft()))
        emb.synchronize()
        return time.perf_counter() - t0

    for batches in plans.values():
        one_pass(batches)  # warm-up: kernels, autotuning, CUDA graphs for every shape
    per_round: dict[int, list[float]] = {size: [] for size in budgets}
    for r in range(rounds):
        for size, batches in plans.items():  # interleaved: both budgets see the same moments of the machine
            done, spent = 0, 0.0
            while spent < seconds / len(budgets):
                spent += one_pass(batches)
                done += len(ids)
            per_round[size].append(done / spent)
        if progress:
            progress(f"ceiling round {r + 1}/{rounds}: " + ", ".join(
                f"{v[-1]:,.0f} items/s at {k} tokens" for k, v in per_round.items()))
    best = max(budgets, key=lambda k: statistics.median(per_round[k]))
    rates = per_round[best]
    sizes = [b["input_ids"].shape[0] for b in plans[best]]
    return {"model": model, "device": settings.device, "items_per_s": round(statistics.median(rates), 1),
            "min": round(min(rates), 1), "max": round(max(rates), 1), "n": rounds,
            "texts": len(ids), "batches": len(sizes), "items_per_batch_mean": round(sum(sizes) / len(sizes), 1),
            "tokens_per_item_mean": round(sum(len(x) for x in ids) / len(ids), 1),
            "budget_tokens": best, "max_items": settings.max_batch_items, "engine": engine, "packed": packed,
            "cuda_graphs": dict(getattr(emb, "stats", {}), on=getattr(emb, "on", False)),
            "by_budget": {str(k): round(statistics.median(v), 1) for k, v in per_round.items()}}
