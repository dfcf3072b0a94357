"""The GPU of this host, for `plan` without --gpu: the same probes `doctor` uses (NVML, else nvidia-smi)."""

from __future__ import annotations

from infertune.errors import InfertuneError


def local_gpu() -> tuple[str, float | None]:
    """(name as the driver reports it, memory in MiB) of GPU 0, or InfertuneError saying none was found."""
    from infertune.doctor.probes import gpus_nvml, gpus_smi

    found = gpus_nvml() or {}
    if not found.get("gpus"):
        found = gpus_smi()
    gpus = found.get("gpus") or []
    if not gpus or not gpus[0].get("name"):
        why = found.get("error") or "no NVIDIA GPU visible"
        raise InfertuneError(f"no --gpu given and no local GPU found ({why}); pass --gpu NAME, e.g. --gpu H100")
    mem = gpus[0].get("memory_mib")
    return str(gpus[0]["name"]), float(mem) if isinstance(mem, int | float) else None
