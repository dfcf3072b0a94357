"""CUDA/driver compatibility rules over data/cuda_compat.toml, and arch coverage of a build."""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from importlib.resources import files


@lru_cache(maxsize=1)
def table() -> dict:
    return tomllib.loads((files("infertune") / "data" / "cuda_compat.toml").read_text())


def vtuple(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or ""))


def min_driver(cuda: str) -> str | None:
    """Linux driver packaged with CUDA major.minor (the full-feature minimum)."""
    want = vtuple(cuda)[:2]
    for row in table()["toolkit"]:
        if vtuple(row["cuda"])[:2] == want:
            return row["linux"]
    return None


def family_min(major: int) -> str | None:
    return next((f["min_driver"] for f in table()["family"] if f["major"] == major), None)


def max_cuda_for_driver(driver: str) -> str | None:
    """Newest CUDA whose packaged Linux driver is <= `driver` (used when libcuda cannot be asked)."""
    d = vtuple(driver)
    rows = [r for r in table()["toolkit"] if vtuple(r["linux"]) <= d]
    return max((r["cuda"] for r in rows), key=vtuple, default=None)


def runtime_vs_driver(runtime: str, driver_cuda: str | None, driver: str | None) -> tuple[str, str, str]:
    """(level, message, fix) for code built with CUDA `runtime` on a driver supporting `driver_cuda`."""
    rt, dc = vtuple(runtime)[:2], vtuple(driver_cuda)[:2]
    need = min_driver(runtime)
    if not dc:
        return "warning", f"built for CUDA {runtime}; the driver's CUDA version is unknown", ""
    if rt <= dc:
        return "ok", f"built for CUDA {runtime}; driver supports CUDA {driver_cuda}", ""
    fam = family_min(rt[0])
    if rt[0] == dc[0] and fam and driver and vtuple(driver) >= vtuple(fam):
        return ("warning", f"built for CUDA {runtime}, driver supports CUDA {driver_cuda}: runs under minor-version "
                "compatibility, but PTX compiled by the newer toolkit (Triton, JIT kernels) can fail with "
                "'unsupported toolchain'", f"update the driver to >= {need}" if need else "update the driver")
    return ("error", f"built for CUDA {runtime}, but the driver only supports CUDA {driver_cuda}",
            f"update the NVIDIA driver to >= {need or family_min(rt[0]) or '?'} (Linux), or install a build for CUDA "
            f"{driver_cuda}")


def arch_covers(arch_list: list[str], cc: str) -> tuple[bool, str]:
    """Does a build with these arch targets run on compute capability `cc`?

    SASS sm_XY runs on X.Z for Z >= Y (same major); PTX compute_XY is JIT-compiled for any newer GPU;
    'a'/'f'-suffixed targets (sm_90a) run only on exactly that architecture."""
    want = vtuple(cc)
    if len(want) < 2:
        return False, "unknown capability"
    for a in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", a)
        if not m:
            continue
        kind, major, minor, suf = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if suf and (major, minor) == want[:2]:
            return True, a
        if suf:
            continue
        if kind == "sm" and major == want[0] and minor <= want[1]:
            return True, a
        if kind == "compute" and (major, minor) <= want[:2]:
            return True, f"{a} (PTX, JIT-compiled at first use)"
    return False, ""


def vllm_images(vllm: str | None = None) -> list[dict]:
    """[[vllm_image]] rows (vllm, image, cuda), newest vLLM and then newest CUDA first; only `vllm`'s release
    when given (a local suffix such as +cpu ignored)."""
    rows = sorted(table()["vllm_image"], key=lambda r: (vtuple(r["vllm"]), vtuple(r["cuda"])), reverse=True)
    if vllm is None:
        return rows
    return [r for r in rows if vtuple(r["vllm"]) == vtuple(vllm.split("+", 1)[0])]
