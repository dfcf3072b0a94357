"""The GEMM ladder: how fast this host multiplies matrices of given shapes in each precision its quantized engines
compute in, measured in seconds. Shapes and token counts in, plain data out; what to make of it is the caller's
(the embedding family: tasks/embedding/ladder.py).

GPU: bf16 `torch.mm` (the 16-bit base; fp16 below compute capability 8.0), fp8 e4m3 `torch._scaled_mm` with
row-wise scales and bf16 out (compute capability >= 8.9), int8 `torch._int_mm` (int32 out). CPU: fp32 `torch.mm`
(the base), bf16 `torch.mm` where the CPU has native bf16, int8 `torch._int_mm`. Only the GEMM is timed: the
quantization of the activations before it is not (torch.compile fuses it into the kernel before; an eager engine
pays it on top, and eager fp8 ran slower than bf16 on an H100: docs/architecture.md, compiled engines).

Timing: random inputs (tensor cores run zeros faster), several input sets rotated so a call does not find its
operands in cache, every set's first call untimed, then up to N_SAMPLES samples per precision, interleaved across
the precisions of a shape (drift hits them alike); a sample is a run of calls between CUDA events (a GPU; at least
~1 ms of work) or one call between perf_counter reads (a CPU); the median is reported with n and the range."""

from __future__ import annotations

import math
import time
from typing import Any

N_SAMPLES = {"cuda": 30, "cpu": 5}
MIN_SAMPLES = 3
ROTATE_BYTES = 128 * 2**20  # input sets rotated until they add up to this (about twice an H100's 50 MB L2)
OPS = {"bf16": "torch.mm", "fp16": "torch.mm", "fp32": "torch.mm",
       "fp8": "torch._scaled_mm (e4m3, row-wise scales, bf16 out)", "int8": "torch._int_mm (int32 out)"}


def precisions_here(device: str, wanted: list[str]) -> tuple[str, list[str], dict[str, str]]:
    """(the base precision, the precisions to time with the base first, why each wanted one is not timed here)."""
    import torch

    skipped: dict[str, str] = {}
    if device == "cuda":
        cap = torch.cuda.get_device_capability()
        base = "bf16" if cap >= (8, 0) else "fp16"
        if "fp8" in wanted and cap < (8, 9):
            skipped["fp8"] = f"fp8 GEMMs need compute capability >= 8.9; this GPU is {cap[0]}.{cap[1]}"
    else:
        from infertune.hardware.capabilities import read_cpu

        base = "fp32"
        if "bf16" in wanted and not read_cpu(real=True).bf16:
            skipped["bf16"] = "this CPU has no native bf16 (AVX512-BF16 or AMX): torch would emulate it"
    out = [base] + [p for p in dict.fromkeys(wanted) if p != base and p not in skipped]
    return base, out, skipped


def _operands(prec: str, m: int, k: int, n: int, device: str, gen) -> tuple[Any, ...]:
    """One input set: the arguments of `prec`'s GEMM, from random values, quantized the way the engines do."""
    import torch

    a = torch.randn(m, k, device=device, generator=gen)
    w = torch.randn(n, k, device=device, generator=gen)  # a Linear's weight: (out, in)
    if prec in ("bf16", "fp16", "fp32"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[prec]
        return a.to(dt), w.to(dt).t()
    if prec == "int8":
        return (a.mul(40).round().clamp(-127, 127).to(torch.int8),
                w.mul(40).round().clamp(-127, 127).to(torch.int8).t())
    fmax = torch.finfo(torch.float8_e4m3fn).max  # fp8: scales per activation row and per weight row (output column)
    sa = a.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / fmax
    sw = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / fmax
    return ((a / sa).to(torch.float8_e4m3fn), (w / sw).to(torch.float8_e4m3fn).t(), sa.float(), sw.float().t())


def _call(prec: str):
    import torch

    if prec == "int8":
        return lambda ops: torch._int_mm(ops[0], ops[1])
    if prec == "fp8":
        return lambda ops: torch._scaled_mm(ops[0], ops[1], scale_a=ops[2], scale_b=ops[3], out_dtype=torch.bfloat16)
    return lambda ops: torch.mm(ops[0], ops[1])


def _sets(prec: str, m: int, k: int, n: int, device: str, gen) -> list[tuple[Any, ...]]:
    first = _operands(prec, m, k, n, device, gen)
    size = sum(t.numel() * t.element_size() for t in first) + m * n * 4
    count = 2 if device == "cpu" else max(2, min(16, math.ceil(ROTATE_BYTES / size)))
    return [first] + [_operands(prec, m, k, n, device, gen) for _ in range(count - 1)]


class _Clock:
    """Seconds of `reps` calls: CUDA events around them on a GPU, perf_counter after a synchronize on a CPU."""

    def __init__(self, device: str):
        import torch

        self.cuda = device == "cuda"
        self.torch = torch

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time(self, fn, sets: list, start: int, reps: int) -> float:
        if self.cuda:
            a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            a.record()
            for i in range(reps):
                fn(sets[(start + i) % len(sets)])
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        t = time.perf_counter()
        for i in range(reps):
            fn(sets[(start + i) % len(sets)])
        return time.perf_counter() - t


def _shape(m: int, k: int, n: int, precs: list[str], device: str, clock: _Clock, until: float,
           gen) -> dict[str, Any]:
    """One (M, K, N): every precision warmed up, then samples interleaved across them until N_SAMPLES or `until`."""
    cell: dict[str, Any] = {"m": m, "k": k, "n": n, "tflops": {}, "spread": {}, "samples": {}}
    live: dict[str, tuple[Any, list, int]] = {}
    for p in precs:
        try:
            fn, sets = _call(p), _sets(p, m, k, n, device, gen)
            for s in sets:  # every set's first call is untimed (cuBLAS heuristics, oneDNN primitives, caches)
                fn(s)
            clock.sync()
            one = clock.time(fn, sets, 0, 1)
            reps = 1 if device == "cpu" else max(1, min(200, math.ceil(1e-3 / max(one, 1e-7))))
            live[p] = (fn, sets, reps)
        except Exception as e:  # noqa: BLE001 - a kernel this build or GPU lacks: recorded, the rest go on
            cell.setdefault("errors", {})[p] = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    got: dict[str, list[float]] = {p: [] for p in live}
    for i in range(N_SAMPLES[device]):
        if i >= MIN_SAMPLES and time.perf_counter() >= until:
            break
        for p, (fn, sets, reps) in live.items():
            got[p].append(clock.time(fn, sets, i * reps, reps) / reps)
    tera = 2.0 * m * k * n / 1e12
    for p, secs in got.items():
        secs.sort()
        cell["tflops"][p] = _sig(tera / secs[len(secs) // 2])
        cell["spread"][p] = [_sig(tera / secs[-1]), _sig(tera / secs[0])]
        cell["samples"][p] = len(secs)
    return cell


def _sig(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant figures (a CPU's TFLOP/s at tiny shapes is 0.00x)."""
    return float(f"{x:.{digits - 1}e}")


def measure_ladder(shapes: list[tuple[int, int]], tokens: list[int], device: str, max_s: float,
                   precisions: list[str] | None = None) -> dict[str, Any]:
    """Time each (M, K, N) for M in `tokens` and (K, N) in `shapes` (the most important first: a cell that does not
    fit `max_s` is left out and named), in the base precision and `precisions` (default: every one timed on
    `device`). Each cell: TFLOP/s per precision (median, n, range) and the ratio of each to the base."""
    import platform

    import torch

    t0 = time.perf_counter()
    wanted = precisions if precisions is not None else (["fp8", "int8"] if device == "cuda" else ["bf16", "int8"])
    base, precs, skipped = precisions_here(device, wanted)
    gen = torch.Generator(device=device).manual_seed(0)
    clock = _Clock(device)
    todo = [(m, k, n) for m in tokens for k, n in shapes]
    cells, left_out = [], []
    for i, (m, k, n) in enumerate(todo):
        now = time.perf_counter()
        if now - t0 >= max_s:
            left_out.append({"m": m, "k": k, "n": n})
            continue
        until = now + (t0 + max_s - now) / (len(todo) - i)  # an equal share of what is left
        cell = _shape(m, k, n, precs, device, clock, until, gen)
        cell["ratio"] = {p: _sig(v / cell["tflops"][base]) for p, v in cell["tflops"].items()
                         if p != base and cell["tflops"].get(base)}
        cells.append(cell)
    if device == "cuda":
        name = torch.cuda.get_device_name()
        cap = "{}.{}".format(*torch.cuda.get_device_capability())
        torch.cuda.empty_cache()
    else:
        from infertune.hardware.capabilities import read_cpu

        name, cap = read_cpu(real=True).model or platform.processor(), None
    return {"device": device, "device_name": name, "capability": cap, "torch": torch.__version__,
            "threads": torch.get_num_threads() if device == "cpu" else None, "base": base, "precisions": precs,
            "ops": {p: OPS[p] for p in precs}, "not_measured": skipped, "cells": cells, "left_out": left_out,
            "max_s": max_s, "seconds": round(time.perf_counter() - t0, 3)}
