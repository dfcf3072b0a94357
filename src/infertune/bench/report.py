"""What a person reads after `infertune bench`: a console table, bench.json (the contract),
bench.csv (one row per point) and bench.html (inline SVG plots, works offline)."""

from __future__ import annotations

import csv
import html
import math
from pathlib import Path

from infertune.bench.results import BenchResult, Point
from infertune.report import figure_svg

NA = "n/a"


def fmt(x, spec: str = "{:.1f}") -> str:
    """A figure for a person: "n/a" when it was not measured (None, or NaN: e.g. the latency of a point
    that completed no request), else `spec`-formatted."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NA
    return spec.format(x)


def to_json(result: BenchResult) -> str:
    """bench.json's text: a figure that was not measured is null (pydantic writes NaN as null; json.dumps
    would write NaN, which is not JSON)."""
    return result.model_dump_json(indent=1)


def print_summary(result: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=200)
    tgt = result.target
    t = Table(title=f"infertune bench: {tgt.get('url')} {tgt.get('api')} ({tgt.get('model') or 'no model name'})")
    stream = any(p.ttft_ms for p in result.points)
    cols = ["load", "valid", "n", "ok req/s", "err %", "E2E p50 ms", "p90", "p99", "p99.9"]
    if stream:
        cols += ["TTFT p50 ms", "TTFT p99", "ITL p50 ms", "ITL p99", "TPOT p50 ms", "out tok/s"]
    cols += ["lag p99 ms", "client CPU"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("load", "valid") else "right")
    for p in result.points:
        row = [p.label, "yes" if p.valid else "NO", str(p.n), fmt(p.achieved_rps), fmt(p.errors.rate * 100),
               fmt(p.latency_ms.p50), fmt(p.latency_ms.p90), fmt(p.latency_ms.p99), fmt(p.latency_ms.p999)]
        if stream:
            tt, it, tp = p.ttft_ms, p.itl_ms, p.tpot_ms
            row += [fmt(tt and tt.p50), fmt(tt and tt.p99), fmt(it and it.p50), fmt(it and it.p99), fmt(tp and tp.p50),
                    fmt(p.output_tokens_per_s)]
        row += [fmt(p.client.lag_ms.p99), fmt(p.client.cpu_util, "{:.0%}")]
        t.add_row(*row, style=None if p.valid else "bold red")
    con.print(t)
    con.print("latencies are measured from each request's scheduled send time; n = requests in the measured "
              "window (warm-up excluded)", style="dim", highlight=False)
    for p in result.points:
        if p.errors.total:
            for kind, cnt in p.errors.by_kind.items():
                con.print(f"  {p.label}: {cnt} x {kind}: {p.errors.examples.get(kind, '')}", highlight=False)
        if not p.valid:
            con.print(f"[bold red]INVALID {p.label}:[/] {p.invalid_reason}", highlight=False)
        if p.warning:
            con.print(f"[yellow]caveat {p.label}:[/] {p.warning}", highlight=False)
    if result.slo:
        s = result.slo
        if s.met:
            con.print(f"[bold green]SLO {s.target}: max {s.over} = {s.max_load:.4g}[/] (bracket {s.bracket}, "
                      f"confirmed over {s.repeats} runs)", highlight=False)
        else:
            con.print(f"[bold red]SLO {s.target} not met at any {s.over} tried[/] ({len(s.steps)} steps)", highlight=False)
    if result.knee:
        k = result.knee
        con.print(f"knee: {k.over} {k.load:g} ({k.rule})", highlight=False)
        if k.recommended_max_num_seqs:
            con.print(f"recommended vLLM --max-num-seqs {k.recommended_max_num_seqs}: {k.derivation}", highlight=False)
    for tel in result.telemetry:
        con.print(f"telemetry {tel.source}: {len(tel.series)} series x {len(tel.t)} samples every {tel.interval_s:g} s"
                  + (f" ({len(tel.errors)} scrape errors, first: {tel.errors[0]})" if tel.errors else ""), highlight=False)
    if result.out_dir:
        con.print(f"wrote {result.out_dir}/bench.json, bench.html, bench.csv", highlight=False)


def _row(p: Point) -> dict:
    r = {"label": p.label, "phase": p.phase, "concurrency": p.offered.concurrency, "rate": p.offered.rate,
         "arrivals": p.offered.arrivals, "valid": p.valid, "n": p.n, "ok": p.ok, "achieved_rps": p.achieved_rps,
         "errors": p.errors.total, "error_rate": p.errors.rate, "goodput_rps": p.goodput_rps,
         "input_tokens_per_s": p.input_tokens_per_s, "output_tokens_per_s": p.output_tokens_per_s,
         "client_cpu": p.client.cpu_util, "lag_p99_ms": p.client.lag_ms.p99, "slo_pass": p.slo_pass,
         "invalid_reason": p.invalid_reason, "warning": p.warning}
    for name in ("latency_ms", "ttft_ms", "itl_ms", "tpot_ms"):
        pc = getattr(p, name)
        for q in ("p50", "p90", "p95", "p99", "p999"):
            r[f"{name[:-3]}_{q}_ms"] = getattr(pc, q) if pc else None
    # not measured is None everywhere (CSV: empty, HTML: n/a), never NaN
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}


def _plots(result: BenchResult) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    for over in ("concurrency", "rate"):
        pts = sorted([p for p in result.points if getattr(p.offered, over) is not None], key=lambda p: getattr(p.offered, over))
        if not pts:
            continue
        x = [getattr(p.offered, over) for p in pts]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for q, style in (("p50", "-o"), ("p90", "-s"), ("p99", "-^"), ("p999", ":v")):
            ax.plot(x, [getattr(p.latency_ms, q) for p in pts], style, label=f"E2E {q}", ms=4)
        if any(p.ttft_ms for p in pts):
            ax.plot(x, [p.ttft_ms.p50 if p.ttft_ms else None for p in pts], "--", label="TTFT p50")
            ax.plot(x, [p.ttft_ms.p99 if p.ttft_ms else None for p in pts], "--", label="TTFT p99")
        bad = [(xi, p.latency_ms.p99) for xi, p in zip(x, pts, strict=True) if not p.valid and p.latency_ms.p99]
        if bad:
            ax.scatter(*zip(*bad, strict=True), s=120, facecolors="none", edgecolors="red", label="invalid (client)")
        if result.slo and result.slo.over == over:
            for t in result.slo.target.split(","):
                if "e2e" in t and "<=" in t:
                    ax.axhline(float(t.split("<=")[1]), color="grey", ls=":", label="SLO")
        ax.set_xlabel(f"offered {over}" + (" (req/s)" if over == "rate" else ""))
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.set_title(f"Latency percentiles vs {over}")
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
        ax.set_title(f"Throughput vs {over}")
        out.append((f"Throughput vs {over}", figure_svg(fig)))
    for tel in result.telemetry:
        if not tel.t:
            continue
        names = [n for n, ty in tel.types.items() if ty == "gauge"][:6]
        names += [n for n, ty in tel.types.items() if ty == "counter" and not n.startswith("process_")][:4]
        if not names:
            continue
        fig, axes = plt.subplots(len(names), 1, figsize=(7, 1.4 * len(names) + 0.6), sharex=True, squeeze=False)
        for ax, name in zip(axes[:, 0], names, strict=True):
            ys = tel.series[name]
            if tel.types[name] == "counter":  # counters as rates
                pts = [(t, y) for t, y in zip(tel.t, ys, strict=True) if y is not None]
                xs = [b[0] for b in pts[1:]]
                vals = [(b[1] - a[1]) / max(1e-9, b[0] - a[0]) for a, b in zip(pts, pts[1:], strict=False)]
                ax.plot(xs, vals, lw=1)
                ax.set_ylabel("/s", fontsize=7)
            else:
                ax.plot(tel.t, ys, lw=1)
            ax.set_title(name[:90], fontsize=7, loc="left")
            for p in result.points:
                ax.axvspan(p.t_start, p.t_end, color="green" if p.valid else "red", alpha=0.07)
        axes[-1, 0].set_xlabel("seconds since bench start (shaded: measured windows)")
        out.append((f"Server series over time ({html.escape(tel.source)})", figure_svg(fig)))
    return out


def write_html(result: BenchResult, path: Path) -> None:
    rows = "".join(
        "<tr" + ("" if p.valid else " class=bad") + ">" + "".join(f"<td>{html.escape(fmt(v, '{}'))}</td>"
                                                                 for v in _row(p).values()) + "</tr>"
        for p in result.points)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in _row(result.points[0])) if result.points else ""
    try:
        plots = _plots(result)
    except ImportError:
        plots = [("plots", "<p>matplotlib is not installed: pip install 'infertune[report]'</p>")]
    summary = []
    if result.slo:
        s = result.slo
        summary.append(f"SLO <b>{html.escape(s.target)}</b>: " + (f"max {s.over} = <b>{s.max_load:.4g}</b>" if s.met
                                                                  else "not met") + f" (bracket {s.bracket})")
    if result.knee:
        k = result.knee
        summary.append(f"Knee: {k.over} {k.load:g} ({html.escape(k.rule)})")
        if k.recommended_max_num_seqs:
            summary.append(f"Recommended vLLM <code>--max-num-seqs {k.recommended_max_num_seqs}</code>: "
                           f"{html.escape(k.derivation)}")
    summary += [f"<span class=bad>{html.escape(w)}</span>" for w in result.warnings]
    body = "".join(f"<h2>{t}</h2>{s}" for t, s in plots)
    doc = f"""<!doctype html><meta charset=utf-8><title>infertune bench</title>
<style>body{{font:14px sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;font-size:11px}}
td,th{{border:1px solid #ccc;padding:2px 4px}}.bad{{color:#b00}}</style>
<h1>infertune bench: {html.escape(str(result.target.get('url')))} ({html.escape(str(result.target.get('api')))})</h1>
<p>Latency is measured from each request's <em>scheduled</em> send time. Started {result.started}, wall {result.wall_s} s.
{html.escape('; '.join(result.notes))}</p><ul>{''.join(f'<li>{s}</li>' for s in summary)}</ul>
<table><tr>{head}</tr>{rows}</table>{body}"""
    path.write_text(doc, encoding="utf-8")


def write_outputs(result: BenchResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(to_json(result), encoding="utf-8")
    with open(out / "bench.csv", "w", newline="", encoding="utf-8") as f:
        if result.points:
            w = csv.DictWriter(f, fieldnames=list(_row(result.points[0]).keys()))
            w.writeheader()
            for p in result.points:
                w.writerow(_row(p))
    write_html(result, out / "bench.html")
