"""Each fact about this host, read once: CPU instruction sets, cores and memory (capabilities.py), GPUs (gpus.py),
the NVIDIA driver (driver.py), memory bandwidth (bandwidth.py) and the published GPU specs (gpu_specs.py). Read by
tune (which candidates make sense here), doctor, plan, serve and deploy. Detection is plain data; the rules that
turn it into candidates live with each task (`infertune.tasks.*.candidates`).

The names below load on first use, so `infertune.hardware.bandwidth` imports with torch alone (the GPU scripts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from infertune.hardware.capabilities import CPU, GPU, Capabilities, detect, needs

__all__ = ["CPU", "GPU", "Capabilities", "detect", "needs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from infertune.hardware import capabilities

        return getattr(capabilities, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
