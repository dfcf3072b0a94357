"""infertune: find the fastest way to serve a model on your hardware, for your traffic,
without changing its answers, and prove it.

`import infertune` is light: no torch, no transformers. Heavy libraries load inside the
functions that need them.

Library: `infertune.tune(TuneConfig(...))`, `infertune.serve(ServeConfig(...))`,
`infertune.bench(BenchConfig(...))`, `infertune.validate(ValidateConfig(...))`,
`infertune.plan(PlanConfig(...))`, `infertune.doctor(DoctorConfig(...))`,
`infertune.inspect_model(InspectConfig(...))`, `infertune.explain(ExplainConfig(...))`,
`infertune.export(ExportConfig(...))`, `infertune.verify(VerifyConfig(...))`. They stay
callable after their subpackages are imported (`infertune/_api.py` says how).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from infertune._api import COMMANDS, Command, _Package
from infertune.errors import InfertuneError

__version__ = "0.1.0"
__all__ = ["InfertuneError", "__version__", "tune", "serve", "bench", "validate", "plan", "doctor", "inspect_model",
           "explain", "deploy", "export", "verify"]

if TYPE_CHECKING:  # pragma: no cover
    from infertune.bench.runner import bench
    from infertune.doctor.checks import doctor
    from infertune.doctor.explain import explain
    from infertune.export.run import export
    from infertune.inspect import inspect_model
    from infertune.plan.planner import plan
    from infertune.serve.app import serve
    from infertune.tasks.embedding.reverify import verify
    from infertune.tune import tune
    from infertune.validate.runner import validate
else:
    for _name, (_target, _module) in COMMANDS.items():
        globals()[_name] = Command(_name, _target, _module)
    del _name, _target, _module

sys.modules[__name__].__class__ = _Package

if __import__("os").environ.get("INFERTUNE_QUIET_LIBRARIES") == "1":  # a process the CLI started (infertune.logs)
    from infertune.logs import route_library_logs

    route_library_logs()
