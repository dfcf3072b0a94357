"""Human output of a served causal-LM tune: per candidate the checkpoint, the vLLM arguments, the accuracy through
the API, TTFT/TPOT P50/P99 where it was measured, the goodput at the SLO, the stage reached and why it was
dropped; and, where a quantized checkpoint loses to the unquantized one on this host, a sentence with both
figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infertune.plots import fmt as _f
from infertune.results import CandidateResult, TuneResult


def _ms(lat, q: str) -> str:
    v = getattr(lat, q, None) if lat else None
    return "-" if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _ckpt(r: CandidateResult) -> str:
    ck = r.served.get("checkpoint") or r.executed.get("checkpoint") or ""
    return Path(ck).name if ck else r.candidate.get("checkpoint", "")


HEAD = ["candidate", "status", "stage", "checkpoint", "vLLM arguments", "goodput req/s", "req/s at c",
        "TTFT p50/p99 ms", "TPOT p50/p99 ms", "ppl Δ", "top-1", "KL nats", "greedy (exact)", "start s", "vs defaults"]


def rows(result: TuneResult) -> list[list[str]]:
    out = []
    for r in sorted(result.candidates, key=lambda r: (-(r.goodput_rps or 0), -(r.requests_per_s or 0))):
        a = r.accuracy
        rps = r.requests_per_s or (r.probe or {}).get("speed")
        out.append([
            r.name, r.status, r.stage or "-", _ckpt(r), " ".join(r.candidate.get("args") or ()) or "(defaults)",
            _f(r.goodput_rps, "{:.3f}"), _f(rps, "{:.3f}"), f"{_ms(r.ttft_ms, 'p50')} / {_ms(r.ttft_ms, 'p99')}",
            f"{_ms(r.tpot_ms, 'p50')} / {_ms(r.tpot_ms, 'p99')}",
            "-" if a.ppl_delta_rel is None else f"{a.ppl_delta_rel * 100:+.2f}%", _f(a.top1_agreement, "{:.4f}"),
            _f(a.kl_mean, "{:.1e}"),
            "-" if a.greedy_agreement is None else f"{a.greedy_agreement:.2f} ({a.greedy_exact:.2f})",
            _f(r.executed.get("load_s"), "{:.0f}"), _f(r.speedup_vs_baseline, "{:.2f}x")])
    return out


def quantized_verdicts(result: TuneResult) -> list[str]:
    """For each quantized checkpoint with default arguments, against the unquantized one in the same run: the probe
    (closed-loop requests/s at the workload's concurrency, measured alike for every candidate), the goodput at the
    SLO where both got that far, and the accuracy, in figures."""
    ref = next((r for r in result.candidates if r.name == result.reference), None)
    if ref is None:
        return []
    c = result.lm.get("concurrency")
    out = []
    for r in result.candidates:
        if r.candidate.get("checkpoint") in (None, "bf16") or r.candidate.get("args"):
            continue
        if r.status in ("skipped", "failed"):
            out.append(f"{r.name}: {r.status}: {r.reason}")
            continue
        a = r.accuracy
        acc = (f"perplexity {a.ppl_delta_rel * 100:+.2f}%, top-1 {a.top1_agreement:.4f}, KL {a.kl_mean:.3f}, greedy "
               f"{a.greedy_agreement:.2f}" if a.ppl_delta_rel is not None else "accuracy not measured")
        s, sr = (r.probe or {}).get("speed"), (ref.probe or {}).get("speed")
        parts = []
        if s and sr:
            parts.append(f"{s:.3f} against {sr:.3f} req/s at concurrency {c} ({s / sr:.2f}x)")
        if r.goodput_rps is not None and ref.goodput_rps is not None:
            parts.append(f"goodput {r.goodput_rps:.3f} against {ref.goodput_rps:.3f} req/s at the SLO")
        faster = bool(s and sr and s > sr)
        within = r.meets_accuracy is not False
        verdict = ("wins on speed and holds the accuracy budget" if faster and within else
                   "is faster but over the accuracy budget" if faster else
                   "LOSES on speed" + ("" if within else " and on accuracy"))
        out.append(f"{r.name} {verdict} against the unquantized checkpoint on this host (same run): "
                   + "; ".join(parts + [acc]) + (f" ({r.reason})" if r.status == "rejected" and r.reason else ""))
    return out


def print_served_summary(result: TuneResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=240)
    t = Table(title=f"infertune tune: {result.model} served by vLLM ({result.config.get('device')}; "
                    f"{result.lm.get('slo')}; concurrency {result.lm.get('concurrency')})")
    for col in HEAD:
        t.add_column(col, justify="left" if col in ("candidate", "status", "stage", "checkpoint", "vLLM arguments")
                     else "right")
    win = result.winner.name if result.winner else None
    for row in rows(result):
        t.add_row(*row, style="bold green" if row[0] == win else ("dim" if row[1] in ("skipped", "failed") else None))
    con.print(t)
    for r in result.candidates:
        if r.status in ("skipped", "failed", "rejected") and r.reason:
            con.print(f"  [dim]{r.status}[/] {r.name}: {r.reason}", highlight=False)
    for line in quantized_verdicts(result):
        con.print(f"  {line}", highlight=False, markup=False)


def _card(result: TuneResult) -> str:
    from infertune.page import card, e, no_winner_card

    win = result.winner
    if win is None:
        return no_winner_card(result)
    sp = win.speedup_vs_baseline
    answer = f"Serve <b>{e(win.name)}</b>" + (f": <b>{sp:.2f}x</b> the goodput of vLLM's defaults on the unquantized "
                                             "model" if sp else "")
    return card(answer, [e(x) for x in result.decision], result.next_command, tone="pass")


def write_served_report(result: TuneResult, path: Path) -> Path:
    from infertune.page import document, e, table
    from infertune.tuning.summary import search_lines

    win = result.winner.name if result.winner else None
    body = rows(result)
    reasons = {r.name: r.reason or r.dropped or "" for r in result.candidates}
    cells = [[e(x) for x in row] + [e(reasons[row[0]])] for row in body]
    classes = ["winner" if row[0] == win else row[1] for row in body]
    verdicts = quantized_verdicts(result)
    doc = f"""<h1>infertune tune: {e(result.model)} served by vLLM</h1>
{_card(result)}
<h2>Decision</h2><p>{'<br>'.join(e(x) for x in result.decision)}</p>
<h2>Quantized checkpoints on this host</h2><p>{'<br>'.join(e(x) for x in verdicts) or 'none measured'}</p>
<h2>Candidates</h2>{table([e(h) for h in HEAD + ['why dropped / rejected']], cells, classes, left=5)}
<h2>Search</h2><p>{'<br>'.join(e(x) for x in search_lines(result))}</p>
<h2>Setup</h2><pre>{e(json.dumps(result.lm, indent=2))}</pre>
<h2>Bench points</h2><details><summary>every point bench measured, per candidate</summary><pre>{e(json.dumps(
        {r.name: r.served for r in result.candidates if r.served}, indent=1))}</pre></details>
<h2>Environment</h2><details><summary>fingerprint</summary><pre>{e(result.environment.model_dump_json(indent=2))}</pre></details>
<h2>Config</h2><details><summary>config</summary><pre>{e(json.dumps(result.config, indent=2))}</pre></details>"""
    path.write_text(document(f"infertune tune: {result.model}", doc), encoding="utf-8")
    return path


__all__ = ["print_served_summary", "write_served_report", "quantized_verdicts", "rows"]


def load_line(got: dict[str, Any], slo_text: str) -> str:
    """One bench stage of a served candidate in words: the searched rate, a confirm point or a closed-loop point,
    with its TTFT and TPOT P99s."""
    stage = got.get("stage") or "point"
    if stage == "search":
        pt = got.get("at_max") or got.get("lowest") or {}
        head = (f"{got['max_load_rps']:.3f} req/s meets {slo_text}" if got.get("met") else f"no rate met {slo_text}")
    else:
        pt, head = got, f"{got.get('requests_per_s') or 0:.3f} req/s"
        if stage == "confirm":
            head = f"confirm at {got.get('rate')} req/s: {'held' if got.get('slo_pass') else 'did not hold'}, " + head
    t, p = pt.get("ttft_ms") or {}, pt.get("tpot_ms") or {}
    return (f"{head} (TTFT P99 {t.get('p99') or 0:.0f} ms, TPOT P99 {p.get('p99') or 0:.1f} ms; "
            f"{got.get('points', 1)} bench points, {got.get('wall_s')} s)")
