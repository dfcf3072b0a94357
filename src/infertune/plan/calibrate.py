"""`plan --calibrated-from RUN`: an embedder's throughput bound scaled by the efficiency a tune of the same model
measured on the same kind of GPU (measured / predicted items/s, plan/measured.py), instead of the bare spec bound.

Applicable only when RUN tuned this model on the GPU plan sizes for; anything else is an InfertuneError, not a
warning: a user who asks for a calibrated plan and gets the default one printed beside a warning may read the
uncalibrated figure as calibrated. The model is the same when the run's model directory reads here with the same
architecture, else when its name matches; the GPU is the same when both names find the same gpus.toml entry. A CPU
run never applies: plan sizes a GPU, and a CPU's share of its own (estimated) peak says nothing about a GPU's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.plan.arch import Arch, arch_from_config, load_config
from infertune.plan.measured import compare, efficiency, gpu_host, precision_of, read_run

SAME_ARCH = ("model_type", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab")


def _same_model(run_model: str, model: str, a: Arch) -> bool:
    try:
        other = arch_from_config(load_config(run_model))
    except (InfertuneError, OSError, ValueError):
        return Path(run_model.rstrip("/")).name.lower() == Path(str(model).rstrip("/")).name.lower()
    return all(getattr(other, k) == getattr(a, k) for k in SAME_ARCH)


def calibration(run: str | Path, model: str, a: Arch, g: dict[str, Any]) -> dict[str, Any]:
    """{efficiency, source, precision, gpu} from the tune in `run` of `model` (arch `a`) on GPU `g` (gpus.toml
    entry), or InfertuneError saying why that run does not apply."""
    from infertune.hardware.gpu_specs import find_gpu

    res, f = read_run(run)
    where = f"--calibrated-from {f}"
    if res.kind != "embedding":
        raise InfertuneError(f"{where} is a {res.kind} tune: only an embedding tune calibrates an embedder's plan")
    if not _same_model(res.model, model, a):
        raise InfertuneError(f"{where} tuned {res.model}, not {model}: its efficiency does not apply; tune {model} "
                             "on this GPU first, or plan without --calibrated-from")
    if res.config.get("device") != "cuda" or not res.environment.gpu:
        raise InfertuneError(f"{where} was measured on a CPU ({res.environment.cpu_model or 'unnamed'}); plan sizes a "
                             f"GPU ({g['name']}), so it does not apply: calibrate from `infertune tune --device cuda` "
                             f"on a {g['name']}")
    reported = str(res.environment.gpu[0].get("name") or "")
    try:
        run_gpu = find_gpu(reported)["name"]
    except InfertuneError:
        run_gpu = reported
    if run_gpu != g["name"]:
        raise InfertuneError(f"{where} was measured on {reported} ({run_gpu}), not {g['name']}: its efficiency does "
                             f"not apply here; pass --gpu {run_gpu} or calibrate from a tune on a {g['name']}")
    if res.winner is None or res.winner.measurement is None:
        raise InfertuneError(f"{where} has no measured winner to calibrate with")
    prec = precision_of(res.winner.candidate)
    rows = res.predicted_vs_measured or compare(res, a, gpu_host(reported, prec), None)
    eff = efficiency(rows)
    if eff is None:
        raise InfertuneError(f"{where}: no throughput bound for {prec} on {g['name']} to compare the winner with")
    return {"efficiency": eff, "source": str(f), "precision": prec, "gpu": g["name"],
            "recorded": bool(res.predicted_vs_measured)}


def apply(emb, cal: dict[str, Any], dtype: str, notes: list[str]) -> None:
    """Scale an EmbedPlan's bound by the measured efficiency and say so."""
    emb.calibrated_from = cal["source"]
    emb.efficiency = cal["efficiency"]
    emb.calibrated_tokens_per_s = emb.tokens_per_s * cal["efficiency"]
    emb.calibrated_items_per_s = emb.items_per_s * cal["efficiency"]
    how = ("its recorded predicted_vs_measured" if cal["recorded"] else
           "its winner against plan's bound, computed now")
    share = f"{cal['efficiency'] * 100:.2g}%"
    notes.append(f"calibrated from {cal['source']}: the {cal['precision']} winner reached {share} of "
                 f"the roofline bound on {cal['gpu']} ({how}); the calibrated figure assumes the same share at "
                 f"{dtype}" + (f" (measured at {cal['precision']})" if cal["precision"] != dtype else "")
                 + " and at this plan's batch and input lengths")
