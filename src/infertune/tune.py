"""`infertune.tune(config)`: tune a model on a workload. The loop lives in `infertune.tuning`, the
families in `infertune.tasks`; this module is the import path `from infertune.tune import tune`.
(`infertune.tune(...)` itself is the function: see `infertune/_api.py`.)"""

from __future__ import annotations

from infertune.tuning.driver import NO_WINNER_EXIT, tune

__all__ = ["tune", "NO_WINNER_EXIT"]
