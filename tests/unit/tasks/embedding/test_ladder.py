"""The precision ladder's decisions, with the GEMM probe faked (its real CPU run is tests/unit/hardware/
test_gemm_ladder.py): H100-like figures skip the int8 options with their figure and scale fp8's prior, names given
with --candidates are never skipped, a CPU tune keeps every option it tried before, and the FLOP weighting."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from infertune.config import TuneConfig
from infertune.hardware import CPU, GPU, Capabilities
from infertune.results import TuneResult
from infertune.tasks.embedding import candidates, ladder
from infertune.tasks.embedding.task import EmbeddingTask
from infertune.tuning import driver, search
from infertune.tuning.budget import Budget

H100 = Capabilities(device="cuda", cpu=CPU(flags=frozenset({"avx2", "fma"})),
                    gpus=(GPU(name="NVIDIA H100 80GB HBM3", capability=(9, 0), memory_gb=79),))
AMX = Capabilities(cpu=CPU(flags=frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                                            "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"})))
AVX2 = Capabilities(cpu=CPU(flags=frozenset({"avx2", "fma"})))
QWEN3_06B = {"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072, "vocab_size": 151669}
# TFLOP/s at 16,384 tokens as ../shared/reference/measured_on_h100.md has them (bf16, fp8, int8); int8 where the
# table has no figure: 0.8x of bf16
H100_16K = {(1024, 2048): (710, 990, 568), (1024, 1024): (670, 931, 536), (2048, 1024): (741, 1156, 593),
            (1024, 3072): (714, 1009, 606), (3072, 1024): (766, 1200, 613)}


def _fake_probe(table: dict, base: str = "bf16", quants: tuple[str, ...] = ("fp8", "int8"), calls: list | None = None):
    """A stand-in for run_isolated(measure_ladder): the figures in `table` at every M asked for."""
    def run_isolated(target, kwargs, timeout_s, threads=None):
        assert target == "infertune.hardware.gemm_ladder:measure_ladder"
        if calls is not None:
            calls.append(kwargs)
        precs = [base] + [p for p in quants if p in kwargs["precisions"]]
        cells = []
        for m in kwargs["tokens"]:
            for k, n in kwargs["shapes"]:
                tf = dict(zip([base, *quants], table[(k, n)], strict=True))
                tf = {p: v for p, v in tf.items() if p in precs}
                cells.append({"m": m, "k": k, "n": n, "tflops": tf,
                              "ratio": {p: v / tf[base] for p, v in tf.items() if p != base}})
        return {"device": "cuda" if base == "bf16" else "cpu", "device_name": "fake", "capability": None,
                "torch": "x", "base": base, "precisions": precs, "ops": {}, "not_measured": {}, "cells": cells,
                "left_out": [], "max_s": kwargs["max_s"], "seconds": 0.5}
    return run_isolated


def _task(tmp_path, caps, monkeypatch, probe, **cfg):
    """An EmbeddingTask as the driver holds it after load(): its model a directory with only a config.json."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(QWEN3_06B))
    monkeypatch.setattr("infertune.tuning.worker.run_isolated", probe)
    out = io.StringIO()
    task = EmbeddingTask(TuneConfig(device=caps.device, **cfg), Console(file=out, width=300), None)
    task.spec = type("Spec", (), {"path": str(model), "arch": "encoder"})()
    task.result = TuneResult(model="m", config={}, environment={})
    return task, out


def test_h100_figures_skip_int8_with_its_figure_and_scale_fp8s_prior(tmp_path, monkeypatch):
    calls: list = []
    task, out = _task(tmp_path, H100, monkeypatch, _fake_probe(H100_16K, calls=calls))
    before = {o.candidate.id: o for o in candidates.options(H100)}
    opts = {o.candidate.id: o for o in task.options(H100)}
    fp8, int8 = "torch-compile/fp8/torchao-fp8/tokens-16384", "torch-compile/int8/torchao-int8-dyn/tokens-16384"
    lad = task.result.ladder
    assert calls[0]["tokens"] == [16384, 256] and sorted(calls[0]["precisions"]) == ["fp8", "int8"]
    assert sorted(calls[0]["shapes"]) == sorted(H100_16K)  # the model's Linear shapes, from config.json alone
    assert 1.39 < lad["expected_speedup"]["fp8"] < 1.57 and 0.75 < lad["expected_speedup"]["int8"] < 0.85
    skip = opts[int8].skip
    assert skip.startswith(f"int8 GEMMs measured {lad['expected_speedup']['int8']:.2f}x of bf16 at this model's "
                           "shapes and 16,384 tokens")
    assert opts[fp8].skip is None
    assert opts[fp8].prior == pytest.approx(before[fp8].prior * lad["expected_speedup"]["fp8"], abs=1e-3)
    # the options it does not decide on are untouched
    for k, o in before.items():
        if k not in (fp8, int8):
            assert (opts[k].prior, opts[k].skip) == (o.prior, None), k
    assert {d["candidate"]: d["action"] for d in lad["decisions"]} == {fp8: "prior", int8: "skipped"}
    assert "precision ladder: " in out.getvalue() and "int8 0.8" in out.getvalue() and "fp8 1.4" in out.getvalue()
    # the driver records the skipped option with the ladder's sentence and does not try it
    run = search.Run(task, task.cfg, tmp_path, task.console, Budget(180.0))
    tried = {o.candidate.id for o in driver.screen(run, list(opts.values()), H100)}
    assert int8 not in tried and fp8 in tried
    assert run.results[int8].status == "skipped" and run.results[int8].reason == skip


def test_names_given_with_candidates_are_never_skipped_only_given_a_prior(tmp_path, monkeypatch):
    task, _ = _task(tmp_path, H100, monkeypatch, _fake_probe(H100_16K), candidates=["int8"])
    opts = {o.candidate.id: o for o in task.options(H100)}
    named = [k for k in opts if "torchao-int8" in k]
    assert named and all(opts[k].skip is None for k in named)
    sp = task.result.ladder["expected_speedup"]["int8"]
    for d in task.result.ladder["decisions"]:
        assert d["action"] == "prior" and "tried anyway" in d["why"]
        assert d["prior"] == pytest.approx(d["prior_was"] * sp, abs=1e-3)
    assert "fp8" not in task.result.ladder["expected_speedup"]  # not selected: not timed


def test_quick_gpu_tune_has_no_quantized_option_and_skips_the_ladder(tmp_path, monkeypatch):
    def never(*a, **k):
        raise AssertionError("the ladder ran with nothing to decide")

    task, out = _task(tmp_path, H100, monkeypatch, never, quick=True)
    opts = task.options(H100)
    assert task.result.ladder["status"] == "skipped" and "--quick leaves those out" in task.result.ladder["reason"]
    assert [(o.prior, o.skip) for o in opts] == [(o.prior, None) for o in candidates.options(H100, quick=True)]
    assert "precision ladder: skipped" in out.getvalue()


@pytest.mark.parametrize("caps", [AMX, AVX2], ids=["amx", "avx2"])
def test_a_cpu_tune_tries_every_option_it_tried_before(tmp_path, monkeypatch, caps):
    """The CPU's int8 engines run their own kernels: torch._int_mm's figure (0.04x of fp32 on the AVX2 EPYC) does
    not speak for them, so nothing is timed, skipped or reordered."""
    def never(*a, **k):
        raise AssertionError("the ladder timed GEMMs for engines whose kernels it does not measure")

    for quick in (True, False):
        task, _ = _task(tmp_path, caps, monkeypatch, never, quick=quick)
        got = [(o.candidate.id, o.prior, o.skip) for o in task.options(caps)]
        assert got == [(o.candidate.id, o.prior, None) for o in candidates.options(caps, quick)]
        assert task.result.ladder["status"] == "skipped" and "own kernels" in task.result.ladder["reason"]
        assert task.result.ladder["seconds"] == 0.0


def test_on_a_cpu_a_named_torchao_option_gets_the_measured_ratio_as_its_prior(tmp_path, monkeypatch):
    table = {k: (0.08, 0.004) for k in H100_16K}  # fp32, int8: torch._int_mm at 0.05x
    task, _ = _task(tmp_path, AVX2, monkeypatch, _fake_probe(table, base="fp32", quants=("int8",)),
                    candidates=["torchao"])
    opts = {o.candidate.id: o for o in task.options(AVX2)}
    o = opts["torch-eager/int8/torchao-int8-dyn/tokens-512"]
    assert o.skip is None and o.prior == pytest.approx(0.2 * 0.05, abs=1e-3)
    assert task.result.ladder["base"] == "fp32" and task.result.ladder["tokens"] == [128]


def test_a_ladder_that_fails_changes_nothing_and_says_why(tmp_path, monkeypatch):
    from infertune.tuning.worker import WorkerFailed

    def broken(*a, **k):
        raise WorkerFailed("worker process died (exit code -11)")

    task, out = _task(tmp_path, H100, monkeypatch, broken)
    got = [(o.candidate.id, o.prior, o.skip) for o in task.options(H100)]
    assert got == [(o.candidate.id, o.prior, None) for o in candidates.options(H100)]
    assert task.result.ladder["status"] == "failed" and "exit code -11" in task.result.ladder["reason"]


def test_the_speedup_adds_each_shapes_flop_share_up_as_time():
    shapes = [{"k": 1, "n": 3, "flop_share": 0.75}, {"k": 2, "n": 2, "flop_share": 0.25}]
    cells = [{"m": 8, "k": 1, "n": 3, "tflops": {"bf16": 100.0, "fp8": 200.0}},  # 2x on 75% of the FLOPs
             {"m": 8, "k": 2, "n": 2, "tflops": {"bf16": 100.0, "fp8": 50.0}}]  # 0.5x on 25%
    sp, cov = ladder.expected_speedup(cells, shapes, "fp8", "bf16", 8)
    assert cov == 1.0 and sp == pytest.approx(1 / (0.75 / 2 + 0.25 / 0.5), abs=1e-4)  # 1.1429, not the mean's 1.625
    # a shape slower in 16-bit weighs more: its FLOPs take longer
    cells[1]["tflops"] = {"bf16": 25.0, "fp8": 12.5}
    t16, tq = 0.75 / 100 + 0.25 / 25, 0.75 / 200 + 0.25 / 12.5
    assert ladder.expected_speedup(cells, shapes, "fp8", "bf16", 8)[0] == pytest.approx(t16 / tq, abs=1e-4)
    # only the cells at the asked M count; under half the FLOPs covered: no figure
    assert ladder.expected_speedup(cells, shapes, "fp8", "bf16", 256) == (None, 0.0)
    assert ladder.expected_speedup(cells[1:], shapes, "fp8", "bf16", 8) == (None, 0.25)


def test_model_shapes_reads_the_linear_layers_and_their_flop_shares(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_06B))
    shapes = ladder.model_shapes(tmp_path)
    assert {(s["k"], s["n"]): s["layers"] for s in shapes} == {
        (1024, 2048): 28, (1024, 1024): 56, (2048, 1024): 28, (1024, 3072): 56, (3072, 1024): 28}
    assert math.isclose(sum(s["flop_share"] for s in shapes), 1.0, abs_tol=1e-3)
    assert shapes[0]["k"] == 1024 and shapes[0]["n"] == 3072  # gate and up: the largest share first


def test_results_json_carries_the_ladder(tmp_path, monkeypatch):
    task, _ = _task(tmp_path, H100, monkeypatch, _fake_probe(H100_16K))
    task.options(H100)
    driver.write(task.result, tmp_path)
    got = json.loads((tmp_path / "results.json").read_text())["ladder"]
    assert got["status"] == "measured" and got["base"] == "bf16" and got["decision_tokens"] == 16384
    assert {"k", "n", "layers", "flop_share", "timed"} <= set(got["shapes"][0])
    assert {"m", "k", "n", "tflops", "ratio"} <= set(got["cells"][0])
    assert set(got["expected_speedup"]) == {"fp8", "int8"} and set(got["expected_speedup_by_tokens"]) == {
        "16384", "256"}
    assert {"candidate", "kind", "action", "prior", "why"} <= set(got["decisions"][0])
    assert got["seconds"] >= 0 and got["min_speedup"] == ladder.MIN_SPEEDUP
    assert TuneResult(model="m", config={}, environment={}).model_dump()["ladder"] == {}  # additive: empty by default
