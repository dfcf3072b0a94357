"""Share of the peak: how far a GPU candidate is from what the GPU can do, per candidate of an embedding tune.

achieved Linear TFLOP/s = Linear FLOPs per token x real tokens/s of the best timed pass / 1e12
fraction               = achieved / the GPU's dense tensor peak for the candidate's precision

FLOPs per token are plan's count from the model's config.json (`Arch.flops_per_token`, the same figure `infertune
plan` and `infertune inspect` use): 2 x the Linear weights a token multiplies through. Only the Linear layers are
counted, because only they run at a dense tensor peak: attention scores and values (which grow with the input
length), norms and pooling are left out, so the fraction is a floor of what the device did. Tokens are the texts'
real token counts (after truncation, special tokens included): padding is work the model did not need.

The peak is the dense figure of data/gpus.toml (hardware/gpu_specs.py) for the precision the matmuls run in: bf16
and fp16 their 16-bit peak, fp8 the fp8 one, int8 the int8 TOPS, mixed precision its quantized kind's; fp32 has no
tensor-core figure there. The GPU is found by the name torch reports ("NVIDIA H100 80GB HBM3" -> H100-SXM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.results import CandidateResult, Peak

UNIT = {"int8": "TOPS"}  # the table's int8 figure counts operations; every other precision FLOP/s


def linear_flops_per_token(model_dir: str | Path) -> tuple[float | None, str | None]:
    """(Linear FLOPs per token of the model whose config.json is in `model_dir`, None) or (None, why not)."""
    from infertune.plan.arch import arch_from_config, load_config

    try:
        a = arch_from_config(load_config(model_dir))
    except InfertuneError as e:
        return None, f"no FLOP count: {e}"
    return a.flops_per_token(1, "prefill")["linear"], None


def peak_precision(candidate: dict[str, Any]) -> str:
    """The precision whose peak applies to a candidate (its `candidate` dict in results.json): mixed precision
    is compared with its quantized kind's peak (int8 or fp8), as the quantized layers are most of its work."""
    precision = str(candidate.get("precision") or "fp32")
    if precision == "mixed":
        from infertune.registry import quant

        q = quant(candidate.get("quant") or "")
        return q.kind if q is not None else precision  # an unknown quantizer: no peak figure, the note says so
    return precision


def gpu_peak(gpu_name: str, precision: str) -> tuple[str | None, float | None, str | None]:
    """(gpus.toml entry's name, its dense peak for `precision`, why a figure is missing) for a GPU as torch
    names it."""
    from infertune.hardware.gpu_specs import find_gpu, peak_tflops

    try:
        g = find_gpu(gpu_name)
    except InfertuneError:
        return None, None, (f"{gpu_name!r} is not in the GPU spec table (data/gpus.toml): no peak to compare with; "
                            "`infertune plan --gpu` lists the GPUs it knows")
    if precision in ("fp32", "int4"):  # int4 weight-only computes in 16 bit; no embedding candidate runs it
        return g["name"], None, (f"no dense {precision} tensor-core figure in the GPU spec table for {g['name']} "
                                 "(its peaks are bf16, fp16, fp8 and int8)")
    peak = peak_tflops(g, precision)
    if peak is None:
        return g["name"], None, f"the GPU spec table has no {precision} figure for {g['name']} (no primary source read)"
    return g["name"], float(peak), None


def peak_record(flops_per_token: float | None, tokens_per_s: float | None, precision: str, gpu_name: str,
                why_no_flops: str | None = None) -> Peak:
    """A candidate's Peak from its Linear FLOPs per token, its real tokens/s and the GPU torch reports."""
    gpu, peak, note = gpu_peak(gpu_name, precision)
    tflops = flops_per_token * tokens_per_s / 1e12 if flops_per_token and tokens_per_s else None
    if tflops is None:
        note = why_no_flops or "no best-pass real tokens/s recorded for this candidate"
    return Peak(linear_tflops=tflops, flops_per_token=flops_per_token, tokens_per_s=tokens_per_s,
                precision=precision, peak_tflops=peak, fraction=tflops / peak if tflops and peak else None,
                gpu=gpu, gpu_reported=gpu_name, note=note)


def candidate_peak(r: CandidateResult, gpu_name: str | None, flops: tuple[float | None, str | None]) -> Peak | None:
    """The Peak of a measured candidate on a GPU (`gpu_name` as torch reports it; None on a CPU: no peak), with
    `flops` as linear_flops_per_token answered."""
    m = r.measurement
    if not gpu_name or m is None:
        return None
    return peak_record(flops[0], m.tokens_per_s_best, peak_precision(r.candidate), gpu_name, flops[1])


def peak_line(r: CandidateResult) -> str | None:
    """One line for a person: '28% of the H100-SXM's bf16 peak (277 of 989 TFLOP/s in Linear layers, best of
    n=30 passes)'; the note when a figure is missing; None without a Peak."""
    p = r.peak
    if p is None:
        return None
    unit = UNIT.get(p.precision or "", "TFLOP/s")
    n = f", best of n={r.measurement.passes} passes" if r.measurement else ""
    if p.fraction is not None and p.linear_tflops is not None:
        share = f"{p.fraction * 100:.0f}%" if p.fraction >= 0.1 else f"{p.fraction * 100:.1f}%"
        return (f"{share} of the {p.gpu}'s {p.precision} peak ({_num(p.linear_tflops)} of "
                f"{p.peak_tflops:g} {unit} in Linear layers{n})")
    if p.linear_tflops is not None:
        return f"{_num(p.linear_tflops)} {unit} in Linear layers{n}; no share of the peak: {p.note}"
    return f"no achieved TFLOP/s: {p.note}"


def _num(x: float) -> str:
    """277 (three figures and more), 19.7 (fewer)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"
