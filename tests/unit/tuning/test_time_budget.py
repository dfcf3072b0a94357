"""The time budget on a fake clock: a fake task whose options declare what preparing, compiling, probing, verifying
and measuring them costs, the whole search loop (driver._search) run with no processes and no sleeps. A run never
ends with an option skipped for time while it used less than 80% of its budget; a long first run (a compile) is
charged to the candidate's "prepare" stage and capped by what is left of the budget, not by the probe share."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from infertune.config import Candidate
from infertune.results import Accuracy, Latency, TuneResult
from infertune.tuning import budget, driver, search
from infertune.tuning.budget import Budget
from infertune.tuning.decide import decide
from infertune.tuning.task import Option, Probe, Task
from infertune.tuning.worker import WorkerFailed


class _Clock:
    def __init__(self):
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    fake = SimpleNamespace(monotonic=c.monotonic)
    monkeypatch.setattr(search, "time", fake)
    monkeypatch.setattr(budget, "time", fake)
    return c


# what each engine costs on the fake clock, in seconds, and how fast it probes and measures (items/s): a GPU host's
# MiniLM tune in miniature, where the two compiled torchao engines declare a 90 s first run (probe_s)
CHEAP = {"prepare": 8.0, "warm": 5.0, "probe": 6.0, "verify": 3.0, "pass": 2.0}
COMPILE = {**CHEAP, "warm": 40.0}
REF = Option(Candidate(backend="torch-eager", precision="fp32"), "reference", 1.0, role="reference")
BASE = Option(Candidate(backend="st-naive", precision="fp32"), "baseline", 0.6, role="baseline")
PACKED = Option(Candidate(backend="torch-eager", precision="fp16", options=(("batches", "packed"),)), "packed", 4.2)
FP16 = Option(Candidate(backend="torch-eager", precision="fp16"), "fp16", 4.0)
BF16 = Option(Candidate(backend="torch-eager", precision="bf16"), "bf16", 3.9)
ORT = Option(Candidate(backend="onnxruntime", precision="fp32"), "ort", 3.6)
FP8 = Option(Candidate(backend="torch-compile", precision="fp8", quant="torchao-fp8"), "fp8", 3.5, probe_s=90.0)
INT8 = Option(Candidate(backend="torch-compile", precision="int8", quant="torchao-int8-dyn"), "int8", 3.0,
              probe_s=90.0)
SPEED = {REF: 140.0, BASE: 100.0, PACKED: 1700.0, FP16: 1600.0, BF16: 1550.0, ORT: 500.0, FP8: 2400.0, INT8: 2000.0}
OPTIONS = list(SPEED)


class _Worker:
    def __init__(self, clock: _Clock, cost: dict, timeout_s: float):
        self.clock, self.cost, self.timeout_s = clock, cost, timeout_s

    def ready(self):
        return {"prepare_s": self.clock_call(self.cost["prepare"], self.timeout_s), "executed": {}}

    def clock_call(self, seconds: float, limit: float | None) -> float:
        """Advance the clock by what the call costs; past its limit, the worker times out there."""
        if limit is not None and seconds > limit:
            self.clock.t += limit
            raise WorkerFailed(f"timed out after {limit:.0f} s")
        self.clock.t += seconds
        return seconds

    def kill(self):
        pass

    def stop(self):
        pass


class _Task(Task):
    kind, unit = "embedding", "items/s"

    def __init__(self, clock: _Clock, cost: dict[str, dict] | None = None):
        cfg = SimpleNamespace(device="cuda", drop_below=0.5, rounds=2, quick=True, confirm_rounds=1, tie_margin=0.05,
                              candidate_timeout_s=600, candidates=None)
        from rich.console import Console

        super().__init__(cfg, Console(quiet=True))
        self.clock, self.warmed = clock, set()
        self.cost = {o.candidate.id: COMPILE if o.probe_s else CHEAP for o in OPTIONS} | (cost or {})
        self.speed_of = {o.candidate.id: s for o, s in SPEED.items()}
        self.prepared: list[str] = []

    def worker(self, cand, timeout_s):
        self.prepared.append(cand.id)
        return _Worker(self.clock, self.cost[cand.id], timeout_s)

    def probe(self, worker, cand, cap_s):
        cost, first = self.cost[cand.id], cand.id not in self.warmed
        warm = cost["warm"] if first else 0.0
        worker.clock_call(warm + cost["probe"], self.call_limit_s)
        self.warmed.add(cand.id)
        return Probe(speed=self.speed_of[cand.id], p99_ms=50.0, warm_s=warm)

    def verify(self, worker, cand):
        worker.clock_call(self.cost[cand.id]["verify"], None)
        return Accuracy(cosine_mean=1.0, cosine_min=1.0), True, ""

    def measure(self, worker, cand, max_s=None):
        worker.clock_call(min(self.cost[cand.id]["pass"], max_s or float("inf")), None)
        return {"speed": self.speed_of[cand.id]}

    def pass_s(self, run, cand):
        return self.cost[cand.id]["pass"]

    def summarize(self, run, cand, samples):
        return {"items_per_s": samples[-1]["speed"], "latency_ms": Latency(p50=20.0, p99=50.0, n=10)}

    def speed(self, r):
        return r.items_per_s or 0.0

    def slo(self, r):
        return r.latency_ms.p99, 100.0

    @staticmethod
    def drift(r):
        return None


def _tune(clock: _Clock, total_s: float, tmp_path: Path, cost: dict | None = None):
    """The search loop over OPTIONS on the fake clock; returns (run, result by name, seconds the run used)."""
    task = _Task(clock, cost)
    run = search.Run(task, task.cfg, tmp_path, task.console, Budget(total_s, start=clock.t))
    run.owed[BASE.candidate.id] = "baseline"
    result = TuneResult(model="m", config={}, environment={}, out_dir=str(tmp_path))
    driver._search(run, task, search.order(OPTIONS), result, tmp_path)
    decide(task, result, task.cfg.tie_margin, task.drift)
    driver._finish_log(run, result)
    return run, {r.name: r for r in result.candidates}, run.budget.elapsed(), result


def _skipped_for_time(by: dict) -> list[str]:
    return [k for k, r in by.items() if r.status == "skipped" and "time budget" in r.reason]


def test_compiled_options_put_off_by_the_probe_share_are_tried_when_the_run_would_end_early(clock, tmp_path):
    """The H100 story: the probe share ran out before the two compiled torchao engines (90 s first runs) could start,
    and the run would have ended with half its budget unused. They are tried now, and the fastest of them wins."""
    run, by, used, result = _tune(clock, 300.0, tmp_path)
    assert _skipped_for_time(by) == []
    put_off = [o.candidate.id for _, o in run.deferred]
    assert FP8.candidate.id in put_off and INT8.candidate.id in put_off  # the probe share was over for them
    for o in (FP8, INT8):
        r = by[o.candidate.id]
        assert r.probe and r.probe["speed"] == SPEED[o] and r.items_per_s == SPEED[o], (r.status, r.reason)
        # the compile is the candidate's preparation: prepare + the first warm-up, not its probe
        assert run.costs[o.candidate.id]["prepare"] == pytest.approx(COMPILE["prepare"] + COMPILE["warm"])
        assert run.costs[o.candidate.id]["probe"] == pytest.approx(COMPILE["probe"])
    assert result.winner.name == FP8.candidate.id
    assert used <= 300.0
    assert result.search["cost_s"]["prepare"] >= 2 * COMPILE["warm"]


def test_a_budget_too_small_for_the_compiles_skips_them_only_after_using_most_of_it(clock, tmp_path):
    """150 s with timed passes of 20 s: the rounds fill their shares, so the late pass finds no time; the compiles
    are skipped for time, never prepared, and the run used at least 80% of its budget without overrunning it."""
    slow = {o.candidate.id: {**CHEAP, "pass": 20.0} for o in (BASE, PACKED, FP16)}
    run, by, used, _ = _tune(clock, 150.0, tmp_path, slow)
    assert FP8.candidate.id in _skipped_for_time(by) and INT8.candidate.id in _skipped_for_time(by)
    assert FP8.candidate.id not in run.task.prepared and INT8.candidate.id not in run.task.prepared
    assert 0.8 * 150.0 <= used <= 150.0
    why = by[FP8.candidate.id].reason
    assert re.match(r"time budget: 45 s needed to start \(its first run needs ~90 s\), \d s left for it "
                    r"\(1[2-4]\d of 150 s used", why), why


def test_the_invariant_holds_whatever_the_budget(clock, tmp_path):
    """At the end of every run, an option skipped for time means the run used at least 80% of its budget."""
    for total in (60.0, 100.0, 150.0, 200.0, 250.0, 300.0, 400.0, 600.0):
        clock.t = 1000.0
        _, by, used, _ = _tune(clock, total, tmp_path)
        assert not _skipped_for_time(by) or used >= budget.USED_BEFORE_SKIP * total, (total, used)


def _late_run(clock: _Clock, total_s: float, used_s: float) -> search.Run:
    task = _Task(clock)
    run = search.Run(task, task.cfg, Path("."), task.console, Budget(total_s, start=clock.t - used_s))
    run.budget.recut()
    run.late = True
    return run


def test_a_compile_that_needs_more_than_is_left_is_skipped_with_the_seconds_needed_and_left(clock):
    """In the late pass, at 250 of 300 s (past 80%): the re-cut probe share has 17 s left, the compile needs 45."""
    run = _late_run(clock, 300.0, 250.0)
    search.try_option(run, FP8)
    r = run.results[FP8.candidate.id]
    assert r.status == "skipped"
    assert r.reason.startswith("time budget: 45 s needed to start (its first run needs ~90 s), 17 s left for it "
                               "(250 of 300 s used"), r.reason
    assert run.task.prepared == []
    # at 230 s (under 80%) it is started all the same, though 29 s are left of the share: the time would go unused
    early = _late_run(clock, 300.0, 230.0)
    early.task.cost[FP8.candidate.id] = {**COMPILE, "warm": 30.0}
    search.try_option(early, FP8)
    assert early.results[FP8.candidate.id].status == "ok" and FP8.candidate.id in early.probes


def test_a_compile_is_capped_by_what_is_left_of_the_budget_not_by_the_probe_share(clock):
    """Started with 65 s of the probe share left (its 45 s fit): a 150 s compile finishes (the old cap, the probe
    share plus 15 s, cut it at 72 s); a 250 s one is stopped where the report's share begins, and says why."""
    for warm, finishes in ((150.0, True), (250.0, False)):
        clock.t = 1000.0
        task = _Task(clock, {FP8.candidate.id: {**COMPILE, "warm": warm}})
        run = search.Run(task, task.cfg, Path("."), task.console, Budget(300.0, start=clock.t - 100.0))
        search.try_option(run, FP8)
        r, cost = run.results[FP8.candidate.id], run.costs[FP8.candidate.id]
        if finishes:
            assert r.status == "ok" and cost["prepare"] == pytest.approx(COMPILE["prepare"] + warm)
        else:
            assert r.status == "failed" and "capped at 179 s" in r.reason, r.reason
            assert run.budget.elapsed() == pytest.approx(300.0 - run.budget.tail_s())
            assert cost["prepare"] == pytest.approx(179.0) and not cost.get("probe")


def test_a_measured_tail_estimate_ends_every_stage_before_it(clock):
    b = Budget(150.0, start=clock.t)
    assert b.tail_s() == pytest.approx(150.0 * (1 - max(budget.SHARES.values())))  # the share: 10.5 s
    assert b.stage_left("confirm") == pytest.approx(0.93 * 150.0)
    b.tail_est_s = 30.0  # the artifact's speed passes over long texts on a slow host
    assert b.tail_s() == 30.0
    assert b.stage_left("confirm") == pytest.approx(120.0) and b.stage_left("probe") == pytest.approx(0.55 * 150.0)
    b.tail_est_s = 500.0  # a slow reference keeps at most MAX_TAIL_SHARE from the stages
    assert b.tail_s() == pytest.approx(budget.MAX_TAIL_SHARE * 150.0)
    clock.t += 120.0
    assert b.stage_left("full") == pytest.approx(150.0 * (1 - budget.MAX_TAIL_SHARE) - 120.0)


def test_a_server_start_is_not_begun_in_the_late_pass_with_less_left_than_one_took(clock):
    """A task whose options are servers (measured_starts): past 80% of the budget, the late pass does not start one
    when less is left than the quickest start, verification and probe took in this run (a served tune started a
    vLLM server with 75 s of 840 left and overran by 550 s). Without measured starts the same option starts."""
    costs = {"ref": {"prepare": 100.0, "verify": 50.0, "probe": 20.0}, "q": {"prepare": 150.0, "probe": 20.0}}
    for measured in (True, False):
        run = _late_run(clock, 300.0, 250.0)
        run.task.measured_starts = measured
        run.costs.update(costs)
        assert search.start_s(run) == (170.0 if measured else 0.0)
        search.try_option(run, PACKED)
        r = run.results[PACKED.candidate.id]
        if measured:
            assert r.status == "skipped" and PACKED.candidate.id not in run.task.prepared
            assert r.reason.startswith("time budget: 170 s needed to start (a start, verification and probe took "
                                       "170 s here), 17 s left for it (250 of 300 s used"), r.reason
        else:
            assert r.status == "ok" and PACKED.candidate.id in run.probes, r.reason
    # the first pass starts on the probe share alone (one deferred there comes back only after the leaders' passes
    # used the time): at 130 of 300 s, 35 s of the share left, the option starts though a start took 170 s
    task = _Task(clock)
    task.measured_starts = True
    first = search.Run(task, task.cfg, Path("."), task.console, Budget(300.0, start=clock.t - 130.0))
    first.costs.update(costs)
    search.try_option(first, PACKED)
    assert first.results[PACKED.candidate.id].status == "ok" and PACKED.candidate.id in first.probes
