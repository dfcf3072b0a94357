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
