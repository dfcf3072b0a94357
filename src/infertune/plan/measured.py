"""Plan held against a tune's measurement: what `infertune plan` predicts for an embedder on this host beside what
`infertune tune` measured for its winner, each pair with its error, (predicted - measured) / measured x 100.

  tokens/s bound  plan/embed.py's roofline at the winner's precision and token budget, inputs of the workload's
                  median length; on a GPU the gpus.toml peak and bandwidth (plan's own), on a CPU the estimated
                  matmul peak (hardware/cpu_peak.py; no spec bandwidth, so the compute side only). Measured: the
                  real (unpadded) tokens/s of the winner's best pass.
  items/s bound   the tokens/s bound over the eval split's real tokens per item (measured tokens/s over items/s).
  weight memory   plan's count at the checkpoint's stored dtype vs the bytes of its weight files.
  peak memory     plan's need at the winner's precision (weights + batch activations, + non-torch on a GPU) vs the
                  winner's measured peak (GPU: torch's allocator peak; CPU: the worker's RSS, which also holds
                  Python, torch and the engine's libraries).

A bound over-predicts by construction; measured / predicted of the items/s row is the *efficiency* that
`plan --calibrated-from RUN` applies to its bound on the same device (calibration below)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.errors import InfertuneError
from infertune.plan.arch import DTYPE_BYTES, Arch, arch_from_config, load_config
from infertune.plan.embed import GIB, TYPICAL_LEN, activation_bytes, flops_per_token, roofline
from infertune.results import PlanVsMeasured, TuneResult

MIB = 2**20
EFFICIENCY_ROW = "items/s bound"
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # config.json's torch_dtype -> plan's names


class Host(BaseModel):
    """The device a bound is computed for: a GPU from the spec table, or this CPU's estimated peak."""

    device: str  # cpu | cuda
    name: str
    peak_tflops: float | None = None
    how: str = ""
    spec: dict[str, Any] | None = None  # the gpus.toml entry (GPU): plan's roofline reads peak and bandwidth there


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured x 100; None when either is missing or nothing was measured."""
    if predicted is None or measured is None or not measured:
        return None
    return (predicted - measured) / measured * 100


def pair(quantity: str, unit: str, predicted: float | None, measured: float | None, note: str) -> PlanVsMeasured:
    return PlanVsMeasured(quantity=quantity, unit=unit, predicted=predicted, measured=measured,
                          error_pct=error_pct(predicted, measured), note=note)


def precision_of(candidate: dict[str, Any]) -> str:
    """The precision a candidate's matmuls run in: mixed precision counts as its quantizer's kind."""
    p = str(candidate.get("precision") or "fp32")
    if p == "mixed":
        from infertune.registry import quant

        q = quant(candidate.get("quant") or "")
        return q.kind if q is not None else "int8"
    return p if p in DTYPE_BYTES else "fp32"


def gpu_host(name: str, precision: str) -> Host:
    """A GPU as plan sees it (data/gpus.toml, found by the name torch or nvidia-smi reports)."""
    from infertune.hardware.gpu_specs import find_gpu, peak_tflops

    g = find_gpu(name)
    peak = None if precision == "fp32" else peak_tflops(g, precision)
    how = (f"{g['name']} spec: {peak:g} dense {precision} TFLOP/s, {g['bandwidth_gbs']} GB/s" if peak else
           f"{g['name']} spec: {g['bandwidth_gbs']} GB/s, no dense {precision} peak (memory side only)")
    return Host(device="cuda", name=g["name"], peak_tflops=peak, how=how, spec=g)


def cpu_host(precision: str, threads: int | None = None) -> Host:
    """This CPU (hardware/capabilities.py, as tune reads it) with its estimated matmul peak."""
    from infertune.hardware.capabilities import read_cpu
    from infertune.hardware.cpu_peak import cpu_peak_tflops

    cpu = read_cpu()  # INFERTUNE_CPU_FLAGS applies, as it does to tune's candidates
    peak, how = cpu_peak_tflops(cpu, precision, threads)
    return Host(device="cpu", name=cpu.model or "this CPU", peak_tflops=peak, how=how)


def bound(a: Arch, host: Host, dtype: str, tokens: int, length: int) -> dict[str, Any] | None:
    """Plan's throughput bound on `host` (tokens_per_s, bound); None without a peak or bandwidth to bound with."""
    decoder = not a.encoder
    if host.spec is not None:
        return roofline(a, host.spec, dtype, tokens, length, decoder)
    if not host.peak_tflops:
        return None
    return {"tokens_per_s": host.peak_tflops * 1e12 / flops_per_token(a, length, decoder), "bound": "compute"}


def weight_files_bytes(model_dir: str | Path) -> int | None:
    """Bytes of the checkpoint's weight files (safetensors, else PyTorch .bin) in `model_dir`."""
    d = Path(model_dir)
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        files = sorted(d.glob(pattern))
        if files:
            return sum(f.stat().st_size for f in files)
    return None


def subject(result: TuneResult):
    """The candidate compared with plan: the winner, else (no candidate met every constraint) the fastest measured."""
    measured = [r for r in result.candidates if r.measurement is not None and r.items_per_s]
    return result.winner or max(measured, key=lambda r: r.items_per_s, default=None)


def compare(result: TuneResult, a: Arch, host: Host, weights_bytes: int | None) -> list[PlanVsMeasured]:
    """The rows for a tune's winner, else its fastest measured candidate (none without one)."""
    w = subject(result)
    m = w.measurement if w is not None else None
    if w is None or m is None or not m.items_per_s:
        return []
    dtype = precision_of(w.candidate)
    wl = result.workload
    length = max(1, int(min(wl.tokens_p50, wl.max_length))) if wl else TYPICAL_LEN
    b = w.candidate.get("batching") or {}
    tokens = int(b.get("size") or 1) * (1 if b.get("kind", "tokens") == "tokens" else length)
    real_tps = m.tokens_per_s_best or m.tokens_per_s
    per_item = real_tps / (m.items_per_s if m.tokens_per_s_best else (m.items_per_s_median or m.items_per_s))
    roof = bound(a, host, dtype, tokens, length)
    where = f"{host.how}; {dtype}, {tokens}-token batches of {length}-token inputs"
    tps = roof["tokens_per_s"] if roof else None
    rows = [pair("tokens/s bound", "tokens/s", tps, real_tps,
                 f"roofline ({roof['bound'] if roof else 'no'}-bound): {where}; measured: real tokens of the "
                 f"{'best pass' if m.tokens_per_s_best else 'timed passes'}"),
            pair(EFFICIENCY_ROW, "items/s", tps / per_item if tps else None, m.items_per_s,
                 f"the tokens/s bound over {per_item:.1f} real tokens per item of the eval split; measured: "
                 f"{w.name}'s best of n={m.passes} passes")]
    stored = SHORT.get(a.dtype, a.dtype if a.dtype in DTYPE_BYTES else "fp32")
    rows.append(pair("weight memory", "MiB", a.weights_bytes(stored) / MIB,
                     weights_bytes / MIB if weights_bytes else None,
                     f"plan's parameter count at the checkpoint's {stored}; measured: its weight files"))
    non_torch = 0.5 * GIB if host.device == "cuda" else 0.0
    need = a.weights_bytes(dtype) + activation_bytes(a, tokens, dtype) + non_torch
    gpu = host.device == "cuda"
    rows.append(pair("peak memory", "MiB", need / MIB, m.peak_gpu_mb if gpu else m.peak_rss_mb,
                     f"plan's need at {dtype}: weights + activations of {tokens} tokens"
                     + (" + 0.5 GiB non-torch; measured: torch's GPU allocator peak" if gpu else
                        "; measured: the worker's peak RSS, which also holds Python, torch and the engine's "
                        "libraries (plan does not model them)")))
    return rows


def for_run(result: TuneResult, model_dir: str | Path, device: str, threads: int | None = None,
            gpu_name: str | None = None) -> tuple[list[PlanVsMeasured], str | None]:
    """(the rows for a tune of the model in `model_dir` on this host, None) or ([], why none)."""
    if subject(result) is None:
        return [], "no measured candidate to compare with"
    try:
        a = arch_from_config(load_config(model_dir))
        prec = precision_of(subject(result).candidate)
        host = gpu_host(gpu_name or "", prec) if device == "cuda" else cpu_host(prec, threads)
    except InfertuneError as e:
        return [], str(e)
    return compare(result, a, host, weight_files_bytes(model_dir)), None


def efficiency(rows: list[PlanVsMeasured]) -> float | None:
    """Measured / predicted of the items/s bound: the share of plan's bound the winner reached."""
    r = next((x for x in rows if x.quantity == EFFICIENCY_ROW), None)
    return r.measured / r.predicted if r and r.measured and r.predicted else None


def read_run(run: str | Path) -> tuple[TuneResult, Path]:
    """A tune's results.json, given it or its output directory."""
    p = Path(run).expanduser()
    f = p / "results.json" if p.is_dir() else p
    try:
        return TuneResult.model_validate(json.loads(f.read_text())), f
    except OSError as e:
        raise InfertuneError(f"--calibrated-from {run}: no tune results there ({e.strerror}); pass a tune's --out "
                             "directory or its results.json") from None
    except ValueError as e:
        raise InfertuneError(f"--calibrated-from {f}: not a tune's results.json ({str(e).splitlines()[0]})") from None
