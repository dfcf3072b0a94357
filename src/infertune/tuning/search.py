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
from infertune.tuning.worker import Worker, WorkerFailed

REFINE_TOP = 4  # engines that get the task's refinement (batching search) and full rounds
PROBE_MIN_S = 8.0  # an option is not started when less than this is left of the probe share
PROBE_CALL_FLOOR_S = 60.0  # the least a probe call gets (a compile-on-first-shape warm-up fits in it)
# An option whose first run may take this long (a compiled, graph-captured decode step can take minutes) counts at
# half its prior: the cheap options it would starve are probed first. Cheap options cost seconds each, so the long
# one still starts with most of the probe share left.
LONG_FIRST_RUN_S = 150.0
RESERVE_SHARE = 0.10  # of the budget: the most kept for the owed steps (the naive baseline's start and probe)
STAGE_OF = {"probe": "probe", "verification": "verify", "batching search": "refine"}


def short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def expected_value(o: Option) -> float:
    """What the search expects of an option per second spent: its prior, halved for a long first run."""
    return o.prior / 2 if (o.probe_s or 0.0) >= LONG_FIRST_RUN_S else o.prior


def order(options: list[Option]) -> list[tuple[str, Option]]:
    """The order of work, as (step, option) with step "reference" | "reference-probe" | "option".

    The reference is prepared and verified first: every other candidate is verified against its outputs, which
    it computes once, on the task's accuracy subset. Then the options that can win on this host, by expected
    value; the reference's own probe takes its place among them by its prior (on a GPU the fp32 reference
    trails every half-precision option, and two slow fp32 engines used 101 of a 180 s budget before fp16, bf16
    and compile were skipped for time). The naive baseline comes last: it cannot win, its time is reserved
    (Run.reserve_s) and its timed calls are capped (rounds.BASELINE_PASS_SHARE)."""
    refs = [o for o in options if o.role == "reference"]
    pool = [("reference-probe", o) for o in refs] + [("option", o) for o in options if o.role == "candidate"]
    pool.sort(key=lambda step: -expected_value(step[1]))  # stable: equal values keep the task's order
    return ([("reference", o) for o in refs] + pool
            + [("option", o) for o in options if o.role == "baseline"])


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
        self.costs: dict[str, dict[str, float]] = {}  # candidate -> stage -> seconds (results.json)
        self.owed: dict[str, str] = {}  # steps that must still run: candidate id -> "baseline" | "reference-probe"
        self.deferred: list[tuple[str, Option]] = []  # steps skipped for time, as order() gives them (a late pass)
        self.late = False  # in the late pass: an option is skipped for time only once the run has used 80%

    # --- records -------------------------------------------------------------------------------
    def record(self, c, **kw: Any) -> CandidateResult:
        r = self.results.get(c.id) or CandidateResult(name=c.id, candidate=c.model_dump(mode="json"), status="ok")
        r = r.model_copy(update=kw)
        self.results[c.id], self.cands[c.id] = r, c
        return r

    def charge(self, c, seconds: float, stage: str = "other") -> None:
        self.spent[c.id] = self.spent.get(c.id, 0.0) + seconds
        by = self.costs.setdefault(c.id, {})
        by[stage] = by.get(stage, 0.0) + seconds
        self.results[c.id] = self.results[c.id].model_copy(update={"time_s": round(self.spent[c.id], 2)})

    def recharge(self, c, seconds: float, was: str, now: str) -> None:
        """Move `seconds` of `c`'s cost from stage `was` to stage `now` (its total stays)."""
        by = self.costs.setdefault(c.id, {})
        seconds = max(0.0, min(seconds, by.get(was, 0.0)))
        if not seconds:
            return
        by[was] = by.get(was, 0.0) - seconds
        by[now] = by.get(now, 0.0) + seconds

    def call(self, c, what: str, fn: Callable[[Worker], Any], stage: str | None = None) -> Any:
        """Run `fn(worker)` for candidate `c`, charging its time to `stage`; a failure fails the engine."""
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
                self.charge(c, time.monotonic() - t, stage or STAGE_OF.get(what, what))

    def fold(self, into, other_id: str) -> None:
        """A variant measured for `into` (a batching-search point not kept): its time is `into`'s."""
        for st, v in self.costs.pop(other_id, {}).items():  # every second of `spent` went through charge()
            self.charge(into, v, st)
        self.spent.pop(other_id, None)

    def probe_cap(self) -> float:
        """Seconds of a default probe's timed pass on this device (an option's probe_s replaces it)."""
        return 3.0 if self.cfg.device == "cpu" else 6.0

    def reserve_s(self) -> float:
        """Seconds of the probe share kept for the steps that must still run (the naive baseline, the
        reference's probe on a CPU): each a warm-up and a probe, the baseline also what the reference's
        preparation and verification cost; at most RESERVE_SHARE of the budget together."""
        if not self.owed:
            return 0.0
        ref = next((k for k, o in self.options.items() if o.role == "reference"), None)
        first = sum(self.costs.get(ref, {}).get(k, 0.0) for k in ("prepare", "verify")) if ref else 0.0
        cap = self.probe_cap()
        need = sum((first if step == "baseline" else 0.0) + 2 * cap for step in self.owed.values())
        return min(need, RESERVE_SHARE * self.budget.total_s)

    def first_run_cap(self, c) -> float:
        """The most seconds a long first run (prepare, then the first probe's warm-up: a compile, a capture) may take:
        what is left of the budget less what is kept (the owed steps, the artifact and report), not a stage share."""
        kept = (self.reserve_s() if c.id not in self.owed else 0.0) + self.budget.tail_s()
        return max(1.0, min(self.cfg.candidate_timeout_s, self.budget.left() - kept))

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
    def start(self, c, cap_s: float | None = None) -> bool:
        """Prepare `c`'s engine (shared by candidates that differ only in how they are batched), within `cap_s`
        when given (a long first run: first_run_cap). The caller (try_option) has already checked that the
        engine is available here."""
        if c.engine_id in self.workers:
            sib = next((r for k, r in self.results.items() if self.cands[k].engine_id == c.engine_id
                        and r.status == "ok"), None)
            self.record(c, status="ok", reason="", prepare_s=sib.prepare_s if sib else None,
                        executed=sib.executed if sib else {}, compile=sib.compile if sib else {})
            return True
        if c.engine_id in self.dead:
            status, why = self.dead[c.engine_id]
            self.record(c, status=status, reason=why)
            return False
        self.console.print(f"  preparing {c.engine_id} ...", highlight=False)
        t = time.monotonic()
        self.record(c, status="ok", stage="prepare", reason="")  # a late try clears its skip
        own = c.option("timeout_s") if hasattr(c, "option") else None  # a candidate's own timeout wins
        usual = float(own) if own else self.timeout("probe", 60.0)
        w = self.task.worker(c, usual if own or cap_s is None else cap_s)
        try:
            info = w.ready()
        except WorkerFailed as e:
            w.kill()
            self.charge(c, time.monotonic() - t, "prepare")
            self.dead[c.engine_id] = ("failed", f"prepare failed: {short(e)}")
            self.record(c, status="failed", reason=f"prepare failed: {short(e)}")
            self.console.print(f"  [red]failed[/] {c.id}: {short(e)}", highlight=False)
            return False
        except BaseException:  # SIGTERM or Ctrl-C while it starts: stop() does not know this worker yet
            w.kill()
            raise
        self.workers[c.engine_id] = w
        if hasattr(w, "timeout_s"):
            w.timeout_s = usual  # the cap was for the preparation; later calls get the usual timeout
        self.record(c, status="ok", prepare_s=round(info["prepare_s"], 2), executed=info["executed"],
                    **info.get("record", {}))
        self.charge(c, time.monotonic() - t, "prepare")
        return True

    def probe(self, o: Option, limit_s: float | None = None) -> Probe | None:
        """Probe `o` (its call bounded by `limit_s`, or by the probe share). The first probe's warm-up (Probe.warm_s:
        where a compiled engine compiles) is charged to the candidate's "prepare" stage, not to "probe"; so is all
        of a first probe with a long first run (probe_s) that failed or timed out in its compile."""
        c = o.candidate
        cap, first = o.probe_s or self.probe_cap(), c.id not in self.probes
        before = self.costs.get(c.id, {}).get("probe", 0.0)
        # a probe may not outlive the probe stage's share of the budget by much: one batch of a big model on a
        # small CPU (Qwen3-0.6B, 2 cores) outlasted the old fixed 120 s and the run overran its budget by 13%
        self.task.call_limit_s = limit_s or max(PROBE_CALL_FLOOR_S, self.budget.stage_left("probe") + 15.0)
        try:
            pr = self.call(c, "probe", lambda w: self.task.probe(w, c, cap))
        finally:
            self.task.call_limit_s = None
        if first and c.id in self.results:
            spent = self.costs.get(c.id, {}).get("probe", 0.0) - before
            self.recharge(c, pr.warm_s if pr is not None else spent if o.probe_s else 0.0, "probe", "prepare")
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
    if o.role == "candidate" and (why := _no_time(run, o)):
        run.record(c, status="skipped", reason=why, why_tried=o.why)
        defer(run, "option", o, why)
        return
    # a long first run is capped by the budget (what is left, less what is kept), not by the probe share
    cap, t = (run.first_run_cap(c) if o.probe_s else None), time.monotonic()
    if not run.start(c, cap):
        run.record(c, why_tried=o.why)
        _capped(run, c, cap)
        return
    run.record(c, why_tried=o.why)
    if o.role == "reference":  # verified now (its outputs are what every candidate is checked against), probed later
        if not run.verify(c):
            raise InfertuneError(f"the reference {c.id} failed: {run.results[c.id].reason}")
        return
    pr = run.probe(o, None if cap is None else max(1.0, cap - (time.monotonic() - t)))
    run.owed.pop(c.id, None)
    if pr is None:
        _capped(run, c, cap)
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


def _no_time(run: Run, o: Option) -> str | None:
    """Why `o` may not start now (what is left of the probe share, less what the owed steps need), or None.
    An option with a long first run (a compile, graph capture: its probe_s) needs half of it left, or it would
    eat the next stages' time for a probe that may not finish. The reference's own probe on a GPU needs its
    capped warm-up and probe (3 probe caps: a probe can take far more than the floor). In the late
    pass (shares re-cut from what was left) nothing is skipped before the run has used 80% of its budget."""
    b = run.budget
    need = max(PROBE_MIN_S, (o.probe_s or 0.0) / 2)
    first = f" (its first run needs ~{o.probe_s:.0f} s)" if o.probe_s and need > PROBE_MIN_S else ""
    if run.late and (took := start_s(run)) > need:
        need, first = took, f" (a start, verification and probe took {took:.0f} s here)"
    if o.role == "reference" and run.cfg.device != "cpu":
        need = max(need, 3 * run.probe_cap())
        first = " (its capped warm-up and probe)"
    reserve = run.reserve_s() if o.candidate.id not in run.owed else 0.0
    left = b.stage_left("probe") - reserve
    if left >= need or (run.late and not b.may_skip()):
        return None
    return (f"time budget: {need:.0f} s needed to start{first}, {max(left, 0.0):.0f} s left for it "
            f"({b.elapsed():.0f} of {b.total_s:.0f} s used, --time-budget"
            + (f"; {reserve:.0f} s kept for the naive baseline" if reserve >= 1 else "") + ")")


def start_s(run: Run) -> float:
    """For a task with measured starts (Task.measured_starts): the least seconds an option's start, verification and
    probe took in this run, 0 before one has. What a late pass needs left to start one: it had started a server with
    75 s of 840 left and overran by 550 s (docs/measurements/2026-12-06-epyc-smollm2-quick-quantized). The first pass
    starts on the probe share alone: there a start that runs over the share takes from the stages after it, and the
    options it defers come back only in a late pass, after the leaders' passes have used the time."""
    if not run.task.measured_starts:
        return 0.0
    took = [c["prepare"] + c.get("verify", 0.0) + c["probe"] for c in run.costs.values() if "prepare" in c
            and "probe" in c]
    return min(took, default=0.0)


def _capped(run: Run, c, cap: float | None) -> None:
    """A long first run that timed out under its budget cap says so (it did not fail on its own)."""
    r = run.results[c.id]
    if cap is not None and r.status == "failed" and "timed out" in r.reason:
        run.record(c, reason=f"{r.reason} (its first run was capped at {cap:.0f} s: what was left of the time "
                             "budget, less what the owed steps and the report need)")


def defer(run: Run, step: str, o: Option, why: str) -> None:
    """`o` is skipped for time (`why`); the late pass tries it if the run leaves time unused (tuning.driver)."""
    if all(d.candidate.id != o.candidate.id for _, d in run.deferred):
        run.deferred.append((step, o))
    run.console.print(f"  [yellow]skip[/] {o.candidate.id}: {why}", highlight=False)


def skipped_for_time(run: Run) -> list[tuple[str, Option]]:
    """The deferred steps whose candidate is still recorded as skipped for time."""
    return [(step, o) for step, o in run.deferred if (r := run.results.get(o.candidate.id)) is not None
            and r.status == "skipped" and "time budget" in r.reason]


def probe_reference(run: Run, o: Option) -> None:
    """The reference's own probe, in its place by prior. On a CPU it always runs (its time is kept from the
    probe share): the lossless fp32 engine is often what meets the SLO when the faster ones do not. On a GPU it
    is skipped for time once a verified candidate probed faster: fp32 there trails every half-precision engine
    by an order of magnitude, and its capped probe still costs a large share of a quick budget."""
    c = o.candidate
    r = run.results.get(c.id)
    if r is None or r.status != "ok" and not (run.late and "time budget" in r.reason):
        return
    if c.id not in run.owed and run.best_probe[0] > 0 and (why := _no_time(run, o)):
        why = f"probe skipped ({why}); its outputs verified the candidates"
        run.record(c, status="skipped", reason=why)
        run.release(c)
        defer(run, "reference-probe", o, why)
        return
    if c.engine_id not in run.workers and not run.start(c):  # late: its worker went when its probe was put off
        return
    pr = run.probe(o)
    run.owed.pop(c.id, None)
    if pr is None:
        if run.late:  # its outputs verified the candidates already: the run goes on without its figure
            return
        raise InfertuneError(f"the reference {c.id} failed: {run.results[c.id].reason}")
    if pr.speed > run.best_probe[0]:
        run.best_probe = (pr.speed, c.id)
    run.budget.tail_est_s = run.task.tail_estimate_s(pr.speed)  # the reference is the slowest engine a winner can be
    run.console.print(f"  probe {c.id}: {pr.speed:.1f} {run.task.unit} (the reference)", highlight=False)
