"""Backend names -> "module:Class", imported lazily. Third parties add entries through the
`infertune.backends` entry-point group (value "package.module:Class")."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from infertune.errors import InfertuneError

BACKENDS: dict[str, str] = {
    "st-naive": "infertune.backends.st_naive:SentenceTransformerNaive",
    "torch-eager": "infertune.backends.torch_eager:TorchEager",
    "torch-compile": "infertune.backends.torch_compile:TorchCompile",
    "onnxruntime": "infertune.backends.onnxruntime:OnnxRuntime",
    "openvino": "infertune.backends.openvino:OpenVino",
    "fake": "infertune.backends.fake:FakeBackend",
}


def _all() -> dict[str, str]:
    names = dict(BACKENDS)
    for ep in entry_points(group="infertune.backends"):
        names.setdefault(ep.name, ep.value)
    return names


def backend_names() -> list[str]:
    return sorted(_all())


def load_backend(name: str) -> Any:
    """Return the backend class registered under `name`."""
    target = _all().get(name)
    if target is None:
        raise InfertuneError(f"unknown backend {name!r}; known: {', '.join(backend_names())}")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)
