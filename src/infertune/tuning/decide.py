"""The decision, for every family: the fastest candidate within the SLO and the accuracy budget, with
ties broken towards the simpler engine; the Pareto front; sentences saying why; and, when nothing is
eligible, what is achievable and the exact flags that would make it eligible."""

from __future__ import annotations

from infertune.results import CandidateResult, TuneResult
from infertune.tuning.task import Task


def pick(task: Task, eligible: list[CandidateResult], tie_margin: float):
    """(winner, fastest). Candidates within `tie_margin` of the fastest eligible one are tied (a gap that
    size is inside run-to-run noise); among them the simplest wins (`task.rank`: for the embedding engines the
    ranks the registry declares, infertune.catalog), then the lowest SLO figure (at equal throughput smaller
    batches answer sooner), then the higher speed."""
    fastest = max(eligible, key=task.speed)
    close = [r for r in eligible if task.speed(r) >= (1 - tie_margin) * task.speed(fastest)]
    return min(close, key=lambda r: (task.rank(r), task.slo(r)[0] or 0.0, -task.speed(r))), fastest


def pareto_front(task: Task, results: list[CandidateResult], drift) -> list[str]:
    """Candidates not beaten on both speed and accuracy drift (lower is better) by another one."""
    pts = [r for r in results if task.speed(r) and drift(r) is not None]
    front = [r for r in pts if not any(
        task.speed(o) >= task.speed(r) and drift(o) <= drift(r)
        and (task.speed(o) > task.speed(r) or drift(o) < drift(r)) for o in pts if o is not r)]
    return [r.name for r in sorted(front, key=task.speed, reverse=True)]


def decide(task: Task, result: TuneResult, tie_margin: float, drift) -> None:
    """Set status / meets_* / speedup on each candidate, then winner, pareto, decision and (when
    nothing is eligible) `achievable`, in place."""
    base = result.baseline
    base_speed = task.speed(base) if base else 0.0
    u = task.unit
    for r in result.candidates:
        if r.status in ("failed", "skipped") or r.stage == "probe" and r.status == "rejected":
            continue
        if not task.measured(r):
            r.status, r.reason = "failed", r.reason or "no timed passes completed"
            continue
        if base_speed:
            r.speedup_vs_baseline = round(task.speed(r) / base_speed, 3)
        fig, limit = task.slo(r)
        r.meets_slo = None if limit is None else (fig is not None and fig <= limit)
        reasons = []
        if r.meets_accuracy is False:
            reasons.append(r.reason or "accuracy below budget")
        if r.meets_slo is False:
            reasons.append(f"P99 {fig:.1f} ms > SLO {limit:g} ms")
        if base is not None and r.name == base.name and not task.baseline_eligible:
            r.status, r.reason = "ok", "; ".join(["naive baseline", *reasons])
            continue
        if r.stage == "probe":  # verified but never measured in full rounds (budget): not eligible
            reasons.append("probed only: the time budget ran out before its full rounds")
        r.status = "rejected" if reasons else "ok"
        r.reason = "; ".join(reasons)
    eligible = [r for r in result.candidates if r.status == "ok" and r.meets_slo is not False
                and r.meets_accuracy is not False
                and (base is None or r.name != base.name or task.baseline_eligible)]
    result.pareto = pareto_front(task, [r for r in result.candidates if r.status in ("ok", "rejected")
                                        and r.stage != "probe"], drift)
    if not eligible:
        _no_winner(task, result)
        return
    win, fastest = pick(task, eligible, tie_margin)
    result.winner = win.model_copy(deep=True)
    result.achievable = {}
    lines = [task.describe_winner(win)]
    if fastest is not win:
        why = task.simpler_because(win, fastest) if task.rank(win) < task.rank(fastest) else "the lower latency"
        lines.append(f"{fastest.name} measured {(task.speed(fastest) / task.speed(win) - 1) * 100:.1f}% faster, "
                     f"inside the {tie_margin:.0%} tie margin: {why} is chosen.")
    if base_speed:
        lines.append(f"That is {task.speed(win) / base_speed:.2f}x {task.baseline_label} ({base.name}, "
                     f"{base_speed:.1f} {u}, measured in the same run, {task.measured_how}).")
    faster = [r for r in result.candidates
              if task.speed(r) > task.speed(win) and r.name not in (win.name, fastest.name)]
    for r in sorted(faster, key=task.speed, reverse=True)[:3]:
        lines.append(f"Faster but not chosen: {r.name} ({task.speed(r):.1f} {u}"
                     f"{', probe' if r.stage == 'probe' else ''}): {r.reason or r.status}.")
    others = sorted((r for r in eligible if r.name != win.name), key=task.speed, reverse=True)
    if others:
        r = others[0]
        gap = (task.speed(r) / task.speed(win) - 1) * 100
        lines.append(f"Runner-up: {r.name} at {task.speed(r):.1f} {u} ("
                     + (f"{gap:.1f}% faster, tied as above)." if gap >= 0.05 else
                        "the same rate within 0.1%; the winner is the simpler one)." if gap > -0.5 else
                        f"{-gap:.0f}% slower)."))
    result.decision = lines


def _no_winner(task: Task, result: TuneResult) -> None:
    """Nothing met every constraint: say what is achievable and which flags would admit it."""
    result.winner = None
    u = task.unit
    measured = [r for r in result.candidates if task.measured(r) and r.stage != "probe" and r.status != "failed"
                and (result.baseline is None or r.name != result.baseline.name)]
    ach: dict = {}
    lines = ["No candidate met every constraint (" + task.constraints() + ")."]
    with_slo = [r for r in measured if task.slo(r)[0] is not None]
    if with_slo:
        low = min(with_slo, key=lambda r: task.slo(r)[0])
        ach["lowest_p99"] = {"name": low.name, "p99_ms": round(task.slo(low)[0], 1)}
        lines.append(f"Lowest P99 measured: {low.name} at {task.slo(low)[0]:.1f} ms.")
    acc_ok = [r for r in measured if r.meets_accuracy is not False]
    if acc_ok:
        f = max(acc_ok, key=task.speed)
        fig, limit = task.slo(f)
        flags = task.slo_flags(fig, limit) if fig is not None and limit is not None and fig > limit else ""
        ach["fastest_within_accuracy"] = {"name": f.name, "speed": round(task.speed(f), 2), "unit": u,
                                          "p99_ms": round(fig, 1) if fig is not None else None, "flags": flags}
        lines.append(f"Fastest within the accuracy budget: {f.name} at {task.speed(f):.1f} {u}"
                     + (f", P99 {fig:.1f} ms: eligible with `{flags}`." if flags else "."))
    slo_ok = [r for r in measured if r.meets_slo is not False and r.meets_accuracy is False]
    if slo_ok:
        f = max(slo_ok, key=task.speed)
        flags = task.accuracy_flags(f)
        ach["fastest_within_slo"] = {"name": f.name, "speed": round(task.speed(f), 2), "unit": u, "flags": flags}
        lines.append(f"Fastest within the SLO but over the accuracy budget: {f.name} at {task.speed(f):.1f} {u}"
                     f" ({f.reason}): eligible with `{flags}`.")
    if not measured:
        lines.append("No candidate completed its full rounds: see each candidate's reason "
                     "(a larger --time-budget lets more of them run).")
    result.achievable = ach
    result.decision = lines
