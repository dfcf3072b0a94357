"""--cuda-graphs: settings carry it to the engines; `on` where the server would run on CPU is a clear error."""

from __future__ import annotations

import pytest

from infertune.errors import InfertuneError
from infertune.serve.config import ServeConfig, resolve_settings


def test_cuda_graphs_reach_the_settings():
    assert resolve_settings(ServeConfig(device="cuda"), None).cuda_graphs == "auto"
    assert resolve_settings(ServeConfig(device="cuda", cuda_graphs="off"), None).cuda_graphs == "off"
    assert resolve_settings(ServeConfig(device="cpu", cuda_graphs="off"), None).cuda_graphs == "off"


def test_graphs_on_without_a_gpu_is_an_error():
    with pytest.raises(InfertuneError, match="needs a GPU"):
        resolve_settings(ServeConfig(device="cpu", cuda_graphs="on"), None)
    with pytest.raises(InfertuneError, match="needs a GPU"):
        resolve_settings(ServeConfig(cuda_graphs="on"), {"device": "cpu"})


def test_packed_without_a_gpu_is_an_error_too():
    assert resolve_settings(ServeConfig(device="cuda", cuda_graphs="packed"), None).cuda_graphs == "packed"
    with pytest.raises(InfertuneError, match="--cuda-graphs packed needs a GPU"):
        resolve_settings(ServeConfig(device="cpu", cuda_graphs="packed"), None)
