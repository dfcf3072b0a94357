"""Host capabilities as plain data, and the requirement checks candidates declare.

`detect()` reads /proc/cpuinfo (Linux) and asks torch about GPUs only when asked for a CUDA device.
INFERTUNE_CPU_FLAGS (comma- or space-separated) replaces the detected CPU flags: the test suite uses it
to check the candidate rules against CPUs it does not run on, and a user can see what infertune would
try on another box (`INFERTUNE_CPU_FLAGS=avx2,fma infertune tune --dry-run`)."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from infertune.hardware.gpus import GPU, read_gpus

# flags that decide which kernels run fast: wide vectors, int8 dot products, bf16/fp16 matrix units
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "bf16", "i8mm")


class CPU(BaseModel):
    model_config = ConfigDict(frozen=True)
    model: str = ""
    vendor: str = ""
    flags: frozenset[str] = frozenset()
    cores: int = 1  # logical cores this process may use
    memory_gb: float = 0.0
    flags_source: str = "/proc/cpuinfo"
    mhz: float = 0.0  # the clock /proc/cpuinfo reports for the first core (0: not reported)

    def has(self, *flags: str) -> bool:
        return all(f in self.flags for f in flags)

    @property
    def avx2(self) -> bool:
        return self.has("avx2", "fma")

    @property
    def avx512(self) -> bool:
        return self.has("avx512f", "avx512bw", "avx512vl")

    @property
    def vnni(self) -> bool:
        """int8 dot-product instructions (AVX512-VNNI or AVX-VNNI; AMX-INT8 implies them)."""
        return self.has("avx512_vnni") or self.has("avx_vnni") or self.has("amx_int8") or self.has("i8mm")

    @property
    def bf16(self) -> bool:
        """Native bf16 arithmetic (AVX512-BF16, AMX-BF16, Arm BF16); elsewhere bf16 is emulated and slower
        than fp32."""
        return self.has("avx512_bf16") or self.has("amx_bf16") or self.has("bf16")

    @property
    def amx(self) -> bool:
        return self.has("amx_tile") and (self.has("amx_bf16") or self.has("amx_int8"))

    @property
    def fp16(self) -> bool:
        return self.has("avx512_fp16") or self.has("amx_fp16")

    def isa(self) -> str:
        """One phrase: the widest vector ISA and the matrix/dot-product extras."""
        if self.avx512:
            base = "AVX-512"
        elif self.avx2:
            base = "AVX2+FMA"
        elif self.has("asimd"):
            base = "NEON"
        else:
            base = "SSE-class (no AVX2)"
        extras = [name for name, ok in (("VNNI", self.vnni), ("BF16", self.bf16), ("FP16", self.fp16),
                                        ("AMX", self.amx)) if ok]
        return base + (f" + {' + '.join(extras)}" if extras else ", no VNNI/BF16/AMX")


class Capabilities(BaseModel):
    model_config = ConfigDict(frozen=True)
    device: str = "cpu"
    cpu: CPU = CPU()
    gpus: tuple[GPU, ...] = ()

    @property
    def gpu(self) -> GPU | None:
        return self.gpus[0] if self.gpus else None

    def summary(self) -> str:
        c = self.cpu
        s = f"{c.model or 'unknown CPU'}: {c.cores} cores, {c.isa()}, {c.memory_gb:.0f} GiB"
        if c.flags_source != "/proc/cpuinfo":
            s += f" (CPU flags from {c.flags_source})"
        for g in self.gpus:
            s += f"; GPU {g.index} {g.name} (sm_{g.capability[0]}{g.capability[1]}, {g.memory_gb:.0f} GiB)"
        return s


def _parse_flags(text: str) -> frozenset[str]:
    return frozenset(f.strip().lower() for f in text.replace(",", " ").split() if f.strip())


def read_cpu(flags_override: str | None = None, real: bool = False) -> CPU:
    """This host's CPU, the one place /proc/cpuinfo is read. `real`: the flags the kernels will meet, whatever
    INFERTUNE_CPU_FLAGS says (an engine's own availability check and the environment fingerprint want those)."""
    model = vendor = board = ""
    mhz = 0.0
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = val.strip()
                elif key == "Hardware" and not board:  # Arm boards name the SoC here, and have no model name
                    board = val.strip()
                elif key == "vendor_id" and not vendor:
                    vendor = val.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = _parse_flags(val)
                elif key == "cpu MHz" and not mhz:
                    try:
                        mhz = float(val)
                    except ValueError:
                        pass
    except OSError:
        pass
    model = model or board or platform.processor()
    source = "/proc/cpuinfo"
    override = None if real else flags_override if flags_override is not None else os.environ.get(
        "INFERTUNE_CPU_FLAGS")
    if override is not None:
        flags, source = _parse_flags(override), "INFERTUNE_CPU_FLAGS"
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        import psutil

        mem = psutil.virtual_memory().total / 2**30
    except Exception:  # noqa: BLE001
        mem = 0.0
    return CPU(model=model, vendor=vendor, flags=flags & frozenset(ISA_FLAGS) if source == "/proc/cpuinfo"
               else flags, cores=cores, memory_gb=round(mem, 1), flags_source=source, mhz=mhz)


def detect(device: str = "cpu") -> Capabilities:
    return Capabilities(device=device, cpu=read_cpu(), gpus=read_gpus() if device == "cuda" else ())


def needs(caps: Capabilities, requirements: Iterable[str]) -> str | None:
    """None when every requirement holds on this host, else one sentence naming the first that does not.

    Requirement names: cpu-bf16, cpu-vnni, cpu-avx512, cpu-avx2, gpu, gpu-bf16, gpu-fp8."""
    c, g = caps.cpu, caps.gpu
    for req in requirements:
        if req == "cpu-bf16" and not c.bf16:
            return ("this CPU has no native bf16 (needs AVX512-BF16 or AMX; found "
                    f"{c.isa()}): bf16 would be emulated and slower than fp32")
        if req == "cpu-vnni" and not c.vnni:
            return (f"this CPU has no int8 dot-product instructions (VNNI/AMX; found {c.isa()}): "
                    "this engine's int8 kernels run slower than its fp32 ones here")
        if req == "cpu-avx512" and not c.avx512:
            return f"needs AVX-512; this CPU has {c.isa()}"
        if req == "cpu-avx2" and not c.avx2:
            return f"needs AVX2+FMA; this CPU has {c.isa()}"
        if req.startswith("gpu") and g is None:
            return "needs a CUDA GPU; none is visible"
        if req == "gpu-bf16" and g is not None and not g.bf16:
            return f"bf16 needs compute capability >= 8.0; {g.name} is {g.capability[0]}.{g.capability[1]}"
        if req == "gpu-fp8" and g is not None and not g.fp8:
            return f"fp8 needs compute capability >= 8.9; {g.name} is {g.capability[0]}.{g.capability[1]}"
    return None
