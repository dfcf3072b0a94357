"""The causal-LM family in the search loop: verify each engine against eager generate() on the
workload's text (perplexity, top-1 agreement, KL, greedy agreement), probe batch-1 decode, measure TTFT
at prompt-length percentiles and TPOT at each batch size, pick the fastest batch-1 decoder within the
accuracy budget, write a vLLM-loadable artifact."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from infertune.results import Accuracy, CandidateResult, TuneResult
from infertune.tuning.task import Option, Probe, Task

RANDOM_WEIGHTS_MAX_KL = 0.01  # nats/token: the same function up to rounding (bf16 vs fp16: ~2e-7)
# --quick: the reference's verification took 60-86 s of 180 under load 15 on 2 cores, and the default 55% probe
# share then left the static loop no time to start (docs/measurements/2026-12-06-epyc-decode-quick)
QUICK_SHARES = {"probe": 0.75, "refine": 0.75, "full": 0.93, "confirm": 0.93}
ENGINE_RANK = {"hf-generate": 0, "static": 1, "cuda-graph": 2, "static-compile": 3, "cuda-graph-compile": 3}


class CausalLMTask(Task):
    kind = "causal-lm"
    unit = "tokens/s"
    baseline_eligible = True  # eager generate() is also the accuracy reference and a servable answer
    # --quick is a diagnosis (does a loop beat eager, and why): one interleaved round, no confirmation passes
    quick_confirm = False

    def __init__(self, cfg, console, ref):
        from infertune.workloads.chat import load_chat_workload

        super().__init__(cfg, console)
        self.ref = ref
        self.requests = load_chat_workload(cfg.workload)  # first: a malformed file fails before anything heavy loads
        self.ref_score: dict | None = None
        self.ref_greedy: list | None = None
        self.greedy: dict[str, list[list[int]]] = {}
        self.call_s: dict[str, float] = {}
        self.warm_s: dict[str, float] = {}  # the probe's warm-up call: what compiling/capturing one batch size costs
        self.batches: dict[str, list[int]] = {}  # the batch sizes each engine's timed passes measure (all warmed)
        self.ref_cand = None  # the reference when the GPU cannot hold it (tasks/causal_lm/fit_torch.py)
        self.stream: set[str] = set()  # quantized candidates loaded layer by layer (their 16-bit model cannot fit)

    # --- setup ---------------------------------------------------------------------------------
    def load(self, out: Path) -> TuneResult:
        from infertune.engines.causal_lm.models import lm_spec, load_tokenizer
        from infertune.hardware.bandwidth import memory_bandwidth
        from infertune.hardware.fingerprint import fingerprint
        from infertune.tasks.causal_lm.candidates import reference
        from infertune.tasks.causal_lm.plan import workload_plan

        cfg, console = self.cfg, self.console
        if cfg.quick:  # no refinement and no confirmation in a quick diagnosis: the loops' probes get that time
            self.stage_shares = QUICK_SHARES
        if self.ref.format == "gguf":
            console.print(f"loading {self.ref.gguf_file} (a GGUF is converted once to plain safetensors, cached) ...",
                          highlight=False)
        self.spec = spec = lm_spec(self.ref)
        self.tok = load_tokenizer(spec)
        self.plan, summary = workload_plan(cfg, spec, self.tok, self.requests)
        if cfg.device == "cuda":  # measured in a child: no CUDA context here to take memory from the workers
            from infertune.hardware.bandwidth import gpu_bandwidth_in_child
            from infertune.hardware.gpus import free_memory_gib

            self.bw = bw = gpu_bandwidth_in_child(free_memory_gib())
        else:
            self.bw = bw = memory_bandwidth(cfg.device)
        env = fingerprint(cfg.threads)
        console.print(
            f"[bold]infertune tune[/] {spec.name} ({spec.architecture}, {spec.n_params / 1e6:.0f}M params"
            f"{', RANDOM weights: speed and memory only' if spec.random_weights else ''}) on {cfg.device}: "
            f"{summary.n_items} requests (prompt p50 {summary.tokens_p50:.0f} / p99 {summary.tokens_p99:.0f} "
            f"tokens); memory bandwidth {bw['gb_per_s']:.1f} GB/s (n={bw['n']}, range "
            f"{bw['range'][0]:.1f}-{bw['range'][1]:.1f}) -> {out}", highlight=False)
        p = self.plan
        self.result = TuneResult(kind="causal-lm", model=spec.name, config=cfg.model_dump(mode="json"), environment=env,
                          workload=summary, started=env.timestamp, out_dir=str(out),
                          reference=reference(cfg.device).id,
                          lm={"spec": spec.to_dict(), "bandwidth": bw, "eval_tokens": sum(len(s) for s in p["seqs"]),
                              "greedy_prompts": len(p["greedy"]), "greedy_tokens": p["n_new"],
                              "ttft_lengths": list(p["ttft"]), "tpot_batches": p["batches"],
                              "tpot_context": len(p["ctx"]), "tpot_steps": p["steps"],
                              "static_cache_len": p["max_len"], "kl": "top-64 of the reference + tail bucket"})
        return self.result

    def default_budget_s(self) -> float:
        """--lm-time-budget; a third (180 s) with --quick on CPU, aiming at about 3 minutes on 2 cores (on GPU a
        compiled, graph-captured step needs its compile time whatever the mode). A quarter left the static loop no
        time to start on a busy 2-core EPYC; at load 9-14 the run still took 303 s, its first round overrunning
        (docs/measurements/2026-12-06-epyc-decode-quick)."""
        quick_cpu = self.cfg.quick and self.cfg.device == "cpu"
        return self.cfg.lm_time_budget_s / 3 if quick_cpu else self.cfg.lm_time_budget_s

    def options(self, caps) -> list[Option]:
        from infertune.tasks.causal_lm.candidates import options
        from infertune.tasks.causal_lm.fit_torch import screen

        return screen(self, options(caps, self.cfg.quick), caps)  # fit before any worker loads a weight

    def available(self, cand) -> str | None:
        from infertune.tasks.causal_lm.candidates import available

        return available(cand, self.cfg.device)

    def baseline_id(self) -> str:
        from infertune.tasks.causal_lm.candidates import reference

        return (self.ref_cand or reference(self.cfg.device)).id

    # --- per engine ----------------------------------------------------------------------------
    def job(self, cand) -> dict[str, Any]:
        return {"serve": "infertune.tasks.causal_lm.worker:serve", "spec": self.spec.to_dict(),
                "candidate": cand.model_dump(), "device": cand.device or self.cfg.device, "threads": self.cfg.threads,
                "max_len": self.plan["max_len"], "seed": self.cfg.seed,
                # a reference on the CPU: weights made on the CPU for every candidate (the same random draw)
                "cpu_init": self.ref_cand is not None, "stream": cand.id in self.stream}

    def _measure(self, worker, cand, ttft: dict, steps: int, batches: list[int], timeout: float) -> dict:
        t = time.monotonic()
        got = worker.call("measure", timeout=timeout, ttft=ttft, reps=1, ctx=self.plan["ctx"], steps=steps,
                          batches=batches)
        self.call_s[cand.id] = time.monotonic() - t
        return got

    def probe(self, worker, cand, cap_s: float) -> Probe:
        """Batch-1 decode steps after a warm-up (which compiles or captures the step where the engine
        does): tokens/s = 1000 / median step time."""
        import statistics

        first = dict(list(self.plan["ttft"].items())[:1])
        timeout = max(60.0, min(self.cfg.candidate_timeout_s, cap_s * 4))
        self._measure(worker, cand, first, 3, [1], timeout)
        warm = self.call_s[cand.id]
        got = self._measure(worker, cand, first, 8, [1], timeout)
        # what the warm-up cost beyond a timed call (which runs more steps) is the compile or capture of one batch
        # size; an eager loop has ~0, so a loaded box's slow calls never cost it the batch sizes of its first pass
        self.warm_s[cand.id] = max(0.0, warm - self.call_s[cand.id])
        step = statistics.median(got["tpot"]["1"])
        return Probe(speed=1000 / step, detail={"tpot_ms": round(step, 3), "ttft_ms": round(
            next(iter(got["ttft"].values()))[0], 2)}, warm_s=warm)

    def verify(self, worker, cand) -> tuple[Accuracy, bool, str]:
        from infertune.tasks.causal_lm.verify import accuracy, within_budget

        timeout = max(120.0, self.cfg.candidate_timeout_s)
        t = time.perf_counter()
        score = worker.call("score", timeout=timeout, seqs=self.plan["seqs"], ref=self.ref_score)
        greedy = worker.call("greedy", timeout=timeout, prompts=self.plan["greedy"], n=self.plan["n_new"])["tokens"]
        self.greedy[cand.id] = greedy
        if self.ref_score is None:
            self.ref_score, self.ref_greedy = score, greedy
            acc = accuracy(score, None, greedy, greedy)
        else:
            acc = accuracy(self.ref_score, score, self.ref_greedy, greedy)
        ok, why = within_budget(acc, self.cfg.lm_accuracy)
        if self.spec.random_weights and cand.id != self.baseline_id():
            # random weights give near-uniform logits: their argmax flips on rounding alone (top-1 0.95
            # for the same function compiled, KL 2e-7), so the budget is judged on KL instead
            ok = (acc.kl_mean or 0.0) <= RANDOM_WEIGHTS_MAX_KL
            why = "" if ok else (f"random weights: KL {acc.kl_mean:.2e} > {RANDOM_WEIGHTS_MAX_KL:g} nats/token "
                                 "(top-1 agreement of near-uniform logits is not meaningful)")
        self.console.print(f"    ppl {acc.ppl:.3f} ({acc.ppl_delta_rel * 100:+.2f}%), top-1 {acc.top1_agreement:.4f}, "
                           f"KL {acc.kl_mean:.2e}, greedy {acc.greedy_agreement:.2f} "
                           f"({time.perf_counter() - t:.0f} s){'' if ok else '  [yellow]over budget[/]'}",
                           highlight=False)
        return acc, ok, why

    def measure(self, worker, cand, max_s: float | None = None) -> dict[str, Any]:
        p = self.plan
        timeout = self.cfg.candidate_timeout_s
        if cand.id not in self.batches:  # compiles / captures each batch size's step once
            self.batches[cand.id] = todo = warm_batches(p["batches"], self.warm_s.get(cand.id, 0.0), max_s)
            if len(todo) < len(p["batches"]):
                self.console.print(
                    f"    {cand.id}: TPOT at batch {', '.join(map(str, todo))} only: compiling a batch size took "
                    f"{self.warm_s[cand.id]:.0f} s in its probe, and {max_s:.0f} s are left for this pass",
                    highlight=False)
            if p["batches"] != [1] or len(p["ttft"]) > 1:  # --quick: the probe warmed all of it (batch 1, one length)
                self._measure(worker, cand, dict(list(p["ttft"].items())[:1]), 2, todo, timeout)
        steps = p["steps"]
        if max_s is not None and cand.id in self.call_s and self.call_s[cand.id] > max_s:
            steps = max(2, int(steps * max_s / self.call_s[cand.id]))
        return self._measure(worker, cand, p["ttft"], steps, self.batches[cand.id], timeout)

    def pass_s(self, run, cand) -> float:
        """A timed pass's expected seconds; the first also compiles (or captures) every batch size but 1, at what
        the probe's warm-up took for one (on the H200 a max-autotune step took 60 s a batch size)."""
        once = self.call_s.get(cand.id, 5.0)
        if cand.id in self.batches:
            return once
        return 2 * once + self.warm_s.get(cand.id, 0.0) * (len(self.plan["batches"]) - 1)

    def summarize(self, run, cand, samples: list[dict[str, Any]]) -> dict[str, Any]:
        from infertune.tasks.causal_lm.measure import roofline_ms, summarize_lm

        r = run.results[cand.id]
        wb = r.weight_bytes or r.executed.get("decode_weight_bytes")
        ttft, tpot = summarize_lm(samples)
        first = next(iter(ttft.values()), None)
        b1 = tpot.get("1")
        tps = 1000 / b1.p50 if b1 and b1.p50 else None
        bw = self.bw["gb_per_s"]
        # the roofline is this device's: a reference moved to the CPU has none against the GPU's bandwidth
        roof = (roofline_ms(wb, bw) / b1.p50) if (b1 and b1.p50 and wb and not cand.device) else None
        last = samples[-1]
        ex = dict(r.executed, peak_rss_mb=round(last.get("peak_rss_mb") or 0, 1),
                  peak_gpu_mb=round(last["peak_gpu_mb"], 1) if last.get("peak_gpu_mb") else None)
        return {"ttft_by_length": ttft, "tpot_by_batch": tpot, "ttft_ms": first, "tpot_ms": b1,
                "tokens_per_s": tps, "roofline_fraction": roof, "executed": ex, "weight_bytes": wb}

    # --- decision ------------------------------------------------------------------------------
    def speed(self, r: CandidateResult) -> float:
        return r.tokens_per_s or 0.0

    def rank(self, r: CandidateResult) -> int:
        return ENGINE_RANK.get(str(r.candidate.get("backend", "")), 2)

    @staticmethod
    def drift(r: CandidateResult) -> float | None:
        return None if r.accuracy.ppl_delta_rel is None else max(r.accuracy.ppl_delta_rel, 0.0)

    def accuracy_flags(self, r: CandidateResult) -> str:
        a = r.accuracy
        up = math.ceil(max(a.ppl_delta_rel or 0, 0) * 1e3) / 1e3
        down = math.floor((a.top1_agreement or 0) * 1e3) / 1e3
        return f"--max-ppl-delta {up:g} --min-top1 {down:g}"

    def constraints(self) -> str:
        b = self.cfg.lm_accuracy
        return f"perplexity <= +{b.max_ppl_delta_rel * 100:g}%, top-1 agreement >= {b.min_top1_agreement:g}"

    def describe_winner(self, win: CandidateResult) -> str:
        a, t = win.accuracy, win.tpot_ms
        lat = f"TPOT {t.p50:.1f} ms (p5-p95 {t.p5:.1f}-{t.p95:.1f}, n={t.n})" if t and t.p50 else "no TPOT"
        roof = f", {win.roofline_fraction * 100:.0f}% of the memory roofline" if win.roofline_fraction else ""
        return (f"Winner: {win.name} at {win.tokens_per_s:.1f} tokens/s batch-1 decode ({lat}{roof}); "
                f"perplexity {a.ppl_delta_rel * 100:+.2f}%, top-1 agreement {a.top1_agreement:.4f}, "
                f"KL {a.kl_mean:.2e} nats/token, greedy agreement {a.greedy_agreement:.2f}.")

    def compare_with_plan(self, result: TuneResult) -> None:
        """The roofline held against the loops: when none beat eager generate(), one decision line says so and why
        (tasks/causal_lm/diagnosis.py); results.json's `lm.diagnosis` keeps the figures."""
        from infertune.tasks.causal_lm.diagnosis import diagnose

        d = diagnose(result, self.unit)
        if d is not None:
            result.lm["diagnosis"] = d
            result.decision.append(d["sentence"])

    # --- outputs -------------------------------------------------------------------------------
    def save_artifact(self, run, result: TuneResult, out: Path) -> None:
        from infertune.tasks.causal_lm.artifact import save_artifact

        save_artifact(run.workers, run.cands, self.greedy, self.plan["greedy"], result, out, self.tok,
                      self.console, self.spec)

    def write_report(self, result: TuneResult, path: Path) -> None:
        from infertune.tasks.causal_lm.report import write_lm_report

        write_lm_report(result, path)


def warm_batches(batches: list[int], warm_s: float, max_s: float | None) -> list[int]:
    """The batch sizes a first timed pass can compile within `max_s`: batch 1 (the probe compiled it) and then
    each next size while its compile, estimated at `warm_s`, fits; all of them without a cap."""
    if max_s is None or warm_s <= 0:
        return list(batches)
    keep = [b for b in batches if b == 1] or list(batches[:1])
    left = max_s - warm_s  # the pass itself, about one warm-up's length for a compiled engine
    for b in batches:
        if b in keep:
            continue
        if left < warm_s:
            break
        keep.append(b)
        left -= warm_s
    return keep

