"""The causal-LM family searched as vLLM serves it: each candidate is a checkpoint x engine arguments, started as
a vLLM server (served_worker.py), scored through the API (served_measure.py) against the unquantized checkpoint
served with vLLM's defaults, and loaded by `infertune bench` at the workload's prompts and output lengths. The pick
is the highest sustained request rate meeting the TTFT and TPOT P99 SLOs (--slo-ttft-ms, --slo-tpot-ms) within the
accuracy budget; without an SLO, the most requests/s at the workload's concurrency. The winner is what `infertune
serve` starts: the same checkpoint and the same arguments.

Stages, all in tuning/'s loop: the reference starts and is verified; every checkpoint is probed (one closed-loop
bench point) and verified; the settings search starts variants of the best checkpoint (extra_options); the
survivors get the SLO search (full rounds) and the leaders a confirming point at the rate it found."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from infertune.engines.causal_lm.vllm_server import engine_report, unapplied
from infertune.ports import free_port
from infertune.results import CandidateResult, Latency, TuneResult
from infertune.tasks.causal_lm.task import RANDOM_WEIGHTS_MAX_KL, CausalLMTask
from infertune.tuning.task import Option, Probe

QUICK_BUDGET_S, FULL_BUDGET_S = 840.0, 2400.0
# --quick calibrates its checkpoints on a thinned split with shorter sequences: GPTQ and SmoothQuant walk every layer
# over every calibration token, and the full split's W8A8 checkpoint of SmolLM2 took over 55 min on a 2-core EPYC
QUICK_CALIBRATION, QUICK_MAX_SEQ = 32, 512


def _lat(p: dict | None) -> Latency | None:
    return None if not p else Latency(p50=p.get("p50"), p99=p.get("p99"), n=p.get("n") or 0)


class ServedLMTask(CausalLMTask):
    kind = "causal-lm"
    unit = "req/s"
    baseline_eligible = True  # vLLM's defaults on the unquantized model may well be the answer
    quick_confirm, measured_starts = True, True  # the rate is confirmed once, --quick or not; starts take minutes
    baseline_label = "vLLM's defaults on the unquantized model"
    measured_how = "each server loaded alone, same load file and SLO search"
    # server starts (and checkpoint making) fill the probe stage, but the SLO searches of the full rounds are the
    # figures the pick reads: on 2 cores a quick run's starts, probes and checks took ~50% of 840 s and its two
    # searches needed ~40% (six 29 s points each)
    stage_shares = {"probe": 0.5, "refine": 0.5, "full": 0.9, "confirm": 0.97}

    def __init__(self, cfg, console, ref):
        super().__init__(cfg, console, ref)
        self.sets = None
        self.reported: dict[str, dict[str, Any] | None] = {}  # what vLLM said it runs, per candidate
        self.ref_batch: float | None = None  # the reference's greedy agreement alone vs batched
        self.best_ckpt: Any = None
        self.loads: dict[str, list[dict]] = {}
        self.e2e_p99: dict[str, float] = {}  # ms, from each candidate's probe
        self.reference_off_gpu: str | None = None  # why vllm/bf16 was not started (tasks/causal_lm/fit.py)
        self.result: TuneResult | None = None

    # --- setup ---------------------------------------------------------------------------------
    def load(self, out: Path) -> TuneResult:
        from infertune.engines.causal_lm.models import lm_spec, load_tokenizer
        from infertune.engines.causal_lm.vllm_server import find_vllm
        from infertune.hardware.fingerprint import fingerprint
        from infertune.quantize.llm_calibration import render_workload, write_calibration
        from infertune.quantize.llm_checkpoint_step import MAX_SEQ
        from infertune.results import WorkloadSummary
        from infertune.tasks.causal_lm.served_measure import eval_sets
        from infertune.workloads.buckets import histogram

        cfg, console = self.cfg, self.console
        self.out = out
        self.spec = spec = lm_spec(self.ref)
        self.tok = load_tokenizer(spec)
        self.vllm = find_vllm(cfg.device)  # InfertuneError with the install command when there is none
        out.mkdir(parents=True, exist_ok=True)
        quick = cfg.quick
        rendered = render_workload(self.tok, requests=self.requests)  # rendered and tokenized once, read thrice
        self.sets = eval_sets(self.tok, out / "served", cfg.workload, n_seqs=12 if quick else 24,
                              n_prompts=16, max_len=256, max_tokens=cfg.lm_max_tokens, rendered=rendered)
        self.max_seq_length = QUICK_MAX_SEQ if quick else MAX_SEQ
        self.calibration = write_calibration(out / "calibration", self.tok, cfg.workload, rendered=rendered,
                                             max_n=QUICK_CALIBRATION if quick else None)
        lengths = [len(x) for x in rendered.ids]
        srt = sorted(lengths)

        def pct(q: float) -> float:
            return float(srt[min(len(srt) - 1, int(q * len(srt)))])

        summary = WorkloadSummary(
            source=str(cfg.workload or "built-in chat sample"), n_items=len(lengths), n_calibration=self.calibration.n,
            n_eval=self.sets.n_eval, tokens_mean=sum(srt) / len(srt), tokens_p50=pct(0.5), tokens_p90=pct(0.9),
            tokens_p99=pct(0.99), tokens_max=srt[-1], over_limit=sum(x > spec.max_length for x in srt),
            max_length=spec.max_length, histogram=histogram(srt))
        self.prompt_p90 = int(summary.tokens_p90)
        env = fingerprint(cfg.threads)
        console.print(
            f"[bold]infertune tune[/] {spec.name} ({spec.architecture}, {spec.n_params / 1e6:.0f}M params"
            f"{', RANDOM weights: speed and memory only' if spec.random_weights else ''}) as vLLM serves it on "
            f"{cfg.device}: {summary.n_items} requests (prompt p50 {summary.tokens_p50:.0f} / p90 "
            f"{summary.tokens_p90:.0f} tokens), {self.calibration.n} calibrate the checkpoints, {self.sets.n_eval} "
            f"judge and load them; {self.slo_text()} -> {out}", highlight=False)
        self.result = TuneResult(kind="causal-lm", model=spec.name, config=cfg.model_dump(mode="json"), environment=env,
                          workload=summary, started=env.timestamp, out_dir=str(out), reference="vllm/bf16",
                          lm={"spec": spec.to_dict(), "engine": "vllm", "vllm": " ".join(self.vllm),
                              "slo": self.slo_text(), "concurrency": cfg.lm_concurrency,
                              "eval_seqs": len(self.sets.seqs), "greedy_prompts": len(self.sets.prompts),
                              "greedy_tokens": self.n_new, "load_file": str(self.sets.load_file),
                              "calibration": self.calibration.model_dump(),
                              "kl": f"top-{20} of each server's prompt_logprobs + tail bucket (a lower bound)",
                              "accuracy_reference": {"kind": "served", "candidate": "vllm/bf16"}})
        return self.result

    @property
    def n_new(self) -> int:
        return 16

    def slo_text(self) -> str:
        c = self.cfg
        terms = ([f"p99_ttft_ms<={c.slo_ttft_ms:g}"] if c.slo_ttft_ms else []) + (
            [f"p99_tpot_ms<={c.slo_tpot_ms:g}"] if c.slo_tpot_ms else [])
        return ",".join(terms) or f"no SLO: requests/s at concurrency {c.lm_concurrency}"

    @property
    def has_slo(self) -> bool:
        return bool(self.cfg.slo_ttft_ms or self.cfg.slo_tpot_ms)

    def default_budget_s(self) -> float:
        return QUICK_BUDGET_S if self.cfg.quick else FULL_BUDGET_S

    def options(self, caps) -> list[Option]:
        from infertune.tasks.causal_lm.fit import screen_task
        from infertune.tasks.causal_lm.served_candidates import checkpoint_options

        self.caps = caps
        return screen_task(self, checkpoint_options(caps, self.cfg.quick), caps)  # fit before any server starts

    def available(self, cand) -> str | None:
        from infertune.quantize.llm_checkpoint_rules import SCHEMES, evaluate

        if cand.checkpoint == "bf16":
            return None
        rule = evaluate(next(s for s in SCHEMES if s.id == cand.checkpoint), self.caps)
        if rule.status != "candidate":
            return rule.reason
        from infertune.errors import InfertuneError
        from infertune.quantize.llm_checkpoint_make import find_llmc

        try:
            find_llmc()
        except InfertuneError as e:
            if not self._cached(cand):
                return f"no checkpoint made yet and no llm-compressor to make it: {str(e).splitlines()[0]}"
        return None

    def _cached(self, cand) -> bool:
        from infertune.quantize.llm_checkpoint_cache import checkpoint_key, recipe_for
        from infertune.quantize.llm_checkpoint_rules import SCHEMES

        scheme = next(s for s in SCHEMES if s.id == cand.checkpoint)
        key = checkpoint_key(self.spec.path, scheme, recipe_for(scheme, self.spec.path),
                             self.calibration.file if scheme.calibrated else None, self.max_seq_length)
        return any(p.is_dir() for p in self.cache_dir().glob(f"*-{key}"))

    def cache_dir(self) -> Path:
        from infertune.engines.causal_lm.models import cache_root

        return cache_root() / "checkpoints"

    def baseline_id(self) -> str:
        return "vllm/bf16"

    # --- per engine ----------------------------------------------------------------------------
    def job(self, cand) -> dict[str, Any]:
        dtype = "bfloat16"
        if self.cfg.device == "cuda" and self.caps.gpu is not None and self.caps.gpu.half != "bf16":
            dtype = "float16"
        return {"checkpoint": self.spec.path if cand.checkpoint == "bf16" else None,
                "scheme": None if cand.checkpoint == "bf16" else cand.checkpoint,
                "args": [*self.cfg.lm_vllm_args, *cand.args],
                "device": self.cfg.device, "dtype": dtype, "max_model_len": min(self.spec.max_length, 2048),
                "port": free_port(), "log": str(self._log(cand)),
                "model_dir": self.spec.path, "calibration": self.calibration.file, "cache_dir": str(self.cache_dir()),
                "max_seq_length": self.max_seq_length}

    def worker(self, cand, timeout_s: float):
        from infertune.tasks.causal_lm.served_worker import ServedWorker

        return ServedWorker(self.job(cand), max(timeout_s, 900.0))

    def _point(self, worker, options: dict[str, Any], timeout: float) -> dict[str, Any]:
        return worker.call("load", timeout=timeout, workload=str(self.sets.load_file), options=options)

    def _durations(self, cand=None) -> dict[str, float]:
        """Seconds per bench point. An LLM request lasts seconds: the warm-up covers the slowest request the probe
        saw (so the window opens in steady state, and the keep-up check compares completions with sends rather
        than with the ramp), and the window holds enough requests for P99s to mean something."""
        e2e = (self.e2e_p99.get(cand.id) or 0.0) / 1000 if cand is not None else 0.0
        warm = min(max(5.0, 1.1 * e2e), 15.0 if self.cfg.quick else 30.0)
        return {"duration_s": 10.0 if self.cfg.quick else 20.0, "warmup_s": round(warm, 1)}

    def probe(self, worker, cand, cap_s: float) -> Probe:
        """One closed-loop bench point at the workload's concurrency: requests/s and the P99s there."""
        got = self._point(worker, {"concurrency": self.cfg.lm_concurrency, **self._durations()}, 600)  # 5 s warm-up
        self.loads.setdefault(cand.id, []).append({"stage": "probe", **got})
        self.e2e_p99[cand.id] = (got.get("e2e_ms") or {}).get("p99") or 0.0
        ttft, tpot = got.get("ttft_ms") or {}, got.get("tpot_ms") or {}
        self.console.print(f"    {cand.id}: {got['requests_per_s']:.3f} req/s at c={self.cfg.lm_concurrency}, "
                           f"TTFT P99 {ttft.get('p99') or 0:.0f} ms, TPOT P99 {tpot.get('p99') or 0:.1f} ms",
                           highlight=False)
        return Probe(speed=got["requests_per_s"], p99_ms=ttft.get("p99"),
                     detail={"ttft_p99_ms": ttft.get("p99"), "tpot_p99_ms": tpot.get("p99"),
                             "output_tokens_per_s": got.get("output_tokens_per_s")})

    def verify(self, worker, cand):
        from infertune.tasks.causal_lm.served_measure import score
        from infertune.tasks.causal_lm.verify import accuracy, judge_batch, within_budget

        if getattr(self, "reference_off_gpu", None) is not None:  # bf16 did not fit: its logits off the GPU
            from infertune.tasks.causal_lm.fit import offline_reference

            offline_reference(self)
        t = time.perf_counter()
        rows = worker.call("logprobs", timeout=600, seqs=self.sets.seqs)
        greedy = worker.call("greedy", timeout=600, prompts=self.sets.prompts, n_new=self.n_new)
        self.greedy[cand.id] = greedy
        if self.ref_score is None:
            self.ref_rows, self.ref_score, self.ref_greedy = rows, score(rows), greedy
            if getattr(self, "result", None) is not None and cand.id != self.baseline_id():
                self.result.lm["accuracy_reference"] |= {"candidate": cand.id}
            acc = accuracy(self.ref_score, None, greedy, greedy)
        else:
            acc = accuracy(self.ref_score, score(self.ref_rows, rows), self.ref_greedy, greedy)
        together = worker.call("greedy", timeout=600, prompts=self.sets.prompts, n_new=self.n_new,
                               concurrency=self.cfg.lm_concurrency)
        ref = self.ref_batch if cand.id != self.baseline_id() else None  # the reference's figure is the engine's
        moved = judge_batch(acc, greedy, together, self.sets.prompts,
                            None if ref is None else min(self.cfg.lm_accuracy.min_top1_agreement, ref))
        self.ref_batch = acc.greedy_batch_agreement if ref is None else self.ref_batch
        ok, why = within_budget(acc, self.cfg.lm_accuracy)
        ok, why = (False, moved) if moved and ok else (ok, why)
        if self.spec.random_weights and cand.id != self.baseline_id():
            # random weights' near-uniform logits flip their argmax on rounding alone: judged on KL (causal_lm/task.py)
            ok = (acc.kl_mean or 0.0) <= RANDOM_WEIGHTS_MAX_KL
            why = "" if ok else f"random weights: KL {acc.kl_mean:.2e} > {RANDOM_WEIGHTS_MAX_KL:g} nats/token"
        ok, why = (False, bad) if (bad := self._unapplied(cand)) else (ok, why)
        self.console.print(f"    {cand.id}: ppl {acc.ppl:.3f} ({acc.ppl_delta_rel * 100:+.2f}%), top-1 "
                           f"{acc.top1_agreement:.4f}, KL {acc.kl_mean:.2e}, greedy {acc.greedy_agreement:.2f} "
                           f"(exact {acc.greedy_exact:.2f}; {time.perf_counter() - t:.0f} s)"
                           f"{'' if ok else '  [yellow]over budget[/]'}", highlight=False)
        return acc, ok, why

    def _unapplied(self, cand) -> str:
        """Why a quantized checkpoint's server is rejected for what vLLM reports running (its log)."""
        return unapplied(cand.checkpoint, self.reported.setdefault(cand.id, engine_report(self._log(cand))))

    def _log(self, cand) -> Path:
        return self.out / "served" / f"{cand.id.replace('/', '_')}.log"

    def extra_options(self, run) -> list[Option]:
        """The settings search: variants of the checkpoint that probed fastest among those within budget."""
        from infertune.tasks.causal_lm.served_candidates import settings_options

        ok = [k for k, r in run.results.items() if r.status == "ok" and k in run.probes
              and r.meets_accuracy is not False]
        if not ok:
            return []
        best = max(ok, key=lambda k: run.probes[k].speed)
        self.best_ckpt = run.cands[best]
        self.console.print(f"  settings search on {best} (probed fastest within the accuracy budget)",
                           highlight=False)
        opts = settings_options(run.cands[best], self.caps, self.cfg.lm_concurrency, self.cfg.quick,
                                self.prompt_p90)
        for o in opts:
            if not self.matches(o.candidate, self.cfg.candidates):
                run.log["not_tried"].append({"candidate": o.candidate.id, "why": "not selected by --candidates"})
        return [o for o in opts if self.matches(o.candidate, self.cfg.candidates)]

    def measure(self, worker, cand, max_s: float | None = None) -> dict[str, Any]:
        """With an SLO: the first pass is bench's search for the highest request rate meeting it (started at the
        probe's closed-loop rate); later passes re-measure that rate once. Without: a closed-loop point."""
        d = self._durations(cand)
        if not self.has_slo:
            got = self._point(worker, {"concurrency": self.cfg.lm_concurrency, **d}, 900)
        else:
            found = next((x for x in self.loads.get(cand.id, []) if x.get("stage") == "search"), None)
            if found is None:
                start = max(0.01, self.loads.get(cand.id, [{}])[0].get("requests_per_s") or 0.1)
                # a pass cut short by the budget brackets the rate coarser (fewer bisection points)
                tol = 0.15 if self.cfg.quick else 0.1
                if max_s is not None and max_s < self.pass_s(None, cand):
                    tol = 0.3
                got = self._point(worker, {"slo": self.slo_text(), "slo_start": start, "slo_tolerance": tol, **d},
                                  1800)
                got["stage"] = "search"
            else:
                rate = found.get("max_load_rps")
                if not rate:
                    return {**found, "stage": "confirm-skipped"}
                got = self._point(worker, {"rate": rate, "slo_bounds": self.slo_text(), **d}, 900)
                got["stage"] = "confirm"
        self.loads.setdefault(cand.id, []).append(got)
        self._say(cand, got)
        return got

    def _say(self, cand, got: dict[str, Any]) -> None:
        from infertune.tasks.causal_lm.served_report import load_line

        self.console.print(f"    {cand.id}: {load_line(got, self.slo_text())}", highlight=False)

    def pass_s(self, run, cand) -> float:
        """One point costs its warm-up and window plus ~8 s of requests draining and bench's own work (measured:
        23 s a point for 15 s nominal); an SLO search takes about 6 points."""
        d = self._durations(cand)
        one = d["duration_s"] + d["warmup_s"] + 8
        searched = any(x.get("stage") == "search" for x in self.loads.get(cand.id, []))
        return one * (1 if searched or not self.has_slo else 6)

    def summarize(self, run, cand, samples: list[dict[str, Any]]) -> dict[str, Any]:
        r = run.results[cand.id]
        served = {"checkpoint": r.executed.get("checkpoint"), "args": list(cand.args),
                  "load_s": r.executed.get("load_s"), "loads": self.loads.get(cand.id, []),
                  "engine_report": self.reported.get(cand.id)}
        probe = next((x for x in self.loads.get(cand.id, []) if x.get("stage") == "probe"), {})
        out: dict[str, Any] = {"requests_per_s": probe.get("requests_per_s"), "served": served}
        if not self.has_slo:
            last = samples[-1]
            rps = sorted(s["requests_per_s"] for s in samples)
            out |= {"requests_per_s": rps[len(rps) // 2], "ttft_ms": _lat(last.get("ttft_ms")),
                    "tpot_ms": _lat(last.get("tpot_ms")), "goodput_rps": None}
            return out
        search = next((s for s in samples if s.get("stage") == "search"), samples[0])
        at = search.get("at_max") or {}
        confirms = [s for s in samples if s.get("stage") == "confirm"]
        held = [bool(c.get("slo_pass")) for c in confirms]
        goodput = search.get("max_load_rps") if search.get("met") else 0.0
        served |= {"slo_bracket": search.get("bracket"), "confirm_held": held}
        out |= {"goodput_rps": goodput, "ttft_ms": _lat(at.get("ttft_ms")), "tpot_ms": _lat(at.get("tpot_ms"))}
        if not search.get("met"):
            low = search.get("lowest") or {}
            out |= {"ttft_ms": _lat(low.get("ttft_ms")), "tpot_ms": _lat(low.get("tpot_ms"))}
        return out

    # --- decision ------------------------------------------------------------------------------
    def speed(self, r: CandidateResult) -> float:
        return (r.goodput_rps or 0.0) if self.has_slo else (r.requests_per_s or 0.0)

    def measured(self, r: CandidateResult) -> bool:
        return (r.goodput_rps is not None if self.has_slo else bool(r.requests_per_s)) and r.stage != "probe"

    def slo(self, r: CandidateResult) -> tuple[float | None, float | None]:
        """The binding term at the measured point: (its P99 in ms, its limit). A candidate whose SLO search met
        some rate is within both limits there; one that met none shows the term it failed at its lowest rate."""
        if not self.has_slo:
            return None, None
        terms = [(r.ttft_ms.p99 if r.ttft_ms else None, self.cfg.slo_ttft_ms),
                 (r.tpot_ms.p99 if r.tpot_ms else None, self.cfg.slo_tpot_ms)]
        terms = [(f, lim) for f, lim in terms if lim]
        if r.goodput_rps:
            return max(terms, key=lambda t: (t[0] or 0.0) / t[1]) if terms else (None, None)
        bad = [(f, lim) for f, lim in terms if f is not None]
        if not bad:
            return float("inf"), terms[0][1]
        f, lim = max(bad, key=lambda t: t[0] / t[1])
        return (f if f > lim else lim * 1.0001), lim  # no rate met it: over the limit even if P99 alone was not

    def slo_flags(self, fig: float, limit: float) -> str:
        from infertune.tuning.task import ceil_flag

        name = "--slo-ttft-ms" if limit == self.cfg.slo_ttft_ms else "--slo-tpot-ms"
        return f"{name} {ceil_flag(fig):g}" if fig != float("inf") else f"{name} (none measured)"

    def rank(self, r: CandidateResult) -> int:
        c = r.candidate
        return (0 if c.get("checkpoint") == "bf16" else 1) + (1 if c.get("args") else 0)

    def simpler_because(self, win: CandidateResult, other: CandidateResult) -> str:
        return f"the simpler configuration ({win.name}: fewer changes from vLLM's defaults on the original weights)"

    def describe_winner(self, win: CandidateResult) -> str:
        a = win.accuracy
        t, p = win.ttft_ms, win.tpot_ms
        lat = (f"TTFT P99 {t.p99:.0f} ms, TPOT P99 {p.p99:.1f} ms" if t and p and t.p99 and p.p99 else "")
        rate = (f"{win.goodput_rps:.3f} req/s sustained within {self.slo_text()}" if self.has_slo else
                f"{win.requests_per_s:.3f} req/s at concurrency {self.cfg.lm_concurrency}")
        args = " ".join(win.candidate.get("args") or ()) or "vLLM's defaults"
        return (f"Winner: {win.name} ({args}) at {rate} ({lat}); perplexity {a.ppl_delta_rel * 100:+.2f}%, top-1 "
                f"agreement {a.top1_agreement:.4f}, KL {a.kl_mean:.2e} nats/token, greedy agreement "
                f"{a.greedy_agreement:.2f}.")

    # --- outputs -------------------------------------------------------------------------------
    def save_artifact(self, run, result: TuneResult, out: Path) -> None:
        from infertune.tasks.causal_lm.served_artifact import save_served_artifact

        save_served_artifact(run, result, out, self)

    def write_report(self, result: TuneResult, path: Path) -> None:
        from infertune.tasks.causal_lm.served_report import write_served_report

        write_served_report(result, path)


__all__ = ["ServedLMTask"]
