"""The search loop. One Run per `infertune tune`; the task supplies everything family-specific.

Order of work: the reference (every other candidate is verified against it), the naive baseline, then
the options most promising on this host first. Each gets a short probe; a candidate clearly behind the
best verified probe so far is dropped on the spot with its figure (successive halving: a pathological
engine costs seconds, not minutes). Survivors are verified, refined by the task (embeddings: the batch
token budget searched against the SLO), measured in interleaved rounds, and the leaders get confirmation
passes. Every stage scales itself to what is left of the time budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.results import CandidateResult
from infertune.tuning.budget import Budget
from infertune.tuning.task import Option, Probe, Task
from infertune.worker import Worker, WorkerFailed

REFINE_TOP = 4  # engines that get the task's refinement (batching search) and full rounds
PROBE_MIN_S = 8.0  # an option is not started when less than this is left of the probe share
PROBE_CALL_FLOOR_S = 60.0  # the least a probe call gets (a compile-on-first-shape warm-up fits in it)


def short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


class Run:
    """State of one search: workers by engine, results by candidate id, time spent by candidate."""

    def __init__(self, task: Task, cfg, out: Path, console, budget: Budget):
        self.task, self.cfg, self.out, self.console, self.budget = task, cfg, out, console, budget
        self.workers: dict[str, Worker] = {}
        self.dead: dict[str, tuple[str, str]] = {}
        self.results: dict[str, CandidateResult] = {}
        self.cands: dict[str, Any] = {}
        self.options: dict[str, Option] = {}
        self.probes: dict[str, Probe] = {}
        self.spent: dict[str, float] = {}
        self.samples: dict[str, list[dict]] = {}
        self.log: dict[str, Any] = {"not_tried": [], "stages": [], "refine": {}, "dropped": []}
        self.best_probe: tuple[float, str] = (0.0, "")

    # --- records -------------------------------------------------------------------------------
    def record(self, c, **kw: Any) -> CandidateResult:
        r = self.results.get(c.id) or CandidateResult(name=c.id, candidate=c.model_dump(mode="json"), status="ok")
        r = r.model_copy(update=kw)
        self.results[c.id], self.cands[c.id] = r, c
        return r

    def charge(self, c, seconds: float) -> None:
        self.spent[c.id] = self.spent.get(c.id, 0.0) + seconds
        self.results[c.id] = self.results[c.id].model_copy(update={"time_s": round(self.spent[c.id], 2)})

    def call(self, c, what: str, fn: Callable[[Worker], Any]) -> Any:
        """Run `fn(worker)` for candidate `c`, charging its time; a failure fails the engine."""
        w = self.workers.get(c.engine_id)
        if w is None:
            return None
        t = time.monotonic()
        try:
            return fn(w)
        except WorkerFailed as e:
            self.fail(c, f"{what} failed: {short(e)}")
            return None
        finally:
            if c.id in self.results:
                self.charge(c, time.monotonic() - t)

    def fail(self, c, why: str) -> None:
        self.console.print(f"  [red]failed[/] {c.id}: {why}", highlight=False)
        self.dead[c.engine_id] = ("failed", why)
        for other in list(self.cands.values()):
            if other.engine_id == c.engine_id:
                self.record(other, status="failed", reason=why)
        self.release(c)

    def release(self, c) -> None:
        w = self.workers.pop(c.engine_id, None)
        if w:
            w.kill()

    def stop(self) -> None:
        for w in self.workers.values():
            w.stop()
        self.workers.clear()

    def timeout(self, stage: str, floor: float = 30.0) -> float:
        return max(floor, min(self.cfg.candidate_timeout_s, self.budget.stage_left(stage) + floor))

    # --- one engine ----------------------------------------------------------------------------
    def start(self, c) -> bool:
        """Prepare `c`'s engine (shared by candidates that differ only in how they are batched). The
        caller (try_option) has already checked that the engine is available here."""
        if c.engine_id in self.workers:
            sib = next((r for k, r in self.results.items() if self.cands[k].engine_id == c.engine_id
                        and r.status == "ok"), None)
            self.record(c, status="ok", prepare_s=sib.prepare_s if sib else None,
                        executed=sib.executed if sib else {})
            return True
        if c.engine_id in self.dead:
            status, why = self.dead[c.engine_id]
            self.record(c, status=status, reason=why)
            return False
        self.console.print(f"  preparing {c.engine_id} ...", highlight=False)
        t = time.monotonic()
        self.record(c, status="ok", stage="prepare")
        own = c.option("timeout_s") if hasattr(c, "option") else None  # a candidate's own timeout wins
        w = Worker(self.task.job(c), float(own) if own else self.timeout("probe", 60.0))
        try:
            info = w.ready()
        except WorkerFailed as e:
            w.kill()
            self.charge(c, time.monotonic() - t)
            self.dead[c.engine_id] = ("failed", f"prepare failed: {short(e)}")
            self.record(c, status="failed", reason=f"prepare failed: {short(e)}")
            self.console.print(f"  [red]failed[/] {c.id}: {short(e)}", highlight=False)
            return False
        self.workers[c.engine_id] = w
        self.record(c, status="ok", prepare_s=round(info["prepare_s"], 2), executed=info["executed"],
                    **info.get("record", {}))
        self.charge(c, time.monotonic() - t)
        return True

    def probe(self, o: Option) -> Probe | None:
        c = o.candidate
        cap = o.probe_s or (3.0 if self.cfg.device == "cpu" else 6.0)
        # a probe may not outlive the probe stage's share of the budget by much: one batch of a big model on a
        # small CPU (Qwen3-0.6B, 2 cores) outlasted the old fixed 120 s and the run overran its budget by 13%
        self.task.call_limit_s = max(PROBE_CALL_FLOOR_S, self.budget.stage_left("probe") + 15.0)
        try:
            pr = self.call(c, "probe", lambda w: self.task.probe(w, c, cap))
        finally:
            self.task.call_limit_s = None
        if pr is not None:
            self.probes[c.id] = pr
            self.record(c, stage="probe", probe={"speed": round(pr.speed, 3), "unit": self.task.unit,
                                                 "p99_ms": pr.p99_ms, **pr.detail})
        return pr

    def verify(self, c) -> bool:
        got = self.call(c, "verification", lambda w: self.task.verify(w, c))
        if got is None:
            return False
        acc, ok, why = got
        self.record(c, accuracy=acc, meets_accuracy=ok, reason=why)
        return ok


def try_option(run: Run, o: Option) -> None:
    """Prepare, probe, drop or verify one option."""
    c, task, cfg = o.candidate, run.task, run.cfg
    run.options[c.id] = o
    try:  # cheap, and a better reason than the budget when both apply
        missing = run.task.available(c)
    except Exception as e:  # noqa: BLE001
        missing = f"availability check failed: {e}"
    if missing:
        run.dead[c.engine_id] = ("skipped", missing)
        run.record(c, status="skipped", reason=missing, why_tried=o.why)
        run.console.print(f"  [yellow]skip[/] {c.id}: {missing}", highlight=False)
        return
    # an option with a long first run (a compile, graph capture: its probe_s) needs half of it left of the probe
    # share, or it would eat the next stages' time for a probe that may not finish
    need = max(PROBE_MIN_S, (o.probe_s or 0.0) / 2)
    if o.role == "candidate" and run.budget.stage_left("probe") < need:
        why = (f"time budget: {run.budget.total_s:.0f} s in all (--time-budget), "
               f"{run.budget.elapsed():.0f} s used before this candidate could start"
               + (f" (its first run needs ~{o.probe_s:.0f} s)" if need > PROBE_MIN_S else ""))
        run.record(c, status="skipped", reason=why, why_tried=o.why)
        run.console.print(f"  [yellow]skip[/] {c.id}: {why}", highlight=False)
        return
    if not run.start(c):
        run.record(c, why_tried=o.why)
        return
    run.record(c, why_tried=o.why)
    if o.role == "reference":
        if not run.verify(c):
            raise InfertuneError(f"the reference {c.id} failed: {run.results[c.id].reason}")
        pr = run.probe(o)
        if pr is None:
            raise InfertuneError(f"the reference {c.id} failed: {run.results[c.id].reason}")
        run.best_probe = (pr.speed, c.id)
        return
    pr = run.probe(o)
    if pr is None:
        return
    best, best_id = run.best_probe
    ratio = pr.speed / best if best else 1.0
    if o.role == "candidate" and best and cfg.drop_below / 2 <= ratio < cfg.drop_below:
        # a neighbour's burst can halve one short probe on a shared box (never speed it up): a candidate
        # near the line is probed once more and the faster probe kept; one far below it is not noise
        again = run.probe(o)
        if again is None:
            return
        if again.speed > pr.speed:
            pr = again
        else:
            run.probes[c.id] = pr
            run.record(c, probe={**run.results[c.id].probe, "speed": round(pr.speed, 3)})
        run.record(c, probe={**run.results[c.id].probe, "probes": 2})
        ratio = pr.speed / best
    if o.role == "candidate" and best and ratio < cfg.drop_below:
        why = (f"dropped after the probe: {pr.speed:.1f} {task.unit} = {ratio:.2f}x the best verified probe "
               f"so far ({best_id}, {best:.1f}); below --drop-below {cfg.drop_below:g}")
        run.record(c, status="rejected", reason=why, dropped=why)
        run.log["dropped"].append({"candidate": c.id, "stage": "probe", "ratio": round(ratio, 3)})
        run.console.print(f"  [yellow]drop[/] {c.id}: {ratio:.2f}x the best so far", highlight=False)
        run.release(c)
        return
    ok = run.verify(c)
    if run.results[c.id].status == "failed":
        return
    if o.role == "candidate" and not ok:
        run.record(c, status="rejected")
        run.console.print(f"  [yellow]over budget[/] {c.id}: {run.results[c.id].reason}", highlight=False)
        run.release(c)
        return
    if o.role == "candidate" and pr.speed > best:
        run.best_probe = (pr.speed, c.id)
    run.console.print(f"  probe {c.id}: {pr.speed:.1f} {task.unit} ({ratio:.2f}x the best so far)",
                      highlight=False)


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
        cost = sum(run.task.pass_s(run, c) for c in ok)
        left = run.budget.stage_left(stage_name)
        if done >= 1 and left < cost:
            break
        # the first round always runs; when a full pass each does not fit, each pass is cut short (a
        # time-capped pass over shuffled batches: every length still sampled, n stays honest)
        cap = None if left >= cost else max(1.0, left / max(len(ok), 1))
        for c in ok:
            if bar is not None:
                bar.update(task_id, description=f"{label} {r + 1}/{n} {c.id}")
            got = run.call(c, "measurement", lambda w, c=c, cap=cap: run.task.measure(w, c, cap))
            if got is not None:
                run.samples.setdefault(c.id, []).append(got)
                run.record(c, stage="full" if label == "round" else "confirm")
            if bar is not None:
                bar.advance(task_id)
        done += 1
    return done
