"""What a person reads after `infertune validate`: a console verdict table, validate.json (the contract)
and validate.html (a verdict per drill with its evidence, and time-series plots as inline SVG)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from infertune.report import figure_svg
from infertune.validate.config import Drill, ValidateResult


def print_summary(result: ValidateResult) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(stderr=True)
    if not con.is_terminal:
        con = Console(stderr=True, width=200)
    t = Table(title=f"infertune validate: {result.target.get('url')} (peak {result.peak.get('rps')} req/s, "
                    f"{result.peak.get('source')})")
    for c in ("drill", "verdict", "evidence"):
        t.add_column(c)
    for d in result.drills:
        verdict = "skipped" if d.passed is None else "PASS" if d.passed else "FAIL"
        t.add_row(d.name, verdict, d.reason, style=None if d.passed is not False else "bold red")
    con.print(t)
    la = result.load_average
    con.print(f"load average (1/5/15 min) at start {la.get('start')}, at end {la.get('end')} on "
              f"{result.environment.cpu_cores_logical} CPU(s); wall {result.wall_s} s", highlight=False)
    con.print("[bold green]all drills passed[/]" if result.passed else "[bold red]validation failed[/]")
    if result.out_dir:
        con.print(f"wrote {result.out_dir}/validate.json, validate.html", highlight=False)


_COLORS = {"ok": "tab:green", "429": "tab:orange"}


def _plot(d: Drill) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = d.series
    if d.name == "soak" and s.get("window_t_s"):
        fig, axes = plt.subplots(3, 1, figsize=(8, 6.5), sharex=True)
        axes[0].plot(s["window_t_s"], s["window_p99_ms"], "-o", ms=3, label="P99")
        axes[0].plot(s["window_t_s"], s["window_p50_ms"], "-s", ms=3, label="P50")
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
        ax.set_yscale("log")
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
        ax.set_yscale("log")
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


def write_html(result: ValidateResult, path: Path) -> None:
    parts = []
    for d in result.drills:
        verdict = "skipped" if d.passed is None else "PASS" if d.passed else "FAIL"
        cls = "skip" if d.passed is None else "pass" if d.passed else "fail"
        try:
            plot = _plot(d) or ""
        except ImportError:
            plot = "<p>matplotlib is not installed: pip install 'infertune[report]'</p>"
        parts.append(f"<h2>{html.escape(d.name)}: <span class={cls}>{verdict}</span></h2>"
                     f"<p>{html.escape(d.reason)}</p>{plot}<details><summary>evidence</summary><pre>"
                     f"{html.escape(json.dumps(d.evidence, indent=1))}</pre></details>")
    rows = "".join(f"<tr><td>{html.escape(d.name)}</td><td class={'skip' if d.passed is None else 'pass' if d.passed else 'fail'}>"
                   f"{'skipped' if d.passed is None else 'PASS' if d.passed else 'FAIL'}</td>"
                   f"<td>{html.escape(d.reason)}</td></tr>" for d in result.drills)
    la = result.load_average
    doc = f"""<!doctype html><meta charset=utf-8><title>infertune validate</title>
<style>body{{font:14px sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;vertical-align:top}}.pass{{color:#080}}.fail{{color:#b00}}
.skip{{color:#888}}pre{{font-size:11px}}</style>
<h1>infertune validate: <span class={'pass' if result.passed else 'fail'}>{'PASSED' if result.passed else 'FAILED'}</span></h1>
<p>Target {html.escape(str(result.target.get('url')))} ({html.escape(str(result.target.get('model')))},
{'started by validate' if result.target.get('started_by_validate') else 'already running'}); peak
{result.peak.get('rps')} req/s ({html.escape(str(result.peak.get('source')))}, SLO {html.escape(str(result.peak.get('slo')))}).
Started {result.started}, wall {result.wall_s} s. Load average at start {la.get('start')}, at end {la.get('end')}
on {result.environment.cpu_cores_logical} CPU(s). Latency is measured from each request's scheduled send time.</p>
<table><tr><th>drill</th><th>verdict</th><th>evidence</th></tr>{rows}</table>{''.join(parts)}"""
    path.write_text(doc, encoding="utf-8")


def write_outputs(result: ValidateResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "validate.json").write_text(json.dumps(result.model_dump(mode="json"), indent=1), encoding="utf-8")
    write_html(result, out / "validate.html")
