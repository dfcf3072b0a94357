"""How many processes `serve` starts, from the config and the host (logic only, no processes)."""

import os

import pytest

from infertune.errors import InfertuneError
from infertune.serve.config import ServeConfig
from infertune.serve.launcher import default_frontends, wants_processes


def test_cpu_stays_one_process_unless_asked():
    assert wants_processes(ServeConfig(), "cpu") == (False, ["cpu"], 1)
    assert wants_processes(ServeConfig(frontends=3), "cpu") == (True, ["cpu"], 3)


def test_gpu_frontends_scale_with_cores_and_gpus(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert default_frontends("cuda", 1) == 8
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert default_frontends("cuda", 1) == 8 and default_frontends("cuda", 2) == 16
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert default_frontends("cuda", 2) == 2
    assert default_frontends("cpu", 0) == 1


def test_explicit_devices_make_one_engine_each():
    multi, devices, frontends = wants_processes(ServeConfig(devices=["0", "cuda:1"], frontends=4), "cuda")
    assert multi and devices == ["cuda:0", "cuda:1"] and frontends == 4


def test_devices_without_cuda_is_a_clear_error():
    with pytest.raises(InfertuneError, match="--device cuda"):
        wants_processes(ServeConfig(devices=["0"]), "cpu")
