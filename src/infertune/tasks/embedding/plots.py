"""The figures of an embedding tune's report.html (matplotlib, inline SVG): speed vs accuracy with numbered
points that match the table's # column, the decision's P99 per candidate on a log axis, per-layer int8
sensitivity and the workload's length histogram."""

from __future__ import annotations

from infertune.plots import figure_svg, log_axis
from infertune.results import CandidateResult, TuneResult

GREEN, BLUE, GREY, RED = "#1a7f37", "#0969da", "#8c959f", "#cf222e"


def decision_p99(r: CandidateResult) -> float | None:
    """The P99 the decision checks against the SLO (tasks/embedding/task.py `slo`): the P99 over batches of
    each batch's median across passes when it was measured, else the pooled P99."""
    m = r.measurement
    return m.slo_p99_ms if m is not None and m.slo_p99_ms is not None else r.latency_ms.p99


def slo_limit(result: TuneResult) -> float | None:
    return (result.config.get("slo") or {}).get("p99_ms")


def numbered(result: TuneResult) -> list[tuple[int, CandidateResult]]:
    """Candidates in table order (fastest first), numbered from 1: the same numbers label the plots."""
    order = sorted(result.candidates, key=lambda r: -(r.items_per_s or 0))
    return list(enumerate(order, start=1))


def misses_slo(r: CandidateResult, limit: float | None) -> bool:
    p = decision_p99(r)
    return limit is not None and p is not None and p > limit


def place_labels(ax, pts: list[tuple[float, float, str]], fontsize: float = 8.0) -> list[tuple[float, ...]]:
    """Numbers next to points without overlapping each other or the markers: each label takes the first of a
    ring of offsets whose box is free (a greedy repel; enough for a dozen points). Returns the labels' boxes
    (points, display coordinates)."""
    fig = ax.figure
    fig.canvas.draw()  # fixes the limits, so data -> display is final
    scale = 72.0 / fig.dpi  # display pixels -> points
    xy = [tuple(c * scale for c in ax.transData.transform((x, y))) for x, y, _ in pts]
    boxes = [(px - 4, py - 4, px + 4, py + 4) for px, py in xy]  # the markers themselves
    ring = [(6, 5), (6, -13), (-6, 5), (-6, -13), (0, 10), (0, -18), (10, -4), (-10, -4), (12, 14), (12, -22),
            (-12, 14), (-12, -22), (20, 0), (-20, 0), (0, 22), (0, -30)]
    for (x, y, text), (px, py) in zip(pts, xy, strict=True):
        w, h = 0.62 * fontsize * len(text), fontsize
        best, best_hits = ring[0], None
        for dx, dy in ring:
            x0 = px + dx if dx >= 0 else px + dx - w
            box = (x0, py + dy, x0 + w, py + dy + h)
            hits = sum(not (box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3]) for b in boxes)
            if best_hits is None or hits < best_hits:
                best, best_hits = (dx, dy), hits
            if hits == 0:
                break
        dx, dy = best
        x0 = px + dx if dx >= 0 else px + dx - w
        boxes.append((x0, py + dy, x0 + w, py + dy + h))
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, fontweight="bold",
                    ha="left" if dx >= 0 else "right", va="bottom",
                    arrowprops={"arrowstyle": "-", "color": GREY, "lw": 0.5} if abs(dx) + abs(dy) > 16 else None)
    return boxes[len(pts):]


def pareto_svg(result: TuneResult, plt) -> str | None:
    from matplotlib.lines import Line2D

    nums = {r.name: n for n, r in numbered(result)}
    measured = [r for r in result.candidates if r.items_per_s and r.accuracy.cosine_mean is not None]
    if not measured:
        return None
    limit, win = slo_limit(result), result.winner.name if result.winner else None
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    drift = {r.name: max(1 - r.accuracy.cosine_mean, 1e-7) for r in measured}
    front = sorted((r for r in measured if r.name in result.pareto), key=lambda r: r.items_per_s)
    if len(front) > 1:
        ax.plot([r.items_per_s for r in front], [drift[r.name] for r in front], "--", color=BLUE, lw=1, zorder=1)
    for r in measured:
        miss = misses_slo(r, limit) or r.meets_accuracy is False
        if r.name == win:
            ax.scatter(r.items_per_s, drift[r.name], marker="*", s=260, color=GREEN, edgecolor="black", zorder=4)
        else:
            ax.scatter(r.items_per_s, drift[r.name], marker="X" if miss else "o", s=70 if miss else 50, zorder=3,
                       color=RED if miss else (BLUE if r.name in result.pareto else GREY))
    # the winner's number is placed first, so it gets the best spot
    pts = sorted(measured, key=lambda r: (r.name != win, nums[r.name]))
    budget = (result.config.get("accuracy") or {}).get("min_cosine_mean")
    if budget is not None:
        ax.axhline(1 - budget, color=RED, lw=1, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("items/s (best pass)")
    ax.set_ylabel("1 - mean cosine vs fp32 (log; lower is more accurate)")
    place_labels(ax, [(r.items_per_s, drift[r.name], str(nums[r.name])) for r in pts])
    handles = []
    if win:
        handles.append(Line2D([], [], marker="*", ls="", color=GREEN, mec="black", ms=13,
                              label=f"winner (#{nums[win]})"))
    handles += [Line2D([], [], marker="o", ls="--" if len(front) > 1 else "", color=BLUE, label="Pareto front"),
                Line2D([], [], marker="o", ls="", color=GREY, label="dominated"),
                Line2D([], [], marker="X", ls="", color=RED, label="misses the SLO or accuracy budget")]
    if budget is not None:
        handles.append(Line2D([], [], ls=":", color=RED, label=f"accuracy budget (mean cosine {budget})"))
    ax.legend(handles=handles, fontsize=7.5, loc="best")
    title = "Speed vs accuracy; numbers are the table's # column"
    ax.set_title(title + ("" if win else "\nno winner: no candidate met every constraint"), fontsize=10)
    return figure_svg(fig)


def latency_svg(result: TuneResult, plt) -> str | None:
    limit, win = slo_limit(result), result.winner.name if result.winner else None
    rows = [(n, r) for n, r in numbered(result) if decision_p99(r) is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 0.34 * len(rows) + 1.6))
    rows = rows[::-1]  # fastest at the top
    labels = [f"#{n} {r.name}" for n, r in rows]
    p99 = [decision_p99(r) for _, r in rows]
    colors = [GREEN if r.name == win else RED if misses_slo(r, limit) else BLUE for _, r in rows]
    ax.barh(labels, p99, color=colors, alpha=0.85, label="P99 (the SLO figure)")
    ax.scatter([r.latency_ms.p50 or 0 for _, r in rows], labels, marker="|", s=160, color="black", zorder=3,
               label="P50")
    for i, (_, r) in enumerate(rows):
        if misses_slo(r, limit):
            ax.annotate(f"misses SLO: {decision_p99(r):.0f} ms", (decision_p99(r), i), xytext=(4, -3),
                        textcoords="offset points", fontsize=7, color=RED)
    if limit is not None:
        ax.axvline(limit, color=RED, ls=":", label=f"SLO {limit:g} ms")
    log_axis(ax, "x")
    ax.set_xlabel("batch latency, ms (log), tokenization included; P99 over batches of each batch's median "
                  "across passes")
    ax.tick_params(axis="y", labelsize=7.5)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure_svg(fig)


def memory_svg(result: TuneResult, plt) -> str | None:
    rows = [(n, r) for n, r in numbered(result) if r.measurement and (r.measurement.peak_rss_mb
                                                                      or r.measurement.peak_gpu_mb)]
    if not rows:
        return None
    win = result.winner.name if result.winner else None
    rows = rows[::-1]
    fig, ax = plt.subplots(figsize=(8.5, 0.3 * len(rows) + 1.4))
    labels = [f"#{n} {r.name}" for n, r in rows]
    gpu = any(r.measurement.peak_gpu_mb for _, r in rows)
    vals = [(r.measurement.peak_gpu_mb if gpu else r.measurement.peak_rss_mb) or 0 for _, r in rows]
    ax.barh(labels, vals, color=[GREEN if r.name == win else GREY for _, r in rows])
    ax.set_xlabel("peak GPU memory, MB" if gpu else "peak resident memory of the candidate's worker, MB")
    ax.tick_params(axis="y", labelsize=7.5)
    return figure_svg(fig)


def tune_plots(result: TuneResult) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = {k: v for k, v in (("pareto", pareto_svg(result, plt)), ("latency", latency_svg(result, plt)),
                               ("memory", memory_svg(result, plt))) if v}
    if result.sensitivity:
        s = result.sensitivity[:40]
        fig, ax = plt.subplots(figsize=(8, 0.22 * len(s) + 1.5))
        keep = set(result.mixed_precision.get("keep_high", []))
        ax.barh([x.layer for x in s][::-1], [max(x.drop, 1e-7) for x in s][::-1],
                color=[RED if x.layer in keep else GREY for x in s][::-1])
        ax.set_xscale("log")
        mp = result.mixed_precision
        ax.set_xlabel(f"1 - mean cosine when only this layer is {mp.get('method', 'torch.ao-dynamic')} "
                      f"(red: kept in {mp.get('kept_dtype', 'fp32')})")
        ax.tick_params(axis="y", labelsize=6)
        plots["sensitivity"] = figure_svg(fig)
    if result.workload:
        h = result.workload.histogram
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.bar([b["bucket"] for b in h], [b["count"] for b in h], color="#8250df")
        ax.set_xlabel(f"tokens per item (model limit {result.workload.max_length})")
        ax.set_ylabel("items")
        ax.tick_params(axis="x", labelsize=7)
        plots["lengths"] = figure_svg(fig)
    return plots
