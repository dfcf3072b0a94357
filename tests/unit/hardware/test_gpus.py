"""The GPU readers: the fingerprint never imports torch to read GPUs, and `plan` without --gpu reads GPU 0 the way
doctor does (NVML first, nvidia-smi when nvidia-ml-py is missing)."""

import subprocess
import sys

import pytest

from infertune.errors import InfertuneError
from infertune.hardware import gpus


def test_the_fingerprint_does_not_import_torch_to_read_gpus():
    code = ("import sys; from infertune.hardware.fingerprint import fingerprint; fingerprint(); "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_local_gpu_prefers_nvml_and_falls_back_to_nvidia_smi(monkeypatch):
    monkeypatch.setattr(gpus, "gpus_nvml", lambda: {"available": True, "gpus": [{"name": "NVIDIA L4",
                                                                                 "memory_mib": 23034}]})
    monkeypatch.setattr(gpus, "gpus_smi", lambda: pytest.fail("nvidia-smi read although NVML answered"))
    assert gpus.local_gpu() == ("NVIDIA L4", 23034.0)
    monkeypatch.setattr(gpus, "gpus_nvml", lambda: None)
    monkeypatch.setattr(gpus, "gpus_smi", lambda: {"available": False, "error": "nvidia-smi not found"})
    with pytest.raises(InfertuneError, match="nvidia-smi not found"):
        gpus.local_gpu()
