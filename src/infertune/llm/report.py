"""Human output of a causal-LM tune: a console table and report.html with TTFT-vs-prompt-length,
TPOT-vs-batch and speed-vs-drift plots (inline SVG, offline)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from infertune.plots import figure_svg
from infertune.plots import fmt as _f
from infertune.results import CandidateResult, TuneResult


def _tpot(r: CandidateResult, b: str) -> str:
    t = r.tpot_by_batch.get(b)
    return f"{t.p50:.1f} ({t.p5:.1f}-{t.p95:.1f})" if t and t.p50 else "-"


def _pct(x, digits=2) -> str:
    return "-" if x is None else f"{x * 100:+.{digits}f}%"


def rows(result: TuneResult) -> tuple[list[str], list[list[str]]]:
    batches = [str(b) for b in result.lm.get("tpot_batches", [1])]
    head = ["candidate", "status", "tok/s b1", *[f"TPOT b{b} ms p50 (p5-p95)" for b in batches], "TTFT p50-len ms",
            "ppl Δ", "top-1", "KL nats", "greedy", "roofline", "vs naive"]
    out = []
    for r in sorted(result.candidates, key=lambda r: -(r.tokens_per_s or 0)):
        a = r.accuracy
        out.append([r.name, r.status, _f(r.tokens_per_s), *[_tpot(r, b) for b in batches],
                    _f(r.ttft_ms.p50 if r.ttft_ms else None), _pct(a.ppl_delta_rel), _f(a.top1_agreement, "{:.4f}"),
                    _f(a.kl_mean, "{:.1e}"), _f(a.greedy_agreement, "{:.2f}"),
                    _f(r.roofline_fraction * 100 if r.roofline_fraction else None, "{:.0f}%"),
                    _f(r.speedup_vs_baseline, "{:.2f}x")])
    return head, out


def print_lm_summary(result: TuneResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=220)
    n = next((r.tpot_ms.n for r in result.candidates if r.tpot_ms), 0)
    t = Table(title=f"infertune tune: {result.model} ({result.config.get('device')}, causal LM; TPOT n={n} steps "
                    f"per batch size; eval {result.lm.get('eval_tokens')} tokens)")
    head, body = rows(result)
    for col in head:
        t.add_column(col, justify="left" if col in ("candidate", "status") else "right")
    win = result.winner.name if result.winner else None
    for row in body:
        t.add_row(*row, style="bold green" if row[0] == win else ("dim" if row[1] in ("skipped", "failed") else None))
    con.print(t)
    for r in result.candidates:
        if r.status in ("skipped", "failed", "rejected") and r.reason:
            con.print(f"  [dim]{r.status}[/] {r.name}: {r.reason}", highlight=False)
    bw = result.lm.get("bandwidth", {})
    if bw:
        con.print(f"memory roofline: decode weight bytes / {bw['gb_per_s']:.1f} GB/s measured copy bandwidth "
                  f"(n={bw['n']}, range {bw['range'][0]:.1f}-{bw['range'][1]:.1f})", highlight=False)
    for line in result.decision:
        con.print(line, highlight=False)
    con.print(f"results: {result.out_dir}/results.json  report: {result.out_dir}/report.html", highlight=False)
    if result.next_command:
        con.print(f"next: [bold]{result.next_command}[/]", highlight=False)


def _plots(result: TuneResult) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots: dict[str, str] = {}
    measured = [r for r in result.candidates if r.tpot_by_batch]
    win = result.winner.name if result.winner else None
    if not measured:
        return plots
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in measured:
        bs = sorted(r.tpot_by_batch, key=int)
        ax.errorbar([int(b) for b in bs], [r.tpot_by_batch[b].p50 for b in bs],
                    yerr=[[r.tpot_by_batch[b].p50 - r.tpot_by_batch[b].p5 for b in bs],
                          [r.tpot_by_batch[b].p95 - r.tpot_by_batch[b].p50 for b in bs]],
                    marker="o", capsize=3, lw=2.5 if r.name == win else 1, label=r.name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch size")
    ax.set_ylabel("TPOT: ms per decode step (median, p5-p95)")
    ax.set_title("Decode step time vs batch")
    ax.legend(fontsize=7)
    plots["tpot"] = figure_svg(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in measured:
        ks = sorted(r.ttft_by_length, key=lambda k: int(k.split(":")[1]))
        ax.plot([int(k.split(":")[1]) for k in ks], [r.ttft_by_length[k].p50 for k in ks], marker="o",
                lw=2.5 if r.name == win else 1, label=r.name)
    ax.set_xlabel("prompt tokens (workload percentiles)")
    ax.set_ylabel("TTFT ms (median)")
    ax.set_title("Time to first token vs prompt length")
    ax.legend(fontsize=7)
    plots["ttft"] = figure_svg(fig)
    pts = [r for r in measured if r.accuracy.ppl_delta_rel is not None and r.tokens_per_s]
    if pts:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in pts:
            color = "tab:green" if r.name == win else ("tab:red" if r.status == "rejected" else "tab:blue")
            ax.scatter(r.tokens_per_s, r.accuracy.ppl_delta_rel * 100, color=color)
            ax.annotate(r.name, (r.tokens_per_s, r.accuracy.ppl_delta_rel * 100), fontsize=7)
        ax.axhline(result.config["lm_accuracy"]["max_ppl_delta_rel"] * 100, color="red", ls=":", label="budget")
        ax.set_xlabel("batch-1 decode tokens/s")
        ax.set_ylabel("perplexity change vs reference (%)")
        ax.legend()
        plots["pareto"] = figure_svg(fig)
    return plots


def write_lm_report(result: TuneResult, path: Path) -> Path:
    from infertune.tuning.summary import search_lines

    e = html.escape
    plots = _plots(result)
    head, body = rows(result)
    reasons = {r.name: r.reason for r in result.candidates}
    table = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "<th>reason</th></tr>" + "".join(
        f"<tr class='{row[1]}'>" + "".join(f"<td>{e(x)}</td>" for x in row) + f"<td>{e(reasons[row[0]])}</td></tr>"
        for row in body)
    sections = "".join(f"<h2>{t}</h2>{plots[k]}" for k, t in (
        ("tpot", "TPOT vs batch"), ("ttft", "TTFT vs prompt length"), ("pareto", "Speed vs perplexity drift"))
        if k in plots)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>infertune: {e(result.model)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px}}tr.rejected{{color:#a60}}tr.failed,tr.skipped{{color:#999}}
svg{{max-width:100%;height:auto}}</style></head><body>
<h1>infertune tune: {e(result.model)} (causal LM)</h1>
<p>{'<br>'.join(e(x) for x in result.decision)}</p>
<h2>Search</h2><p>{'<br>'.join(e(x) for x in search_lines(result))}</p>
<h2>Candidates</h2><table>{table}</table>{sections}
<h2>Setup</h2><pre>{e(json.dumps(result.lm, indent=2))}</pre>
<h2>Environment</h2><pre>{e(result.environment.model_dump_json(indent=2))}</pre>
<h2>Config</h2><pre>{e(json.dumps(result.config, indent=2))}</pre></body></html>"""
    path.write_text(doc)
    return path
