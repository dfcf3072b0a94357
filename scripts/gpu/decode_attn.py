#!/usr/bin/env python
"""Batch-1 decode of the Qwen3-0.6B shape: attention variants (the profile showed cuDNN SDPA over the
512-slot static cache at ~30% of step time). Graph replay per step, same weights, greedy agreement."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, "scripts/gpu")
from decode_probe import bandwidth, build_model, graphed, log, med, naive, prompt_ids  # noqa: E402

MODE = "max-autotune-no-cudagraphs"


def main():
    bw = bandwidth()
    ids = prompt_ids()
    rows = []
    ref = None
    for label, attn, cudnn, max_len in (("sdpa cudnn (current) L512", "sdpa", True, 512),
                                        ("sdpa no-cudnn L512", "sdpa", False, 512),
                                        ("sdpa no-cudnn L256", "sdpa", False, 256),
                                        ("eager-attn L512", "eager", True, 512),
                                        ("eager-attn L256", "eager", True, 256)):
        model = build_model(attn)
        roof = sum(p.numel() for p in model.parameters()) * 2 / (bw * 1e9) * 1000
        if ref is None:
            _, ref = naive(model, ids)
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        torch._dynamo.reset()
        try:
            ev, wall, toks, prep = graphed(model, ids, 1, mode=MODE, max_len=max_len)
            e = med(ev)
            agree = next((i for i, (a, b) in enumerate(zip(ref, toks, strict=False)) if a != b), len(toks))
            rows.append(f"{label:28s} {e[0]:.3f} ({e[1]:.3f}-{e[2]:.3f}) wall {med(wall)[0]:.3f}  "
                        f"roofline {roof / e[0] * 100:5.1f}%  greedy {agree}/{len(toks)}  prep {prep:.0f} s")
        except Exception as ex:  # noqa: BLE001
            rows.append(f"{label:28s} failed: {type(ex).__name__}: {str(ex)[:200]}")
        log(rows[-1])
        del model
        torch.cuda.empty_cache()
    print(f"roofline {roof:.3f} ms/step at {bw:.0f} GB/s; ms/step p50 (p5-p95) from CUDA events over graph replays")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
