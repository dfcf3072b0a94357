"""The accuracy reference when the unquantized model cannot be served on the GPU: the 16-bit weights' logits on
the evaluation split, computed by transformers on the CPU (the weights upcast to fp32 where the host RAM holds them,
which is lossless, else kept in their 16-bit type, else offloaded layer by layer from disk through accelerate's
device map), in the rows `position_logprobs` and `greedy` of tasks/causal_lm/served_measure.py return, so
`served_measure.score` and `verify.accuracy` judge the quantized candidates against it unchanged.

`choose` decides whether this host can compute it within the time left: the FLOPs of the evaluation tokens
(plan/arch.flops_per_token) over the CPU's estimated matmul peak (hardware/cpu_peak.py) at an efficiency we state,
plus, when offloaded, one read of the weights from disk per forward pass. When it cannot, the reference is the most
precise checkpoint that fits, served like the others, and results.json's `lm.accuracy_reference` says so."""

from __future__ import annotations

import os
import time
from typing import Any

CPU_EFFICIENCY = 0.25  # of the estimated peak an eager transformers forward reaches on small batches (stated)
DISK_GBS = 1.0  # GB/s read when offloaded (stated: an ordinary NVMe through the page cache)


def _mem_available_bytes() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0


def choose(arch, cpu, n_tokens: int, n_decode: int, time_left_s: float,
           mem_available: float | None = None) -> dict[str, Any]:
    """How to compute the 16-bit reference on this host: {"how", "dtype", "estimate_s", "why"}; how is "cpu",
    "cpu-offload" or None (not within the time left)."""
    from infertune.hardware.cpu_peak import cpu_peak_tflops

    mem = _mem_available_bytes() if mem_available is None else mem_available
    fp32, half = arch.weights_bytes("fp32"), arch.weights_bytes("bf16")
    how, dtype = ("cpu", "fp32") if fp32 * 1.2 < mem else ("cpu", "bf16") if half * 1.2 < mem else ("cpu-offload",
                                                                                                   "bf16")
    peak, _ = cpu_peak_tflops(cpu, "fp32" if dtype == "fp32" or not cpu.bf16 else "bf16")
    flops = arch.flops_per_token(256)["total"] * n_tokens + arch.flops_per_token(256, "decode")["total"] * n_decode
    est = flops / ((peak or 0.05) * 1e12 * CPU_EFFICIENCY)
    if how == "cpu-offload":
        est += (n_decode + 1) * half / (DISK_GBS * 1e9)
    est = round(est, 1)
    size = (fp32 if dtype == "fp32" else half) / 2**30
    room = f"{mem / 2**30:.1f} GiB of host RAM available, {dtype} weights {size:.1f} GiB"
    if est > time_left_s / 2:
        return {"how": None, "dtype": dtype, "estimate_s": est,
                "why": f"the 16-bit model on this CPU ({how}, {room}) needs about {est:.0f} s, more than half of the "
                       f"{time_left_s:.0f} s left"}
    return {"how": how, "dtype": dtype, "estimate_s": est,
            "why": f"the 16-bit weights' logits on the CPU ({room}; about {est:.0f} s estimated)"}


def compute(model_dir: str, seqs: list[list[int]], prompts: list[list[int]], n_new: int, dtype: str = "fp32",
            offload_dir: str | None = None, k: int = 20) -> tuple[list, list[list[int]], float]:
    """(position rows as served.position_logprobs gives them, greedy continuations as served.greedy, seconds)."""
    import torch
    from transformers import AutoModelForCausalLM

    t = time.perf_counter()
    kw: dict[str, Any] = {"dtype": torch.float32 if dtype == "fp32" else torch.bfloat16}
    if offload_dir:
        os.makedirs(offload_dir, exist_ok=True)
        kw |= {"device_map": "auto", "offload_folder": offload_dir, "max_memory": {"cpu": _mem_available_bytes() * 0.6}}
    model = AutoModelForCausalLM.from_pretrained(model_dir, **kw).eval()
    rows = []
    with torch.inference_mode():
        for ids in seqs:
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
            lp = torch.log_softmax(logits, dim=-1)
            top_v, top_i = lp.topk(k, dim=-1)
            rows.append([(int(tok), float(lp[i, tok]), dict(zip(top_i[i].tolist(), top_v[i].tolist(), strict=True)))
                         for i, tok in enumerate(ids[1:])])
        greedy = []
        for ids in prompts:
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                                 pad_token_id=model.config.eos_token_id)
            greedy.append([int(x) for x in out[0, len(ids):]])
    del model
    return rows, greedy, round(time.perf_counter() - t, 1)


__all__ = ["choose", "compute"]
