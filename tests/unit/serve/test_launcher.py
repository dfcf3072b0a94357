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
    assert default_frontends("cuda", 1) == 12  # two cores for the engine, two for the rest
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert default_frontends("cuda", 1) == 12 and default_frontends("cuda", 2) == 24
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert default_frontends("cuda", 1) == 4
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert default_frontends("cuda", 2) == 1
    assert default_frontends("cpu", 0) == 1


def test_explicit_devices_make_one_engine_each():
    multi, devices, frontends = wants_processes(ServeConfig(devices=["0", "cuda:1"], frontends=4), "cuda")
    assert multi and devices == ["cuda:0", "cuda:1"] and frontends == 4


def test_devices_without_cuda_is_a_clear_error():
    with pytest.raises(InfertuneError, match="--device cuda"):
        wants_processes(ServeConfig(devices=["0"]), "cpu")


def test_an_artifact_tuned_frontend_count_is_used_on_a_gpu_within_this_hosts_default(monkeypatch):
    """tune records the frontends per GPU its figure was measured to match; serve starts that many (times the
    GPUs) unless --frontends says otherwise, capped by this host's own default (an artifact from a bigger host)."""
    import infertune.serve.launcher as launcher

    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.setattr(launcher, "cuda_devices", lambda cfg: ["cuda:0", "cuda:1"])
    assert wants_processes(ServeConfig(), "cuda", tuned=3) == (True, ["cuda:0", "cuda:1"], 6)
    assert wants_processes(ServeConfig(), "cuda", tuned=16)[2] == 24  # capped by this host's default for 2 GPUs
    assert wants_processes(ServeConfig(frontends=2), "cuda", tuned=3)[2] == 2  # the flag wins
    assert wants_processes(ServeConfig(), "cuda")[2] == 24
    assert wants_processes(ServeConfig(), "cpu", tuned=8) == (False, ["cpu"], 1)  # CPU: the model owns the cores


def test_the_manifest_records_the_tokenization_tune_measured_with(monkeypatch):
    from infertune.tasks.embedding.artifact import _tokenization

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert _tokenization("cuda") == {"tokenizer_threads": 16, "tokenizer_processes": 12, "frontends_per_gpu": 12}
    assert _tokenization("cpu") == {"tokenizer_threads": 1, "tokenizer_processes": 1, "frontends_per_gpu": 1}
