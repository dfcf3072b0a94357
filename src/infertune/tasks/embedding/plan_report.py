"""Plan vs measured, for a person: the console lines and report.html's "Predicted vs measured" table of a tune's
`predicted_vs_measured` rows (plan/measured.py computes them)."""

from __future__ import annotations

from infertune.page import e, table
from infertune.results import PlanVsMeasured, TuneResult


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f} {unit}" if unit == "MiB" or x < 100 else f"{x:,.0f} {unit}"


def _err(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:+,.1f}%" if abs(x) < 10 else f"{x:+,.0f}%"


def console_lines(rows: list[PlanVsMeasured]) -> list[str]:
    """'predicted vs measured: items/s bound 1,234 items/s vs 310 items/s (+298%)', one line per row."""
    return [f"predicted vs measured: {r.quantity} {_num(r.predicted, r.unit)} vs {_num(r.measured, r.unit)} "
            f"({_err(r.error_pct)})" for r in rows]


def record(result: TuneResult, model_dir, device: str, threads: int | None, console) -> None:
    """Set result.predicted_vs_measured for the tune of the model in `model_dir` on this host, and print it."""
    from infertune.plan.measured import for_run

    gpus = result.environment.gpu  # torch's view: tune runs on the first visible GPU
    rows, why = for_run(result, model_dir, device, result.environment.threads or threads,
                        str(gpus[0].get("name") or "") if gpus else None)
    result.predicted_vs_measured = rows
    for line in console_lines(rows) if rows else [f"predicted vs measured: none ({why})"]:
        console.print(line, highlight=False, markup=False)


def predicted_section(result: TuneResult) -> str:
    """report.html's table of plan's predictions beside the winner's measurements; "" when there are none."""
    rows = result.predicted_vs_measured
    if not rows:
        return ""
    body = [[e(r.quantity), e(_num(r.predicted, r.unit)), e(_num(r.measured, r.unit)), e(_err(r.error_pct)),
             e(r.note)] for r in rows]
    left_note = [["", "", "", "", "l"] for _ in rows]
    note = ('<p class="note">Error = (predicted - measured) / measured. A throughput bound over-predicts by '
            "construction: measured / predicted is the share of the bound reached, which "
            "<code>infertune plan --calibrated-from</code> applies to its bound on the same GPU.</p>")
    return (f'<h2 id="predicted">Predicted vs measured</h2><p>{e(result.winner.name if result.winner else "")}: '
            "what <code>infertune plan</code> predicts for this host beside what the winner measured.</p>"
            f"{table(['quantity', 'predicted (plan)', 'measured (tune)', 'error', 'note'], body, None, 1, left_note)}"
            f"{note}")
