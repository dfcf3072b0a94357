"""bench.html from a recorded H200 run (one load point, /metrics and NVML series) and a synthetic sweep
with an SLO answer: a headline, at most 12 columns with the rest folded, the GPU series plotted, and a
single point not drawn as a line."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import report_inputs as inputs  # noqa: E402


def _page(res, tmp_path):
    from infertune.bench.report import write_html

    write_html(res, tmp_path / "bench.html")
    return (tmp_path / "bench.html").read_text()


def _first_table_columns(page: str) -> list[str]:
    first = page[page.index("<h2>Load points</h2>"):]
    first = first[:first.index("</table>")]
    return re.findall(r"<th[^>]*>(.*?)</th>", first)


def test_single_point_h200_run_has_a_headline_a_narrow_table_and_gpu_series(tmp_path):
    page = _page(inputs.bench(), tmp_path)
    head = page[page.index('id="headline"'):page.index("</p>", page.index('id="headline"'))]
    assert "Max throughput <b>303.1 req/s</b>" in head and "9700.0 inputs/s" in head and "n=2431" in head
    assert "P99 110.5 ms" in head
    assert "Knee: not measured: one load point" in page and "SLO: none given" in page
    assert 'id="next-command">infertune bench http://127.0.0.1:8000 --sweep<' in page
    cols = _first_table_columns(page)
    assert len(cols) <= 12, cols
    assert "All 41 columns (as in bench.csv)" in page  # the rest, folded (error_laden, of_ceiling added later)
    assert "GPU telemetry (NVML)" in page and "gpu_util_percent" in page and "gpu_power_w" in page
    assert "Latency at the one load point (concurrency=32)" in page and "Latency vs concurrency" not in page


def test_nvml_series_recorded_untyped_are_still_plotted():
    from infertune.bench.plots import telemetry_panels

    tel = next(t for t in inputs.bench().telemetry if t.source == "nvml")
    assert set(tel.types.values()) == {"untyped"}  # as the H200 run recorded them
    titles = [t for t, _ in telemetry_panels(tel)]
    assert titles == ['gpu_memory_used_mib', 'gpu_power_w', 'gpu_util_percent']


def test_prometheus_sum_and_count_become_a_mean_and_counters_rates():
    from infertune.bench.plots import _values, telemetry_panels

    tel = next(t for t in inputs.bench().telemetry if t.source != "nvml")
    panels = dict(telemetry_panels(tel))
    assert "mean infertune_batch_size_items per observation" in panels
    assert "infertune_items_total (rate, per s)" in panels
    _, items_per_s = _values(tel, "infertune_items_total")
    assert 9000 < sorted(items_per_s)[len(items_per_s) // 2] < 10500  # ~303 req/s x 32 inputs


def test_sweep_headline_has_knee_slo_answer_and_validate_next(tmp_path):
    res = inputs.bench_sweep()
    page = _page(res, tmp_path)
    assert res.knee.load == 8  # 3640 of 4010 output tok/s: the first >= 90%
    assert "Knee: concurrency 8" in page and "met up to concurrency <b>8</b>" in page and "tone-pass" in page
    assert "infertune validate http://127.0.0.1:8000 --slo &#x27;p99_e2e_ms&lt;=200&#x27;" in page
    assert "Latency vs concurrency" in page and "Throughput vs concurrency" in page
    assert len(_first_table_columns(page)) <= 12


def test_next_command_after_a_sweep_without_slo_proposes_a_bound_from_the_knee():
    from infertune.bench.report import next_command

    res = inputs.bench_sweep()
    res.slo = None
    assert next_command(res) == "infertune bench http://127.0.0.1:8000 --api chat --slo 'p99_e2e_ms<=230'"  # 190 x 1.2
