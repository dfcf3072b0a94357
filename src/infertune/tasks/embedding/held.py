"""What an embedding artifact keeps so `infertune verify` can prove it again elsewhere: held eval texts spread over
length buckets, the fp32 reference engine's vectors on them (held.npz), and a speed figure of the winner measured
the way verify measures (`measure_speed`, same texts), so verify compares like with like (the manifest's `verify`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infertune.engines.held_check import HELD_FILE

HELD_TEXTS = 64  # texts kept: enough for a per-bucket cosine check and a speed pass
SPEED_PASSES = 10  # timed passes over the held texts (after one warm-up pass)
MIN_SPEED_TEXTS = 16  # the fewest held texts the speed passes run (the first ones: every length bucket in turn)
SAVE_S = 5.0  # writing the artifact's weights and files, before the speed passes (MiniLM on 2 cores: ~5 s)


def pass_s(held_lengths: Sequence[int], lengths: Sequence[int], items_per_s: float) -> float:
    """Expected seconds of one pass over the held texts at `items_per_s` measured on texts of `lengths`: scaled by
    tokens, since the held texts are taken from every length bucket and run longer than the workload's average."""
    mean = sum(lengths) / max(len(lengths), 1) or 1.0
    return sum(held_lengths) / (max(items_per_s, 1e-3) * mean)


def speed_texts(one_pass_s: float | None, allow_s: float | None) -> int:
    """How many of the held texts the speed passes run (the first ones, every length bucket in turn): all of them
    where SPEED_PASSES and a warm-up over them fit `allow_s`, fewer where not, never fewer than MIN_SPEED_TEXTS.
    verify measures the same texts with the same n (a best pass of n is biased by n). Long held texts on a small CPU
    run a few items/s (MiniLM, 2 cores, texts up to 512 tokens: 11 passes over 64 took 96 s)."""
    if not one_pass_s or allow_s is None:
        return HELD_TEXTS
    fit = int(HELD_TEXTS * allow_s / ((SPEED_PASSES + 1) * one_pass_s))
    return max(MIN_SPEED_TEXTS, min(HELD_TEXTS, fit))


def tail_s(task: Any, items_per_s: float) -> float:
    """The artifact step's expected seconds at `items_per_s`: the save, then the speed passes and their warm-up over
    the fewest texts."""
    lengths = task.lengths if task.acc_idx is None else [task.lengths[i] for i in task.acc_idx]
    held_lengths = [lengths[i] for i in pick_held(lengths, HELD_TEXTS, task.cfg.seed)]
    one = pass_s(held_lengths, lengths, items_per_s) * MIN_SPEED_TEXTS / HELD_TEXTS
    return SAVE_S + (SPEED_PASSES + 1) * one


def pick_held(lengths: Sequence[int], n: int = HELD_TEXTS, seed: int = 0) -> list[int]:
    """Positions of up to `n` texts taken in turn from each length bucket (workloads.buckets), so a rare long bucket
    is held as well as the common short one."""
    import random

    from infertune.workloads.buckets import bucket_of

    groups: dict[int, list[int]] = {}
    for i, t in enumerate(lengths):
        groups.setdefault(bucket_of(int(t)), []).append(i)
    rng = random.Random(seed)
    for g in groups.values():
        rng.shuffle(g)
    out: list[int] = []
    while len(out) < n and any(groups.values()):
        for b in sorted(groups):
            if groups[b] and len(out) < n:
                out.append(groups[b].pop())
    return sorted(out)


def measure_speed(emb: Any, texts: Sequence[str], batching: Any, passes: int = SPEED_PASSES,
                  warmup: int = 1) -> dict[str, Any]:
    """Warm up, then `passes` timed passes over `texts` (Embedder.measure_pass: tokenize, batch, forward,
    post-process). items/s of the best pass (tasks/embedding/measure.py says why on shared CPUs), the median and
    the range beside it, with n. tune runs this on the winner at artifact time and verify on the loaded artifact."""
    from infertune.tasks.embedding.measure import summarize

    for _ in range(warmup):
        emb.measure_pass(list(texts), batching)
    m = summarize([emb.measure_pass(list(texts), batching) for _ in range(passes)])
    return {"items_per_s": round(m.items_per_s, 3), "items_per_s_median": round(m.items_per_s_median or 0, 3),
            "spread": [round(x, 3) for x in m.items_per_s_spread], "n": m.passes, "items": m.items_per_pass,
            "estimator": m.items_per_s_estimator, "runs": m.items_per_s_runs}


def record(task: Any, worker: Any, cand: Any, art: Path, allow_s: float | None = None) -> None:
    """At artifact time: write held.npz (texts, token lengths, bucket labels, reference vectors) and the
    manifest's `verify` section (the accuracy budget, the dims judged, the winner's speed on as many of the held texts
    as SPEED_PASSES over them fit `allow_s` at the speed a pass runs now: speed_texts; `speed.items` says how
    many)."""
    import numpy as np

    from infertune.workloads.buckets import bucket_label, bucket_of

    ref = task.ref_vectors
    if ref is None:
        return
    lengths = task.lengths if task.acc_idx is None else [task.lengths[i] for i in task.acc_idx]
    texts = task.evals if task.acc_idx is None else [task.evals[i] for i in task.acc_idx]
    keep = pick_held(lengths, HELD_TEXTS, task.cfg.seed)
    held_texts = [texts[i] for i in keep]
    held_len = [int(lengths[i]) for i in keep]
    np.savez(art / HELD_FILE, texts=np.array(held_texts, dtype=object).astype(str), lengths=np.array(held_len),
             buckets=np.array([bucket_label(bucket_of(t)) for t in held_len]),
             reference=np.asarray(ref)[keep].astype(np.float32))
    a = task.cfg.accuracy
    m = json.loads((art / "manifest.json").read_text())
    m["verify"] = {
        "file": HELD_FILE, "texts": len(held_texts), "reference": task.result.reference if task.result else None,
        "budget": {"min_cosine_mean": a.min_cosine_mean, "min_cosine_min": a.min_cosine_min,
                   "min_bucket_items": a.min_bucket_items},
        "dimensions": (m.get("tune") or {}).get("accuracy_dimensions"),
        "threads": task.cfg.threads,
        "speed": None,  # below, once measured: the accuracy half works without it
        "how": "held texts: up to 64 of the verified eval texts, taken in turn from each length bucket; reference: "
               "the fp32 reference engine's pooled vectors on them; speed: the winner in its tune worker, "
               "measured by infertune.tasks.embedding.held.measure_speed on the first speed.items held texts (what "
               "verify runs)",
    }
    (art / "manifest.json").write_text(json.dumps(m, indent=2))
    # the timeout is for a box shared with others
    k = speed_texts(*_pass_now(worker, cand, held_texts, held_len, allow_s)) if allow_s is not None else HELD_TEXTS
    m["verify"]["speed"] = worker.call("speed", timeout=600, batching=cand.batching.model_dump(), texts=held_texts[:k],
                                       passes=SPEED_PASSES)
    (art / "manifest.json").write_text(json.dumps(m, indent=2))


def _pass_now(worker: Any, cand: Any, texts: Sequence[str], lengths: Sequence[int],
              allow_s: float) -> tuple[float, float]:
    """(seconds of one pass over all the held texts, seconds still allowed), from a pass over the first
    MIN_SPEED_TEXTS timed now, in the winner's worker, scaled by tokens. The tuned items/s is no guide here: it was
    measured on the workload's texts, perhaps while the host was quieter (a quick MiniLM tune on a shared 2-core
    host sized its passes from 42 items/s, ran them at 7-21, and its artifact step took 65 s of a 150 s budget)."""
    import time

    t0 = time.perf_counter()
    few = worker.call("speed", timeout=600, batching=cand.batching.model_dump(), texts=list(texts[:MIN_SPEED_TEXTS]),
                      passes=1)  # its warm-up pass is the final passes' too
    head = sum(lengths[:MIN_SPEED_TEXTS]) or 1
    one = MIN_SPEED_TEXTS / max(few["items_per_s"], 1e-3) * sum(lengths) / head
    return one, allow_s - (time.perf_counter() - t0)
