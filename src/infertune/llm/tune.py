"""`infertune tune` for causal LMs: build candidates, verify each against the reference (eager
generate() in the reference dtype) on the workload's text, measure TTFT / TPOT in interleaved rounds
(each engine isolated in its own process), pick the fastest batch-1 decoder within the accuracy budget,
write results.json, report.html and a vLLM-loadable artifact."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

from infertune.config import TuneConfig
from infertune.errors import InfertuneError
from infertune.fingerprint import fingerprint
from infertune.llm.candidates import LMCandidate, available, default_candidates, matches, reference
from infertune.llm.measure import memory_bandwidth, roofline_ms, summarize_lm
from infertune.llm.verify import accuracy, within_budget
from infertune.results import CandidateResult, TuneResult, WorkloadSummary
from infertune.tune import _short
from infertune.worker import Worker, WorkerFailed


def _plan(cfg: TuneConfig, spec, tok) -> tuple[dict[str, Any], WorkloadSummary]:
    """What to score, greedy-decode and time, all cut from the workload (built-in sample by default)."""
    import numpy as np

    from infertune.llm.workload import load_chat_workload
    from infertune.workload import histogram

    reqs, source = load_chat_workload(cfg.workload)
    rendered = [tok(r.render(tok), add_special_tokens=False)["input_ids"] for r in reqs]
    lengths = np.asarray([len(x) for x in rendered])
    limit = min(spec.max_length, 4096) - 64
    quick = cfg.quick
    # 1. evaluation text: the requests' own content (not the chat template), chunked
    rng = random.Random(cfg.seed)
    order = list(range(len(reqs)))
    rng.shuffle(order)
    seq_len, budget = (256, 512) if quick else (512, 1024)
    stream: list[int] = []
    for i in order:
        r = reqs[i]
        text = r.prompt if r.messages is None else "\n".join(c for _, c in r.messages)
        stream += tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if tok.eos_token_id else [])
        if len(stream) >= budget:
            break
    stream = stream[:budget]
    seqs = [stream[i:i + seq_len] for i in range(0, len(stream), seq_len) if len(stream[i:i + seq_len]) > 8]
    # 2. greedy continuations on short real prompts, spread over lengths
    n_new, n_prompts = (12, 3) if quick else (24, 4)
    short = sorted((i for i in range(len(reqs)) if len(rendered[i]) <= 128), key=lambda i: len(rendered[i]))
    if not short:
        short = sorted(range(len(reqs)), key=lambda i: len(rendered[i]))[:n_prompts]
    picks = [short[round(k * (len(short) - 1) / max(n_prompts - 1, 1))] for k in range(min(n_prompts, len(short)))]
    greedy = [rendered[i][-128:] for i in dict.fromkeys(picks)]
    # 3. TTFT at prompt-length percentiles: the real prompt nearest each percentile
    ttft = {}
    for q in (50, 90) if quick else (50, 90, 99):
        target = min(float(np.percentile(lengths, q)), limit)
        i = int(np.argmin(np.abs(np.minimum(lengths, limit) - target)))
        ids = rendered[i][:limit]
        ttft[f"p{q}:{len(ids)}"] = ids
    # 4. TPOT: decode steps after a 64-token real context, at each batch size
    ctx_src = next((x for x in rendered if len(x) >= 64), max(rendered, key=len))
    steps = 8 if quick else 16
    batches = [b for b in cfg.lm_batches if not quick or b <= 8] or [1]
    plan = {"seqs": seqs, "greedy": greedy, "n_new": n_new, "ttft": ttft, "ctx": ctx_src[:64], "steps": steps,
            "batches": batches, "reps": 1,
            "max_len": max(max(len(g) for g in greedy) + n_new, len(ctx_src[:64]) + steps + 1) + 8}
    summary = WorkloadSummary(
        source=source, n_items=len(reqs), n_calibration=0, n_eval=len(reqs), tokens_mean=float(lengths.mean()),
        tokens_p50=float(np.percentile(lengths, 50)), tokens_p90=float(np.percentile(lengths, 90)),
        tokens_p99=float(np.percentile(lengths, 99)), tokens_max=int(lengths.max()),
        over_limit=int((lengths > spec.max_length).sum()), max_length=spec.max_length, histogram=histogram(lengths))
    return plan, summary


class _LMRun:
    def __init__(self, cfg: TuneConfig, spec, plan: dict[str, Any], out: Path, console, t_start: float):
        self.cfg, self.spec, self.plan, self.out, self.console = cfg, spec, plan, out, console
        self.workers: dict[str, Worker] = {}
        self.results: dict[str, CandidateResult] = {}
        self.cands: dict[str, LMCandidate] = {}
        self.ref_score: dict | None = None
        self.greedy: dict[str, list[list[int]]] = {}
        self.deadline = t_start + cfg.lm_time_budget_s  # t_start: time.monotonic() when tune began
        self.rounds: dict[str, list[dict]] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def timeout(self) -> float:
        """Prepare/verify calls: the candidate timeout, cut to what is left of the verification share of
        the budget (at least 60 s). Measurement calls keep the full candidate timeout: a candidate that
        was verified is measured; the budget then only limits the number of timed rounds."""
        return max(60.0, min(self.cfg.candidate_timeout_s, self.left() - 0.45 * self.cfg.lm_time_budget_s))

    def record(self, c: LMCandidate, **kw: Any) -> CandidateResult:
        r = self.results.get(c.id) or CandidateResult(name=c.id, candidate=c.model_dump(mode="json"), status="ok")
        r = r.model_copy(update=kw)
        self.results[c.id], self.cands[c.id] = r, c
        return r

    def start(self, c: LMCandidate) -> bool:
        reason = available(c, self.cfg.device)
        if not reason and self.left() < 0.45 * self.cfg.lm_time_budget_s and c != reference(self.cfg.device):
            reason = (f"time budget: {self.cfg.lm_time_budget_s:.0f} s in all (--lm-time-budget), 55% of it for "
                      "preparing and verifying candidates, was used up before this one could start")
        if reason:
            self.record(c, status="skipped", reason=reason)
            self.console.print(f"  [yellow]skip[/] {c.id}: {reason}", highlight=False)
            return False
        job = {"serve": "infertune.llm.worker:serve", "spec": self.spec.to_dict(), "candidate": c.model_dump(),
               "device": self.cfg.device, "threads": self.cfg.threads, "max_len": self.plan["max_len"],
               "seed": self.cfg.seed}
        self.console.print(f"  preparing {c.id} ...", highlight=False)
        w = Worker(job, self.timeout())
        try:
            info = w.ready()
        except WorkerFailed as e:
            w.kill()
            return self.fail(c, f"prepare failed: {_short(e)}")
        self.workers[c.id] = w
        self.record(c, status="ok", prepare_s=round(info["prepare_s"], 2), executed=info["executed"],
                    weight_bytes=info["executed"]["decode_weight_bytes"])
        return True

    def verify(self, c: LMCandidate) -> None:
        w, p = self.workers[c.id], self.plan
        try:
            t = time.perf_counter()
            score = w.call("score", timeout=self.timeout(), seqs=p["seqs"], ref=self.ref_score)
            greedy = w.call("greedy", timeout=self.timeout(), prompts=p["greedy"], n=p["n_new"])["tokens"]
        except WorkerFailed as e:
            self.fail(c, f"verification failed: {_short(e)}")
            return
        self.greedy[c.id] = greedy
        if self.ref_score is None:
            self.ref_score, self.ref_greedy = score, greedy
            acc = accuracy(score, None, greedy, greedy)
        else:
            acc = accuracy(self.ref_score, score, self.ref_greedy, greedy)
        ok, why = within_budget(acc, self.cfg.lm_accuracy)
        self.record(c, accuracy=acc, meets_accuracy=ok, reason=why)
        self.console.print(f"    ppl {acc.ppl:.3f} ({acc.ppl_delta_rel * 100:+.2f}%), top-1 {acc.top1_agreement:.4f}, "
                           f"KL {acc.kl_mean:.2e}, greedy {acc.greedy_agreement:.2f} "
                           f"({time.perf_counter() - t:.0f} s){'' if ok else '  [yellow]over budget[/]'}",
                           highlight=False)

    def measure(self, c: LMCandidate, warmup: bool = False) -> dict | None:
        w, p = self.workers.get(c.id), self.plan
        if w is None:
            return None
        ttft = dict(list(p["ttft"].items())[:1]) if warmup else p["ttft"]
        try:
            return w.call("measure", timeout=self.cfg.candidate_timeout_s, ttft=ttft, reps=1 if warmup else p["reps"], ctx=p["ctx"],
                          steps=2 if warmup else p["steps"], batches=p["batches"])
        except WorkerFailed as e:
            self.fail(c, f"measurement failed: {_short(e)}")
            return None

    def fail(self, c: LMCandidate, why: str) -> bool:
        self.console.print(f"  [red]failed[/] {c.id}: {why}", highlight=False)
        self.record(c, status="failed", reason=why)
        w = self.workers.pop(c.id, None)
        if w:
            w.kill()
        return False

    def stop(self) -> None:
        for w in self.workers.values():
            w.stop()
        self.workers.clear()


def tune_lm(cfg: TuneConfig, quiet: bool = False) -> TuneResult:
    """Tune a causal LM on a chat/completions workload; returns the TuneResult also in results.json."""
    from rich.console import Console

    from infertune.llm.models import lm_spec, load_tokenizer
    from infertune.models.resolve import resolve_model
    from infertune.tune import _out_dir, _write

    console = Console(stderr=True, quiet=quiet)
    t_start, t_mono = time.perf_counter(), time.monotonic()
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InfertuneError("--device cuda asked for, but torch sees no CUDA GPU; run `infertune doctor`")
    ref = resolve_model(cfg.model)
    if ref.format == "gguf":
        console.print(f"loading {ref.gguf_file} (a GGUF is converted once to plain safetensors, cached) ...",
                      highlight=False)
    spec = lm_spec(ref)
    tok = load_tokenizer(spec)
    out = _out_dir(cfg)
    plan, summary = _plan(cfg, spec, tok)
    bw = memory_bandwidth(cfg.device)
    env = fingerprint(cfg.threads)
    refc = reference(cfg.device)
    console.print(f"[bold]infertune tune[/] {spec.name} ({spec.architecture}, {spec.n_params / 1e6:.0f}M params"
                  f"{', RANDOM weights: speed and memory only' if spec.random_weights else ''}) on {cfg.device}: "
                  f"{summary.n_items} requests (prompt p50 {summary.tokens_p50:.0f} / p99 {summary.tokens_p99:.0f} "
                  f"tokens); memory bandwidth {bw['gb_per_s']:.1f} GB/s (n={bw['n']}, range "
                  f"{bw['range'][0]:.1f}-{bw['range'][1]:.1f}) -> {out}", highlight=False)
    result = TuneResult(kind="causal-lm", model=spec.name, config=cfg.model_dump(mode="json"), environment=env,
                        workload=summary, started=env.timestamp, out_dir=str(out), reference=refc.id,
                        lm={"spec": spec.to_dict(), "bandwidth": bw, "eval_tokens": sum(len(s) for s in plan["seqs"]),
                            "greedy_prompts": len(plan["greedy"]), "greedy_tokens": plan["n_new"],
                            "ttft_lengths": list(plan["ttft"]), "tpot_batches": plan["batches"],
                            "tpot_context": len(plan["ctx"]), "tpot_steps": plan["steps"],
                            "static_cache_len": plan["max_len"], "kl": "top-64 of the reference + tail bucket"})
    run = _LMRun(cfg, spec, plan, out, console, t_mono)
    cands = [c for c in default_candidates(cfg.device, cfg.quick) if c == refc or matches(c, cfg.candidates)]
    try:
        for c in [refc] + [c for c in cands if c != refc]:
            if run.start(c):
                run.verify(c)
            if c == refc and run.ref_score is None:
                raise InfertuneError(f"the reference {c.id} failed: {run.results[c.id].reason}")
            result.candidates = list(run.results.values())
            _write(result, out)
        _rounds(run, cfg, console, quiet)
        _finish(run, result, bw)
        from infertune.llm.decide import decide_lm

        decide_lm(result, cfg)
        _write(result, out)
        if cfg.write_artifact and result.winner is not None:
            from infertune.llm.artifact import save_artifact

            save_artifact(run, result, out, tok, console)
    finally:
        run.stop()
    result.wall_s = round(time.perf_counter() - t_start, 1)
    if result.artifact:
        result.next_command = f"infertune serve {result.artifact}"
    _write(result, out)
    try:
        from infertune.llm.report import write_lm_report

        write_lm_report(result, out / "report.html")
    except Exception as e:  # noqa: BLE001 - a plotting problem must not lose the results
        console.print(f"[yellow]report.html not written: {e}[/]")
    shutil.rmtree(out / "work", ignore_errors=True)
    return result


def _rounds(run: _LMRun, cfg: TuneConfig, console, quiet: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    live = [run.cands[k] for k, r in run.results.items() if r.status == "ok" and k in run.workers]
    run.rounds = {c.id: [] for c in live}
    rounds = 1 if cfg.quick else max(1, min(cfg.rounds, 3))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=quiet) as bar:
        task = bar.add_task("measuring", total=len(live) * (rounds + 1))
        t_prev = time.monotonic()
        for r in range(rounds + 1):  # round 0 warms up (and compiles each batch size's step): short
            t_round = time.monotonic()
            if r > 1 and run.left() < (t_round - t_prev) * 1.1:
                console.print(f"  time budget: stopping after {r - 1} timed rounds", highlight=False)
                break
            t_prev = t_round
            for c in live:
                bar.update(task, description=f"round {r}/{rounds} {c.id}")
                if c.id in run.workers:
                    got = run.measure(c, warmup=r == 0)
                    if got is not None and r > 0:
                        run.rounds[c.id].append(got)
                bar.advance(task)


def _finish(run: _LMRun, result: TuneResult, bw: dict[str, Any]) -> None:
    for cid, got in run.rounds.items():
        r = run.results[cid]
        if r.status != "ok" or not got:
            continue
        ttft, tpot = summarize_lm(got)
        first = next(iter(ttft.values()), None)
        b1 = tpot.get("1")
        tps = 1000 / b1.p50 if b1 and b1.p50 else None
        roof = (roofline_ms(r.weight_bytes, bw["gb_per_s"]) / b1.p50) if (b1 and b1.p50 and r.weight_bytes) else None
        peaks = got[-1]
        ex = dict(r.executed, peak_rss_mb=round(peaks.get("peak_rss_mb") or 0, 1),
                  peak_gpu_mb=round(peaks["peak_gpu_mb"], 1) if peaks.get("peak_gpu_mb") else None)
        run.record(run.cands[cid], ttft_by_length=ttft, tpot_by_batch=tpot, ttft_ms=first, tpot_ms=b1,
                   tokens_per_s=tps, roofline_fraction=roof, executed=ex)
    result.candidates = list(run.results.values())
    result.baseline = run.results.get(result.reference)
