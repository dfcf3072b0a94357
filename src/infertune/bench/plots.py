"""The figures of bench.html (matplotlib, inline SVG, offline): latency and throughput against the offered
load when there are several load points, the percentile ladder of a single point (one point is not a
line), and the server's series over time (Prometheus /metrics and NVML GPU telemetry)."""

from __future__ import annotations

import html
import re

from infertune.bench.results import BenchResult, Point, TelemetrySeries
from infertune.plots import figure_svg, log_axis

QS = (("p50", "P50"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99"), ("p999", "P99.9"))
MAX_PANELS = 8


def slo_bound_ms(target: str, metric: str = "e2e") -> float | None:
    """The bound of a `p99_<metric>_ms<=X` clause of an SLO string, if there is one."""
    for t in (target or "").split(","):
        m = re.match(rf"\s*p99_{metric}_ms\s*<=\s*([0-9.]+)", t)
        if m:
            return float(m.group(1))
    return None


def _one_point(p: Point, result: BenchResult, plt) -> str:
    """A single load point: its latency percentiles as bars (a line through one point says nothing)."""
    fig, ax = plt.subplots(figsize=(7, 2.6))
    groups = [("E2E", p.latency_ms)] + [(n, pc) for n, pc in (("TTFT", p.ttft_ms), ("ITL", p.itl_ms)) if pc]
    labels, vals, colors = [], [], []
    for gi, (g, pc) in enumerate(groups):
        for q, name in QS:
            v = getattr(pc, q)
            if v is not None and v == v:
                labels.append(f"{g} {name}")
                vals.append(v)
                colors.append(("#0969da", "#8250df", "#bf8700")[gi % 3])
    ax.barh(labels[::-1], vals[::-1], color=colors[::-1])
    for i, v in enumerate(vals[::-1]):
        ax.annotate(f"{v:.1f}", (v, i), xytext=(3, -3), textcoords="offset points", fontsize=7)
    bound = slo_bound_ms(result.slo.target) if result.slo else None
    if bound:
        ax.axvline(bound, color="#cf222e", ls=":", label=f"SLO {bound:g} ms")
        ax.legend(fontsize=7)
    if vals and max(vals) / max(min(vals), 1e-9) > 30:
        log_axis(ax, "x")
    ax.set_xlabel(f"ms at {p.label} (n={p.n} requests, one load point)")
    ax.tick_params(axis="y", labelsize=8)
    return figure_svg(fig)


def _curves(pts: list[Point], over: str, result: BenchResult, plt) -> list[tuple[str, str]]:
    x = [getattr(p.offered, over) for p in pts]
    out = []
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for q, style in (("p50", "-o"), ("p90", "-s"), ("p99", "-^"), ("p999", ":v")):
        ax.plot(x, [getattr(p.latency_ms, q) for p in pts], style, label=f"E2E {dict(QS)[q]}", ms=4)
    if any(p.ttft_ms for p in pts):
        ax.plot(x, [p.ttft_ms.p50 if p.ttft_ms else None for p in pts], "--", label="TTFT P50")
        ax.plot(x, [p.ttft_ms.p99 if p.ttft_ms else None for p in pts], "--", label="TTFT P99")
    bad = [(xi, p.latency_ms.p99) for xi, p in zip(x, pts, strict=True) if not p.valid and p.latency_ms.p99]
    if bad:
        ax.scatter(*zip(*bad, strict=True), s=120, facecolors="none", edgecolors="red",
                   label="not valid (client, or errors)")
    bound = slo_bound_ms(result.slo.target) if result.slo and result.slo.over == over else None
    if bound:
        ax.axhline(bound, color="grey", ls=":", label=f"SLO {bound:g} ms")
    ax.set_xlabel(f"offered {over}" + (" (req/s)" if over == "rate" else ""))
    ax.set_ylabel("ms (log)")
    log_axis(ax, "y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"Latency percentiles vs {over}", fontsize=10)
    out.append((f"Latency vs {over}", figure_svg(fig)))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(x, [p.achieved_rps for p in pts], "-o", label="ok req/s")
    if any(p.goodput_rps is not None for p in pts):
        ax.plot(x, [p.goodput_rps for p in pts], "-x", label="goodput req/s")
    if over == "rate":
        ax.plot(x, x, ":", color="grey", label="offered")
    k = result.knee
    if k and k.over == over:
        ax.axvline(k.load, color="red", ls="--", label=f"knee ({k.load:g})")
    if any(p.output_tokens_per_s for p in pts):
        ax2 = ax.twinx()
        ax2.plot(x, [p.output_tokens_per_s for p in pts], "-s", color="green", label="output tok/s")
        ax2.set_ylabel("output tokens/s")
        ax2.legend(fontsize=7, loc="lower right")
    ax.set_xlabel(f"offered {over}")
    ax.set_ylabel("req/s")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(f"Throughput vs {over}", fontsize=10)
    out.append((f"Throughput vs {over}", figure_svg(fig)))
    return out


def _kind(tel: TelemetrySeries, name: str) -> str:
    ty = tel.types.get(name, "untyped")
    base = _base(name)
    if ty in ("summary", "histogram") or ty == "untyped" and tel.source != "nvml":
        return "counter" if base.endswith(("_total", "_count", "_sum")) else "gauge"
    return "gauge" if tel.source == "nvml" else ty  # NVML samples are readings


def _base(name: str) -> str:
    return name.split("{", 1)[0]


def _label(name: str) -> str:
    return name[len(_base(name)):].strip("{}") or _base(name)


def _values(tel: TelemetrySeries, name: str, per: str | None = None) -> tuple[list[float], list[float]]:
    """(t, y) of a series: gauges as read, counters as rates per second, and a `_sum` over its `_count`
    (`per`) as the mean per observation in each interval."""
    den = dict(zip(tel.t, tel.series[per], strict=False)) if per else {}
    pts = [(t, y) for t, y in zip(tel.t, tel.series[name], strict=False)
           if y is not None and (not per or den.get(t) is not None)]
    if _kind(tel, name) != "counter":
        return [t for t, _ in pts], [y for _, y in pts]
    xs, ys = [], []
    for (t0, y0), (t1, y1) in zip(pts, pts[1:], strict=False):
        d = den[t1] - den[t0] if per else t1 - t0
        if d > 0:
            xs.append(t1)
            ys.append((y1 - y0) / d)
    return xs, ys


def telemetry_panels(tel: TelemetrySeries) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Panels worth drawing, each a title and its (series, denominator) lines: NVML readings (utilization,
    memory, power per GPU), gauges, means per observation (`_sum` / `_count`), then counters as rates.
    Series that never change are left out (NVML's are kept: a flat GPU memory line is an answer)."""
    fams: dict[str, list[tuple[str, str | None]]] = {}
    for name in tel.series:
        base = _base(name)
        if base.startswith(("process_", "python_")) or base.endswith("_count") and (
                name.replace("_count", "_sum", 1) in tel.series):
            continue
        per = name.replace("_sum", "_count", 1) if base.endswith("_sum") else None
        if per not in tel.series:
            per = None
        _, ys = _values(tel, name, per)
        if len(ys) < 2 or (max(ys) == min(ys) and tel.source != "nvml"):
            continue
        title = (f"mean {base[:-4]} per observation" if per else
                 f"{base} (rate, per s)" if _kind(tel, name) == "counter" else base)
        fams.setdefault(title, []).append((name, per))
    rank = {"gauge": 0, "mean": 1, "rate": 2}
    order = sorted(fams, key=lambda t: (rank["mean" if t.startswith("mean ") else "rate" if "(rate" in t else "gauge"],
                                        t))
    return [(t, fams[t][:8]) for t in order][:MAX_PANELS]


def telemetry_svg(tel: TelemetrySeries, result: BenchResult, plt) -> str | None:
    panels = telemetry_panels(tel)
    if not tel.t or not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.45 * len(panels) + 0.7), sharex=True, squeeze=False)
    for ax, (title, lines) in zip(axes[:, 0], panels, strict=True):
        for name, per in lines:
            xs, ys = _values(tel, name, per)
            ax.plot(xs, ys, lw=1.2, label=_label(name))
        ax.set_title(title, fontsize=8, loc="left")
        ax.tick_params(labelsize=7)
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        if len(lines) > 1:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        for p in result.points:
            ax.axvspan(p.t_start, p.t_end, color="green" if p.valid else "red", alpha=0.08)
    axes[-1, 0].set_xlabel("seconds since bench start (shaded: measured windows)")
    fig.tight_layout()
    return figure_svg(fig)


def bench_plots(result: BenchResult) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    measured = [p for p in result.points if p.ok]
    if len(measured) == 1:
        out.append((f"Latency at the one load point ({html.escape(measured[0].label)})",
                    _one_point(measured[0], result, plt)))
    else:
        for over in ("concurrency", "rate"):
            pts = sorted((p for p in result.points if getattr(p.offered, over) is not None),
                         key=lambda p: getattr(p.offered, over))
            if len(pts) >= 2:
                out += _curves(pts, over, result, plt)
            elif pts and pts[0].ok:
                out.append((f"Latency at {html.escape(pts[0].label)}", _one_point(pts[0], result, plt)))
    for tel in result.telemetry:
        svg = telemetry_svg(tel, result, plt)
        if svg:
            title = "GPU telemetry (NVML)" if tel.source == "nvml" else f"Server metrics ({html.escape(tel.source)})"
            out.append((title, svg))
    return out
