"""What a person reads after `infertune bench`: a console table, bench.json (the contract),
bench.csv (one row per point) and bench.html (a headline card: max throughput, knee, SLO answer, next
command; a table of at most 12 columns with the rest folded; plots from bench/plots.py; works offline)."""

from __future__ import annotations

import csv
import html
import math
from pathlib import Path

from infertune.bench.results import BenchResult, Point
from infertune.page import card, document, folded, table

NA = "n/a"


def fmt(x, spec: str = "{:.1f}") -> str:
    """A figure for a person: "n/a" when it was not measured (None, or NaN: e.g. the latency of a point
    that completed no request), else `spec`-formatted."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NA
    return spec.format(x)


def valid_cell(p: Point) -> str:
    """The "valid" column: an error-laden point is not valid, and says why in two words."""
    return "yes" if p.valid else "NO: errors" if p.error_laden else "NO"


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
        row = [p.label, valid_cell(p), str(p.n), fmt(p.achieved_rps), fmt(p.errors.rate * 100),
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
            what = "ERROR-LADEN (not valid)" if p.error_laden else "INVALID"
            con.print(f"[bold red]{what} {p.label}:[/] {p.invalid_reason}", highlight=False)
        if p.warning:
            con.print(f"[yellow]caveat {p.label}:[/] {p.warning}", highlight=False)
    if result.slo:
        s = result.slo
        if s.met:
            con.print(f"[bold green]SLO {s.target}: max {s.over} = {s.max_load:.4g}[/] (bracket {s.bracket}, "
                      f"confirmed over {s.repeats} runs)", highlight=False)
        else:
            con.print(f"[bold red]SLO {s.target} not met at any {s.over} tried[/] ({len(s.steps)} steps)",
                      highlight=False)
        line = confirm_line(result)
        if line:
            con.print(line, style="bold green" if s.sustainable_load else "bold red", highlight=False)
    if result.knee:
        k = result.knee
        con.print(f"knee: {k.over} {k.load:g} ({k.rule})", highlight=False)
        if k.recommended_max_num_seqs:
            con.print(f"recommended vLLM --max-num-seqs {k.recommended_max_num_seqs}: {k.derivation}", highlight=False)
    for tel in result.telemetry:
        con.print(f"telemetry {tel.source}: {len(tel.series)} series x {len(tel.t)} samples every {tel.interval_s:g} s"
                  + (f" ({len(tel.errors)} scrape errors, first: {tel.errors[0]})" if tel.errors else ""),
                  highlight=False)
    best = best_point(result)
    if best:
        con.print(f"max throughput: {best.achieved_rps:.1f} req/s at {best.label} (n={best.n} requests, E2E P50 "
                  f"{fmt(best.latency_ms.p50)} ms, P99 {fmt(best.latency_ms.p99)} ms)", highlight=False)
        if best.of_ceiling is not None and result.ceiling:
            per = int(result.config.get("inputs_per_request") or 1)
            con.print(f"served {best.achieved_rps * per:,.0f} items/s: {best.of_ceiling:.0%} of the forward-only "
                      f"ceiling ({result.ceiling['items_per_s']:,.0f} items/s)", highlight=False)
    elif any(p.error_laden for p in result.points):
        con.print(f"[bold red]max throughput: none to quote[/]: {no_throughput(result)}", highlight=False)
    if result.out_dir:
        con.print(f"wrote {result.out_dir}/bench.json, bench.html, bench.csv", highlight=False)
    nxt = next_command(result)
    if nxt:
        con.print(f"next: [bold]{nxt}[/]", highlight=False)


def _row(p: Point) -> dict:
    r = {"label": p.label, "phase": p.phase, "concurrency": p.offered.concurrency, "rate": p.offered.rate,
         "arrivals": p.offered.arrivals, "valid": p.valid, "error_laden": p.error_laden, "n": p.n, "ok": p.ok,
         "achieved_rps": p.achieved_rps, "of_ceiling": p.of_ceiling,
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


def best_point(result: BenchResult) -> Point | None:
    """The valid point with the highest completed req/s (invalid points measured the client, not the server).
    With none valid, the best client-invalid one; an error-laden point never (its ok req/s is not the server's
    throughput: a loading server answers 503 in microseconds)."""
    pts = ([p for p in result.points if p.valid and p.ok]
           or [p for p in result.points if p.ok and not p.error_laden])
    return max(pts, key=lambda p: p.achieved_rps) if pts else None


def no_throughput(result: BenchResult) -> str:
    """Why no max throughput is quoted: every point that completed requests (if any did) was error-laden."""
    bad = [p for p in result.points if p.error_laden]
    kinds: dict[str, int] = {}
    for p in bad:
        for k, c in p.errors.by_kind.items():
            kinds[k] = kinds.get(k, 0) + c
    what = ", ".join(f"{c:,} x {k}" for k, c in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return (f"{len(bad)} of {len(result.points)} points had more than the error budget of failed requests "
            f"({what}); first: {bad[0].invalid_reason}" if bad else "no point completed a request")


def confirm_line(result: BenchResult) -> str | None:
    """The confirm stage in one line: the sustainable load beside the short points' answer."""
    s = result.slo
    c = s.confirm if s else None
    if s is None or c is None:
        return None
    short = f"short {result.config.get('duration')} s points: {fmt(s.max_load, '{:.4g}')}"
    if c.met:
        st = c.steps[-1]
        return (f"sustainable {s.over} = {c.load:.4g} ({short}): a {c.duration_s:g} s point met {s.target} "
                f"there (P50 {fmt(st.p50_ms)} ms, P99 {fmt(st.p99_ms)} ms, {st.achieved_rps:.1f} of "
                f"{st.sent_rps:.1f} req/s completed); {len(c.steps)} long point(s)")
    tried = ", ".join(f"{x.load:.4g} (P99 {fmt(x.p99_ms)} ms)" for x in c.steps)
    return (f"no sustainable {s.over} found ({short}): {c.duration_s:g} s points at {tried} all missed "
            f"{s.target}")


def _cmd(result: BenchResult, *flags: str) -> str:
    t = result.target
    api = t.get("api") or result.config.get("api")
    return " ".join(["infertune bench", str(t.get("url")), *([f"--api {api}"] if api and api != "embeddings" else []),
                     *flags])


def next_command(result: BenchResult) -> str | None:
    """What to run next: validate at the SLO's answer; a sweep after a single load point; an SLO search after
    a sweep (its bound: the P99 at the knee, rounded up)."""
    url, s = result.target.get("url"), result.slo
    if s and s.confirm and s.over == "rate":
        if s.sustainable_load:
            return f"infertune validate {url} --peak {s.sustainable_load:.4g} --slo '{s.target}'"
        return _cmd(result, "--sweep")
    if s and s.met and s.over == "rate" and s.max_load:
        return f"infertune validate {url} --peak {s.max_load:.4g} --slo '{s.target}'"
    if s and s.met:
        return f"infertune validate {url} --slo '{s.target}'"
    if s:
        return _cmd(result, "--sweep")
    if len([p for p in result.points if p.ok]) < 2:
        return _cmd(result, "--sweep")
    k = result.knee
    at = next((p for p in result.points if k and getattr(p.offered, k.over) == k.load), None) or best_point(result)
    p99 = at.latency_ms.p99 if at else None
    bound = f"{math.ceil(p99 * 1.2 / 10) * 10:g}" if p99 and p99 == p99 else "200"
    return _cmd(result, f"--slo 'p99_e2e_ms<={bound}'")


def _card(result: BenchResult) -> str:
    e = html.escape
    best, facts, tone = best_point(result), [], ""
    if best:
        per = result.config.get("inputs_per_request") or 1
        items = f" = {best.achieved_rps * per:.1f} inputs/s ({per} per request)" if per > 1 else ""
        tok = f", {best.output_tokens_per_s:.1f} output tok/s" if best.output_tokens_per_s else ""
        answer = (f"Max throughput <b>{best.achieved_rps:.1f} req/s</b>{items}{tok} at {e(best.label)}: E2E P50 "
                  f"{fmt(best.latency_ms.p50)} ms, P99 {fmt(best.latency_ms.p99)} ms (n={best.n} requests, "
                  f"{best.window_s:g} s window)")
    elif any(p.error_laden for p in result.points):
        answer, tone = f"No throughput to quote: {e(no_throughput(result))}", "fail"
    else:
        answer, tone = "No request completed at any load point", "fail"
    n_ok = len([p for p in result.points if p.ok])
    k = result.knee
    if k:
        facts.append(f"Knee: {e(k.over)} {k.load:g} ({e(k.rule)})"
                     + (f"; vLLM <code>--max-num-seqs {k.recommended_max_num_seqs}</code>" if k.recommended_max_num_seqs
                        else ""))
    else:
        facts.append("Knee: " + ("not measured: one load point (a sweep finds it)" if n_ok < 2 else
                                 "none found: throughput still rising at the highest load"))
    s = result.slo
    if s and s.met:
        tone = tone or "pass"
        facts.append(f"SLO <b>{e(s.target)}</b>: met up to {e(s.over)} <b>{s.max_load:.4g}</b> (bracket "
                     f"{' - '.join(fmt(b, '{:.4g}') for b in s.bracket)}, confirmed over {s.repeats} runs)"
                     + (f"; {e(s.noise_note)}" if s.noise_note else ""))
    elif s:
        tone = "fail"
        facts.append(f"SLO <b>{e(s.target)}</b>: <b>not met</b> at any {e(s.over)} tried ({len(s.steps)} steps)")
    else:
        facts.append("SLO: none given (<code>--slo 'p99_e2e_ms&lt;=200'</code> "
                     "searches the highest load that meets it)")
    line = confirm_line(result)
    if line:
        facts.append(f"<b>{e(line)}</b>" if s and s.sustainable_load
                     else f"<span class=fail>{e(line)}</span>")
    laden = [p for p in result.points if p.error_laden]
    if laden:
        tone = "warn" if tone != "fail" else tone
        facts.append(f"<span class=fail>{len(laden)} of {len(result.points)} load points error-laden</span> "
                     f"(not valid, never quoted): {e(laden[0].invalid_reason)}")
    bad = [p for p in result.points if not p.valid and not p.error_laden]
    if bad:
        tone = "warn" if tone != "fail" else tone
        facts.append(f"<span class=fail>{len(bad)} of {len(result.points)} load points invalid</span> (the client "
                     f"could not keep up): {e(bad[0].invalid_reason)}")
    facts += [f"<span class=warn>{e(w)}</span>" for w in result.warnings]
    return card(answer, facts, next_command(result), tone=tone)


def _table(result: BenchResult) -> str:
    """At most 12 columns; every figure of every point (the CSV's columns) is folded below it."""
    stream = any(p.ttft_ms for p in result.points)
    head = ["load", "valid", "n", "ok req/s", "err %", "E2E P50 ms", "E2E P99 ms"]
    head += ["TTFT P50 ms", "ITL P50 ms", "out tok/s"] if stream else ["E2E P90 ms", "E2E P99.9 ms", "goodput req/s"]
    head += ["client lag P99 ms", "SLO"]
    rows, classes = [], []
    for p in result.points:
        lat = p.latency_ms
        row = [p.label, valid_cell(p), str(p.n), fmt(p.achieved_rps), fmt(p.errors.rate * 100),
               fmt(lat.p50), fmt(lat.p99)]
        row += ([fmt(p.ttft_ms and p.ttft_ms.p50), fmt(p.itl_ms and p.itl_ms.p50), fmt(p.output_tokens_per_s)]
                if stream else [fmt(lat.p90), fmt(lat.p999), fmt(p.goodput_rps)])
        row += [fmt(p.client.lag_ms.p99), "-" if p.slo_pass is None else "pass" if p.slo_pass else "fail"]
        rows.append([html.escape(c) for c in row])
        classes.append("" if p.valid else "bad")
    full_rows = [[html.escape(fmt(v, "{}")) for v in _row(p).values()] for p in result.points]
    head_full = [html.escape(k) for k in _row(result.points[0])] if result.points else []
    return (table([html.escape(h) for h in head], rows, classes) +
            folded(f"All {len(head_full)} columns (as in bench.csv)", table(head_full, full_rows, left=3)))


def write_html(result: BenchResult, path: Path) -> None:
    e = html.escape
    try:
        from infertune.bench.plots import bench_plots

        plots = bench_plots(result)
    except ImportError:
        plots = [("plots", "<p>matplotlib is not installed: pip install 'infertune[report]'</p>")]
    notes = []
    if result.knee and result.knee.recommended_max_num_seqs:
        notes.append(f"Recommended vLLM <code>--max-num-seqs {result.knee.recommended_max_num_seqs}</code>: "
                     f"{e(result.knee.derivation)}")
    if result.slo and result.slo.steps:
        notes.append(folded(f"SLO search: {len(result.slo.steps)} steps", "<br>".join(e(x) for x in result.slo.steps)))
    if result.slo and result.slo.confirm:
        notes.append(folded(f"SLO confirm: {len(result.slo.confirm.steps)} long point(s)", "<br>".join(
            e(f"{x.load:.4g}: {'pass' if x.passed else 'FAIL'} over {x.window_s:g} s ({'; '.join(x.notes)})")
            for x in result.slo.confirm.steps)))
    for p in result.points:
        if p.warning:
            notes.append(f"<span class=warn>caveat {e(p.label)}: {e(p.warning)}</span>")
    for tel in result.telemetry:
        if tel.errors:
            notes.append(f"telemetry {e(tel.source)}: {len(tel.errors)} scrape errors, first: {e(tel.errors[0])}")
    body = "".join(f"<h2>{t}</h2>{s}" for t, s in plots)
    title = f"infertune bench: {result.target.get('url')} ({result.target.get('api')})"
    doc = f"""<h1>{e(title)}</h1>
{_card(result)}
<p class="note">Latency is measured from each request's <em>scheduled</em> send time; n = requests in the measured
window (warm-up excluded). Started {e(str(result.started))}, wall {e(str(result.wall_s))} s. {e('; '.join(result.notes))}</p>
<h2>Load points</h2>{_table(result)}
{''.join(f'<p>{n}</p>' for n in notes)}
{body}
<h2>Environment</h2>{folded('fingerprint', f'<pre>{e(result.environment.model_dump_json(indent=1))}</pre>')}"""  # noqa: E501
    path.write_text(document(title, doc), encoding="utf-8")


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
