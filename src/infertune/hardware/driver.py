"""The NVIDIA driver as a process sees it: can libcuda.so.1 and libnvidia-ml.so.1 be loaded, and which driver and
CUDA versions they report. Read through ctypes, so it works without torch or nvidia-ml-py (doctor, deploy)."""

from __future__ import annotations

import ctypes
from typing import Any

from infertune.hardware.shell import read_text


def _loaded_path(fragment: str) -> str | None:
    for ln in (read_text("/proc/self/maps") or "").splitlines():
        if fragment in ln and "/" in ln:
            return ln[ln.index("/"):].strip()
    return None


def libcuda() -> dict[str, Any]:
    """Load libcuda.so.1 (the driver API) and ask it which CUDA version it supports."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"loadable": False, "error": str(e)}
    v = ctypes.c_int(0)
    rc = lib.cuDriverGetVersion(ctypes.byref(v))
    out: dict[str, Any] = {"loadable": True, "path": _loaded_path("libcuda.so")}
    if rc == 0 and v.value:
        out["cuda_version"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    else:
        out["error"] = f"cuDriverGetVersion returned {rc}"
    return out


NVML_ERRORS = {1: "uninitialized", 2: "invalid argument", 3: "not supported", 4: "no permission",
               9: "driver not loaded", 12: "library not found", 18: "driver/library version mismatch",
               999: "unknown error"}


def nvml_access() -> dict[str, Any]:
    """Can libnvidia-ml.so.1 be loaded and initialised? (Works without nvidia-ml-py.)"""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return {"loadable": False, "error": str(e)}
    rc = lib.nvmlInit_v2()
    out: dict[str, Any] = {"loadable": True, "init_rc": rc, "path": _loaded_path("libnvidia-ml.so")}
    if rc != 0:
        out["error"] = NVML_ERRORS.get(rc, f"NVML error {rc}")
        return out
    buf = ctypes.create_string_buffer(96)
    if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
        out["driver"] = buf.value.decode()
    lib.nvmlShutdown()
    return out
