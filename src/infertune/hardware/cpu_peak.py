"""A CPU's matmul peak, estimated: plan's roofline denominator on a host without a GPU (tune's predicted vs
measured). CPUs publish no tensor peak the way GPUs do, so it is counted from the parts:

  peak FLOP/s = cores x clock x FLOPs per cycle per core for the precision's widest matmul unit

FLOPs per cycle assume two FMA pipes per core (most x86 server and desktop cores): fp32 64 with AVX-512, 32 with
AVX2+FMA, 16 with NEON; bf16 1,024 with AMX, 128 with AVX512-BF16, else fp32's (emulated bf16 is no faster);
int8 2,048 with AMX, 256 with AVX512-VNNI, 128 with AVX-VNNI, else twice fp32's. The cores are those this process
may use (or the tune's threads): SMT siblings share the pipes, so on a box that counts them the estimate is high."""

from __future__ import annotations

from infertune.hardware.capabilities import CPU


def flops_per_cycle(cpu: CPU, precision: str) -> tuple[int, str]:
    """(FLOPs per cycle per core for `precision`'s matmuls on `cpu`, the unit that gives them)."""
    fp32 = (64, "AVX-512 FMA") if cpu.avx512 else (32, "AVX2 FMA") if cpu.avx2 else (
        (16, "NEON FMA") if cpu.has("asimd") else (8, "SSE"))
    if precision == "bf16":
        if cpu.amx and cpu.has("amx_bf16"):
            return 1024, "AMX-BF16"
        return (128, "AVX512-BF16") if cpu.has("avx512_bf16") else fp32
    if precision == "int8":
        if cpu.amx and cpu.has("amx_int8"):
            return 2048, "AMX-INT8"
        if cpu.has("avx512_vnni"):
            return 256, "AVX512-VNNI"
        return (128, "AVX-VNNI") if cpu.has("avx_vnni") else (2 * fp32[0], fp32[1] + " (int8 at twice fp32)")
    return fp32


def cpu_peak_tflops(cpu: CPU, precision: str, threads: int | None = None) -> tuple[float | None, str]:
    """(estimated dense matmul peak in TFLOP/s (TOPS for int8), how it was counted) or (None, why not)."""
    if not cpu.mhz:
        return None, "no clock in /proc/cpuinfo: no CPU peak to estimate"
    per, unit = flops_per_cycle(cpu, precision)
    cores = min(threads, cpu.cores) if threads else cpu.cores
    peak = cores * cpu.mhz * 1e6 * per / 1e12
    return peak, (f"{cores} cores x {cpu.mhz / 1000:.2f} GHz x {per} {precision} FLOPs/cycle ({unit}): "
                  "an estimate, not a published figure")
