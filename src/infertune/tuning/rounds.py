"""Timed rounds: every live candidate gets one timed call per round, interleaved (fair under machine drift), and a
round that would overrun its stage's share is cut to time-capped passes or not started. Also the stage log."""

from __future__ import annotations

from infertune.tuning.search import Run

BASELINE_PASS_SHARE = 0.025  # of the budget: the most one timed call of the naive baseline takes (>= 3 s)


def stage(run: Run, name: str, t0: float, n: int) -> None:
    run.log["stages"].append({"stage": name, "started_s": round(t0, 1), "ended_s": round(run.budget.elapsed(), 1),
                              "candidates": n})


def rounds(run: Run, live: list, n: int, label: str, bar=None, task_id=None) -> int:
    """Up to `n` interleaved rounds over `live`; stops early when the next round would overrun its share.
    Returns the rounds done."""
    done = 0
    stage_name = "full" if label == "round" else "confirm"
    for r in range(n):
        ok = [c for c in live if run.results[c.id].status == "ok" and c.engine_id in run.workers]
        cost = sum(_call_s(run, c) for c in ok)
        left = run.budget.stage_left(stage_name)
        if done >= 1 and left < cost:
            break
        # the first round always runs; when a full pass each does not fit, each pass is cut short (a
        # time-capped pass over shuffled batches: every length still sampled, n stays honest)
        cap = None if left >= cost else max(1.0, left / max(len(ok), 1))
        for c in ok:
            if bar is not None:
                bar.update(task_id, description=f"{label} {r + 1}/{n} {c.id}")
            mine = _baseline_cap(run, c, cap)
            got = run.call(c, "measurement", lambda w, c=c, mine=mine: run.task.measure(w, c, mine), stage_name)
            if got is not None:
                run.samples.setdefault(c.id, []).append(got)
                run.record(c, stage="full" if label == "round" else "confirm")
            if bar is not None:
                bar.advance(task_id)
        done += 1
    return done


def _call_s(run: Run, c) -> float:
    """Expected seconds of `c`'s next timed call: the task's estimate, or what its timed calls took so far where
    that is more: on a GPU calls can take several times what items/s implies (tokenizer processes, graph
    replays, the answer copies; docs/measurements/2026-12-02-h200-torchao-installed, run 2)."""
    est = run.task.pass_s(run, c)
    calls = len(run.samples.get(c.id, []))
    if calls:
        by = run.costs.get(c.id, {})
        est = max(est, (by.get("full", 0.0) + by.get("confirm", 0.0)) / calls)
    return _baseline_cap(run, c, est) or est


def _baseline_cap(run: Run, c, cap: float | None) -> float | None:
    """The naive baseline's timed calls are capped at BASELINE_PASS_SHARE of the budget (>= 3 s): it only
    gives the ratio, and on long texts one of its passes took longer than a candidate's whole probe. A capped
    pass runs shuffled batches, so every length is still sampled."""
    o = run.options.get(c.id)
    if o is None or o.role != "baseline":
        return cap
    most = max(3.0, BASELINE_PASS_SHARE * run.budget.total_s)
    return most if cap is None else min(cap, most)
