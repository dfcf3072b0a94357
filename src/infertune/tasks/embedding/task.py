"""The embedding family in the search loop: load and split the workload, prepare engines in workers,
probe on shuffled batches of the eval split, verify against the fp32 reference by cosine, search each
survivor's token budget against the SLO, measure passes, save the artifact."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from infertune.config import Batching, Candidate, TuneConfig
from infertune.registry import engine
from infertune.results import Accuracy, CandidateResult, TuneResult, WorkloadSummary
from infertune.tasks.embedding import batch_search, candidates, held
from infertune.tuning.task import Option, Probe, Task


class EmbeddingTask(Task):
    kind = "embedding"
    unit = "items/s"

    def __init__(self, cfg: TuneConfig, console, ref, custom: list[Candidate] | None = None):
        from infertune.workloads.texts import load_workload

        super().__init__(cfg, console)
        self.ref, self.custom = ref, custom
        from infertune.tasks.embedding.task_eval import TaskEval

        self.workload = load_workload(cfg.workload)  # first: a malformed file fails before anything heavy loads
        self.task_eval = TaskEval(cfg.eval_pairs, cfg.eval_fn, cfg.accuracy)
        self.ref_vectors = None
        self.flops: tuple[float | None, str | None] | None = None  # Linear FLOPs per token, or why none (peak.py)
        self.warmed: set[str] = set()
        self.acc_idx: list[int] | None = None  # positions in the eval split that verification embeds
        self.result: TuneResult | None = None
        self.pairs: dict[str, list[tuple[int, float]]] = {}  # engine -> (padded tokens, batch ms) from probes

    # --- setup ---------------------------------------------------------------------------------
    def load(self, out: Path) -> TuneResult:
        from infertune.hardware.fingerprint import fingerprint
        from infertune.models.embedding import embedding_spec, load_tokenizer

        _quiet_libraries()
        cfg = self.cfg
        self.spec = embedding_spec(self.ref, cfg.pooling, cfg.task)
        if isinstance(cfg.dimensions, int) and cfg.dimensions > self.spec.dim:
            from infertune.errors import InfertuneError

            raise InfertuneError(f"--dimensions {cfg.dimensions} is more than the model's {self.spec.dim}")
        self.tokenizer = load_tokenizer(self.spec)
        self.out = out
        self.calib, self.evals, summary = self._workload()
        self.console.print(
            f"[bold]infertune tune[/] {self.spec.name} on {cfg.device}: {summary.n_items} items (p50 "
            f"{summary.tokens_p50:.0f} / p99 {summary.tokens_p99:.0f} tokens, {summary.over_limit} over "
            f"{self.spec.max_length}); eval {summary.n_eval}, calibration {summary.n_calibration} -> {out}",
            highlight=False)
        env = fingerprint(cfg.threads)
        self.result = TuneResult(model=self.spec.name, config=cfg.model_dump(mode="json"), environment=env,
                                 workload=summary, started=env.timestamp, out_dir=str(out),
                                 reference=candidates.reference(cfg.device).id)
        return self.result

    def _workload(self) -> tuple[list[str], list[str], WorkloadSummary]:
        import numpy as np

        from infertune.tasks.embedding.verify import accuracy_subset
        from infertune.workloads.buckets import histogram, stratified_split, stratified_subsample

        cfg = self.cfg
        wl = self.workload
        lengths = [len(x) for x in self.tokenizer(wl.items, truncation=False)["input_ids"]]
        calib, evals = stratified_split(lengths, cfg.eval_fraction, cfg.seed)
        # CPU passes are slow: cap the eval split so a full tune fits in minutes. GPU passes are fast, and a
        # 120-item pass is one or two batches of a GPU token budget: padded 2.4x where the same budget over the
        # whole workload pads ~1.1x (tune then measured half the forward-only ceiling:
        # docs/measurements/2026-11-30-h200-cuda-graphs), so a quick GPU tune measures on up to 1,000 items
        cap = cfg.max_eval_items or ((120 if cfg.device == "cpu" else 1000) if cfg.quick
                                     else 256 if cfg.device == "cpu" else 5000)
        evals = stratified_subsample(evals, lengths, cap, cfg.seed)
        self.lengths = [lengths[i] for i in evals] or [1]
        self.acc_idx = accuracy_subset(self.lengths, cfg.seed)
        calib = stratified_subsample(calib, lengths, 32 if cfg.quick else 64, cfg.seed)
        a = np.asarray(lengths)
        summary = WorkloadSummary(
            source=wl.source, n_items=len(wl.items), n_calibration=len(calib), n_eval=len(evals),
            tokens_mean=float(a.mean()), tokens_p50=float(np.percentile(a, 50)),
            tokens_p90=float(np.percentile(a, 90)), tokens_p99=float(np.percentile(a, 99)), tokens_max=int(a.max()),
            over_limit=int((a > self.spec.max_length).sum()), max_length=self.spec.max_length,
            histogram=histogram(lengths),
            n_accuracy=len(evals) if self.acc_idx is None else len(self.acc_idx))
        return [wl.items[i] for i in calib], [wl.items[i] for i in evals], summary

    def default_budget_s(self) -> float:  # a full GPU tune compiles several engines (fp8, int8 too)
        return {("cuda", True): 180.0, ("cpu", True): 150.0}.get((self.cfg.device, self.cfg.quick), 300.0)

    def options(self, caps) -> list[Option]:
        extra = bool(self.cfg.candidates)
        opts = candidates.options(caps, self.cfg.quick, extra=extra, arch=self.spec.arch)
        if self.spec.arch == "decoder":  # a decoder packs its batches on a GPU anyway
            opts = [o for o in opts if o.candidate.option("batches") != "packed"]
        if self.custom is not None:  # the library caller's own list; reference and baseline stay
            keep = [o for o in opts if o.role != "candidate"]
            ids = {o.candidate.id for o in keep}
            opts = keep + [Option(c, "given by the caller", 1.0) for c in self.custom if c.id not in ids]
        from infertune.tasks.embedding import ladder

        return ladder.run(self, caps, opts)  # the quantized options' GEMMs timed: skipped when slower, else priors

    def available(self, cand) -> str | None:
        from infertune.registry import load_backend

        return load_backend(cand.backend).available(cand, self.cfg.device)

    # --- per engine ----------------------------------------------------------------------------
    def job(self, cand) -> dict[str, Any]:
        return {"serve": "infertune.tasks.embedding.worker:serve", "spec": self.spec.to_dict(),
                "candidate": cand.model_dump(mode="json"), "device": self.cfg.device, "threads": self.cfg.threads,
                "workdir": str(self.out / "work"), "texts": self.evals, "calibration": self.calib}

    def _timed(self, worker, cand, cap_s: float) -> dict[str, Any]:
        """One capped pass over shuffled batches of the eval split (after a shorter capped warm-up)."""
        warm = 0 if cand.id in self.warmed else 1
        timeout = max(120.0, 20 * cap_s)
        if self.call_limit_s is not None:  # the search's share of the budget for this call (tuning.search)
            timeout = min(timeout, self.call_limit_s)
        got = worker.call("measure", timeout=timeout, batching=cand.batching.model_dump(),
                          warmup=warm, warmup_max_s=self._warm_cap(cand, cap_s), match_warmup=True,
                          passes=1, max_s=cap_s, shuffle=self.cfg.seed)
        self.warmed.add(cand.id)
        return got["passes"][0]

    def _warm_cap(self, cand, cap: float) -> float | None:
        """Warm-up passes are cut short, except where the engine declares that the first run of each shape
        compiles or is captured (a compile left for the timed pass would be timed; infertune.catalog):
        torch.compile, and PyTorch eager on a GPU (CUDA graphs, captured and checked at a shape's first sight)."""
        first_run = self.cfg.device in engine(cand.backend).first_run
        if first_run and cand.engine_id == candidates.reference(self.cfg.device).engine_id:
            # the fp32 reference cannot win on a GPU: its warm-up is capped, and the timed pass runs exactly the
            # batches it warmed (match_warmup), so no capture lands in it
            return 2 * cap
        return None if first_run else cap

    def probe(self, worker, cand, cap_s: float) -> Probe:
        import numpy as np

        from infertune.tasks.embedding.measure import wait_share

        t, first = time.monotonic(), cand.id not in self.warmed
        p = self._timed(worker, cand, cap_s)
        warm_s = max(0.0, time.monotonic() - t - p["wall_s"]) if first else 0.0  # its warm-up: a compile, a capture
        speed = p["items"] / p["wall_s"]
        p99 = float(np.percentile(p["latency_ms"], 99))
        self.pairs.setdefault(cand.engine_id, []).extend(zip(p["padded_per_batch"], p["latency_ms"], strict=True))
        detail = {"items": p["items"], "batches": p["batches"], "batching": cand.batching.id, "complete": p["complete"]}
        if (share := wait_share([p])) is not None:  # an overlapped GPU pass: what its main thread waited for
            detail["wait_share"] = share
        return Probe(speed=speed, p99_ms=p99, detail=detail, warm_s=warm_s)

    def run_peers(self, result: TuneResult, out: Path) -> list:
        """tune --peers: our artifact under `infertune serve` vs vLLM's pooling runner on the source model."""
        from infertune.tasks.embedding.peers import run_peers

        c = self.cfg
        return run_peers(c.peers, result.artifact, self.ref.path, self.workload.items, self.spec.max_length,
                         self.tokenizer, out, c.device, console=self.console)

    def peers_table(self, got: list) -> str:
        """The peers' figures as the console prints them."""
        from infertune.tasks.embedding.peers import table

        return table(got)

    def verify(self, worker, cand) -> tuple[Accuracy, bool, str]:
        """Cosine, top-10 (per bucket) and task metrics vs the reference; invariance.py; kernels.py."""
        from infertune.tasks.embedding import kernels
        from infertune.tasks.embedding.dimensions import judged_dims
        from infertune.tasks.embedding.invariance import check as check_invariance
        from infertune.tasks.embedding.verify import compare, unit, within_budget

        batching = cand.batching.model_dump()
        vec = worker.call("embed", batching=batching, subset=self.acc_idx)
        if self.ref_vectors is None:
            self.ref_vectors = vec
        # Matryoshka: judged on the dims the user will ask for (auto: chosen on the reference, the first call)
        d = judged_dims(self, vec, lambda t: worker.call("embed", batching=batching, texts=list(t)))
        lengths = self.lengths if self.acc_idx is None else [self.lengths[i] for i in self.acc_idx]
        acc = compare(self.ref_vectors[:, :d], vec[:, :d], lengths=lengths)
        if self.task_eval:  # the user's own texts, on the same dims
            acc.task = self.task_eval.score(
                lambda t: unit(worker.call("embed", batching=batching, texts=list(t))[:, :d]))
        ok, why = within_budget(acc, self.cfg.accuracy)
        if kernels.requested(cand) and (bad := kernels.verdict(cand, worker.call("kernels"))):
            ok, why = False, "; ".join(x for x in (bad, why) if x)  # quantized in name only: its speed is not int8's
        if getattr(cand, "backend", None) == candidates.BASELINE.backend:  # cannot win: not served, not checked
            return acc, ok, why
        acc.batch_invariance, still, moved = check_invariance(self, worker, cand, 1 - (acc.cosine_min or 0))
        return (acc, ok, why) if still else (acc, False, f"{why}; {moved}" if why else moved)

    def refine(self, run, cand, probe: Probe, share_s: float) -> list:
        """Search the token budget against the SLO (batch_search says how)."""
        if cand.batching.kind != "tokens":
            return [cand]
        dev, slo = self.cfg.device, self.cfg.slo.p99_ms
        cap = 2.0 if dev == "cpu" else 4.0
        longest = min(self.spec.max_length, max(self.lengths))
        pairs = self.pairs.setdefault(cand.engine_id, [])
        points = [batch_search.Point(cand.batching.size, probe.speed, probe.p99_ms or 0.0)]
        t_end = time.monotonic() + share_s
        variants: dict[int, Candidate] = {cand.batching.size: cand}
        waits = {cand.batching.size: probe.detail.get("wait_share")}  # overlapped GPU passes only (diagnostics)
        for _ in range(batch_search.MAX_STEPS):
            nxt = batch_search.next_budget(points, pairs, longest, slo, dev, trust_measured=dev == "cuda")
            if nxt is None or time.monotonic() + 2 * cap > t_end:
                break
            v = cand.model_copy(update={"batching": candidates.tokens(dev, nxt)})
            src = run.results[cand.id]
            run.record(v, status="ok", stage="probe", why_tried=src.why_tried, accuracy=src.accuracy,
                       meets_accuracy=src.meets_accuracy, prepare_s=src.prepare_s, executed=src.executed,
                       compile=src.compile)
            pr = run.call(v, "batching search", lambda w, v=v: self.probe(w, v, cap))
            if pr is None:
                break
            variants[nxt] = v
            points.append(batch_search.Point(nxt, pr.speed, pr.p99_ms or 0.0))
            waits[nxt] = pr.detail.get("wait_share")
        best, pred = batch_search.choose(points, pairs, longest, slo, trust_measured=dev == "cuda")
        chosen = variants[best.tokens]
        a, b = batch_search.fit(pairs)
        run.log["refine"][cand.engine_id] = {
            "chosen_tokens": best.tokens, "slo_ms": slo, "target_ms": batch_search.HEADROOM * slo,
            "latency_model": {"a_ms": round(a, 3), "ms_per_padded_token": round(b, 5), "n": len(pairs),
                              "longest_item_tokens": longest},
            "points": [p.as_dict(slo, pred[p.tokens]) for p in points]}
        if any(waits.values()):
            run.log["refine"][cand.engine_id]["wait_share"] = {str(k): v for k, v in waits.items() if v}
        for v in variants.values():  # the points not chosen live in search.refine, not as candidates
            if v is not chosen:
                run.fold(chosen, v.id)
                run.results.pop(v.id, None)
                run.cands.pop(v.id, None)
        run.record(chosen, probe={"speed": round(best.speed, 3), "unit": self.unit, "p99_ms": best.p99_ms,
                                  "batching": chosen.batching.id})
        run.probes[chosen.id] = Probe(speed=best.speed, p99_ms=best.p99_ms)
        if self.result is not None and self.result.reference == cand.id:
            self.result.reference = chosen.id  # the reference engine, under the batching it was measured with
        run.options.setdefault(chosen.id, run.options.get(cand.id))
        self.console.print(f"  batching {cand.engine_id}: {chosen.batching.id} ({best.speed:.1f} items/s, predicted "
                           f"P99 {pred[best.tokens]:.1f} ms; {len(points)} budgets tried)", highlight=False)
        return [chosen]

    def extra_options(self, run) -> list[Option]:
        """Mixed precision, when a quantized engine was fast but over the accuracy budget and time allows."""
        from infertune.tasks.embedding.mixed_step import mixed_options

        return mixed_options(self, run)

    def measure(self, worker, cand, max_s: float | None = None) -> dict[str, Any]:
        per_call = 1 if self.cfg.device == "cpu" else 3
        warm = 0 if cand.id in self.warmed else 1
        # the probe's order: the same batches (CUDA graphs captured in its warm-up are the shapes timed here)
        extra: dict[str, Any] = {"shuffle": self.cfg.seed}
        if max_s is not None:
            extra["max_s"] = max_s / per_call
        got = worker.call("measure", batching=cand.batching.model_dump(), warmup=warm,
                          warmup_max_s=self._warm_cap(cand, 3.0), passes=per_call, **extra)
        self.warmed.add(cand.id)
        return got

    def pass_s(self, run, cand) -> float:
        r = run.results[cand.id]
        speed = r.items_per_s or (run.probes[cand.id].speed if cand.id in run.probes else 0) or 1.0
        return len(self.evals) / speed * (1 if self.cfg.device == "cpu" else 3) + 0.2

    def summarize(self, run, cand, samples: list[dict[str, Any]]) -> dict[str, Any]:
        from infertune.tasks.embedding.measure import summarize

        passes = [p for s in samples for p in s["passes"]]
        last = samples[-1]
        m = summarize(passes, last["peak_rss_mb"], last["peak_gpu_mb"])
        return {"measurement": m, "items_per_s": m.items_per_s, "latency_ms": m.latency_ms,
                "peak": self.peak(run.results[cand.id].model_copy(update={"measurement": m}))}

    def peak(self, r: CandidateResult):
        """A measured candidate's share of the GPU's dense peak (tasks/embedding/peak.py); None on a CPU."""
        from infertune.tasks.embedding.peak import candidate_peak, linear_flops_per_token

        if self.cfg.device != "cuda" or self.result is None:
            return None
        gpus = self.result.environment.gpu  # torch's view: tune runs on the first visible GPU
        if self.flops is None:
            self.flops = linear_flops_per_token(self.spec.path)
        return candidate_peak(r, str(gpus[0].get("name") or "") if gpus else "an unnamed GPU", self.flops)

    # --- decision ------------------------------------------------------------------------------
    def speed(self, r: CandidateResult) -> float:
        return r.items_per_s or 0.0

    def slo(self, r: CandidateResult) -> tuple[float | None, float | None]:
        m = r.measurement
        fig = m.slo_p99_ms if m is not None and m.slo_p99_ms is not None else r.latency_ms.p99
        return fig, self.cfg.slo.p99_ms

    def simpler_because(self, win: CandidateResult, other: CandidateResult) -> str:
        if other.candidate.get("quant") and not win.candidate.get("quant"):
            a, b = win.accuracy.cosine_mean, other.accuracy.cosine_mean
            return ("the unquantized candidate (no calibration, answers kept: mean cosine "
                    + (f"{a:.5f} vs {b:.5f})" if a is not None and b is not None else "closer to the reference)"))
        return super().simpler_because(win, other)

    @staticmethod
    def drift(r: CandidateResult) -> float | None:
        return None if r.accuracy.cosine_mean is None else 1 - r.accuracy.cosine_mean

    def accuracy_flags(self, r: CandidateResult) -> str:
        from infertune.tasks.embedding.verify import admitting_flags

        return admitting_flags(r.accuracy, self.cfg.accuracy)

    def constraints(self) -> str:
        a = self.cfg.accuracy
        return (f"P99 batch latency <= {self.cfg.slo.p99_ms:g} ms, mean cosine >= {a.min_cosine_mean}, "
                f"min >= {a.min_cosine_min}")

    def describe_winner(self, win: CandidateResult) -> str:
        m = win.measurement
        spread = (f" ({m.items_per_s_estimator}, median {m.items_per_s_median or 0:.1f}, n={m.passes} passes, "
                  f"range {m.items_per_s_spread[0]:.1f}-{m.items_per_s_spread[1]:.1f})") if m else ""
        fig, limit = self.slo(win)
        return (f"Winner: {win.name} at {win.items_per_s:.1f} items/s{spread}, P99 batch latency {fig:.1f} ms "
                f"(of batch medians over passes; pooled {win.latency_ms.p99:.1f}) vs SLO {limit:g} ms, mean cosine "
                f"{win.accuracy.cosine_mean:.5f}, min {win.accuracy.cosine_min:.5f}.")

    # --- outputs -------------------------------------------------------------------------------
    def compare_with_plan(self, result: TuneResult) -> None:
        from infertune.tasks.embedding.plan_report import record

        record(result, self.spec.path, self.cfg.device, self.cfg.threads, self.console)

    def tail_estimate_s(self, speed: float) -> float:
        return held.tail_s(self, speed)

    def save_artifact(self, run, result: TuneResult, out: Path) -> None:
        from infertune.tasks.embedding.artifact import write_manifest
        from infertune.tuning.worker import WorkerFailed

        c = run.cands[result.winner.name]
        w = run.workers.get(c.engine_id)
        if w is None:
            return
        art = out / "artifact"
        try:
            saved = w.call("save", path=str(art))
        except WorkerFailed as e:
            self.console.print(f"[yellow]artifact not written: {str(e)[:300]}[/]")
            return
        write_manifest(art, self.spec, c, result, saved)
        try:  # what `infertune verify` needs: held texts, reference vectors, the winner's speed on them
            held.record(self, w, c, art, run.budget.left())
        except WorkerFailed as e:
            self.console.print(f"[yellow]no verify data (or no speed figure) in the artifact: {str(e)[:300]}[/]")
        result.artifact = str(art)

    def write_report(self, result: TuneResult, path: Path) -> None:
        from infertune.tasks.embedding.report import write_report

        write_report(result, path)


def _quiet_libraries() -> None:
    """Library chatter (progress bars, 'sequence longer than max length' for items we truncate on
    purpose) would bury the report; real problems surface as candidate failures instead."""
    import logging

    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # noqa: BLE001
        pass
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)


__all__ = ["EmbeddingTask", "Batching"]
