"""Facts about this host for the doctor, gathered without importing torch in this process. The GPUs and the driver
are read by infertune.hardware (gpus.py, driver.py), which plan and deploy read too.

Pattern after torch.utils.collect_env: every probe runs a command or reads a file and returns None when
the fact cannot be collected, so a missing tool never stops the report. Differences: NVML (nvidia-ml-py)
is preferred over parsing nvidia-smi, libcuda is loaded directly to get the driver's CUDA version and to
test library resolution (the container case), and torch runs in a subprocess."""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distributions, version
from importlib.util import find_spec
from typing import Any

from infertune.hardware.shell import read_text, run

PACKAGES = ["torch", "vllm", "tensorrt", "onnxruntime", "onnxruntime-gpu", "torchao", "transformers", "triton",
            "nvidia-ml-py", "pynvml"]


def host() -> dict[str, Any]:
    import psutil

    from infertune.hardware.capabilities import read_cpu

    osr = read_text("/etc/os-release") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', osr, re.M)
    cgroup = read_text("/proc/1/cgroup") or ""
    container = None
    if os.path.exists("/.dockerenv"):
        container = "docker"
    elif os.path.exists("/run/.containerenv"):
        container = "podman"
    elif re.search(r"docker|kubepods|containerd|lxc", cgroup):
        container = "container"
    cpu = read_cpu(real=True)
    shm = None
    try:
        st = os.statvfs("/dev/shm")
        shm = st.f_frsize * st.f_blocks
    except OSError:
        pass
    return {
        "os": m.group(1) if m else f"{platform.system()} {platform.release()}",
        "kernel": platform.release(), "machine": platform.machine(), "python": platform.python_version(),
        "container": container, "wsl": "microsoft" in (read_text("/proc/version") or "").lower(),
        "cpu_model": cpu.model, "cpu_flags": sorted(cpu.flags), "cpu_logical": os.cpu_count(),
        "cpu_physical": psutil.cpu_count(logical=False), "ram_bytes": psutil.virtual_memory().total,
        "shm_bytes": shm,
    }


def nodes() -> dict[str, Any]:
    km = read_text("/proc/driver/nvidia/version") or ""
    m = re.search(r"Kernel Module(?: for [\w]+)?\s+([\d.]+)", km)
    mods = [ln.split()[0] for ln in (read_text("/proc/modules") or "").splitlines()
            if ln.startswith(("nvidia", "nouveau"))]
    return {"dev": sorted(glob.glob("/dev/nvidia*")), "kernel_module": m.group(1) if m else None,
            "modules": mods}


def cuda_runtimes() -> list[dict[str, str]]:
    """CUDA runtimes this host could load: system libcudart, pip nvidia-cuda-runtime wheels, nvcc."""
    found: list[dict[str, str]] = []
    r = run(["ldconfig", "-p"])
    for ln in (r[1] if r else "").splitlines():
        m = re.search(r"(libcudart\.so\.[\d.]+).*=>\s*(\S+)", ln)
        if m:
            found.append({"kind": "system", "name": m.group(1), "where": m.group(2)})
    for d in distributions():
        name = (d.metadata["Name"] or "").lower()
        if name.startswith("nvidia-cuda-runtime"):
            found.append({"kind": "pip", "name": name, "version": d.version})
    for vj in sorted(glob.glob("/usr/local/cuda*/version.json")):
        try:
            v = json.loads(read_text(vj) or "{}").get("cuda", {}).get("version")
            found.append({"kind": "toolkit", "name": vj.rsplit("/", 1)[0], "version": v or "?"})
        except (OSError, ValueError):
            pass
    r = run(["nvcc", "--version"])
    if r and r[0] == 0 and (m := re.search(r"release .+ V([\d.]+)", r[1])):
        found.append({"kind": "nvcc", "name": shutil.which("nvcc") or "nvcc", "version": m.group(1)})
    return found


def _linked_cuda_major(pattern: str, lib: bytes = rb"lib(?:cudart|cublasLt|cublas)\.so\.(\d+)") -> int | None:
    """CUDA major a shared library was linked against (its DT_NEEDED names sit near the file start)."""
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as f:
                head = f.read(8 << 20)
        except OSError:
            continue
        m = re.search(lib, head)
        if m:
            return int(m.group(1))
    return None


def packages() -> dict[str, Any]:
    vers: dict[str, str] = {}
    for p in PACKAGES:
        try:
            vers[p] = version(p)
        except PackageNotFoundError:
            pass
    trt = sorted((d.metadata["Name"] or "").lower() for d in distributions()
                 if (d.metadata["Name"] or "").lower().startswith(("tensorrt-cu", "tensorrt_cu")))
    majors: dict[str, int | None] = {}
    spec = find_spec("vllm")
    if spec and spec.submodule_search_locations:
        majors["vllm"] = _linked_cuda_major(os.path.join(list(spec.submodule_search_locations)[0], "_C*.so"))
    spec = find_spec("onnxruntime")
    if spec and spec.submodule_search_locations:
        base = list(spec.submodule_search_locations)[0]
        if glob.glob(os.path.join(base, "capi", "libonnxruntime_providers_cuda.so")):
            majors["onnxruntime"] = _linked_cuda_major(os.path.join(base, "capi", "libonnxruntime_providers_cuda.so"))
    for name in trt:
        m = re.search(r"cu(\d+)", name)
        if m:
            majors["tensorrt"] = int(m.group(1))
    return {"versions": vers, "tensorrt_dists": trt, "cuda_majors": majors}


def stack(timeout: float) -> dict[str, Any]:
    """torch and onnxruntime as a fresh interpreter sees them (never initialises CUDA in this process)."""
    try:
        p = subprocess.run([sys.executable, "-m", "infertune.doctor.torch_probe"], capture_output=True,
                           text=True, timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return {"error": f"the torch probe did not finish in {timeout:.0f} s (CUDA initialisation hung?)"}
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"the torch probe failed (exit {p.returncode}): {p.stderr.strip()[-600:]}"}


def display_adapters() -> list[dict[str, str]]:
    """PCI display controllers (class 0x03xxxx) by vendor: finds hybrid Intel/AMD + NVIDIA laptops."""
    vendors = {"0x10de": "NVIDIA", "0x8086": "Intel", "0x1002": "AMD"}
    out = []
    for dev in sorted(glob.glob("/sys/bus/pci/devices/*")):
        cls = (read_text(f"{dev}/class") or "").strip()
        if cls.startswith("0x03"):
            v = (read_text(f"{dev}/vendor") or "").strip()
            out.append({"pci": os.path.basename(dev), "vendor": vendors.get(v, v)})
    return out


def env() -> dict[str, str]:
    keys = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
            "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_MODULE_LOADING", "VLLM_WORKER_MULTIPROC_METHOD"]
    return {k: os.environ[k] for k in keys if k in os.environ}
