"""The decode-loop diagnosis in one sentence: when no loop of ours beat eager generate(), say so and why, with the
memory roofline (the decode weight bytes over the measured copy bandwidth: the fastest a batch-1 step can be when it
reads every weight once). A loop removes per-step cache growth and generate()'s bookkeeping; that pays only where the
step is near the roofline, so a step far from it is bound by compute and per-op overhead that no loop removes."""

from __future__ import annotations

from typing import Any

from infertune.results import TuneResult

EAGER = "hf-generate"


def diagnose(result: TuneResult, unit: str = "tokens/s") -> dict[str, Any] | None:
    """{"loop_beats_eager", "sentence", figures} for a torch decode-loop tune, None when there is nothing to compare
    (no eager figure, or no loop measured)."""
    measured = [r for r in result.candidates if r.tokens_per_s and r.stage != "probe"]
    eager = next((r for r in measured if r.candidate.get("backend") == EAGER), None)
    loops = [r for r in measured if r.candidate.get("backend") != EAGER]
    if eager is None:
        return None
    if not loops:  # every loop skipped or failed: say which and why rather than nothing
        untried = [r for r in result.candidates if r.candidate.get("backend") not in (EAGER, "vllm")
                   and r.status in ("skipped", "failed") and r.reason]
        if not untried:
            return None
        r = next((x for x in untried if "time budget" in x.reason), untried[-1])  # the one that could have run
        return {"loop_beats_eager": None, "eager_tokens_per_s": round(eager.tokens_per_s, 3),
                "eager_roofline_fraction": eager.roofline_fraction,
                "sentence": f"No decode loop was measured here, so none is compared with eager generate(): {r.name} "
                            f"was {r.status} ({r.reason})."}
    best = max(loops, key=lambda r: r.tokens_per_s)
    win = result.winner
    beats = win is not None and win.candidate.get("backend") != EAGER
    bw = (result.lm.get("bandwidth") or {}).get("gb_per_s")
    wb = eager.weight_bytes or best.weight_bytes
    roof_ms = wb / (bw * 1e9) * 1e3 if wb and bw else None
    frac = eager.roofline_fraction
    out: dict[str, Any] = {"loop_beats_eager": beats, "best_loop": best.name, "best_loop_tokens_per_s":
                           round(best.tokens_per_s, 3), "eager_tokens_per_s": round(eager.tokens_per_s, 3),
                           "eager_roofline_fraction": frac, "roofline_ms_per_token": roof_ms and round(roof_ms, 2)}
    if beats:
        out["sentence"] = (f"A decode loop beat eager generate(): {win.name} at {win.tokens_per_s:.1f} {unit} against "
                           f"{eager.tokens_per_s:.1f}.")
        return out
    gap = (1 - best.tokens_per_s / eager.tokens_per_s) * 100
    rel = f"{gap:.0f}% slower" if gap > 0 else f"{-gap:.0f}% faster, inside the tie margin"
    roof = ""
    if roof_ms and frac:
        roof = (f" Eager decode runs at {frac * 100:.0f}% of the memory roofline ({wb / 1e6:.0f} MB of weights per "
                f"token / {bw:.1f} GB/s measured = {roof_ms:.1f} ms a token, {1000 / roof_ms:.0f} {unit}): the step "
                "is bound by compute and per-op overhead, not by the weight reads or the cache growth a loop removes, "
                "so a loop pays only where decode nears that bound.")
    out["sentence"] = (f"No decode loop beat eager generate(): the fastest, {best.name}, measured "
                       f"{best.tokens_per_s:.1f} {unit} against {eager.tokens_per_s:.1f} ({rel}).{roof}")
    return out


__all__ = ["diagnose"]
