"""What a person reads after `infertune validate`: a console verdict table, validate.json (the contract)
and validate.html (a summary card that says PASSED only when every drill passed, the soak met the SLO and
the peak was confirmed or given; a verdict per drill with its evidence; time-series plots as inline SVG)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from infertune.bench.plots import slo_bound_ms
from infertune.bench.report import fmt
from infertune.page import card, document, folded, table
from infertune.plots import figure_svg, log_axis
from infertune.validate.config import Drill, ValidateResult


def print_summary(result: ValidateResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=200)
    sus = result.peak.get("sustainable_rps")
    also = f"; sustainable {sus} req/s, soaked there" if sus else ""
    t = Table(title=f"infertune validate: {result.target.get('url')} (peak {result.peak.get('rps')} req/s, "
                    f"{result.peak.get('source')}{also})")
    for c in ("drill", "verdict", "evidence"):
        t.add_column(c)
    for d in result.drills:
        verdict = "skipped" if d.passed is None else "PASS" if d.passed else "FAIL"
        t.add_row(d.name, verdict, d.reason, style=None if d.passed is not False else "bold red")
    con.print(t)
    sus = sustainable_line(result)
    if sus:
        con.print(sus, highlight=False)
    la = result.load_average
    con.print(f"load average (1/5/15 min) at start {la.get('start')}, at end {la.get('end')} on "
              f"{result.environment.cpu_cores_logical} CPU(s); wall {result.wall_s} s", highlight=False)
    caveats = slo_caveats(result)
    if result.passed and not caveats:
        con.print("[bold green]all drills passed[/]")
    elif result.passed:
        con.print("[bold red]SLO NOT MET:[/] every drill passed its own rule, but " + "; and ".join(caveats),
                  highlight=False)
    else:
        con.print("[bold red]validation failed[/]" + (": also " + "; and ".join(caveats) if caveats else ""),
                  highlight=False)
    if result.out_dir:
        con.print(f"wrote {result.out_dir}/validate.json, validate.html", highlight=False)


_COLORS = {"ok": "tab:green", "429": "tab:orange", "503 stalled": "tab:purple"}


def _plot(d: Drill, bound: float | None = None) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = d.series
    if d.name == "soak" and s.get("window_t_s"):
        fig, axes = plt.subplots(3, 1, figsize=(8, 6.5), sharex=True)
        axes[0].plot(s["window_t_s"], s["window_p99_ms"], "-o", ms=3, label="P99")
        axes[0].plot(s["window_t_s"], s["window_p50_ms"], "-s", ms=3, label="P50")
        if bound is not None:
            axes[0].axhline(bound, color="#cf222e", ls=":", label=f"SLO {bound:g} ms")
        ys = [y for y in s["window_p99_ms"] + s["window_p50_ms"] if y]
        if ys and max(ys) > 20 * min(ys):
            log_axis(axes[0], "y")
        axes[0].set_ylabel("latency ms")
        axes[0].legend(fontsize=7)
        axes[0].set_title(f"soak: latency per {d.evidence.get('window_s')} s window", fontsize=9, loc="left")
        axes[1].plot(s["t_s"], s["rss_mb"], lw=1)
        fit = d.evidence.get("rss") or {}
        if fit.get("slope_mb_per_h") is not None:
            t0, t1 = fit["fit_from_s"], fit["fit_to_s"]
            y0 = fit["rss_fit_start_mb"]
            axes[1].plot([t0, t1], [y0, y0 + fit["slope_mb_per_h"] * (t1 - t0) / 3600], "r--",
                         label=f"fit {fit['slope_mb_per_h']} MB/h")
            axes[1].legend(fontsize=7)
        axes[1].set_ylabel("RSS MB")
        axes[2].plot(s["t_s"], s["queue_depth"], lw=1)
        axes[2].set_ylabel("queue depth")
        axes[2].set_xlabel("seconds since the soak started")
        return figure_svg(fig)
    if d.name == "long-tail" and s.get("buckets"):
        fig, ax = plt.subplots(figsize=(8, 3.6))
        for k, b in s["buckets"].items():
            if any(v is not None for v in b["p99"]):
                ax.plot(b["rate"], b["p99"], "-o", ms=4, label=f"{k} P99")
        ax.set_xlabel("offered req/s (all buckets)")
        ax.set_ylabel("ms")
        log_axis(ax, "y")
        ax.legend(fontsize=7)
        ax.set_title("long tail: P99 per length bucket vs rate", fontsize=9, loc="left")
        return figure_svg(fig)
    if s.get("sent_s"):
        fig, ax = plt.subplots(figsize=(8, 3.6))
        kinds = sorted(set(s["outcome"]))
        for k in kinds:
            xs = [x for x, o in zip(s["sent_s"], s["outcome"], strict=True) if o == k]
            ys = [y for y, o in zip(s["latency_ms"], s["outcome"], strict=True) if o == k]
            ax.scatter(xs, ys, s=4, label=f"{k} ({len(xs)})", color=_COLORS.get(k, "tab:red"))
        ax.axvline(0, color="grey", ls=":", label=s.get("t_ref"))
        log_axis(ax, "y")
        ax.set_xlabel(f"request send time, s from the {s.get('t_ref')}")
        ax.set_ylabel("latency ms")
        ax.legend(fontsize=7, markerscale=3)
        if s.get("queue_depth"):
            ax2 = ax.twinx()
            ax2.plot(s["queue_t_s"], s["queue_depth"], color="black", lw=0.8)
            ax2.set_ylabel("server queue depth")
        ax.set_title(f"{d.name}: every request", fontsize=9, loc="left")
        return figure_svg(fig)
    return None


def _verdict_word(d: Drill) -> str:
    return "skipped" if d.passed is None else "PASS" if d.passed else "FAIL"


def _cls(d: Drill) -> str:
    return "skip" if d.passed is None else "pass" if d.passed else "fail"


def slo_caveats(result: ValidateResult) -> list[str]:
    """What the drills' own rules may not catch, read from the recorded figures: a soak whose P99 breaks
    the SLO, and a peak that the SLO search never confirmed."""
    out = []
    slo = str(result.peak.get("slo") or result.config.get("slo") or "")
    bound = slo_bound_ms(slo)
    soak = next((d for d in result.drills if d.name == "soak" and d.passed is not None), None)
    p99 = ((soak.evidence.get("latency_ms") or {}).get("p99") if soak else None)
    if bound is not None and p99 is not None and p99 > bound:
        out.append(f"the soak's P99 {p99:.1f} ms breaks the SLO {slo} (at {soak.evidence.get('rate_rps')} req/s, "
                   f"n={(soak.evidence.get('latency_ms') or {}).get('n')} requests)")
    pk = result.peak
    if pk.get("source") == "slo-search" and pk.get("confirmed") is False:
        br = pk.get("bracket") or [None, None]
        out.append(f"the peak {float(pk.get('rps')):.4g} req/s was not confirmed by the SLO search "
                   f"({pk.get('note') or 'its repeat failed'}); the search's bracket was "
                   f"{' - '.join('?' if x is None else f'{x:.4g}' for x in br)} req/s")
    return out


def sustainable_line(result: ValidateResult) -> str | None:
    """The confirm stage beside the short-point peak: the rate a long point held, which the soak ran at."""
    pk = result.peak
    c = pk.get("confirm") or {}
    if not pk.get("sustainable_rps") or not c.get("steps"):
        return None
    st = c["steps"][-1]
    failed = [f"{x['load']:.4g} (P99 {fmt(x['p99_ms'])} ms)" for x in c["steps"][:-1]]
    frac = result.config.get("soak_fraction")
    margin = f" ({pk.get('slo')} with margin {pk['soak_margin']:g})" if pk.get("slo_with_margin") else ""
    return (f"Sustainable {pk['sustainable_rps']:.4g} req/s: a {c['duration_s']:g} s point met "
            f"{pk.get('slo_with_margin') or pk.get('slo')}{margin} there (P50 {fmt(st['p50_ms'])} ms, P99 "
            f"{fmt(st['p99_ms'])} ms); the soak ran at it"
            + (f" (failed first: {', '.join(failed)} req/s)" if failed else
               f" (the confirm started at {c['start']:.4g} req/s, {frac} x the peak)"))


def _peak_line(result: ValidateResult) -> str:
    pk, e = result.peak, html.escape
    rps = pk.get("rps")
    if rps is None:
        return "Peak: not found"
    if pk.get("source") == "flag":
        return f"Peak {float(rps):.4g} req/s given with <code>--peak</code> (not measured by this run)"
    br = pk.get("bracket") or [None, None]
    brs = " - ".join("?" if x is None else f"{x:.4g}" for x in br)
    if pk.get("confirmed"):
        return (f"Peak {float(rps):.4g} req/s: the highest rate meeting {e(str(pk.get('slo')))}, <b>confirmed</b> by "
                f"the SLO search's repeat (bracket {brs} req/s)")
    return (f"Peak {float(rps):.4g} req/s: <b class=fail>not confirmed</b> (passed once; "
            f"{e(str(pk.get('note') or 'its repeat failed'))}; bracket {brs} req/s)")


def _next(result: ValidateResult, caveats: list[str]) -> str | None:
    target = str(result.config.get("target") or result.target.get("url"))
    pk, slo = result.peak, str(result.peak.get("slo") or result.config.get("slo") or "")
    if pk.get("source") == "slo-search" and pk.get("confirmed") is False and (pk.get("bracket") or [None])[0]:
        return f"infertune validate {target} --peak {pk['bracket'][0]:.4g} --slo '{slo}'"
    soak = next((d for d in result.drills if d.name == "soak" and d.passed is not None), None)
    if caveats and soak and soak.evidence.get("confirm"):  # soak lower than the rate its confirm point held
        rate = soak.evidence["rate_rps"]
        return f"infertune validate {target} --peak {rate:.4g} --soak-fraction 0.75 --slo '{slo}'"
    if caveats and soak:
        frac = max(0.1, round(float(result.config.get("soak_fraction") or 0.8) * 0.75 * 20) / 20)
        return f"infertune validate {target} --peak {float(pk['rps']):.4g} --soak-fraction {frac:g} --slo '{slo}'"
    if not result.passed and pk.get("rps"):
        return f"infertune validate {target} --peak {float(pk['rps']):.4g} --slo '{slo}'"
    return None


def _card(result: ValidateResult) -> tuple[str, str, str]:
    """(verdict word, tone, card HTML)."""
    e = html.escape
    caveats = slo_caveats(result)
    ran = [d for d in result.drills if d.passed is not None]
    failed = [d for d in ran if not d.passed]
    skipped = [d for d in result.drills if d.passed is None]
    if not result.passed:
        word, tone = "FAILED", "fail"
        answer = (f"<b>FAILED</b>: {len(failed)} of {len(ran)} drills failed ("
                  + "; ".join(f"{e(d.name)}: {e(d.reason)}" for d in failed) + ")" if failed else
                  "<b>FAILED</b>: no drill ran" if not ran else "<b>FAILED</b>")
    elif caveats:
        word, tone = "SLO NOT MET", "fail"
        answer = (f"<b>SLO NOT MET</b>: every drill passed its own rule, but {e(caveats[0])}")
    else:
        word, tone = "PASSED", "pass"
        soak = next((d for d in ran if d.name == "soak"), None)
        at = f" at {soak.evidence.get('rate_rps')} req/s" if soak else ""
        answer = f"<b>PASSED</b>: all {len(ran)} drills passed{at}, within {e(str(result.peak.get('slo')))}"
    facts = [_peak_line(result)]
    sus = sustainable_line(result)
    if sus:
        facts.append(f"<b>{html.escape(sus)}</b>")
    facts += [f"<span class=fail>Also: {e(c)}</span>" for c in caveats[1 if word == "SLO NOT MET" else 0:]
              if not c.startswith("the peak")]  # the peak line says that one
    soak = next((d for d in ran if d.name == "soak"), None)
    if soak:
        ev, lat = soak.evidence, soak.evidence.get("latency_ms") or {}
        drift = (ev.get("p99_drift") or {}).get("ratio")
        rss = (ev.get("rss") or {}).get("slope_mb_per_h")
        facts.append(f"Soak: {ev.get('requests')} requests at {ev.get('rate_rps')} req/s ({ev.get('fraction')} of the "
                     f"peak) for {ev.get('duration_s')} s; P50 {lat.get('p50')} ms, P99 {lat.get('p99')} ms, "
                     f"max {lat.get('max')} ms; {ev.get('errors')} errors; P99 drift {drift}x; RSS slope {rss} MB/h")
    facts.append(f"Drills: {len(ran) - len(failed)} passed, {len(failed)} failed, {len(skipped)} skipped"
                 + (f" ({', '.join(e(d.name) for d in skipped)})" if skipped else ""))
    la = result.load_average
    facts.append(f"Load average (1/5/15 min) at start {la.get('start')}, at end {la.get('end')} on "
                 f"{result.environment.cpu_cores_logical} CPU(s): the box may be shared")
    return word, tone, card(answer, facts, _next(result, caveats), tone=tone)


def write_html(result: ValidateResult, path: Path) -> None:
    e = html.escape
    parts = []
    soak_over = any(c.startswith("the soak") for c in slo_caveats(result))
    for d in result.drills:
        try:
            plot = _plot(d, slo_bound_ms(str(result.peak.get("slo") or result.config.get("slo") or ""))) or ""
        except ImportError:
            plot = "<p>matplotlib is not installed: pip install 'infertune[report]'</p>"
        over = (" <span class=fail>but its P99 breaks the SLO</span>"
                if d.name == "soak" and d.passed and soak_over else "")
        parts.append(f"<h2>{e(d.name)}: <span class={_cls(d)}>{_verdict_word(d)}</span>{over}</h2>"
                     f"<p>{e(d.reason)}</p>{plot}<details><summary>evidence</summary><pre>"
                     f"{e(json.dumps(d.evidence, indent=1))}</pre></details>")
    rows = [[e(d.name), f"<span class={_cls(d)}>{_verdict_word(d)}</span>"
             + (" <span class=fail>but its P99 breaks the SLO</span>" if d.name == "soak" and d.passed and soak_over
                else ""), e(d.reason)] for d in result.drills]
    word, tone, summary = _card(result)
    doc = f"""<h1>infertune validate: <span class={'pass' if tone == 'pass' else 'fail'}>{e(word)}</span></h1>
{summary}
<p class="note">Target {e(str(result.target.get('url')))} ({e(str(result.target.get('model')))},
{'started by validate' if result.target.get('started_by_validate') else 'already running'}). Started {e(result.started)},
wall {result.wall_s} s. {e(_greedy_note(result.target))}Latency is measured from each request's scheduled send time.
{e('; '.join(result.notes))}</p>
<h2>Drills</h2>{table(['drill', 'verdict', 'evidence'], rows, left=3)}{''.join(parts)}
<h2>Environment</h2>{folded('fingerprint', f'<pre>{e(result.environment.model_dump_json(indent=1))}</pre>')}"""  # noqa: E501
    path.write_text(document(f"infertune validate: {word}", doc), encoding="utf-8")


def write_outputs(result: ValidateResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "validate.json").write_text(json.dumps(result.model_dump(mode="json"), indent=1), encoding="utf-8")
    write_html(result, out / "validate.html")


def _greedy_note(target: dict) -> str:
    """serve's own check at start, on an idle server: the served model against tune's recorded continuations."""
    return f"At start, serve's {target['greedy_check']}. " if target.get("greedy_check") else ""
