"""The one memory-bandwidth measurement (tune's roofline denominator and the GPU scripts')."""

import pytest

from infertune.hardware.bandwidth import memory_bandwidth


def test_cpu_bandwidth_reports_median_spread_and_method():
    pytest.importorskip("torch")
    bw = memory_bandwidth("cpu", mib=8, reps=3, warmup=2)
    assert bw["n"] == 3 and 0 < bw["range"][0] <= bw["gb_per_s"] <= bw["range"][1] == bw["best"]
    assert bw["method"].startswith(("torch read of 8 MiB", "torch copy of 8 MiB"))
