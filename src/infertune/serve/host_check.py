"""serve's start-up check: does this host match the one the artifact was tuned on, where it matters?

Compared: the CPU features the engine's kernels use (hardware/engine_features.py, the rule deploy places pods by),
on a GPU the compute capability and the product, and the engine's library version. A difference changes the
speed the artifact's batching was sized from, or (a missing bf16/int8 unit, another kernel version) the engine
itself; serve prints one line naming it and the tune command to run here, or refuses with `--strict-host`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from infertune.errors import InfertuneError
from infertune.hardware.engine_features import BF16_UNITS, INT8_UNITS, WIDE, engine_features, engine_package


def _installed(pkg: str) -> str | None:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def differences(manifest: dict[str, Any], host_flags: set[str], host_gpu: tuple[str, tuple[int, int]] | None,
                device: str) -> list[str]:
    """What differs, one phrase each (empty: same host class, or the artifact records no fingerprint)."""
    fp = manifest.get("fingerprint") or {}
    if not fp:
        return []
    f = engine_features(manifest)
    out: list[str] = []
    if device == "cpu" and f.device == "cpu":
        tuned = set(fp.get("cpu_flags") or [])
        used = set(f.required) | set(f.preferred)
        missing = sorted(x for x in used if x not in host_flags)
        if missing:
            out.append(f"this CPU lacks {', '.join(missing)} (tuned on {fp.get('cpu_model') or 'a CPU'} with them)")
        kind_units = set(BF16_UNITS) | set(INT8_UNITS) | set(WIDE)
        extra = sorted(x for x in kind_units if x in host_flags and x not in tuned)
        if extra:
            out.append(f"this CPU has {', '.join(extra)}, which the tune host lacked (another engine may win here)")
    elif device == "cuda" and f.device == "cuda" and host_gpu:
        name, cc = host_gpu
        if f.gpu_cc and tuple(cc) != tuple(f.gpu_cc):
            out.append(f"GPU compute capability {cc[0]}.{cc[1]} here, {f.gpu_cc[0]}.{f.gpu_cc[1]} on the tune host")
        elif f.gpu_product and name and name != f.gpu_product:
            out.append(f"GPU {name} here, {f.gpu_product} on the tune host")
    pkg = engine_package(manifest)
    tuned_v = (fp.get("libraries") or {}).get(pkg) if pkg else None
    here = _installed(pkg) if pkg else None
    if tuned_v and here and here != tuned_v:
        out.append(f"{pkg} {here} here, {tuned_v} when tuned")
    return out


def check_host(manifest: dict[str, Any], device: str, strict: bool) -> str | None:
    """The one line to print (None: nothing that matters differs); raises with --strict-host."""
    from infertune.hardware.capabilities import read_cpu, read_gpus

    host_gpu = None
    if device == "cuda":
        g = next(iter(read_gpus()), None)
        host_gpu = (g.name, g.capability) if g else None
    diff = differences(manifest, set(read_cpu().flags), host_gpu, device)
    if not diff:
        return None
    model = manifest.get("source") or manifest.get("model") or "MODEL"
    line = (f"host check: {'; '.join(diff)}. The artifact's engine and batch sizes were measured there; run "
            f"`infertune tune {model} --device {device}` here for this host's own")
    if strict:
        raise InfertuneError(line + " (--strict-host refuses to serve it)")
    return line
