"""plan held against a tune's measurement (plan/measured.py) and `plan --calibrated-from` (plan/calibrate.py), on
recorded runs: the AMX CPU tune and the H200 MiniLM tune of docs/measurements (tests/fixtures/report_inputs.py)."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[2] / "fixtures"))

import report_inputs as inputs  # noqa: E402

from infertune.cli.main import app  # noqa: E402
from infertune.errors import InfertuneError  # noqa: E402
from infertune.hardware.capabilities import CPU  # noqa: E402
from infertune.hardware.cpu_peak import cpu_peak_tflops, flops_per_cycle  # noqa: E402
from infertune.plan.arch import arch_from_config, load_config  # noqa: E402
from infertune.plan.measured import compare, efficiency, error_pct, gpu_host  # noqa: E402
from infertune.plan.planner import PlanConfig, plan  # noqa: E402

MIB = 2**20


@pytest.fixture(scope="module")
def minilm():
    from infertune.models.resolve import resolve_model

    path = resolve_model("minilm").path
    return path, arch_from_config(load_config(path))


def test_error_is_predicted_minus_measured_over_measured():
    assert error_pct(150.0, 100.0) == pytest.approx(50.0)
    assert error_pct(25.0, 100.0) == pytest.approx(-75.0)
    assert error_pct(None, 100.0) is None and error_pct(5.0, None) is None and error_pct(5.0, 0.0) is None


def test_cpu_peak_counts_cores_clock_and_the_precisions_unit():
    amx = CPU(cores=4, mhz=2500.0, flags=frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "amx_tile",
                                                     "amx_bf16", "amx_int8"}))
    avx2 = CPU(cores=4, mhz=2500.0, flags=frozenset({"avx2", "fma"}))
    assert flops_per_cycle(amx, "bf16")[0] == 1024 and flops_per_cycle(amx, "fp32")[0] == 64
    assert flops_per_cycle(avx2, "bf16")[0] == 32  # emulated bf16 is no faster than fp32
    assert cpu_peak_tflops(avx2, "fp32")[0] == pytest.approx(4 * 2.5e9 * 32 / 1e12)
    assert cpu_peak_tflops(avx2, "fp32", threads=2)[0] == pytest.approx(2 * 2.5e9 * 32 / 1e12)
    assert cpu_peak_tflops(CPU(cores=4), "fp32")[0] is None  # no clock: no estimate


def test_cpu_rows_hold_plans_figures_against_the_winners(minilm):
    """The recorded AMX run's winner (openvino bf16, 2,048-token batches) against plan's compute bound on its CPU:
    each row's prediction is plan's formula computed here by hand, its measurement the run's figure."""
    path, a = minilm
    res = inputs.tune_with_predicted()
    rows = {r.quantity: r for r in res.predicted_vs_measured}
    assert list(rows) == ["tokens/s bound", "items/s bound", "weight memory", "peak memory"]
    m = res.winner.measurement
    length = 64  # the workload's median tokens, 64.5, as plan reads a length
    fl = a.flops_per_token(length, "prefill")
    bound = 2 * 2.0e9 * 1024 / (fl["linear"] + fl["attention"])  # 2 cores x 2 GHz x AMX-BF16; an encoder
    assert rows["tokens/s bound"].predicted == pytest.approx(bound)
    assert rows["tokens/s bound"].measured == m.tokens_per_s  # the run predates the best-pass figure
    per_item = m.tokens_per_s / m.items_per_s_median
    assert rows["items/s bound"].predicted == pytest.approx(bound / per_item)
    assert rows["items/s bound"].measured == m.items_per_s
    assert rows["weight memory"].predicted == pytest.approx(a.weights_bytes("fp32") / MIB)  # stored float32
    assert rows["weight memory"].measured == pytest.approx((Path(path) / "model.safetensors").stat().st_size / MIB)
    assert abs(rows["weight memory"].error_pct) < 1  # plan's parameter count is MiniLM's
    assert rows["peak memory"].measured == m.peak_rss_mb and "RSS" in rows["peak memory"].note
    for r in rows.values():
        assert r.error_pct == pytest.approx((r.predicted - r.measured) / r.measured * 100)
    assert efficiency(res.predicted_vs_measured) == pytest.approx(m.items_per_s / rows["items/s bound"].predicted)
    assert json.loads(res.model_dump_json())["predicted_vs_measured"][1]["quantity"] == "items/s bound"


def test_gpu_rows_use_plans_roofline_and_the_gpu_peak_memory(minilm):
    from infertune.plan.embed import roofline

    _, a = minilm
    res = inputs.tune(inputs.TUNE_GPU)  # H200, winner torch-eager/bf16/tokens-65536
    rows = {r.quantity: r for r in compare(res, a, gpu_host("NVIDIA H200", "bf16"), None)}
    g = gpu_host("NVIDIA H200", "bf16").spec
    assert rows["tokens/s bound"].predicted == pytest.approx(roofline(a, g, "bf16", 65536, 64, False)["tokens_per_s"])
    assert rows["peak memory"].measured == res.winner.measurement.peak_gpu_mb
    assert rows["weight memory"].measured is None and rows["weight memory"].error_pct is None


def test_calibrated_plan_scales_the_bound_by_the_measured_efficiency(minilm):
    _, a = minilm
    res = inputs.tune(inputs.TUNE_GPU)
    eff = efficiency(compare(res, a, gpu_host("NVIDIA H200", "bf16"), None))
    plain = plan(PlanConfig(model="minilm", gpu="H200")).embedding
    cal = plan(PlanConfig(model="minilm", gpu="H200", calibrated_from=inputs.TUNE_GPU))
    e = cal.embedding
    assert 0 < eff < 1 and plain.efficiency is None and plain.calibrated_items_per_s is None
    assert e.efficiency == pytest.approx(eff) and e.calibrated_from == str(inputs.TUNE_GPU)
    assert e.calibrated_items_per_s == pytest.approx(plain.items_per_s * eff)
    assert e.items_per_s == pytest.approx(plain.items_per_s)  # the bound itself stays
    assert any(n.startswith(f"calibrated from {inputs.TUNE_GPU}") for n in cal.notes)


def test_calibrated_plan_cli_says_so():
    r = CliRunner().invoke(app, ["plan", "minilm", "--gpu", "H200", "--calibrated-from", str(inputs.TUNE_GPU)])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("calibrated from"))
    assert "of the roofline bound on this host (H200-SXM)" in line and "items/s expected" in line


def test_calibration_from_a_run_elsewhere_is_refused(minilm, tmp_path):
    other = CliRunner().invoke(app, ["plan", "minilm", "--gpu", "H100", "--calibrated-from", str(inputs.TUNE_GPU)])
    assert isinstance(other.exception, InfertuneError) and "not H100-SXM" in str(other.exception)  # main(): exit 2
    with pytest.raises(InfertuneError, match="measured on a CPU"):
        plan(PlanConfig(model="minilm", gpu="H200", calibrated_from=inputs.TUNE_CPU))
    d = tmp_path / "run"
    d.mkdir()
    data = json.loads(inputs.TUNE_GPU.read_text())
    data["model"] = "/tmp/bge-small-en-v1.5"
    (d / "results.json").write_text(json.dumps(data))
    with pytest.raises(InfertuneError, match="tuned /tmp/bge-small-en-v1.5, not minilm"):
        plan(PlanConfig(model="minilm", gpu="H200", calibrated_from=d))  # a directory: its results.json
    with pytest.raises(InfertuneError, match="no tune results there"):
        plan(PlanConfig(model="minilm", gpu="H200", calibrated_from=tmp_path / "missing"))


def test_without_a_winner_the_fastest_measured_candidate_is_compared(minilm):
    path, a = minilm
    res = inputs.tune_no_winner()
    rows = compare(res, a, inputs.amx_host(), None)
    fastest = max((r for r in res.candidates if r.measurement is not None), key=lambda r: r.items_per_s)
    assert res.winner is None and rows[1].measured == fastest.items_per_s and fastest.name in rows[1].note
