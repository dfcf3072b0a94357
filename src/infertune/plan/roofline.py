"""How fast a causal LM can be at best on a GPU: decode steps bound by memory bandwidth (weights and KV cache
read once per step), prefill bound by the dense tensor peak. Bounds, not measurements."""

from __future__ import annotations

from typing import Any

from infertune.hardware.gpu_specs import peak_tflops
from infertune.plan.arch import Arch

GIB = 2**30


def rooflines(a: Arch, g: dict[str, Any], dtypes: tuple[str, ...], context: int, conc: int, tp: int, kv_dt: str,
              p_len: int) -> dict[str, dict[str, float | None]]:
    """Per weights dtype in `dtypes`: its size, the decode step at batch 1 and at `conc` sequences of `context`
    tokens, the decode tokens/s there, and the prefill time of a `p_len`-token prompt, each GPU holding 1/`tp` of
    the model."""
    bw = g["bandwidth_gbs"] * 1e9
    roof: dict[str, dict[str, float | None]] = {}
    for d in dtypes:
        read = a.decode_read_bytes(d) / tp
        kv_read = a.kv_bytes_per_token(kv_dt, tp) * context
        peak = peak_tflops(g, d)
        fl = a.flops_per_token(p_len, "prefill")
        prefill_flops = p_len * (fl["linear"] + fl["attention"] / 2) + fl["lm_head"] * p_len  # causal: half the square
        roof[d] = {
            "weights_gib": a.weights_bytes(d) / GIB,
            "decode_step_ms_bs1": (read + kv_read) / bw * 1e3,
            "decode_step_ms_at_concurrency": (read + conc * kv_read) / bw * 1e3,
            "decode_tokens_per_s_at_concurrency": conc / ((read + conc * kv_read) / bw),
            "prefill_ms": max(prefill_flops / (peak * 1e12 * tp), read / bw) * 1e3 if peak else None,
            "prefill_tokens": p_len,
        }
    return roof
