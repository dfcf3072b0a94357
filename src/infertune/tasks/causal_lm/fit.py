"""Fit before start: whether a served causal-LM candidate's checkpoint fits the GPU's free memory, computed with
plan's arithmetic (plan/planner.budget: weights, the profile run's activation peak, the non-torch margin; plan/arch:
KV bytes per token) before any server or model starts. A candidate that cannot fit is skipped with one sentence and
the figures, instead of a vLLM start that ends minutes later in "No available memory for the cache blocks" or an
out-of-memory error.

Need = weights (the checkpoint's dtype) + KV for the workload's concurrency at the context vLLM is started with
+ the activation peak of vLLM's profile run (max-num-batched-tokens tokens) + the stated non-torch margin (plan's
`non_torch_gib`: CUDA context and library workspaces). Free = what vLLM may take: total x gpu_memory_utilization,
less whatever other processes hold when the free memory was measured (torch.cuda.mem_get_info)."""

from __future__ import annotations

from dataclasses import dataclass, replace

GIB = 2**30
DEFAULT_UTIL = 0.9  # vLLM's --gpu-memory-utilization default (plan's PlanConfig default too)


@dataclass(frozen=True)
class Fit:
    """One candidate's memory need against the device's free memory, in bytes."""

    candidate: str
    dtype: str
    weights: float
    kv: float
    activation: float
    margin: float
    free: float
    free_why: str
    concurrency: int
    context: int
    engine: str = "vLLM"  # what the free memory is for

    @property
    def need(self) -> float:
        return self.weights + self.kv + self.activation + self.margin

    @property
    def fits(self) -> bool:
        return self.need <= self.free

    def sentence(self) -> str:
        g = GIB
        return (f"needs {self.need / g:.1f} GiB ({self.dtype} weights {self.weights / g:.1f} + KV "
                f"{self.kv / g:.1f} for {self.concurrency} x {self.context} tokens + activation peak "
                f"{self.activation / g:.1f} + {self.margin / g:.1f} CUDA context and workspaces) but "
                f"{self.free / g:.1f} GiB is free for {self.engine} ({self.free_why}): does not fit, not started")

    def as_dict(self) -> dict:
        g = GIB
        return {"candidate": self.candidate, "dtype": self.dtype, "fits": self.fits,
                "need_gib": round(self.need / g, 2), "free_gib": round(self.free / g, 2), "free_why": self.free_why,
                "weights_gib": round(self.weights / g, 2), "kv_gib": round(self.kv / g, 2),
                "activation_gib": round(self.activation / g, 2), "margin_gib": round(self.margin / g, 2),
                "concurrency": self.concurrency, "context": self.context}


def free_bytes(caps, util: float | None = DEFAULT_UTIL, free: float | None = None) -> tuple[float, str] | None:
    """(bytes an engine may use on the first GPU, how that was found); None without a GPU or its size. `util`: vLLM's
    gpu_memory_utilization, None for an engine that takes what is free (the torch loops). `free`: the GiB the driver
    says are free now (hardware.gpus.free_memory_gib), None when unknown (a faked GPU)."""
    g = caps.gpu
    if caps.device != "cuda" or g is None or not g.memory_gb:
        return None
    if util is None:
        if free is None:
            return g.memory_gb * GIB, f"{g.name} {g.memory_gb:.1f} GiB (the free memory could not be read)"
        return free * GIB, f"{g.name}: {free:.1f} of {g.memory_gb:.1f} GiB free now"
    requested = g.memory_gb * util * GIB
    why = f"{g.name} {g.memory_gb:.1f} GiB x {util:g} gpu_memory_utilization"
    if free is not None and free * GIB < requested:
        return free * GIB, f"{g.name}: {free:.1f} of {g.memory_gb:.1f} GiB free now, other processes hold the rest"
    return requested, why


def _arg(args: tuple[str, ...] | list[str], name: str) -> str | None:
    args = list(args)
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def check(arch, cand, caps, *, concurrency: int, context: int, extra_args: tuple[str, ...] = (),
          util: float = DEFAULT_UTIL, free_gib: float | None = None) -> Fit | None:
    """The Fit of a ServedCandidate on `caps`' first GPU (None where there is nothing to check: a CPU)."""
    from infertune.plan.planner import PlanConfig, budget
    from infertune.quantize.llm_checkpoint_rules import SCHEMES

    got = free_bytes(caps, util, free_gib)
    if got is None:
        return None
    free, why = got
    args = (*extra_args, *cand.args)
    dtype = (caps.gpu.half if cand.checkpoint == "bf16"
             else next(s.weights for s in SCHEMES if s.id == cand.checkpoint))
    # vLLM's serve defaults (plan's rule): 8192 batched tokens on big cards, 2048 elsewhere
    batched = int(_arg(args, "--max-num-batched-tokens") or (8192 if caps.gpu.memory_gb >= 70 else 2048))
    seqs = int(_arg(args, "--max-num-seqs") or concurrency)
    b = budget(arch, PlanConfig(model="-", gpu_memory_utilization=util), caps.gpu.memory_gb * GIB, dtype, 1,
               batched, seqs)
    kv_dtype = "fp8" if _arg(args, "--kv-cache-dtype") == "fp8" else "bf16"
    kv = arch.kv_bytes_per_token(kv_dtype) * concurrency * context
    return Fit(candidate=cand.id, dtype=dtype, weights=b["weights"], kv=kv, activation=b["activation_peak"],
               margin=b["non_torch"], free=free, free_why=why, concurrency=concurrency, context=context)


def screen(options: list, arch, caps, *, concurrency: int, context: int,
           extra_args: tuple[str, ...] = (), free_gib: float | None = None) -> tuple[list, list[Fit]]:
    """`options` with those that cannot fit marked `skip` (the loop records them as skipped with the sentence),
    and each candidate's Fit."""
    out, fits = [], []
    for o in options:
        f = check(arch, o.candidate, caps, concurrency=concurrency, context=context, extra_args=extra_args,
                  free_gib=free_gib)
        if f is not None:
            fits.append(f)
            if not f.fits and not o.skip:
                o = replace(o, skip=f.sentence())
        out.append(o)
    return out, fits


__all__ = ["Fit", "check", "screen", "free_bytes"]


def screen_task(task, options: list, caps, free_gib: float | None | str = "measure") -> list:
    """ServedLMTask.options' fit check: the context vLLM is started with (its job's max_model_len), the workload's
    concurrency, the user's vLLM arguments and the free memory the driver reports. Records each figure in
    results.json (`lm.fit`) and, when the unquantized reference cannot fit, plans the accuracy reference that can
    be computed (`lm.accuracy_reference`)."""
    from infertune.plan.arch import arch_from_config, load_config

    if caps.device != "cuda" or caps.gpu is None:
        return options
    if free_gib == "measure":
        from infertune.hardware.gpus import free_memory_gib

        free_gib = free_memory_gib(caps.gpu.index)
    arch = arch_from_config(load_config(task.spec.path))
    out, fits = screen(options, arch, caps, concurrency=task.cfg.lm_concurrency,
                       context=min(task.spec.max_length, 2048), extra_args=tuple(task.cfg.lm_vllm_args),
                       free_gib=free_gib)
    task.arch = arch
    lm = task.result.lm if getattr(task, "result", None) is not None else {}
    lm["fit"] = [f.as_dict() for f in fits]
    ref = next((o for o in out if o.role == "reference"), None)
    if ref is not None and ref.skip:
        task.reference_off_gpu = ref.skip
        lm["accuracy_reference"] = {"kind": "pending", "why_not_served": f"{ref.candidate.id} {ref.skip}"}
        task.console.print("  the unquantized reference does not fit this GPU: accuracy is judged against the "
                           "16-bit model computed off the GPU where this host allows it", highlight=False)
    return out


def offline_reference(task) -> None:
    """Before the first verification, when the reference could not be served: the 16-bit logits computed on the
    CPU (engines/causal_lm/reference.py) if this host can within the budget, else the first checkpoint verified
    stands as the reference (ServedLMTask.verify names it). Sets task.ref_rows / ref_score / ref_greedy when
    computed, and `lm.accuracy_reference` either way."""
    from infertune.engines.causal_lm.reference import choose, compute
    from infertune.tasks.causal_lm.served_measure import score

    lm = task.result.lm if getattr(task, "result", None) is not None else {}
    sets, n_new = task.sets, task.n_new
    n_tok = sum(len(s) for s in sets.seqs) + sum(len(p) for p in sets.prompts)
    budget = task.cfg.time_budget_s or task.default_budget_s()
    plan = choose(task.arch, task.caps.cpu, n_tok, len(sets.prompts) * n_new, budget)
    entry = {**lm.get("accuracy_reference", {}), **plan}
    task.reference_off_gpu = None
    if plan["how"] is None:
        entry["kind"] = "served-first-verified"
        task.console.print(f"  no 16-bit reference off the GPU: {plan['why']}; the first checkpoint verified is the "
                           "reference", highlight=False)
    else:
        task.console.print(f"  computing the accuracy reference: {plan['why']} ...", highlight=False)
        offload = str(task.out / "reference-offload") if plan["how"] == "cpu-offload" else None
        rows, greedy, secs = compute(task.spec.path, sets.seqs, sets.prompts, n_new, plan["dtype"], offload)
        task.ref_rows, task.ref_score, task.ref_greedy = rows, score(rows), greedy
        entry |= {"kind": f"16-bit-{plan['how']}", "seconds": secs}
    lm["accuracy_reference"] = entry
