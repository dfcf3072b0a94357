"""Where a pod may run, from the artifact's engine and the host it was tuned on (hardware/engine_features.py), in
the label names node-feature-discovery and NVIDIA's GPU feature discovery put on nodes:

- CPU: `feature.node.kubernetes.io/cpu-cpuid.<NAME>: "true"` for each feature the engine needs (nodeSelector), and
  a preferred node affinity for the tune host's other speed-relevant features; `kubernetes.io/arch`.
- GPU: `nvidia.com/gpu.compute.major` / `.minor` at or above what the engine's kernels need and
  `nvidia.com/gpu.memory` (MiB) above the memory the pod needs (required affinity), the tuned product
  (`nvidia.com/gpu.product`, spaces as '-') preferred.
- vLLM: `nvidia.com/cuda.driver.major` above the driver its image needs."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from infertune.hardware.engine_features import NFD_CPUID, EngineFeatures

NFD = "feature.node.kubernetes.io/cpu-cpuid."
GFD_PRODUCT, GFD_MAJOR, GFD_MINOR = ("nvidia.com/gpu.product", "nvidia.com/gpu.compute.major",
                                     "nvidia.com/gpu.compute.minor")
GFD_MEMORY, GFD_DRIVER_MAJOR = "nvidia.com/gpu.memory", "nvidia.com/cuda.driver.major"
Obj = dict[str, Any]


class Placement(BaseModel):
    node_selector: dict[str, str] = {}
    required: list[list[Obj]] = []  # nodeSelectorTerms (ORed), each a list of matchExpressions (ANDed)
    preferred: list[Obj] = []  # matchExpressions of one preferred term
    notes: list[str] = []

    def affinity(self) -> Obj:
        na: Obj = {}
        if self.required:
            na["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in self.required]}
        if self.preferred:
            na["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 50, "preference": {"matchExpressions": self.preferred}}]
        return {"nodeAffinity": na} if na else {}


def gfd_product(name: str) -> str:
    """GPU feature discovery's label value for a product name ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3")."""
    v = re.sub(r"[^A-Za-z0-9_.-]", "", name.strip().replace(" ", "-"))
    return v[:63].strip("-_.")


def _gt(key: str, above: int) -> Obj:
    return {"key": key, "operator": "Gt", "values": [str(above)]}


def cpu_placement(f: EngineFeatures) -> Placement:
    sel = {"kubernetes.io/arch": f.arch}
    for flag in f.required:
        sel[NFD + NFD_CPUID[flag]] = "true"
    pref = [{"key": NFD + NFD_CPUID[x], "operator": "In", "values": ["true"]} for x in f.preferred if x in NFD_CPUID]
    names = ", ".join(NFD_CPUID[x] for x in f.required) or "none"
    notes = [f"nodeSelector: CPU features {names} ({'; '.join(f.why)}), node-feature-discovery labels"]
    if pref:
        notes.append("preferred: nodes with " + ", ".join(NFD_CPUID[x] for x in f.preferred) + " as on the tune host")
    if not f.tuned_on:
        notes.append("the artifact records no host fingerprint: placed by the engine's own minimum")
    return Placement(node_selector=sel, preferred=pref, notes=notes)


def gpu_placement(f: EngineFeatures, gpu_memory_mib: int | None) -> Placement:
    required: list[Obj] = []
    notes: list[str] = []
    terms: list[list[Obj]] = []
    if f.gpu_min_cc:
        major, minor = f.gpu_min_cc
        # cc >= major.minor: a newer major, or the same major with minor >= minor
        terms = [[_gt(GFD_MAJOR, major)], [{"key": GFD_MAJOR, "operator": "In", "values": [str(major)]},
                                            _gt(GFD_MINOR, minor - 1)]]
        notes.append(f"compute capability >= {major}.{minor} ({'; '.join(f.why)}): {GFD_MAJOR}/{GFD_MINOR}")
    if gpu_memory_mib:
        required.append(_gt(GFD_MEMORY, gpu_memory_mib - 1))
        notes.append(f"GPU memory >= {gpu_memory_mib} MiB: {GFD_MEMORY}")
    if required:
        terms = [t + required for t in terms] or [required]
    pref = [{"key": GFD_PRODUCT, "operator": "In", "values": [gfd_product(f.gpu_product)]}] if f.gpu_product else []
    if pref:
        notes.append(f"preferred: {f.gpu_product} (the tune host's GPU): {GFD_PRODUCT}={pref[0]['values'][0]}")
    return Placement(node_selector={"kubernetes.io/arch": f.arch}, required=terms, preferred=pref, notes=notes)


def driver_placement(min_driver: str | None) -> Placement:
    """vLLM: nodes whose driver runs the image's CUDA (GFD's nvidia.com/cuda.driver.major)."""
    if not min_driver:
        return Placement()
    major = int(min_driver.split(".")[0])
    return Placement(required=[[_gt(GFD_DRIVER_MAJOR, major - 1)]],
                     notes=[f"NVIDIA driver >= {major} ({GFD_DRIVER_MAJOR}): what the vLLM image's CUDA needs"])
