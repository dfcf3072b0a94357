"""The order of work (tuning.search.order) and the time kept for the naive baseline, on hosts this box is not:
the capabilities are faked, so the rules are checked for an H200, an AMX Xeon and an AVX2-only EPYC."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from infertune.config import Candidate
from infertune.hardware import GPU, Capabilities, needs
from infertune.hardware.capabilities import read_cpu
from infertune.tuning import rounds, search
from infertune.tuning.budget import Budget
from infertune.tuning.task import Option, Probe, Task

H200 = Capabilities(device="cuda", cpu=read_cpu("fma avx2 avx512f avx512bw avx512vl"),
                    gpus=(GPU(name="NVIDIA H200", capability=(9, 0), memory_gb=139),))
AMX = Capabilities(device="cpu", cpu=read_cpu("fma avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 "
                                              "amx_tile amx_bf16 amx_int8"))
AVX2 = Capabilities(device="cpu", cpu=read_cpu("fma avx2"))


def _steps(opts, caps):
    return [(step, o.candidate.id) for step, o in search.order([o for o in opts if needs(caps, o.needs) is None])]


def test_on_a_gpu_the_half_precision_and_packed_embedders_come_before_the_fp32_reference_and_the_baseline():
    from infertune.tasks.embedding.candidates import options

    steps = _steps(options(H200, quick=True), H200)
    assert steps[0] == ("reference", "torch-eager/fp32/tokens-16384")  # verified first: the others need its vectors
    ids = [i for _, i in steps]
    ref_probe = steps.index(("reference-probe", "torch-eager/fp32/tokens-16384"))
    for half in ("torch-eager/fp16/batches=packed/tokens-16384", "torch-eager/fp16/tokens-16384",
                 "torch-eager/bf16/tokens-16384", "torch-compile/fp16/tokens-16384"):
        assert ids.index(half) < ref_probe
    assert steps[-1] == ("option", "st-naive/fp32/batch-32")  # it cannot win: last, with its time kept


def test_on_a_cpu_the_reference_probe_takes_its_place_by_prior_and_the_baseline_is_last():
    from infertune.tasks.embedding.candidates import options

    for caps in (AMX, AVX2):
        opts = [o for o in options(caps, quick=True) if needs(caps, o.needs) is None]
        steps = search.order(opts)
        assert steps[0][0] == "reference" and steps[-1][1].role == "baseline"
        middle = [o.prior for step, o in steps[1:-1]]
        assert middle == sorted(middle, reverse=True)  # most promising first
        probe_at = next(i for i, (step, _) in enumerate(steps) if step == "reference-probe")
        assert all(o.prior >= 1.0 for _, o in steps[1:probe_at])


def test_a_long_first_run_waits_for_the_cheap_options_it_would_starve():
    """The compiled decode step (probe_s 300) took 224 s of a 540 s budget on the H200 while the cuda-graph
    options cost seconds each: they go first, so the torchao ones reach a verdict."""
    from infertune.tasks.causal_lm.candidates import options

    ids = [i for _, i in _steps(options(H200, quick=False), H200)]
    compiled = ids.index("cuda-graph-compile/bf16")
    for quant in ("torchao-int8-wo", "torchao-int4", "torchao-fp8"):
        assert ids.index(f"cuda-graph/bf16/{quant}") < compiled
    assert ids.index("cuda-graph/bf16") < compiled


class _Task(Task):
    def __init__(self, device="cuda"):
        super().__init__(SimpleNamespace(device=device, drop_below=0.5), SimpleNamespace(print=lambda *a, **k: None))

    def available(self, cand):
        return None

    def probe(self, worker, cand, cap_s):
        return Probe(speed=1.0)


def _run(total_s: float, elapsed_s: float, device="cuda") -> search.Run:
    task = _Task(device)
    return search.Run(task, task.cfg, Path("."), task.console, Budget(total_s, start=time.monotonic() - elapsed_s))


def test_time_is_kept_for_the_baseline_until_it_has_run():
    run = _run(400.0, 0.0)
    ref, base = Candidate(backend="torch-eager"), Candidate(backend="st-naive")
    run.options[ref.id] = Option(ref, "reference", role="reference")
    run.record(ref, status="ok")
    run.charge(ref, 12.0, "prepare")
    run.charge(ref, 8.0, "verify")
    assert run.reserve_s() == 0.0  # nothing owed
    run.owed[base.id] = "baseline"
    assert run.reserve_s() == 12.0 + 8.0 + 2 * 6.0  # what the reference's start cost, plus a warm-up and a probe
    run.charge(ref, 100.0, "prepare")
    assert run.reserve_s() == search.RESERVE_SHARE * 400.0  # bounded
    # a candidate that would eat the kept time is skipped, and says so
    late = _run(400.0, 0.55 * 400.0 - 20.0)
    late.options, late.results, late.costs, late.owed = run.options, run.results, run.costs, run.owed
    fp16 = Option(Candidate(backend="torch-eager", precision="fp16"), "fp16", 4.0)
    search.try_option(late, fp16)
    r = late.results[fp16.candidate.id]
    assert r.status == "skipped" and "kept for the naive baseline" in r.reason


def test_the_baselines_timed_calls_are_capped_at_its_share():
    run = _run(180.0, 0.0)
    base, other = Candidate(backend="st-naive"), Candidate(backend="torch-eager", precision="fp16")
    run.options[base.id] = Option(base, "baseline", role="baseline")
    run.options[other.id] = Option(other, "fp16", 4.0)
    assert rounds._baseline_cap(run, base, None) == rounds.BASELINE_PASS_SHARE * 180.0
    assert rounds._baseline_cap(run, base, 1.5) == 1.5
    assert rounds._baseline_cap(run, other, None) is None
    short = _run(40.0, 0.0)
    short.options = run.options
    assert rounds._baseline_cap(short, base, None) == 3.0  # never less than 3 s


def test_stage_costs_add_up_per_candidate_and_fold_the_variants_in():
    run = _run(180.0, 0.0)
    c = Candidate(backend="torch-eager", precision="fp16")
    v = c.model_copy(update={"precision": "bf16"})
    run.record(c, status="ok")
    run.record(v, status="ok")
    run.charge(c, 2.0, "probe")
    run.charge(v, 3.0, "refine")
    run.fold(c, v.id)
    assert run.costs[c.id] == {"probe": 2.0, "refine": 3.0} and v.id not in run.costs
    assert run.results[c.id].time_s == 5.0


def test_a_rounds_cost_is_what_its_calls_took_when_that_is_more_than_the_estimate():
    run = _run(180.0, 0.0)
    c = Candidate(backend="torch-eager", precision="bf16")
    run.options[c.id] = Option(c, "bf16", 3.9)
    run.record(c, status="ok")
    run.task.pass_s = lambda run, c: 1.5  # items/s says 1.5 s
    assert rounds._call_s(run, c) == 1.5
    run.samples[c.id] = [{}, {}]
    run.charge(c, 8.8, "full")  # two calls took 4.4 s each
    assert rounds._call_s(run, c) == 4.4


def test_on_a_gpu_the_references_probe_is_skipped_for_time_once_a_candidate_probed_and_says_why():
    run = _run(180.0, 0.55 * 180.0 - 10.0)  # 10 s left of the probe share: under its 3 probe caps
    ref = Option(Candidate(backend="torch-eager"), "reference", role="reference")
    run.options[ref.candidate.id] = ref
    run.record(ref.candidate, status="ok")
    run.best_probe = (1500.0, "torch-eager/bf16")
    search.probe_reference(run, ref)
    r = run.results[ref.candidate.id]
    assert r.status == "skipped" and "probe skipped" in r.reason and "18 s needed to start" in r.reason
    # on a CPU (or where it is owed) it runs whatever the time
    cpu = _run(180.0, 0.55 * 180.0 - 10.0, device="cpu")
    cpu.options[ref.candidate.id] = ref
    cpu.record(ref.candidate, status="ok")
    cpu.owed[ref.candidate.id] = "reference-probe"
    cpu.workers[ref.candidate.engine_id] = object()
    cpu.best_probe = (100.0, "x")
    search.probe_reference(cpu, ref)
    assert cpu.results[ref.candidate.id].status == "ok" and ref.candidate.id not in cpu.owed
