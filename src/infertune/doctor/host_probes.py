"""Raw facts for the host checks that come before serving (host_checks.py turns them into findings): Secure Boot,
DKMS for the running kernel, nouveau, the NVIDIA Container Toolkit and Docker's daemon.json, the locked-memory
limit, persistence mode and VBIOS, the GPU topology and the processes holding GPU memory.

Every probe returns the command's text or the file's content as it is (None when the tool or file is missing), so
the checks can be tested against recorded outputs of real hosts."""

from __future__ import annotations

import platform
import shutil
from typing import Any

from infertune.hardware.shell import read_text, run

TOOLKIT_BINS = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli")
DAEMON_JSON = "/etc/docker/daemon.json"
SMI_BOARD = ["nvidia-smi", "--query-gpu=index,name,persistence_mode,vbios_version", "--format=csv,noheader"]


def _text(cmd: list[str]) -> str | None:
    r = run(cmd)
    return None if r is None else (r[1] + r[2])


def gpu_processes() -> dict[str, Any]:
    """Processes holding GPU memory: NVML (compute and graphics processes) when nvidia-ml-py is installed, else
    the Processes table of plain `nvidia-smi` (the query interface lists compute processes only: not Xorg)."""
    try:
        import pynvml
    except ImportError:
        return {"source": "nvidia-smi", "text": _text(["nvidia-smi"])}
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: nothing holds GPU memory we could see
        return {"source": "nvml", "procs": None}
    procs: list[dict[str, Any]] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for kind, fn in (("C", "nvmlDeviceGetComputeRunningProcesses"),
                             ("G", "nvmlDeviceGetGraphicsRunningProcesses")):
                for p in getattr(pynvml, fn)(h):
                    try:
                        name = pynvml.nvmlSystemGetProcessName(p.pid)
                    except Exception:  # noqa: BLE001 - another PID namespace
                        name = "?"
                    used = p.usedGpuMemory
                    procs.append({"gpu": i, "pid": p.pid, "type": kind,
                                  "name": name.decode() if isinstance(name, bytes) else name,
                                  "used_mib": None if used is None else used // 2**20})
    finally:
        pynvml.nvmlShutdown()
    return {"source": "nvml", "procs": procs}


def gather() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi") is not None
    return {
        "sb_state": _text(["mokutil", "--sb-state"]),
        "dkms": _text(["dkms", "status"]),
        "kernel": platform.release(),
        "modinfo_nvidia": _text(["modinfo", "-F", "version", "nvidia"]),
        "docker": bool(shutil.which("docker") or shutil.which("dockerd")),
        "daemon_json": read_text(DAEMON_JSON),
        "toolkit": [b for b in TOOLKIT_BINS if shutil.which(b)],
        "limits": read_text("/proc/self/limits"),
        "board": _text(SMI_BOARD) if smi else None,
        "topo": _text(["nvidia-smi", "topo", "-m"]) if smi else None,
        "processes": gpu_processes() if smi else None,
    }
