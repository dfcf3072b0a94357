"""Human output of a tune run: a console table and a self-contained HTML report with offline plots
(inline SVG: Pareto front, latency distributions, per-layer sensitivity, length histogram)."""

from __future__ import annotations

import html
from pathlib import Path

from infertune.plots import figure_svg
from infertune.plots import fmt as _f
from infertune.results import TuneResult
from infertune.tuning.summary import search_lines


def print_summary(result: TuneResult) -> None:
    from rich.console import Console
    from rich.table import Table

    if result.kind == "causal-lm":
        from infertune.llm.report import print_lm_summary

        print_lm_summary(result)
        return print_search(result)
    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=200)
    t = Table(title=f"infertune tune: {result.model} ({result.config.get('device')})", show_lines=False)
    for col in ("candidate", "status", "stage", "time s", "items/s best (n)", "median", "range", "P50 ms",
                "P99 ms", "cos mean", "cos min", "top10", "vs naive"):
        t.add_column(col, justify="left" if col in ("candidate", "status") else "right")
    order = sorted(result.candidates, key=lambda r: -(r.items_per_s or 0))
    for r in order:
        m = r.measurement
        style = "bold green" if result.winner and r.name == result.winner.name else (
            "dim" if r.status in ("skipped", "failed") else None)
        probe = f"{_f(r.probe.get('speed'))} (probe)" if r.probe and not m else "-"
        t.add_row(r.name, r.status, r.stage or "-", _f(r.time_s, "{:.0f}"),
                  f"{_f(r.items_per_s)} (n={m.passes})" if m else probe,
                  _f(m.items_per_s_median) if m else "-",
                  f"{m.items_per_s_spread[0]:.0f}-{m.items_per_s_spread[1]:.0f}" if m else "-",
                  _f(r.latency_ms.p50), _f(r.latency_ms.p99), _f(r.accuracy.cosine_mean, "{:.5f}"),
                  _f(r.accuracy.cosine_min, "{:.5f}"), _f(r.accuracy.topk_overlap, "{:.3f}"),
                  _f(r.speedup_vs_baseline, "{:.2f}x"), style=style)
    con.print(t)
    for r in order:
        if r.status in ("skipped", "failed", "rejected") and r.reason:
            con.print(f"  [dim]{r.status}[/] {r.name}: {r.reason}", highlight=False)
    for line in result.decision:
        con.print(line, highlight=False)
    print_search(result, con)
    con.print(f"results: {result.out_dir}/results.json  report: {result.out_dir}/report.html", highlight=False)
    if result.next_command:
        con.print(f"next: [bold]{result.next_command}[/]", highlight=False)


def print_search(result: TuneResult, con=None) -> None:
    if con is None:
        from rich.console import Console

        con = Console(stderr=True)
    for line in search_lines(result):
        con.print(f"[dim]{line}[/]", highlight=False)


def _plots(result: TuneResult) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots: dict[str, str] = {}
    measured = [r for r in result.candidates if r.items_per_s and r.accuracy.cosine_mean is not None]
    if measured:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in measured:
            color = "tab:green" if result.winner and r.name == result.winner.name else (
                "tab:blue" if r.name in result.pareto else "tab:gray")
            ax.scatter(r.items_per_s, 1 - r.accuracy.cosine_mean + 1e-7, color=color)
            ax.annotate(r.name, (r.items_per_s, 1 - r.accuracy.cosine_mean + 1e-7), fontsize=7)
        front = [r for r in measured if r.name in result.pareto]
        front.sort(key=lambda r: r.items_per_s)
        ax.plot([r.items_per_s for r in front], [1 - r.accuracy.cosine_mean + 1e-7 for r in front], "b--", lw=1)
        ax.axhline(1 - result.config["accuracy"]["min_cosine_mean"], color="red", lw=1, ls=":",
                   label="accuracy budget")
        ax.set_yscale("log")
        ax.set_xlabel("items/s (best pass)")
        ax.set_ylabel("1 - mean cosine vs fp32 (log)")
        ax.set_title("Speed vs accuracy (Pareto front dashed, winner green)")
        ax.legend()
        plots["pareto"] = figure_svg(fig)
        fig, ax = plt.subplots(figsize=(8, 0.35 * len(measured) + 1.5))
        rows = sorted((r for r in measured if r.latency_ms.n), key=lambda r: r.items_per_s)
        ax.barh([r.name for r in rows], [r.latency_ms.p99 for r in rows], color="tab:orange", label="P99")
        ax.barh([r.name for r in rows], [r.latency_ms.p50 for r in rows], color="tab:blue", label="P50")
        ax.axvline(result.config["slo"]["p99_ms"], color="red", ls=":", label="SLO")
        ax.set_xlabel("batch latency (ms), tokenization included")
        ax.tick_params(axis="y", labelsize=7)
        ax.legend()
        plots["latency"] = figure_svg(fig)
    if result.sensitivity:
        s = result.sensitivity[:40]
        fig, ax = plt.subplots(figsize=(8, 0.22 * len(s) + 1.5))
        keep = set(result.mixed_precision.get("keep_high", []))
        ax.barh([x.layer for x in s][::-1], [max(x.drop, 1e-7) for x in s][::-1],
                color=["tab:red" if x.layer in keep else "tab:gray" for x in s][::-1])
        ax.set_xscale("log")
        ax.set_xlabel("1 - mean cosine when only this layer is int8 (red: kept in fp32)")
        ax.tick_params(axis="y", labelsize=6)
        plots["sensitivity"] = figure_svg(fig)
    if result.workload:
        h = result.workload.histogram
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.bar([b["bucket"] for b in h], [b["count"] for b in h], color="tab:purple")
        ax.set_xlabel(f"tokens per item (model limit {result.workload.max_length})")
        ax.set_ylabel("items")
        plots["lengths"] = figure_svg(fig)
    return plots


def write_report(result: TuneResult, path: Path) -> Path:
    plots = _plots(result)
    e = html.escape
    rows = []
    for r in sorted(result.candidates, key=lambda r: -(r.items_per_s or 0)):
        m = r.measurement
        rows.append(
            f"<tr class='{r.status}'><td>{e(r.name)}</td><td>{r.status}</td><td>{e(r.stage or '-')}</td>"
            f"<td>{_f(r.time_s, '{:.0f}')}</td><td>{_f(r.items_per_s)}</td>"
            f"<td>{_f(m.items_per_s_median) if m else '-'}</td><td>{m.passes if m else '-'}</td>"
            f"<td>{(f'{m.items_per_s_spread[0]:.1f}-{m.items_per_s_spread[1]:.1f}') if m else '-'}</td>"
            f"<td>{_f(r.latency_ms.p50)}</td><td>{_f(r.latency_ms.p95)}</td><td>{_f(r.latency_ms.p99)}</td>"
            f"<td>{_f(r.accuracy.cosine_mean, '{:.5f}')}</td><td>{_f(r.accuracy.cosine_min, '{:.5f}')}</td>"
            f"<td>{_f(r.accuracy.topk_overlap, '{:.3f}')}</td><td>{_f(r.speedup_vs_baseline, '{:.2f}x')}</td>"
            f"<td>{e(r.reason)}</td></tr>")
    env = result.environment
    w = result.workload
    sections = "".join(f"<h2>{title}</h2>{plots[k]}" for k, title in (
        ("pareto", "Pareto front"), ("latency", "Latency per batch"), ("sensitivity", "Per-layer int8 sensitivity"),
        ("lengths", "Workload length histogram")) if k in plots)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>infertune: {e(result.model)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px}}tr.rejected{{color:#a60}}tr.failed,tr.skipped{{color:#999}}
svg{{max-width:100%;height:auto}}</style></head><body>
<h1>infertune tune: {e(result.model)}</h1>
<p>{'<br>'.join(e(x) for x in result.decision)}</p>
<h2>Search</h2><p>{'<br>'.join(e(x) for x in search_lines(result))}</p>
<h2>Candidates</h2><table><tr><th>candidate</th><th>status</th><th>stage</th><th>time s</th><th>items/s (best pass)</th><th>median</th><th>n</th><th>range</th>
<th>P50 ms</th><th>P95 ms</th><th>P99 ms</th><th>cos mean</th><th>cos min</th><th>top-10</th><th>vs naive</th><th>reason</th></tr>
{''.join(rows)}</table>
{sections}
<h2>Workload</h2><p>{e(w.source) if w else ''}: {w.n_items if w else 0} items, eval {w.n_eval if w else 0},
calibration {w.n_calibration if w else 0}; tokens p50 {w.tokens_p50 if w else 0:.0f}, p90 {w.tokens_p90 if w else 0:.0f},
p99 {w.tokens_p99 if w else 0:.0f}, max {w.tokens_max if w else 0}; {w.over_limit if w else 0} over the model limit (truncated).</p>
<h2>Environment</h2><pre>{e(env.model_dump_json(indent=2))}</pre>
<h2>Config</h2><pre>{e(__import__('json').dumps(result.config, indent=2))}</pre>
</body></html>"""
    path.write_text(doc)
    return path
