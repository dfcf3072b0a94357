"""The search bounds a probe call by what is left of the probe stage's share of the budget (floor 60 s), and
clears the bound afterwards."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from infertune.config import Candidate
from infertune.tuning import search
from infertune.tuning.budget import SHARES, Budget
from infertune.tuning.task import Option, Probe, Task


class _Task(Task):
    def __init__(self):
        super().__init__(SimpleNamespace(device="cpu"), SimpleNamespace(print=lambda *a, **k: None))
        self.seen: list[float | None] = []

    def probe(self, worker, cand, cap_s):
        self.seen.append(self.call_limit_s)
        return Probe(speed=1.0, p99_ms=1.0, detail={})


def _run(total_s: float, elapsed_s: float) -> tuple[search.Run, _Task, Option]:
    import time

    task = _Task()
    run = search.Run(task, task.cfg, Path("."), task.console, Budget(total_s, start=time.monotonic() - elapsed_s))
    c = Candidate(backend="fake")
    run.workers[c.engine_id] = object()  # a live worker (the stub task never touches it)
    run.record(c, status="ok")
    return run, task, Option(c, "test", 1.0)


def test_probe_call_limit_follows_the_probe_share():
    run, task, o = _run(1000.0, 0.0)  # 550 s of probe share left
    assert run.probe(o) is not None
    assert 550 <= task.seen[-1] <= 566 and task.call_limit_s is None
    run, task, o = _run(150.0, 80.0)  # the share is over: the floor
    run.probe(o)
    assert task.seen[-1] == search.PROBE_CALL_FLOOR_S == 60.0
    assert SHARES["probe"] * 150.0 - 80.0 + 15.0 < 60.0


def test_an_option_with_a_long_first_run_is_not_started_late():
    """A compile-type option (probe_s) starts only with half its first-run time left of the probe share; a plain
    option still starts with PROBE_MIN_S left. Both skips say why."""
    c = Candidate(backend="torch-compile")
    run, task, _ = _run(100.0, 55.0 - 20.0)  # 20 s left of the probe share (55 s)
    slow = Option(c, "compiled", 1.0, probe_s=60.0)
    search.try_option(run, slow)
    r = run.results[c.id]
    assert r.status == "skipped" and "~60 s" in r.reason
    run, task, _ = _run(100.0, 55.0 - 5.0)  # 5 s left: below PROBE_MIN_S, a plain option is skipped too
    plain = Option(Candidate(backend="fake", precision="fp16"), "plain", 1.0)
    search.try_option(run, plain)
    assert run.results[plain.candidate.id].status == "skipped"
