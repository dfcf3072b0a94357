"""infertune: find the fastest way to serve a model on your hardware, for your traffic,
without changing its answers, and prove it.

`import infertune` is light: no torch, no transformers. Heavy libraries load inside the
functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infertune.errors import InfertuneError

__version__ = "0.1.0"
__all__ = ["InfertuneError", "__version__", "tune", "serve", "bench", "doctor", "inspect_model", "plan", "validate"]

_LAZY = {
    "tune": "infertune.tune:tune",
    "serve": "infertune.serve.app:serve",
    "bench": "infertune.bench.runner:bench",
    "doctor": "infertune.doctor.checks:doctor",
    "inspect_model": "infertune.inspect:inspect_model",
    "plan": "infertune.plan.planner:plan",
    "validate": "infertune.validate.runner:validate",
}

if TYPE_CHECKING:  # pragma: no cover
    from infertune.tune import tune  # noqa: F401


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'infertune' has no attribute {name!r}")
    import importlib

    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)
