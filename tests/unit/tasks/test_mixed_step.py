"""When tune tries a mixed-precision candidate, and which quantizer it rescues (logic only: fake run records;
the search itself runs on the real MiniLM in tests/unit/quantize/test_mixed.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from infertune.config import Batching, Candidate
from infertune.hardware.engine_features import engine_features
from infertune.results import CandidateResult
from infertune.tasks.embedding import candidates, mixed_step


def _result(quant: str, speed: float, meets: bool | None, precision: str = "int8") -> CandidateResult:
    c = Candidate(backend="torch-compile", precision=precision, quant=quant, batching=Batching(kind="tokens",
                                                                                               size=16384))
    return CandidateResult(name=c.id, candidate=c.model_dump(mode="json"), status="ok" if meets else "rejected",
                           probe={"speed": speed}, meets_accuracy=meets)


def _setup(device: str, results: list[CandidateResult], names: list[str] | None = None, best: float = 1000.0):
    task = SimpleNamespace(cfg=SimpleNamespace(sensitivity=True, candidates=names, device=device), custom=None)
    run = SimpleNamespace(results={r.name: r for r in results}, best_probe=(best, "x"))
    return task, run


def test_gpu_rescues_the_fastest_over_budget_quantizer_when_it_beats_the_best():
    task, run = _setup("cuda", [_result("torchao-fp8", 1500.0, False), _result("torchao-int8-dyn", 1200.0, False)])
    assert mixed_step.source(task, run) == ("torchao-fp8", None, "torch-compile")


def test_gpu_slow_quantizer_is_not_rescued_unless_mixed_is_named():
    results = [_result("torchao-fp8", 300.0, False)]
    assert mixed_step.source(*_setup("cuda", results)) == (None, None, None)
    assert mixed_step.source(*_setup("cuda", results, ["torchao", "mixed"])) == ("torchao-fp8", None, "torch-compile")
    # named, but only filtering others out: no mixed step
    assert mixed_step.source(*_setup("cuda", results, ["torchao"])) == (None, None, None)


def test_named_mixed_without_an_over_budget_engine_says_why():
    results = [_result("torchao-fp8", 300.0, True), _result("torchao-int8-dyn", 200.0, None)]
    quant, why, _ = mixed_step.source(*_setup("cuda", results, ["mixed"]))
    assert quant is None
    assert "within budget" in why and "not verified" in why


def test_cpu_rescues_ort_dynamic_or_a_named_torchao():
    task, run = _setup("cpu", [_result("torch.ao-dynamic", 5000.0, False), _result("ort-dynamic", 1300.0, False)])
    assert mixed_step.source(task, run) == ("ort-dynamic", None, "torch-compile")
    task, run = _setup("cpu", [_result("torchao-int8-dyn", 50.0, False)], ["torchao", "mixed"])
    assert mixed_step.source(task, run) == ("torchao-int8-dyn", None, "torch-compile")


def test_cpu_mixed_candidates():
    (ort,) = candidates.mixed_options("cpu", ("a", "b"))
    assert ort.candidate.engine_id == "onnxruntime/mixed/ort-dynamic/keep2"
    (tao,) = candidates.mixed_options("cpu", ("a",), "torchao-int8-dyn")
    assert tao.candidate.engine_id == "torch-eager/mixed/torchao-int8-dyn/keep1" and tao.needs == ()


def test_an_already_mixed_candidate_is_not_a_source():
    task, run = _setup("cuda", [_result("torchao-fp8", 5000.0, False, precision="mixed")], ["mixed"])
    assert mixed_step.source(task, run) == (None, None, None)


@pytest.mark.parametrize("quant,cc", [("torchao-fp8", (8, 9)), ("torchao-int8-dyn", (8, 0))])
def test_gpu_mixed_candidate_is_compiled_torchao_with_its_floor(quant, cc):
    (opt,) = candidates.mixed_options("cuda", ("encoder.layer.0.output.dense",), quant)
    c = opt.candidate
    assert (c.backend, c.precision, c.quant, c.keep_high) == ("torch-compile", "mixed", quant,
                                                               ("encoder.layer.0.output.dense",))
    assert c.engine_id == f"torch-compile/mixed/{quant}/keep1"
    assert opt.probe_s and opt.probe_s > 0
    manifest = {"candidate": c.model_dump(mode="json"), "device": "cuda",
                "fingerprint": {"gpu": [{"name": "H200", "capability": "9.0"}]}}
    assert engine_features(manifest).gpu_min_cc == cc


def test_gpu_mixed_follows_the_engine_it_rescues():
    (opt,) = candidates.mixed_options("cuda", ("a",), "torchao-fp8", "torch-eager")
    assert opt.candidate.engine_id == "torch-eager/mixed/torchao-fp8/keep1" and opt.probe_s is None


def test_nothing_kept_high_adds_no_candidate():
    assert candidates.mixed_options("cuda", (), "torchao-fp8") == []
    assert candidates.mixed_options("cpu", ()) == []
