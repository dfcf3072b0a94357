#!/usr/bin/env python
"""Kernel-time breakdown of one compiled batch-1 decode step (Qwen3-0.6B shape, bf16) and the graph
replay time under inductor's default mode vs max-autotune-no-cudagraphs. Companion of decode_probe.py."""

from __future__ import annotations

import collections
import sys

import torch

sys.path.insert(0, "scripts/gpu")
from decode_probe import bandwidth, build_model, graphed, log, med, prompt_ids  # noqa: E402


def profile(model, mode):
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=512)
    fn = torch.compile(lambda t, p: model(t, past_key_values=cache, cache_position=p, use_cache=True).logits[:, -1],
                       dynamic=False, mode=mode)
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
    pos = torch.full((1,), 70, dtype=torch.long, device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            fn(tok, pos)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn(tok, pos)
            torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name[:90]][0] += 1
            agg[e.name[:90]][1] += e.device_time / 5
    total = sum(v[1] for v in agg.values())
    print(f"--- {mode}: {sum(v[0] for v in agg.values()) / 5:.0f} kernels/step, {total:.0f} us kernel time/step")
    for name, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:18]:
        print(f"{us:8.1f} us {n / 5:5.0f}x  {name}")


def main():
    bw = bandwidth()
    model = build_model()
    roof = sum(p.numel() for p in model.parameters()) * 2 / (bw * 1e9) * 1000
    ids = prompt_ids()
    for mode in ("default", "max-autotune-no-cudagraphs"):
        torch._dynamo.reset()
        profile(model, None if mode == "default" else mode)
        torch._dynamo.reset()
        ev, wall, toks, prep = graphed(model, ids, 1, mode=None if mode == "default" else mode)
        e = med(ev)
        print(f"=== {mode}: graph replay {e[0]:.3f} ms/step ({e[1]:.3f}-{e[2]:.3f}), roofline {roof:.3f} "
              f"= {roof / e[0] * 100:.1f}%, prep {prep:.0f} s")
        log(f"{mode} done")


if __name__ == "__main__":
    main()
