"""The first timed pass of a compiled LM engine compiles every batch size; within a capped pass only the
sizes whose compile fits are measured, so a max-autotune engine cannot run past the stage's share."""

from __future__ import annotations

from types import SimpleNamespace

from infertune.tasks.causal_lm.task import CausalLMTask, warm_batches


def test_all_batch_sizes_without_a_cap_or_a_known_compile_cost():
    assert warm_batches([1, 2, 4, 8], 60.0, None) == [1, 2, 4, 8]
    assert warm_batches([1, 2, 4, 8], 0.0, 30.0) == [1, 2, 4, 8]  # eager: nothing to compile


def test_a_cap_keeps_batch_1_and_the_sizes_whose_compile_fits():
    assert warm_batches([1, 2, 4, 8], 60.0, 30.0) == [1]
    assert warm_batches([1, 2, 4, 8], 60.0, 130.0) == [1, 2]
    assert warm_batches([1, 2, 4, 8], 10.0, 1000.0) == [1, 2, 4, 8]


class _Worker:
    def __init__(self):
        self.calls = []

    def call(self, what, timeout, **kw):
        self.calls.append(kw["batches"])
        return {"tpot": {str(b): [1.0] for b in kw["batches"]}, "ttft": {"8": [2.0]}}


def test_the_pass_estimate_counts_the_compiles_and_measure_keeps_what_it_warmed():
    task = CausalLMTask.__new__(CausalLMTask)
    task.cfg = SimpleNamespace(candidate_timeout_s=600.0)
    task.console = SimpleNamespace(print=lambda *a, **k: None)
    task.plan = {"batches": [1, 2, 4, 8], "ttft": {"8": [0] * 8}, "ctx": [0] * 8, "steps": 16}
    task.call_s, task.warm_s, task.batches = {"c": 2.0}, {"c": 60.0}, {}
    cand = SimpleNamespace(id="c")
    assert task.pass_s(None, cand) == 2 * 2.0 + 60.0 * 3  # before the first pass: three sizes to compile
    w = _Worker()
    task.measure(w, cand, max_s=70.0)
    assert w.calls == [[1], [1]]  # the warm-up and the pass, batch 1 only
    task.measure(w, cand, max_s=None)
    assert w.calls[-1] == [1]  # later passes measure what the first one warmed, n stays comparable
    assert task.pass_s(None, cand) == task.call_s["c"]


class _TimedWorker(_Worker):
    """Each call takes `first` seconds the first time (a compile or a capture there) and `per_step` per step."""

    def __init__(self, clock, first, per_step):
        super().__init__()
        self.clock, self.first, self.per_step = clock, first, per_step

    def call(self, what, timeout, **kw):
        self.clock.t += (self.first if not self.calls else 0.0) + self.per_step * kw["steps"]
        return super().call(what, timeout, **kw)


def _probe(monkeypatch, first, per_step):
    import infertune.tasks.causal_lm.task as mod

    clock = SimpleNamespace(t=0.0)
    monkeypatch.setattr(mod.time, "monotonic", lambda: clock.t)
    task = CausalLMTask.__new__(CausalLMTask)
    task.cfg = SimpleNamespace(candidate_timeout_s=600.0)
    task.plan = {"batches": [1, 4], "ttft": {"8": [0] * 8}, "ctx": [0] * 8, "steps": 16}
    task.call_s, task.warm_s = {}, {}
    task.probe(_TimedWorker(clock, first, per_step), SimpleNamespace(id="c"), 30.0)
    return task.warm_s["c"]


def test_the_probe_counts_only_the_warm_ups_excess_as_a_compile(monkeypatch):
    # an eager loop on a loaded box: slow steps, nothing compiled; its first pass keeps every batch size
    assert _probe(monkeypatch, first=0.0, per_step=2.0) == 0.0
    assert warm_batches([1, 4], _probe(monkeypatch, first=0.0, per_step=2.0), 5.0) == [1, 4]
    # a compiled engine: the warm-up's 100 s compile is what the next batch size will cost again
    assert 90.0 <= _probe(monkeypatch, first=100.0, per_step=0.01) <= 100.0
