"""`infertune serve`: an OpenAI-compatible embedding server with token-budget dynamic batching.

Modules: config (ServeConfig, ServeResult, defaults from the artifact), schema (request parsing and
OpenAI-shaped errors), engine (tokenize -> batch -> forward -> post-process stages), metrics
(Prometheus), app (FastAPI app and the `serve()` entry point). Importing this package is light.

`infertune.serve` is both this package and the `serve()` function: once the package is imported, Python
binds the attribute `infertune.serve` to the module, so the module is made callable and forwards to
`infertune.serve.app.serve`.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from infertune.serve.app import serve

        return serve(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
