"""`infertune.tune(config)`: tune a model on a workload. The loop lives in `infertune.tuning`, the
families in `infertune.tasks`; this module is the public entry point."""

from __future__ import annotations

import sys
from typing import Any

from infertune.tuning.driver import NO_WINNER_EXIT, tune

__all__ = ["tune", "NO_WINNER_EXIT"]


class _CallableModule(sys.modules[__name__].__class__):
    """`infertune.tune` is both this module and the function: importing the module rebinds the package
    attribute to the module, so the module forwards calls to the function."""

    def __call__(self, *args: Any, **kwargs: Any):
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
