"""The forward-only ceiling of a served model: how many items per second the device sustains when nothing
but the model runs (`infertune serve MODEL --ceiling`).

Texts are tokenized once up front, sorted by length and packed the way the server packs a full window
(the grown token budget, the item cap, lengths padded to a multiple of 8), then the batches run back to
back: forward, post-process (normalise), device sync. Timed in rounds after a warm-up pass; the figure is
the median over rounds with min-max and n. Compare it with `infertune bench` against the server on the
same texts: the gap is what HTTP, JSON, tokenization and batching cost.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def forward_ceiling(model: str, device: str | None = None, texts: list[str] | None = None, *,
                    seconds: float = 3.0, rounds: int = 5, batch_tokens: int | None = None,
                    max_batch_items: int | None = None, progress: Any = None) -> dict[str, Any]:
    """Measure the ceiling; returns items/s (median, min, max, n rounds) and how batches were formed."""
    from infertune.artifact import load_model, read_manifest
    from infertune.batching import pad_length, plan_batches
    from infertune.config import Batching
    from infertune.models.resolve import resolve_model
    from infertune.serve.config import ServeConfig, resolve_settings
    from infertune.serve.engine import PAD_MULTIPLE

    ref = resolve_model(model)
    manifest = read_manifest(ref.path) if ref.format == "artifact" else None
    settings = resolve_settings(ServeConfig(model=model, device=device, batch_tokens=batch_tokens,
                                            max_batch_items=max_batch_items), manifest)
    if texts is None:
        from infertune.workload import load_workload

        texts = load_workload(None).items
    emb = load_model(model, settings.device)
    ids = sorted(emb.token_ids(texts), key=len)
    lengths = [-(-len(x) // PAD_MULTIPLE) * PAD_MULTIPLE for x in ids]
    policy = Batching(kind="tokens", size=max(settings.max_batch_tokens, settings.batch_tokens),
                      max_items=settings.max_batch_items)
    plan = plan_batches(lengths, policy, settings.max_padding)
    batches = [pad_length(emb.collate([ids[i] for i in b]), PAD_MULTIPLE, emb.pad_id) for b in plan]
    sizes = [len(b) for b in plan]

    def one_pass() -> float:
        t0 = time.perf_counter()
        for b in batches:
            emb.postprocess(emb.forward(b))
        emb.synchronize()
        return time.perf_counter() - t0

    one_pass()  # warm-up: kernels, autotuning, CUDA graphs for every shape
    per_round: list[float] = []
    for r in range(rounds):
        done, spent = 0, 0.0
        while spent < seconds:
            spent += one_pass()
            done += len(ids)
        per_round.append(done / spent)
        if progress:
            progress(f"ceiling round {r + 1}/{rounds}: {per_round[-1]:,.0f} items/s")
    return {"model": model, "device": settings.device, "items_per_s": round(statistics.median(per_round), 1),
            "min": round(min(per_round), 1), "max": round(max(per_round), 1), "n": rounds,
            "texts": len(ids), "batches": len(batches), "items_per_batch_mean": round(sum(sizes) / len(sizes), 1),
            "tokens_per_item_mean": round(sum(len(x) for x in ids) / len(ids), 1),
            "budget_tokens": policy.size, "max_items": policy.max_items}
