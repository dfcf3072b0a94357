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


def _lm_card(result: TuneResult) -> str:
    from infertune.page import card, e, no_winner_card

    win, base = result.winner, result.baseline
    if win is None:
        return no_winner_card(result)
    sp = win.speedup_vs_baseline
    answer = (f"Serve <b>{e(win.name)}</b>: {_f(win.tokens_per_s)} tokens/s batch-1 decode"
              + (f", <b>{sp:.2f}x</b> the naive baseline" if sp else ""))
    facts = []
    t, bt = win.tpot_ms, base.tpot_ms if base else None
    if t and t.p50:
        line = f"TPOT {t.p50:.2f} ms (p5-p95 {_f(t.p5, '{:.2f}')}-{_f(t.p95, '{:.2f}')}, n={t.n} steps)"
        if bt and bt.p50 and t.p5 and t.p95 and bt.p5 and bt.p95:
            line += (f" vs baseline {e(base.name)} {bt.p50:.2f} ms (p5-p95 {bt.p5:.2f}-{bt.p95:.2f}, n={bt.n}): "
                     f"speedup {bt.p50 / t.p50:.2f}x by medians, {bt.p5 / t.p95:.2f}-{bt.p95 / t.p5:.2f}x across "
                     "the p5-p95 spreads")
        facts.append(line + ".")
    a = win.accuracy
    if a.ppl_delta_rel is not None:
        facts.append(f"Perplexity {_pct(a.ppl_delta_rel)} vs the reference, top-1 agreement "
                     f"{_f(a.top1_agreement, '{:.4f}')}, n={a.n} tokens.")
    if win.ttft_ms and win.ttft_ms.p50:
        facts.append(f"TTFT {win.ttft_ms.p50:.1f} ms at the median prompt length (n={win.ttft_ms.n}).")
    if win.weight_bytes:
        facts.append(f"Weights read per decode step: {win.weight_bytes / 2**20:.0f} MiB"
                     + (f" ({win.roofline_fraction:.0%} of the memory roofline)." if win.roofline_fraction else "."))
    return card(answer, facts, result.next_command, tone="pass")


def write_lm_report(result: TuneResult, path: Path) -> Path:
    from infertune.tuning.summary import search_lines

    e = html.escape
    plots = _plots(result)
    head, body = rows(result)
    reasons = {r.name: r.reason for r in result.candidates}
    win = result.winner.name if result.winner else None
    left = lambda i: " class='l'" if i < 2 else ""  # noqa: E731
    table = ("<tr>" + "".join(f"<th{left(i)}>{e(h)}</th>" for i, h in enumerate(head))
             + "<th class='l'>reason</th></tr>"
             + "".join(f"<tr class='{'winner' if row[0] == win else row[1]}'>"
                       + "".join(f"<td{left(i)}>{e(x)}</td>" for i, x in enumerate(row))
                       + f"<td class='l'>{e(reasons[row[0]])}</td></tr>" for row in body))
    sections = "".join(f"<h2>{t}</h2>{plots[k]}" for k, t in (
        ("tpot", "TPOT vs batch"), ("ttft", "TTFT vs prompt length"), ("pareto", "Speed vs perplexity drift"))
        if k in plots)
    doc = f"""<h1>infertune tune: {e(result.model)} (causal LM)</h1>
{_lm_card(result)}
<h2>Decision</h2><p>{'<br>'.join(e(x) for x in result.decision)}</p>
<h2>Search</h2><p>{'<br>'.join(e(x) for x in search_lines(result))}</p>
<h2>Candidates</h2><table>{table}</table>{sections}
<h2>Setup</h2><pre>{e(json.dumps(result.lm, indent=2))}</pre>
<h2>Environment</h2><details><summary>fingerprint</summary><pre>{e(result.environment.model_dump_json(indent=2))}</pre></details>
<h2>Config</h2><details><summary>config</summary><pre>{e(json.dumps(result.config, indent=2))}</pre></details>"""
    from infertune.page import document

    doc = document(f"infertune tune: {result.model}", doc)
    path.write_text(doc, encoding="utf-8")
    return path
