"""Published GPU specs (data/gpus.toml: memory, bandwidth, tensor peaks), the one reader of that table, and lookup
by a forgiving name ("h200", "RTX 3090", "a100-pcie", or what nvidia-smi or torch prints). Read by plan, inspect and
tune's share of the peak (tasks/embedding/peak.py)."""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from importlib.resources import files
from typing import Any

from infertune.errors import InfertuneError


@lru_cache(maxsize=1)
def gpu_table() -> list[dict[str, Any]]:
    return tomllib.loads((files("infertune") / "data" / "gpus.toml").read_text())["gpu"]


def _norm(s: str) -> str:
    """'NVIDIA GeForce RTX 4060 Laptop GPU' (what nvidia-smi prints) -> 'rtx4060laptop'."""
    n = re.sub(r"[^a-z0-9]", "", s.lower().replace("nvidia", "").replace("geforce", ""))
    return n.removesuffix("gpu") if n != "gpu" else n


def find_gpu(name: str) -> dict[str, Any]:
    want = _norm(name)
    for g in gpu_table():
        if want in {_norm(g["name"]), *(_norm(a) for a in g.get("aliases", []))}:
            return g
    close = [g["name"] for g in gpu_table() if want and want in _norm(g["name"])]
    if len(close) == 1:
        return next(g for g in gpu_table() if g["name"] == close[0])
    names = ", ".join(g["name"] for g in gpu_table())
    raise InfertuneError(f"unknown GPU {name!r}{' (ambiguous: ' + ', '.join(close) + ')' if close else ''}; "
                         f"known: {names}")


def peak_tflops(g: dict[str, Any], dtype: str) -> float | None:
    """Dense tensor-core peak for the dtype the matmuls run in (weight-only int4 computes in 16-bit)."""
    key = {"bf16": "bf16_tflops", "fp16": "fp16_tflops", "fp8": "fp8_tflops", "int8": "int8_tops",
           "int4": "bf16_tflops", "fp32": None}.get(dtype)
    if dtype == "int4" and g.get(key) is None:
        key = "fp16_tflops"
    return g.get(key) if key else None
