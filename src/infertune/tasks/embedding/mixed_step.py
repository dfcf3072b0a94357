"""The mixed-precision step of an embedding tune: when a quantized engine missed the accuracy budget, find on
the calibration split which Linear layers to keep high (tasks/embedding/mixed.py, in a worker) and offer the mixed
candidate. CPU: ORT dynamic int8 rescued with torch.ao's per-layer figures, layers kept in fp32. GPU: torchao
fp8 or int8 rescued with torchao's own per-layer figures, layers kept in bf16."""

from __future__ import annotations

from infertune.registry import quant, rescued
from infertune.results import LayerSensitivity
from infertune.tasks.embedding import candidates
from infertune.tuning.task import Option

MIN_LEFT_S = 25.0  # the per-layer pass of MiniLM took ~10 s of them on 2 cores


def source(task, run) -> tuple[str | None, str | None, str | None]:
    """(the quantizer to rescue, None, the engine it ran on) or (None, why no mixed candidate is tried or None
    when not worth a line, None). A rescue is worth it when its engine probed >= 1.1x the best verified probe;
    naming `mixed` in --candidates asks for it at any speed (a measurement, not a bet on winning)."""
    cfg = task.cfg
    if not cfg.sensitivity or task.custom is not None:
        return None, None, None
    named = bool(cfg.candidates) and any("mixed" in f for f in cfg.candidates)
    if cfg.candidates and not named:
        return None, None, None
    quants = rescued(cfg.device)
    tried = [r for r in run.results.values() if r.candidate.get("quant") in quants and r.probe
             and r.candidate.get("precision") != "mixed"]
    over = [r for r in tried if r.meets_accuracy is False]
    if not over:
        if named and tried:
            states = ", ".join(f"{r.name}: {'within budget' if r.meets_accuracy else 'not verified'}" for r in tried)
            return None, f"no quantized engine was verified over the accuracy budget ({states})", None
        return None, None, None
    fastest = max(over, key=lambda r: r.probe["speed"])
    if not named and fastest.probe["speed"] < 1.1 * run.best_probe[0]:
        return None, None, None
    return str(fastest.candidate["quant"]), None, str(fastest.candidate.get("backend"))


def mixed_options(task, run) -> list[Option]:
    from infertune.tuning.worker import WorkerFailed, run_isolated

    cfg = task.cfg
    qname, why, backend = source(task, run)
    label = f"mixed/{qname or 'any'}"
    if qname is None:
        if why:
            run.log["not_tried"].append({"candidate": label, "why": why})
        return []
    left = run.budget.stage_left("probe") - 15
    if left < MIN_LEFT_S:
        run.log["not_tried"].append({"candidate": label,
                                     "why": f"time budget: {max(left, 0):.0f} s left for the sensitivity search"})
        return []
    method = quant(qname).rescue[cfg.device].search  # ORT's rounding is measured with torch.ao's
    task.console.print(f"  mixed precision: per-layer {method} sensitivity on the calibration split ...")
    try:
        found = run_isolated("infertune.tasks.embedding.mixed:search", {
            "spec": task.spec.to_dict(), "texts": task.calib[:32], "min_cosine_mean": cfg.accuracy.min_cosine_mean,
            "min_cosine_min": cfg.accuracy.min_cosine_min, "max_s": left, "method": method,
            "device": cfg.device}, left + 30, cfg.threads)
    except WorkerFailed as e:
        task.result.mixed_precision = {"status": "failed", "method": method, "reason": str(e)[:300]}
        task.console.print(f"  [red]failed[/] the sensitivity search: {str(e)[:200]}", highlight=False)
        return []
    task.result.sensitivity = [LayerSensitivity(**s) for s in found["sensitivity"]]
    task.result.mixed_precision = {k: v for k, v in found.items() if k != "sensitivity"}
    keep = tuple(found["keep_high"])
    task.console.print(f"  keep {len(keep)} of {found['n_layers']} Linear layers in {found['kept_dtype']} "
                       f"({found['search_s']} s)", highlight=False)
    if not keep:
        run.log["not_tried"].append({"candidate": label, "why": f"{method} of every layer met the budget on the "
                                     "calibration split: nothing to keep high"})
        return []
    if len(keep) >= found["n_layers"]:
        why = ("the search ran out of time" if found.get("cut_short") else
               "no quantized layer kept the model within the budget on the calibration split")
        run.log["not_tried"].append({"candidate": label, "why": f"every Linear layer stays high ({why}): "
                                     "no mixed candidate to measure"})
        return []
    return candidates.mixed_options(cfg.device, keep, qname, backend)
