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


def test_an_artifact_tuned_with_packed_batches_is_served_packed():
    """tune's batches=packed winner is served with --cuda-graphs packed unless a flag says otherwise; on CPU (no
    graphs there) the artifact's choice does not apply."""
    packed = {"device": "cuda", "candidate": {"backend": "torch-eager", "options": [["batches", "packed"]]}}
    plain = {"device": "cuda", "candidate": {"backend": "torch-eager", "options": []}}
    s = resolve_settings(ServeConfig(), packed)
    assert s.cuda_graphs == "packed" and s.sources["cuda_graphs"] == "artifact"
    assert resolve_settings(ServeConfig(), plain).cuda_graphs == "auto"
    assert resolve_settings(ServeConfig(cuda_graphs="padded"), packed).cuda_graphs == "padded"
    assert resolve_settings(ServeConfig(device="cpu"), packed).cuda_graphs == "auto"


def test_the_packed_candidate_is_offered_on_a_gpu_for_encoders_only():
    from types import SimpleNamespace

    from infertune.tasks.embedding import candidates

    opts = candidates.options(SimpleNamespace(device="cuda"), quick=True)  # the GPU list needs no more of a host
    packed = [o for o in opts if o.candidate.option("batches") == "packed"]
    # eager and compiled, each measured packed and padded: the tune decides which is faster for the model
    assert {o.candidate.backend for o in packed} == {"torch-eager", "torch-compile"}
    assert all(o.candidate.cuda_graphs == "packed" and "gpu-bf16" in o.needs for o in packed)
    assert all(o.candidate.cuda_graphs == "auto" for o in opts if o not in packed)
    decoder = candidates.options(SimpleNamespace(device="cuda"), quick=True, arch="decoder")
    assert not any(o.candidate.backend == "torch-compile" and o.candidate.option("batches") for o in decoder)
