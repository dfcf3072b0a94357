"""`infertune validate`: production-readiness drills against a server (soak, long tail, faults).

Modules: config (ValidateConfig, Drill, ValidateResult), target (the server: started or reached), load
(drill load on bench's worker processes), analysis (slope, drift and knee arithmetic), soak, longtail,
faults, report (validate.json / validate.html) and runner (`validate()`, the entry point).

Like `infertune.serve`, the package is callable: `infertune.validate(cfg)` forwards to
`infertune.validate.runner.validate`.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from infertune.validate.runner import validate

        return validate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
