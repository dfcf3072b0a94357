"""This host's GPUs, each way they are read, in one place: torch's view (`read_gpus`: tune's capabilities, serve's
host check, the fingerprint in results.json) and the driver's view without torch in this process (`gpus_nvml`
through nvidia-ml-py, else `gpus_smi` parsing nvidia-smi: doctor and `plan` without --gpu)."""

from __future__ import annotations

import re
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict

from infertune.errors import InfertuneError
from infertune.hardware.shell import run

SMI_FIELDS = [
    "index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "ecc.mode.current",
    "mig.mode.current", "clocks_event_reasons.active", "clocks.sm", "clocks.max.sm", "temperature.gpu",
    "power.draw", "power.limit", "pstate", "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
]


class GPU(BaseModel):
    model_config = ConfigDict(frozen=True)
    index: int = 0
    name: str = ""
    capability: tuple[int, int] = (0, 0)
    memory_gb: float = 0.0

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def fp8(self) -> bool:
        return self.capability >= (8, 9)

    @property
    def half(self) -> str:
        """The 16-bit type to run in: bf16 from compute capability 8.0; below it (T4, V100) fp16, which takes
        the same bytes (vLLM refuses bfloat16 there)."""
        return "bf16" if self.bf16 else "fp16"


def read_gpus(import_torch: bool = True) -> tuple[GPU, ...]:
    """GPUs as torch sees them: the one place torch is asked about the devices. `import_torch=False`: only when torch
    is already imported (the environment fingerprint never imports it just for this)."""
    try:
        if import_torch:
            import torch
        elif (torch := sys.modules.get("torch")) is None:
            return ()
        if not torch.cuda.is_available():
            return ()
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append(GPU(index=i, name=p.name, capability=(p.major, p.minor),
                           memory_gb=round(p.total_memory / 2**30, 1)))
        return tuple(out)
    except Exception:  # noqa: BLE001
        return ()


def fingerprint_gpus() -> list[dict[str, Any]]:
    """The GPUs of the environment fingerprint (results.json's `fingerprint.gpu`), only if torch is already imported:
    torch's view, its CUDA version, and the driver's version when nvidia-ml-py is installed."""
    gpus = [{"index": g.index, "name": g.name, "memory_gb": g.memory_gb,
             "capability": f"{g.capability[0]}.{g.capability[1]}", "cuda": sys.modules["torch"].version.cuda}
            for g in read_gpus(import_torch=False)]
    if not gpus:
        return gpus
    try:
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        drv = pynvml.nvmlSystemGetDriverVersion()
        for g in gpus:
            g["driver"] = drv.decode() if isinstance(drv, bytes) else drv
    except Exception:
        pass
    return gpus


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


def local_gpu() -> tuple[str, float | None]:
    """(name as the driver reports it, memory in MiB) of GPU 0 (NVML, else nvidia-smi), or InfertuneError saying
    none was found: `plan` without --gpu."""
    found = gpus_nvml() or {}
    if not found.get("gpus"):
        found = gpus_smi()
    gpus = found.get("gpus") or []
    if not gpus or not gpus[0].get("name"):
        why = found.get("error") or "no NVIDIA GPU visible"
        raise InfertuneError(f"no --gpu given and no local GPU found ({why}); pass --gpu NAME, e.g. --gpu H100")
    mem = gpus[0].get("memory_mib")
    return str(gpus[0]["name"]), float(mem) if isinstance(mem, int | float) else None


def free_memory_gib(index: int = 0) -> float | None:
    """GiB free on GPU `index` now, as the driver counts it (NVML, else nvidia-smi), without a CUDA context in this
    process (tune's fit check runs before vLLM starts, and a context here would take memory from it); None when
    neither answers."""
    try:
        import pynvml  # provided by nvidia-ml-py

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).free / 2**30
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - not installed, or no driver: try nvidia-smi
        pass
    r = run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"])
    v = _num(r[1].splitlines()[0]) if r and r[0] == 0 and r[1].strip() else None
    return v / 1024 if isinstance(v, int | float) else None
