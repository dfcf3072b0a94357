"""The GEMM ladder measured for real on this CPU, at tiny shapes: the structure the embedding family reads, positive
finite figures, and the time limit kept (the figures themselves depend on the box)."""

from __future__ import annotations

import math
import time

from infertune.hardware.gemm_ladder import measure_ladder


def test_the_cpu_ladder_times_each_shape_in_each_precision_within_its_limit():
    import torch  # noqa: F401 - imported already where the ladder runs (a tune's worker); its import is not timed

    shapes, tokens = [(64, 128), (128, 64)], [32, 48]
    t = time.perf_counter()
    got = measure_ladder(shapes, tokens, "cpu", max_s=1.5)
    wall = time.perf_counter() - t
    assert wall < 2.0 and got["seconds"] <= wall + 1e-3
    assert got["device"] == "cpu" and got["base"] == "fp32" and got["precisions"][0] == "fp32"
    assert "int8" in got["precisions"]  # asked for by default; its failure would be in a cell's errors
    assert ("bf16" in got["precisions"]) != ("bf16" in got["not_measured"])  # timed only with native bf16
    assert [(c["m"], c["k"], c["n"]) for c in got["cells"]] + [
        (c["m"], c["k"], c["n"]) for c in got["left_out"]] == [(m, k, n) for m in tokens for k, n in shapes]
    assert got["cells"], "nothing timed in 1.5 s"
    for c in got["cells"]:
        assert c["tflops"]["fp32"] > 0 and math.isfinite(c["tflops"]["fp32"])
        for p in got["precisions"][1:]:
            assert p in c["tflops"] or p in c.get("errors", {}), (p, c)
            if p in c["tflops"]:
                r = c["ratio"][p]
                assert r > 0 and math.isfinite(r)
                assert math.isclose(r, c["tflops"][p] / c["tflops"]["fp32"], rel_tol=0.01)
                lo, hi = c["spread"][p]
                assert 0 < lo <= c["tflops"][p] <= hi and c["samples"][p] >= 3


def test_cells_that_do_not_fit_the_limit_are_left_out_and_named():
    got = measure_ladder([(64, 64)], [32], "cpu", max_s=0.0, precisions=["int8"])
    assert got["cells"] == [] and got["left_out"] == [{"m": 32, "k": 64, "n": 64}]
    assert got["precisions"] == ["fp32", "int8"] and got["ops"]["int8"].startswith("torch._int_mm")
