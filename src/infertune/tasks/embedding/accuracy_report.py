"""The accuracy sections of an embedding tune's report.html and console summary: per length bucket (a table per
candidate and a plot with a line per candidate, numbered as the main table) and the user's task metrics beside
the reference's. Buckets under the budget are marked only where the gate applies (enough texts)."""

from __future__ import annotations

from infertune.page import e, folded, table
from infertune.plots import figure_svg
from infertune.plots import fmt as _f
from infertune.results import CandidateResult, TuneResult
from infertune.tasks.embedding.plots import BLUE, GREEN, GREY, RED, numbered


def _budget(result: TuneResult) -> dict:
    return result.config.get("accuracy") or {}


def _rows(result: TuneResult) -> list[tuple[int, CandidateResult]]:
    return [(n, r) for n, r in numbered(result) if r.accuracy.by_bucket]


def bucket_tables(result: TuneResult) -> str:
    """One small table per candidate: bucket, n, mean and min cosine, top-10; the misses the gate counted in red."""
    b = _budget(result)
    floor, gate_n = b.get("min_cosine_mean"), b.get("min_bucket_items", 20)
    top = b.get("min_topk_overlap") or 0
    parts = []
    for n, r in _rows(result):
        rows, cells = [], []
        for x in r.accuracy.by_bucket:
            gated = x.n >= gate_n
            low = gated and floor is not None and x.cosine_mean is not None and x.cosine_mean < floor
            low_top = gated and top and x.topk_overlap is not None and x.topk_overlap < top
            rows.append([e(x.bucket), str(x.n) + ("" if gated else " (not gated)"), _f(x.cosine_mean, "{:.5f}"),
                         _f(x.cosine_min, "{:.5f}"), _f(x.topk_overlap, "{:.3f}")])
            cells.append(["l", "", "miss" if low else "", "", "miss" if low_top else ""])
        parts.append(f"<h3>#{n} {e(r.name)}</h3>"
                     + table(["tokens", "n", "cos mean", "cos min", "top-10"], rows, left=1, cell_classes=cells))
    if not parts:
        return ""
    note = (f'<p class="note">Tokens are untruncated lengths. A bucket with at least {gate_n} verified texts is gated '
            f"like the pooled figure (mean cosine {floor}" + (f", top-10 {top}" if top else "")
            + "); red: under the budget.</p>")
    return note + folded("Accuracy per length bucket, per candidate", "".join(parts))


def bucket_svg(result: TuneResult) -> str | None:
    """Mean cosine per bucket, a line per candidate (numbered as in the table); the budget as a dotted line."""
    rows = _rows(result)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order: list[str] = []
    for _, r in rows:
        order += [x.bucket for x in r.accuracy.by_bucket if x.bucket not in order]
    order.sort(key=_bucket_key)
    win = result.winner.name if result.winner else None
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    for n, r in rows:
        xs = [order.index(x.bucket) for x in r.accuracy.by_bucket]
        ys = [max(1 - (x.cosine_mean or 0), 1e-7) for x in r.accuracy.by_bucket]
        color = GREEN if r.name == win else RED if r.meets_accuracy is False else BLUE if r.status == "ok" else GREY
        ax.plot(xs, ys, "-o", color=color, lw=2.2 if r.name == win else 1, ms=3.5, alpha=0.9)
        ax.annotate(f"#{n}", (xs[-1], ys[-1]), xytext=(4, 0), textcoords="offset points", fontsize=7, color=color)
    floor = _budget(result).get("min_cosine_mean")
    if floor is not None:
        ax.axhline(1 - floor, color=RED, ls=":", lw=1, label=f"budget (mean cosine {floor})")
        ax.legend(fontsize=7.5, loc="best")
    ax.set_xticks(range(len(order)), order)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per text (untruncated)")
    ax.set_ylabel("1 - mean cosine vs fp32 (log)")
    ax.set_title("Accuracy per length bucket; green: winner, red: over the accuracy budget", fontsize=10)
    return figure_svg(fig)


def _bucket_key(label: str) -> int:
    return 10**9 if label.startswith(">") else int(label.split("-")[0])


def task_table(result: TuneResult) -> str:
    """The user's task metrics: each candidate's figure beside the reference's, and the gate."""
    names: list[tuple[str, str]] = []
    for r in result.candidates:
        names += [(m.source, m.name) for m in r.accuracy.task if (m.source, m.name) not in names]
    if not names:
        return ""
    head = ["#", "candidate"] + [e(f"{name} ({src})") for src, name in names]
    rows, cells = [], []
    for n, r in numbered(result):
        got = {(m.source, m.name): m for m in r.accuracy.task}
        if not got:
            continue
        row, cell = [str(n), e(r.name)], ["", "l"]
        for key in names:
            m = got.get(key)
            if m is None:
                row.append("-")
                cell.append("")
                continue
            miss = m.max_drop is not None and (m.drop is None or m.drop > m.max_drop)
            row.append(f"{_f(m.value, '{:.4f}')} (ref {_f(m.reference, '{:.4f}')})")
            cell.append("miss" if miss else "")
        rows.append(row)
        cells.append(cell)
    b = _budget(result)
    note = (f'<p class="note">Each figure beside the reference\'s on the same texts; red: worse than the reference by '
            f"more than the budget (recall@10: --max-recall-drop {b.get('max_recall_drop')}; --eval metrics: "
            f"--max-eval-drop {b.get('max_eval_drop')}; MRR is shown, not gated).</p>")
    return table(head, rows, left=2, cell_classes=cells) + note


def console_lines(result: TuneResult) -> list[str]:
    """The winner's (or else the reference's) figures per bucket and its task metrics, one line each."""
    name = result.winner.name if result.winner else result.reference
    r = next((c for c in result.candidates if c.name == name), result.winner)
    if r is None:
        return []
    out = []
    if r.accuracy.by_bucket:
        out.append(f"accuracy by length ({r.name}): " + "; ".join(
            f"{x.bucket} tokens n={x.n} cos {_f(x.cosine_mean, '{:.5f}')}" for x in r.accuracy.by_bucket))
    for m in r.accuracy.task:
        out.append(f"{m.name} ({m.source}): {_f(m.value, '{:.4f}')} vs reference {_f(m.reference, '{:.4f}')}"
                   + (f", n={m.n} queries" if m.n else ""))
    return out
