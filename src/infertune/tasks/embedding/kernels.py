"""The kernels that ran, judged: a quantized candidate whose weight GEMMs did not run in the kind it asks for
(torchao leaves layers that are not multiples of 16 in 16-bit; a checkpoint may load and never apply its
quantization) is rejected, so its speed never stands for a quantization that did not happen. The engine's
one profiled batch (engines/kernels.py) is recorded in results.json as `executed.kernels`."""

from __future__ import annotations

from typing import Any

MIN_SHARE = 0.5  # at least half of the GEMMs meant to be quantized ran the requested kind


def profile_batch(emb: Any, texts: list[str]) -> Any:
    """The one batch the kernels are profiled on: up to 8 workload texts, collated as the engine batches them."""
    sample = list(texts[:8]) or ["The kernels that ran: one profiled batch."]
    return emb.collate(emb.token_ids(sample))


def record(emb: Any, texts: list[str]) -> dict[str, Any] | None:
    """The engine's kernel mix over one batch (its `kernel_mix`), None where it has none; a profile that fails is
    recorded as such and never fails the candidate."""
    probe = getattr(emb, "kernel_mix", None)
    if probe is None:
        return None
    try:
        return probe(profile_batch(emb, texts))
    except Exception as e:  # noqa: BLE001 - a diagnosis, not the candidate's answer
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def requested(cand: Any) -> str | None:
    """The GEMM kind a candidate asks for: its quantizer's (int8 | fp8 | int4), or its precision's; None when it asks
    for no quantized GEMMs (a weight-only int8 quantizer: its GEMMs are 16-bit ones on dequantized weights)."""
    method, precision = getattr(cand, "quant", None), getattr(cand, "precision", None)
    if method:
        from infertune.registry import quant

        q = quant(method)
        if q is not None:
            return None if q.weight_only and q.kind != "int4" else q.kind
    return precision if precision in ("int8", "fp8") else None


def verdict(cand: Any, mix: dict[str, Any] | None) -> str:
    """Why `cand` is rejected for the kernels it ran ("int8 requested, 0 of 36 GEMMs ran int8"), or "".
    Mixed precision is judged on the layers meant to be quantized: all GEMMs less the ones it keeps high."""
    kind = requested(cand)
    if not kind or not mix or "gemms" not in mix or not mix.get("total"):
        return ""  # nothing asked for, or nothing seen to judge by
    total = int(mix["total"])
    ran = int(mix["gemms"].get(kind, 0))
    meant = max(total - len(cand.keep_high), 1)
    if ran >= MIN_SHARE * meant:
        return ""
    kept = f" ({meant} meant to run it, {len(cand.keep_high)} kept high)" if cand.keep_high else ""
    return f"{kind} requested, {ran} of {total} GEMMs ran {kind}{kept}: {gemm_line(mix)} ({mix.get('source')})"


def gemm_line(mix: dict[str, Any] | None) -> str:
    """'36 int8, 1 fp32' (most first); '-' when nothing was recorded."""
    if not mix:
        return "-"
    if "error" in mix:
        return "profile failed"
    parts = sorted(mix.get("gemms", {}).items(), key=lambda kv: -kv[1])
    return ", ".join(f"{n} {k}" for k, n in parts) or "none seen"
