"""Human output of a tune run: a console table and a self-contained HTML report (report.html): a summary
card (the answer, the speedup with n and spread, the next command), the candidates with the winner
highlighted and SLO misses marked, and offline plots (plots.py)."""

from __future__ import annotations

import json
from pathlib import Path

from infertune.page import card, document, e, folded, no_winner_card, table
from infertune.plots import fmt as _f
from infertune.results import TuneResult
from infertune.tasks.embedding.peak import UNIT, peak_line
from infertune.tasks.embedding.plots import decision_p99, misses_slo, numbered, slo_limit, tune_plots
from infertune.tuning.summary import print_search, search_lines


def print_summary(result: TuneResult) -> None:
    """The embedding tune's console table, its skipped and failed candidates, accuracy lines and decision."""
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=200)
    t = Table(title=f"infertune tune: {result.model} ({result.config.get('device')})", show_lines=False)
    for col in ("candidate", "status", "stage", "time s", "items/s best (n)", "median", "range", "P50 ms",
                "P99 ms (SLO)", "cos mean", "cos min", "top10", "vs naive"):
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
                  _f(r.latency_ms.p50), _f(decision_p99(r)), _f(r.accuracy.cosine_mean, "{:.5f}"),
                  _f(r.accuracy.cosine_min, "{:.5f}"), _f(r.accuracy.topk_overlap, "{:.3f}"),
                  _f(r.speedup_vs_baseline, "{:.2f}x"), style=style)
    con.print(t)
    for r in order:
        if r.status in ("skipped", "failed", "rejected") and r.reason:
            con.print(f"  [dim]{r.status}[/] {r.name}: {r.reason}", highlight=False)
    from infertune.tasks.embedding.accuracy_report import console_lines

    for line in console_lines(result):
        con.print(f"  {line}", highlight=False)
    for line in result.decision:
        con.print(line, highlight=False)
    if result.winner is not None and (mix := (result.winner.executed or {}).get("kernels")):
        from infertune.tasks.embedding.kernels import gemm_line

        con.print(f"Winner's weight GEMMs: {gemm_line(mix)} ({mix.get('source')}).", highlight=False)
    if result.winner is not None and (line := peak_line(result.winner)):
        con.print(f"Winner's share of the GPU: {line}.", highlight=False)
    print_search(result, con)
    con.print(f"results: {result.out_dir}/results.json  report: {result.out_dir}/report.html", highlight=False)
    if result.next_command:
        con.print(f"next: [bold]{result.next_command}[/]", highlight=False)


def _card(result: TuneResult) -> str:
    """The answer in one line, the speedup with n and spread, the P99 against the SLO, and the next command."""
    limit, win, base = slo_limit(result), result.winner, result.baseline
    if win is None:
        return no_winner_card(result)
    m, bm = win.measurement, base.measurement if base else None
    sp = win.speedup_vs_baseline
    answer = f"Serve <b>{e(win.name)}</b>: {_f(win.items_per_s)} items/s" + (
        f", <b>{sp:.2f}x</b> the naive baseline" if sp else "")
    facts = []
    if m and bm and bm.items_per_s:
        med = (f", {m.items_per_s_median / bm.items_per_s_median:.2f}x by medians"
               if m.items_per_s_median and bm.items_per_s_median else "")
        lo, hi = m.items_per_s_spread
        blo, bhi = bm.items_per_s_spread
        facts.append(f"Speedup {m.items_per_s / bm.items_per_s:.2f}x by best pass{med}; pass to pass "
                     f"{lo / bhi:.2f}-{hi / blo:.2f}x. {e(win.name)}: n={m.passes} passes, {lo:.1f}-{hi:.1f} items/s; "
                     f"baseline {e(base.name)}: n={bm.passes}, {blo:.1f}-{bhi:.1f} items/s (same run).")
    elif m:
        facts.append(f"n={m.passes} passes, {m.items_per_s_spread[0]:.1f}-{m.items_per_s_spread[1]:.1f} items/s.")
    p99 = decision_p99(win)
    if p99 is not None:
        facts.append(f"P99 batch latency {p99:.1f} ms vs SLO {_f(limit, '{:g}')} ms (the decision's figure: P99 over "
                     f"batches of each batch's median across passes; pooled P99 {_f(win.latency_ms.p99)} ms, "
                     f"n={win.latency_ms.n} batches).")
    a, budget = win.accuracy, result.config.get("accuracy") or {}
    if a.cosine_mean is not None:
        facts.append(f"Mean cosine vs fp32 {a.cosine_mean:.5f} (budget {budget.get('min_cosine_mean', '-')}), "
                     f"min {_f(a.cosine_min, '{:.5f}')} (budget {budget.get('min_cosine_min', '-')}), n={a.n} items.")
    if m and (m.peak_rss_mb or m.peak_gpu_mb):
        mem = (f"peak GPU memory {m.peak_gpu_mb:.0f} MB" if m.peak_gpu_mb
               else f"peak resident memory {m.peak_rss_mb:.0f} MB")
        if bm and bm.peak_rss_mb and not m.peak_gpu_mb:
            mem += f" (baseline {bm.peak_rss_mb:.0f} MB)"
        facts.append(mem[0].upper() + mem[1:] + ".")
    facts += [e(x) for x in result.decision[1:] if "tie margin" in x]
    return card(answer, facts, result.next_command, tone="pass")


def _tables(result: TuneResult) -> str:
    limit, win = slo_limit(result), result.winner.name if result.winner else None
    head = ["#", "candidate", "status", "items/s (best, n)", "range", "vs naive", "P99 ms (SLO)", "P50 ms",
            "peak MB", "cos mean", "cos min", "batch 1-cos", "reason"]
    budget = result.config.get("accuracy") or {}
    rows, classes, cells, more = [], [], [], []
    for n, r in numbered(result):
        m = r.measurement
        p99 = decision_p99(r)
        miss = misses_slo(r, limit)
        cos_miss = r.meets_accuracy is False
        mem = m and (m.peak_gpu_mb or m.peak_rss_mb)
        name = e(r.name) + (' <span class="badge">winner</span>' if r.name == win else "")
        rows.append([str(n), name, e(r.status),
                     f"{_f(r.items_per_s)} (n={m.passes})" if m else (
                         f"{_f(r.probe.get('speed'))} (probe)" if r.probe else "-"),
                     f"{m.items_per_s_spread[0]:.1f}-{m.items_per_s_spread[1]:.1f}" if m else "-",
                     _f(r.speedup_vs_baseline, "{:.2f}x"),
                     (f"&#10007; {p99:.1f}" if miss else _f(p99)) if p99 is not None else "-",
                     _f(r.latency_ms.p50), _f(mem, "{:.0f}") if mem else "-",
                     _f(r.accuracy.cosine_mean, "{:.5f}"), _f(r.accuracy.cosine_min, "{:.5f}"), _moved(r), e(r.reason)])
        classes.append("winner" if r.name == win else r.status)
        cells.append(["", "", "", "", "", "", "miss" if miss else "", "", "", "miss" if cos_miss else "",
                      "miss" if cos_miss else "", "miss" if _moves(r) else "", "l"])
        more.append([str(n), e(r.name), e(r.stage or "-"), _f(r.time_s, "{:.0f}"),
                     _f(m.items_per_s_median) if m else "-",
                     _f(r.latency_ms.p95), _f(r.latency_ms.p99), _f(r.latency_ms.max), str(r.latency_ms.n or "-"),
                     _f(r.accuracy.topk_overlap, "{:.3f}"), _f(r.prepare_s), _f(m.peak_rss_mb, "{:.0f}") if m else "-",
                     _f(m.peak_gpu_mb, "{:.0f}") if m else "-", e(r.why_tried)])
    main = table(head, rows, classes, left=3, cell_classes=cells)
    note = (f'<p class="note">P99 (SLO) is the figure the decision checks against the SLO of {_f(limit, "{:g}")} ms '
            "(&#10007;: over it); red cosines are under the accuracy budget "
            f"(mean {budget.get('min_cosine_mean', '-')}, "
            f"min {budget.get('min_cosine_min', '-')}); batch 1-cos is the worst a sampled text's vector moved between "
            "embedded alone and inside mixed batches (neighbours, positions, padding), red over the tolerance; "
            "peak MB is the worker's peak resident memory (GPU memory on a GPU).</p>")
    extra = table(["#", "candidate", "stage", "time s", "items/s median", "P95 ms", "pooled P99 ms", "max ms",
                   "batches n", "top-10", "prepare s", "peak RSS MB", "peak GPU MB", "why tried"], more, left=2)
    return main + note + folded("More columns: stage, cost, median, pooled P99, max, top-10, memory, why tried", extra)


def _moves(r) -> bool:
    b = r.accuracy.batch_invariance
    return b is not None and bool(b.moved)


def _moved(r) -> str:
    b = r.accuracy.batch_invariance
    return "-" if b is None else f"{b.worst_deviation:.1e}"


def _peak_table(result: TuneResult) -> str:
    """Each measured GPU candidate's achieved Linear TFLOP/s and its share of the GPU's dense peak for its precision
    (tasks/embedding/peak.py); "" when no candidate has one (a CPU run)."""
    win = result.winner.name if result.winner else None
    rows, classes = [], []
    for n, r in numbered(result):
        p = r.peak
        if p is None:
            continue
        unit = " " + UNIT.get(p.precision or "", "TFLOP/s")
        rows.append([str(n), e(r.name), e(p.precision), _f(p.linear_tflops, "{:,.1f}" + unit),
                     _f(p.peak_tflops, "{:,.1f}" + unit),
                     _f(p.fraction * 100 if p.fraction is not None else None, "{:.1f}%"),
                     _f(p.flops_per_token / 1e6 if p.flops_per_token else None, "{:,.1f}"),
                     _f(p.tokens_per_s, "{:,.0f}"), e(p.note or "")])
        classes.append("winner" if r.name == win else r.status)
    if not rows:
        return ""
    gpu = next((r.peak.gpu or r.peak.gpu_reported for _, r in numbered(result) if r.peak), "")
    head = ["#", "candidate", "precision", "Linear achieved", "GPU dense peak", "% of peak", "MFLOP/token",
            "real tokens/s (best pass)", "note"]
    note = ('<p class="note">Achieved = Linear-layer FLOPs per token (2 x the Linear weights, from config.json) x real '
            "tokens/s of the candidate's best pass (padding not counted); the peak is the dense figure of "
            f"{e(gpu)} for the candidate's precision (mixed: its quantized kind) from the GPU spec table. Attention "
            "scores, norms and pooling are not counted, so the share is a floor.</p>")
    left_note = [[""] * (len(head) - 1) + ["l"] for _ in rows]
    return f'<h2 id="peak">Share of the GPU\'s peak</h2>{table(head, rows, classes, 3, left_note)}{note}'


def _accuracy_sections(result: TuneResult) -> str:
    """Per length bucket (plot, then a table per candidate) and the user's task metrics, after the candidates."""
    from infertune.tasks.embedding.accuracy_report import bucket_svg, bucket_tables, task_table

    out = ""
    if (tasks := task_table(result)):
        out += f"<h2>Task metrics</h2>{tasks}"
    svg, tables = bucket_svg(result), bucket_tables(result)
    if svg or tables:
        out += f"<h2>Accuracy per length bucket</h2>{svg or ''}{tables}"
    return out


def _ladder_section(result: TuneResult) -> str:
    """The precision ladder (tasks/embedding/ladder.py): the GEMMs timed at the model's shapes, what they decided."""
    lad = result.ladder
    if not lad:
        return ""
    if lad.get("status") != "measured":
        return f'<h2 id="ladder">Precision ladder</h2><p>{e(lad.get("status"))}: {e(lad.get("reason", ""))}</p>'
    base, quants = lad.get("base", ""), [p for p in lad.get("precisions", []) if p != lad.get("base")]
    shares = {(s["k"], s["n"]): s for s in lad.get("shapes", [])}
    rows = []
    for c in lad.get("cells", []):
        s = shares.get((c["k"], c["n"]), {})
        rows.append([f"{c['m']:,} x {c['k']} x {c['n']}", str(s.get("layers", "-")), _f(s.get("flop_share"), "{:.0%}"),
                     _f(c["tflops"].get(base), "{:.2f}")]
                    + [f"{_f(c['tflops'].get(q), '{:.2f}')} ({_f(c.get('ratio', {}).get(q), '{:.2f}x')})"
                       if q in c["tflops"] else e(c.get("errors", {}).get(q, "-")) for q in quants])
    head = ["M x K x N (tokens x in x out)", "layers", "FLOP share", f"{e(base)} TFLOP/s"] + [
        f"{e(q)} TFLOP/s (vs {e(base)})" for q in quants]
    figs = ", ".join(f"{e(k)} {_f(v, '{:.2f}x')}" for k, v in lad.get("expected_speedup", {}).items())
    ops = "; ".join(f"{e(p)}: {e(op)}" for p, op in lad.get("ops", {}).items())
    intro = (f"GEMMs timed on {e(lad.get('device_name'))} (torch {e(lad.get('torch'))}) before the quantized "
             f"candidates, {_f(lad.get('seconds'), '{:.1f}')} s ({ops}; TFLOP/s: median of each cell's samples). "
             f"Expected speedup over {e(base)} at {lad.get('decision_tokens', 0):,} tokens, the model's Linear work "
             f"weighted by FLOPs: <b>{figs}</b>; under {lad.get('min_speedup')}x a quantized option is skipped.")
    dec = "".join(f"<li>{e(d['candidate'])}: {e(d['action'])}: {e(d['why'])}</li>" for d in lad.get("decisions", []))
    return (f'<h2 id="ladder">Precision ladder</h2><p>{intro}</p>'
            f"{table(head, rows)}{f'<ul>{dec}</ul>' if dec else ''}")


def _predicted_vs_measured(result: TuneResult) -> str:
    from infertune.tasks.embedding.plan_report import predicted_section

    return predicted_section(result)


def _kernels_section(result: TuneResult) -> str:
    """The kernels that ran, per candidate with a profile: its weight GEMMs by data type, the attention GEMMs,
    the weight bytes and the kernels' names (tasks/embedding/kernels.py judges the quantized ones)."""
    from infertune.tasks.embedding.kernels import gemm_line

    rows, seen = [], set()
    for n, r in numbered(result):
        mix = (r.executed or {}).get("kernels")
        if not mix or r.status in ("skipped", "failed"):
            continue
        key = json.dumps(mix, sort_keys=True) + r.name.rsplit("/", 1)[0]
        if key in seen:  # a batching variant of an engine already listed
            continue
        seen.add(key)
        att = ", ".join(f"{v} {k}" for k, v in (mix.get("attention") or {}).items()) or "-"
        rows.append([str(n), e(r.name), e(gemm_line(mix)), e(att), _f(mix.get("weight_bytes", 0) / 2**20, "{:.1f}"),
                     e(mix.get("source", "-")),
                     # CUDA kernel names run to 150 characters with no space: they wrap anywhere, not the page
                     f'<div class="names">{e(", ".join(mix.get("examples", [])) or mix.get("error", "-"))}</div>'])
    if not rows:
        return ""
    head = ["#", "candidate", "GEMMs (weights)", "attention GEMMs", "weights MB", "source", "kernels"]
    return ('<h2 id="kernels">Kernels that ran</h2><p class="note">One profiled batch per engine: the weight GEMMs '
            "by the data type they computed in. A quantized candidate whose GEMMs mostly did not run its kind is "
            f"rejected.</p>{table(head, rows, left=2)}")


def write_report(result: TuneResult, path: Path) -> Path:
    plots = tune_plots(result)
    w = result.workload
    sections = "".join(f"<h2>{title}</h2>{plots[k]}" for k, title in (
        ("pareto", "Pareto front: speed vs accuracy"), ("latency", "Latency per batch vs the SLO"),
        ("memory", "Memory"), ("sensitivity", "Per-layer quantization sensitivity"),
        ("lengths", "Workload length histogram")) if k in plots)
    body = f"""<h1>infertune tune: {e(result.model)}</h1>
{_card(result)}
<h2>Decision</h2><p>{'<br>'.join(e(x) for x in result.decision)}</p>
<h2>Candidates</h2>{_tables(result)}
{_kernels_section(result)}
{_peak_table(result)}
{_predicted_vs_measured(result)}
{_accuracy_sections(result)}
{_ladder_section(result)}
{sections}
<h2>Search</h2><p>{'<br>'.join(e(x) for x in search_lines(result))}</p>
<h2>Workload</h2><p>{e(w.source) if w else ''}: {w.n_items if w else 0} items, eval {w.n_eval if w else 0},
calibration {w.n_calibration if w else 0}; tokens p50 {w.tokens_p50 if w else 0:.0f}, p90 {w.tokens_p90 if w else 0:.0f},
p99 {w.tokens_p99 if w else 0:.0f}, max {w.tokens_max if w else 0}; {w.over_limit if w else 0} over the model limit (truncated).</p>
<h2>Environment</h2><details><summary>fingerprint</summary><pre>{e(result.environment.model_dump_json(indent=2))}</pre></details>
<h2>Config</h2><details><summary>config</summary><pre>{e(json.dumps(result.config, indent=2))}</pre></details>"""  # noqa: E501
    path.write_text(document(f"infertune tune: {result.model}", body), encoding="utf-8")
    return path
