"""What a causal-LM tune scores, greedy-decodes and times, all cut from the workload (the built-in chat
sample by default): evaluation text chunks, short real prompts for greedy agreement, real prompts at
length percentiles for TTFT, and a real context for decode steps at each batch size."""

from __future__ import annotations

import random
from typing import Any

from infertune.config import TuneConfig
from infertune.results import WorkloadSummary


def workload_plan(cfg: TuneConfig, spec, tok, loaded: tuple | None = None) -> tuple[dict[str, Any], WorkloadSummary]:
    """What to score, greedy-decode and time, all cut from the workload (built-in sample by default;
    `loaded`: what load_chat_workload already returned for it)."""
    import numpy as np

    from infertune.workloads.buckets import histogram
    from infertune.workloads.chat import load_chat_workload

    reqs, source = loaded or load_chat_workload(cfg.workload)
    rendered = [tok(r.render(tok), add_special_tokens=False)["input_ids"] for r in reqs]
    lengths = np.asarray([len(x) for x in rendered])
    limit = min(spec.max_length, 4096) - 64
    quick = cfg.quick
    # 1. evaluation text: the requests' own content (not the chat template), chunked
    rng = random.Random(cfg.seed)
    order = list(range(len(reqs)))
    rng.shuffle(order)
    seq_len, budget = (256, 512) if quick else (512, 1024)
    stream: list[int] = []
    for i in order:
        r = reqs[i]
        text = r.prompt if r.messages is None else "\n".join(c for _, c in r.messages)
        stream += tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if tok.eos_token_id else [])
        if len(stream) >= budget:
            break
    stream = stream[:budget]
    seqs = [stream[i:i + seq_len] for i in range(0, len(stream), seq_len) if len(stream[i:i + seq_len]) > 8]
    # 2. greedy continuations on short real prompts, spread over lengths
    n_new, n_prompts = (8, 2) if quick else (24, 4)
    short = sorted((i for i in range(len(reqs)) if len(rendered[i]) <= 128), key=lambda i: len(rendered[i]))
    if not short:
        short = sorted(range(len(reqs)), key=lambda i: len(rendered[i]))[:n_prompts]
    picks = [short[round(k * (len(short) - 1) / max(n_prompts - 1, 1))] for k in range(min(n_prompts, len(short)))]
    greedy = [rendered[i][-128:] for i in dict.fromkeys(picks)]
    # 3. TTFT at prompt-length percentiles: the real prompt nearest each percentile
    ttft = {}
    for q in (50,) if quick else (50, 90, 99):  # --quick: the diagnosis is batch-1 decode; one TTFT length
        target = min(float(np.percentile(lengths, q)), limit)
        i = int(np.argmin(np.abs(np.minimum(lengths, limit) - target)))
        ids = rendered[i][:limit]
        ttft[f"p{q}:{len(ids)}"] = ids
    # 4. TPOT: decode steps after a 64-token real context, at each batch size
    ctx_src = next((x for x in rendered if len(x) >= 64), max(rendered, key=len))
    steps = 8 if quick else 16
    # --quick answers "does a loop beat eager at batch 1, and why": batch-1 TPOT only (batch 8 on 2 cores cost
    # more than the diagnosis), unless the batch sizes were given (--lm-batches other than the default)
    asked = tuple(cfg.lm_batches) != type(cfg).model_fields["lm_batches"].default
    batches = [1] if quick and not asked else (list(cfg.lm_batches) or [1])
    plan = {"seqs": seqs, "greedy": greedy, "n_new": n_new, "ttft": ttft, "ctx": ctx_src[:64], "steps": steps,
            "batches": batches, "reps": 1,
            "max_len": max(max(len(g) for g in greedy) + n_new, len(ctx_src[:64]) + steps + 1) + 8}
    summary = WorkloadSummary(
        source=source, n_items=len(reqs), n_calibration=0, n_eval=len(reqs), tokens_mean=float(lengths.mean()),
        tokens_p50=float(np.percentile(lengths, 50)), tokens_p90=float(np.percentile(lengths, 90)),
        tokens_p99=float(np.percentile(lengths, 99)), tokens_max=int(lengths.max()),
        over_limit=int((lengths > spec.max_length).sum()), max_length=spec.max_length, histogram=histogram(lengths))
    return plan, summary
