"""The whole search loop (driver._search) on a GPU host's options, with a fake task and no processes: the
order, the reference's probe and a long first run put off for time once a candidate probed, then tried in the
late pass because the run had time left, the owed baseline measured, the costs recorded, the fastest candidate
picked. The GPU path is otherwise only run on an H200, where a crash in it (a format of a missing probe_s)
cost a GPU run."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from infertune.config import Candidate
from infertune.results import Accuracy, Latency, TuneResult
from infertune.tuning import driver, search
from infertune.tuning.budget import Budget
from infertune.tuning.decide import decide
from infertune.tuning.task import Option, Probe, Task

SPEED = {"fp32": 140.0, "fp16": 1600.0, "bf16": 1550.0}


class _Worker:
    def ready(self):
        return {"prepare_s": 0.0, "executed": {}}

    def kill(self):
        pass

    def stop(self):
        pass


class _GpuTask(Task):
    kind, unit = "embedding", "items/s"

    def __init__(self):
        cfg = SimpleNamespace(device="cuda", drop_below=0.5, rounds=2, quick=True, confirm_rounds=1, tie_margin=0.1,
                              candidate_timeout_s=60, candidates=None)
        from rich.console import Console

        super().__init__(cfg, Console(quiet=True))

    def worker(self, cand, timeout_s):
        return _Worker()

    def probe(self, worker, cand, cap_s):
        return Probe(speed=SPEED.get(cand.precision, 300.0), p99_ms=50.0)

    def verify(self, worker, cand):
        return Accuracy(cosine_mean=1.0, cosine_min=1.0), True, ""

    def measure(self, worker, cand, max_s=None):
        return {"speed": SPEED.get(cand.precision, 300.0)}

    def pass_s(self, run, cand):
        return 0.01

    def summarize(self, run, cand, samples):
        return {"items_per_s": samples[-1]["speed"], "latency_ms": Latency(p50=20.0, p99=50.0, n=10)}

    def speed(self, r):
        return r.items_per_s or 0.0

    def slo(self, r):
        return r.latency_ms.p99, 100.0

    @staticmethod
    def drift(r):
        return None


def test_the_gpu_search_probes_what_can_win_first_and_what_it_put_off_for_time_when_time_is_left(tmp_path):
    task = _GpuTask()
    # 25 s left of the probe share (55 of 100 s): enough for the eager half-precision options (8 s plus the
    # 10 s kept for the baseline), not for the compile (30 s) nor the reference's capped warm-up and probe (18 s)
    run = search.Run(task, task.cfg, Path(tmp_path), task.console, Budget(100.0, start=time.monotonic() - 30.0))
    ref = Option(Candidate(backend="torch-eager", precision="fp32"), "reference", 1.0, role="reference")
    base = Option(Candidate(backend="st-naive", precision="fp32"), "baseline", 0.6, role="baseline")
    fp16 = Option(Candidate(backend="torch-eager", precision="fp16"), "fp16", 4.0)
    bf16 = Option(Candidate(backend="torch-eager", precision="bf16"), "bf16", 3.9)
    comp = Option(Candidate(backend="torch-compile", precision="fp16"), "compile", 3.8, probe_s=60.0)
    opts = [ref, base, fp16, bf16, comp]
    for o in opts:
        run.workers[o.candidate.engine_id] = _Worker()  # "prepared": no processes in a unit test
    run.owed[base.candidate.id] = "baseline"
    result = TuneResult(model="m", config={}, environment={}, out_dir=str(tmp_path))
    driver._search(run, task, search.order(opts), result, Path(tmp_path))
    decide(task, result, 0.1, task.drift)
    driver._finish_log(run, result)
    by = {r.name: r for r in result.candidates}
    # put off in the probe stage (the share had 25 s left), tried in the late pass (the run had used 30 s of 100)
    assert [o.candidate.id for _, o in run.deferred] == [comp.candidate.id, ref.candidate.id]
    assert by[comp.candidate.id].status == "ok" and by[comp.candidate.id].items_per_s == SPEED["fp16"]  # measured
    assert by[ref.candidate.id].status == "rejected" and "0.09x the fastest" in by[ref.candidate.id].reason
    assert not [r.name for r in result.candidates if r.status == "skipped"]
    assert by[base.candidate.id].items_per_s == SPEED["fp32"] and result.baseline.name == base.candidate.id
    assert result.winner.name == fp16.candidate.id  # the compile ties it: the simpler engine wins
    assert {"probe", "full", "confirm"} <= set(result.search["cost_s"])
    assert [s["stage"] for s in result.search["stages"]] == ["reference", "probe", "refine", "full", "confirm",
                                                             "late probe", "late refine", "late full", "late confirm"]
