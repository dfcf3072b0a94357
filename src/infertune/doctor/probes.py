"""Facts about this host, gathered without importing torch in this process.

Pattern after torch.utils.collect_env: every probe runs a command or reads a file and returns None when
the fact cannot be collected, so a missing tool never stops the report. Differences: NVML (nvidia-ml-py)
is preferred over parsing nvidia-smi, libcuda is loaded directly to get the driver's CUDA version and to
test library resolution (the container case), and torch runs in a subprocess."""

from __future__ import annotations

import ctypes
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

SMI_FIELDS = [
    "index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "ecc.mode.current",
    "mig.mode.current", "clocks_event_reasons.active", "clocks.sm", "clocks.max.sm", "temperature.gpu",
    "power.draw", "power.limit", "pstate", "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
]
PACKAGES = ["torch", "vllm", "tensorrt", "onnxruntime", "onnxruntime-gpu", "torchao", "transformers", "triton",
            "nvidia-ml-py", "pynvml"]


def run(cmd: list[str], timeout: float = 15) -> tuple[int, str, str] | None:
    """(returncode, stdout, stderr), or None when the program does not exist or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.returncode, p.stdout, p.stderr


def _read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def host() -> dict[str, Any]:
    import psutil

    from infertune.hardware.capabilities import read_cpu

    osr = _read("/etc/os-release") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', osr, re.M)
    cgroup = _read("/proc/1/cgroup") or ""
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
        "container": container, "wsl": "microsoft" in (_read("/proc/version") or "").lower(),
        "cpu_model": cpu.model, "cpu_flags": sorted(cpu.flags), "cpu_logical": os.cpu_count(),
        "cpu_physical": psutil.cpu_count(logical=False), "ram_bytes": psutil.virtual_memory().total,
        "shm_bytes": shm,
    }


def nodes() -> dict[str, Any]:
    km = _read("/proc/driver/nvidia/version") or ""
    m = re.search(r"Kernel Module(?: for [\w]+)?\s+([\d.]+)", km)
    mods = [ln.split()[0] for ln in (_read("/proc/modules") or "").splitlines() if ln.startswith(("nvidia", "nouveau"))]
    return {"dev": sorted(glob.glob("/dev/nvidia*")), "kernel_module": m.group(1) if m else None,
            "modules": mods}


def _loaded_path(fragment: str) -> str | None:
    for ln in (_read("/proc/self/maps") or "").splitlines():
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


def _num(s: str) -> float | int | str | None:
    s = s.strip()
    if s in ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported"):
        return None
    try:
        return int(s, 16) if s.startswith("0x") else (int(s) if re.fullmatch(r"-?\d+", s) else float(s))
    except ValueError:
        return s


def gpus_smi() -> dict[str, Any]:
    """Per-GPU facts from `nvidia-smi --query-gpu` (fields unknown to an older driver are skipped)."""
    head = run(["nvidia-smi"])
    if head is None:
        return {"available": False, "error": "nvidia-smi not found"}
    if head[0] != 0:
        return {"available": False, "error": (head[1] + head[2]).strip()[:400]}
    m = re.search(r"CUDA Version:\s*([\d.]+)", head[1])
    fields = list(SMI_FIELDS)
    r = run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    if r is None or r[0] != 0:  # an older driver: keep only the fields it knows
        fields = [f for f in SMI_FIELDS
                  if (x := run(["nvidia-smi", f"--query-gpu={f}", "--format=csv,noheader"])) and x[0] == 0]
        r = run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    rows = []
    for line in (r[1] if r and r[0] == 0 else "").strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        rows.append({f: (v if f in ("name", "uuid", "driver_version", "compute_cap", "pstate") else _num(v))
                     for f, v in zip(fields, vals, strict=False)})
    gpus = [{
        "index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid"), "driver": g.get("driver_version"),
        "cc": g.get("compute_cap"), "memory_mib": g.get("memory.total"), "ecc": g.get("ecc.mode.current"),
        "mig": g.get("mig.mode.current"), "clock_reasons": g.get("clocks_event_reasons.active"),
        "sm_clock_mhz": g.get("clocks.sm"), "sm_clock_max_mhz": g.get("clocks.max.sm"),
        "temperature_c": g.get("temperature.gpu"), "power_w": g.get("power.draw"),
        "power_limit_w": g.get("power.limit"), "pstate": g.get("pstate"),
        "ecc_uncorrected_volatile": g.get("ecc.errors.uncorrected.volatile.total"),
        "retired_pages_pending": g.get("retired_pages.pending"),
    } for g in rows]
    return {"available": True, "source": "nvidia-smi", "cuda_version": m.group(1) if m else None, "gpus": gpus}


def gpus_nvml() -> dict[str, Any] | None:
    """Per-GPU facts through nvidia-ml-py; None when the package is not installed."""
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return {"available": False, "source": "nvml", "error": str(e)}

    def s(x: Any) -> Any:
        return x.decode() if isinstance(x, bytes) else x

    def q(fn: str, *a: Any) -> Any:
        try:
            return getattr(pynvml, fn)(*a)
        except Exception:
            return None

    drv = s(q("nvmlSystemGetDriverVersion"))
    cv = q("nvmlSystemGetCudaDriverVersion")
    gpus = []
    for i in range(q("nvmlDeviceGetCount") or 0):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        cc = q("nvmlDeviceGetCudaComputeCapability", h)
        mem = q("nvmlDeviceGetMemoryInfo", h)
        ecc = q("nvmlDeviceGetEccMode", h)
        mig = q("nvmlDeviceGetMigMode", h)
        reasons = q("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = q("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        power = q("nvmlDeviceGetPowerUsage", h)
        limit = q("nvmlDeviceGetEnforcedPowerLimit", h)
        gpus.append({
            "index": i, "name": s(q("nvmlDeviceGetName", h)), "uuid": s(q("nvmlDeviceGetUUID", h)), "driver": drv,
            "cc": f"{cc[0]}.{cc[1]}" if cc else None, "memory_mib": mem.total // 2**20 if mem else None,
            "ecc": None if ecc is None else ("Enabled" if ecc[0] else "Disabled"),
            "mig": None if mig is None else ("Enabled" if mig[0] else "Disabled"),
            "clock_reasons": reasons, "sm_clock_mhz": q("nvmlDeviceGetClockInfo", h, 1),
            "sm_clock_max_mhz": q("nvmlDeviceGetMaxClockInfo", h, 1),
            "temperature_c": q("nvmlDeviceGetTemperature", h, 0),
            "power_w": power / 1000 if power else None, "power_limit_w": limit / 1000 if limit else None,
            "pstate": q("nvmlDeviceGetPerformanceState", h),
            "ecc_uncorrected_volatile": q("nvmlDeviceGetTotalEccErrors", h, 1, 0),
        })
    q("nvmlShutdown")
    return {"available": True, "source": "nvml", "gpus": gpus,
            "cuda_version": f"{cv // 1000}.{(cv % 1000) // 10}" if cv else None}


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
            v = json.loads(_read(vj) or "{}").get("cuda", {}).get("version")
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
        cls = (_read(f"{dev}/class") or "").strip()
        if cls.startswith("0x03"):
            v = (_read(f"{dev}/vendor") or "").strip()
            out.append({"pci": os.path.basename(dev), "vendor": vendors.get(v, v)})
    return out


def env() -> dict[str, str]:
    keys = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
            "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_MODULE_LOADING", "VLLM_WORKER_MULTIPROC_METHOD"]
    return {k: os.environ[k] for k in keys if k in os.environ}
