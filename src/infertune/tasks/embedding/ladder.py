"""The precision ladder before the embedding candidates: the GEMMs a quantized engine would run, timed at the model's
Linear shapes and the tune's token budgets (infertune.hardware.gemm_ladder), decide which quantized options are worth
a probe at all, and their priors.

An option takes part when its quantizer declares the GEMM it runs on this device (infertune.catalog's `gemm`:
torchao's fp8 and int8 on a GPU; the CPU's int8 engines run ONNX Runtime's, OpenVINO's and fbgemm's own kernels,
which torch's GEMMs do not speak for). Per kind, the expected GEMM speedup over 16-bit at the tune's token budget is
the model's Linear work in 16-bit over the same work quantized, each shape weighted by its share of the Linear
FLOPs. An option under MIN_SPEEDUP is recorded as skipped with the figure; any other has its prior scaled by it.
Options the user names with --candidates (or passes as their own list) are never skipped, only given the prior.
The ladder runs only when at least one option takes part, in a worker process (a GPU context in the parent would
hold memory for the whole run), and its seconds count in the tune's time budget."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from infertune.registry import quant
from infertune.tuning.task import Option

# A quantized engine adds work to its GEMMs (the activations' quantization, scales, a compile), so when its GEMMs
# alone are not faster than 16-bit the engine cannot be: int8 GEMMs slower than bf16 made every torchao int8 probe
# on an H100 time lost (docs/measurements/2026-12-06-h100-compiled-embeddings, precision ladder). Tunable: raise it to
# keep only options with a clear margin, lower it to probe near-ties anyway.
MIN_SPEEDUP = 1.0
MAX_S = {"cuda": 20.0, "cpu": 2.0}  # seconds of timing at most; a CPU tune must not notice it
BUDGET_SHARE = 0.1  # and at most this share of the tune's time budget
# M (tokens per GEMM): the first is the token budget the tune's batches start at and the one the decision reads; on a
# GPU also a small batch, what latency-bound serving runs. The CPU's is small: torch._int_mm has no fast CPU kernel
# (1.4 GFLOP/s on the 2-core AVX2 EPYC, 0.04x of fp32: one 512-token call of MiniLM's MLP shape took 0.43 s)
TOKENS = {"cuda": (16384, 256), "cpu": (128,)}
MIN_SHARE = 0.02  # shapes under this share of the Linear FLOPs are not timed (an MoE router, a tiny projection)
MIN_COVERAGE = 0.5  # a kind decides only when the shapes it was timed at hold at least this share of the FLOPs


def gemm_kind(cand, device: str) -> str | None:
    """The ladder's precision that `cand`'s quantized Linear layers run on `device`, or None (not its business)."""
    q = quant(cand.quant) if cand.quant else None
    return q.gemm.get(device) if q is not None and cand.precision != "mixed" else None


def model_shapes(model_dir: str | Path) -> list[dict[str, Any]]:
    """The distinct (K, N) of the model's Linear layers from its config.json (no weights loaded), with how many
    layers have each and their share of the Linear FLOPs, the largest share first."""
    import json

    from infertune.plan.arch import arch_from_config
    from infertune.plan.layers import linear_shapes

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    counts = linear_shapes(arch_from_config(cfg))
    total = sum(k * n * c for (k, n), c in counts.items()) or 1
    out = [{"k": k, "n": n, "layers": c, "flop_share": round(k * n * c / total, 4)} for (k, n), c in counts.items()]
    return sorted(out, key=lambda s: -s["flop_share"])


def expected_speedup(cells: list[dict], shapes: list[dict], kind: str, base: str,
                     m: int) -> tuple[float | None, float]:
    """(the GEMM speedup of `kind` over `base` at M=m for the whole model's Linear work, the FLOP share it covers).
    The work is added up as time: each shape's FLOP share over its measured TFLOP/s, in 16-bit and in `kind`; so two
    shapes at the same 16-bit speed give the FLOP-weighted harmonic mean of their ratios (a shape at 0.5x costs
    twice its 16-bit time, which an arithmetic mean of ratios would understate). None below MIN_COVERAGE."""
    share = {(s["k"], s["n"]): s["flop_share"] for s in shapes}
    t16 = tq = covered = 0.0
    for c in cells:
        w, b, q = share.get((c["k"], c["n"]), 0.0), c["tflops"].get(base), c["tflops"].get(kind)
        if c["m"] != m or not w or not b or not q:
            continue
        t16, tq, covered = t16 + w / b, tq + w / q, covered + w
    if covered < MIN_COVERAGE or not tq:
        return None, round(covered, 4)
    return round(t16 / tq, 4), round(covered, 4)


def decide(opts: list[Option], ladder: dict[str, Any], device: str, named: set[str], among: set[str]) -> list[Option]:
    """The options with the ladder's verdict on those in `among` (ids): skipped (Option.skip) under MIN_SPEEDUP unless
    `named`, else the prior scaled by the expected speedup; one record per option decided on in ladder["decisions"]."""
    speed, base, m = ladder.get("expected_speedup", {}), ladder.get("base", "16-bit"), ladder.get("decision_tokens")
    out, records = [], ladder.setdefault("decisions", [])
    for o in opts:
        kind = gemm_kind(o.candidate, device)
        if kind is None or o.candidate.id not in among:
            out.append(o)
            continue
        sp = speed.get(kind)
        rec: dict[str, Any] = {"candidate": o.candidate.id, "kind": kind, "expected_speedup": sp, "prior_was": o.prior}
        if sp is None:
            why = ladder.get("not_measured", {}).get(kind) or _error(ladder, kind)
            rec.update(action="kept", prior=o.prior, why=f"{kind} GEMMs not measured ({why}); prior unchanged")
            out.append(o)
        else:
            fig = f"{kind} GEMMs measured {sp:.2f}x of {base} at this model's shapes and {m:,} tokens"
            if sp < MIN_SPEEDUP and o.candidate.id not in named:
                why = f"{fig}; a quantized engine needs at least {MIN_SPEEDUP:g}x to pay (precision ladder)"
                rec.update(action="skipped", prior=o.prior, why=why)
                out.append(replace(o, skip=why))
            else:
                prior = round(o.prior * sp, 3)
                note = " (named by the user: tried anyway)" if sp < MIN_SPEEDUP else ""
                rec.update(action="prior", prior=prior, why=f"{fig}{note}; prior {o.prior:g} x {sp:.2f} = {prior:g}")
                out.append(replace(o, prior=prior))
        records.append(rec)
    return out


def _error(ladder: dict[str, Any], kind: str) -> str:
    """Why `kind` has no figure although it was asked for: its first error, else too little was timed."""
    errs = [c["errors"][kind] for c in ladder.get("cells", []) if kind in c.get("errors", {})]
    return f"it failed: {errs[0]}" if errs else f"its shapes timed hold under {MIN_COVERAGE:.0%} of the Linear FLOPs"


def line(ladder: dict[str, Any]) -> str:
    """The tune's progress line: 'precision ladder: fp8 1.41x, int8 0.78x of bf16 (7.2 s)'."""
    if ladder.get("status") != "measured":
        return f"precision ladder: {ladder.get('status')}: {ladder.get('reason', '')}"
    figs = ", ".join(f"{k} {v:.2f}x" if v is not None else f"{k} not measured"
                     for k, v in ladder.get("expected_speedup", {}).items())
    m, wall, timing = ladder.get("decision_tokens"), ladder.get("seconds", 0.0), ladder.get("measure_s", 0.0)
    # the rest of the wall is the worker's start (on a GPU host its first one waits for the fork server's imports)
    of = f", {timing:.1f} s of it timing" if wall - timing >= 1.0 else ""
    return f"precision ladder: {figs} of {ladder.get('base')} at {m:,} tokens ({wall:.1f} s{of})"


def run(task, caps, opts: list[Option]) -> list[Option]:
    """Time the ladder when an option here takes part, decide, record results.json's `ladder` and print one line."""
    from infertune.hardware import needs

    cfg, dev = task.cfg, caps.device
    named = {c.id for c in task.custom or []}
    if cfg.candidates:
        named |= {o.candidate.id for o in opts if task.matches(o.candidate, cfg.candidates)}
    live = [o for o in opts if gemm_kind(o.candidate, dev) and o.role == "candidate" and needs(caps, o.needs) is None
            and (not cfg.candidates or o.candidate.id in named) and not o.skip]
    kinds = list(dict.fromkeys(gemm_kind(o.candidate, dev) for o in live))
    if not kinds:
        rec = {"status": "skipped", "device": dev, "seconds": 0.0, "reason": "no option tried here runs the GEMMs it "
               "times (torch's fp8 and int8, as torchao's GPU options do); "
               + ("--quick leaves those out, and --candidates or the GPU's compute capability can" if dev == "cuda"
                  else "this CPU's int8 engines run ONNX Runtime's, OpenVINO's or fbgemm's own kernels")}
        return _done(task, rec, opts)
    t0 = time.perf_counter()
    rec = measure(task.spec.path, kinds, dev, _max_s(task, dev), cfg.threads)
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    if rec["status"] == "measured":
        opts = decide(opts, rec, dev, named, {o.candidate.id for o in live})
    return _done(task, rec, opts)


def measure(model_dir: str, kinds: list[str], device: str, max_s: float, threads: int | None) -> dict[str, Any]:
    """The ladder's record: shapes from the config, the GEMMs timed in a worker, the expected speedup per kind."""
    from infertune.tuning.worker import WorkerFailed, run_isolated

    try:
        shapes = model_shapes(model_dir)
    except Exception as e:  # noqa: BLE001 - no config.json, or one plan cannot read: the priors stay as they are
        return {"status": "failed", "device": device, "reason": f"no Linear shapes from {model_dir}/config.json: {e}"}
    timed = [s for s in shapes if s["flop_share"] >= MIN_SHARE]
    tokens = list(TOKENS[device])
    try:
        got = run_isolated("infertune.hardware.gemm_ladder:measure_ladder",
                           {"shapes": [(s["k"], s["n"]) for s in timed], "tokens": tokens, "device": device,
                            "max_s": max_s, "precisions": kinds}, timeout_s=max_s + 90.0, threads=threads)
    except WorkerFailed as e:
        return {"status": "failed", "device": device, "shapes": shapes, "reason": f"the GEMM probe failed: {e}"[:400]}
    for s in shapes:
        s["timed"] = s["flop_share"] >= MIN_SHARE
    rec = {"status": "measured", **got, "measure_s": got.pop("seconds"), "shapes": shapes, "tokens": tokens,
           "decision_tokens": tokens[0], "min_speedup": MIN_SPEEDUP}
    by_m = {str(m): {k: expected_speedup(got["cells"], shapes, k, got["base"], m)[0] for k in kinds
                     if k in got["precisions"]} for m in tokens}
    rec["expected_speedup"] = {k: by_m[str(tokens[0])].get(k) for k in kinds}
    rec["expected_speedup_by_tokens"] = by_m
    rec["coverage"] = {k: expected_speedup(got["cells"], shapes, k, got["base"], tokens[0])[1] for k in kinds}
    return rec


def _max_s(task, device: str) -> float:
    budget = task.cfg.time_budget_s or task.default_budget_s()
    return round(min(MAX_S[device], BUDGET_SHARE * budget), 1)


def _done(task, rec: dict[str, Any], opts: list[Option]) -> list[Option]:
    if task.result is not None:
        task.result.ladder = rec
    task.console.print(f"  {line(rec)}", style="yellow" if rec["status"] == "failed" else None, highlight=False,
                       markup=False)
    return opts
