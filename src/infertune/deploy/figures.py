"""The measured figures alerts and dashboards are drawn from, each with where it came from.

Two sources: the tuned artifact's manifest (`tune`: the SLO it was tuned for, the winner's batch latency and
items/s, its accuracy check) and, with `deploy --from-validate validate.json`, what `infertune validate` measured
against a running server (its SLO, the sustainable rate its confirm point held, the soak's errors and restarts, the
finite-output drill). A threshold is written only where a figure stands behind it; each figure carries its source
in words, which deploy writes beside the threshold (an annotation of the alert, a panel's description).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from infertune.errors import InfertuneError


class Figure(NamedTuple):
    value: float
    unit: str  # "s", "req/s", "items/s", "ratio", "count"
    source: str  # where it was measured, in words: file, field and the figure as measured


def read_validate(path: Path | str) -> dict[str, Any]:
    """validate.json, checked for the fields deploy reads."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise InfertuneError(f"--from-validate {p}: no such file (infertune validate --out DIR writes "
                             "DIR/validate.json)") from None
    except (OSError, ValueError) as e:
        raise InfertuneError(f"--from-validate {p}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict) or "drills" not in data or "peak" not in data:
        raise InfertuneError(f"--from-validate {p}: not an infertune validate.json (no 'drills' and 'peak')")
    return data


def _slo_p99_ms(text: str | None) -> float | None:
    m = re.search(r"p99_e2e_ms\s*<=?\s*([\d.]+)", text or "")
    return float(m.group(1)) if m else None


def _drill(v: dict[str, Any], name: str) -> dict[str, Any] | None:
    d = next((d for d in v.get("drills", []) if d.get("name") == name), None)
    return d if d and d.get("passed") is not None else None


def measured(manifest: dict[str, Any] | None, validate: dict[str, Any] | None,
             validate_path: str = "validate.json", manifest_path: str = "manifest.json") -> dict[str, Figure]:
    """The figures found: slo_p99 (s), batch_p99 (s), sustainable_rps, items_per_s, error_rate, nonfinite_rows,
    restarts. Missing ones are absent. The paths name the files in each figure's source."""
    tune = (manifest or {}).get("tune") or {}
    mp = manifest_path
    out: dict[str, Figure] = {}
    v = validate or {}
    vp = validate_path
    slo_v = _slo_p99_ms((v.get("config") or {}).get("slo"))
    if slo_v is not None:
        out["slo_p99"] = Figure(slo_v / 1e3, "s", f"{vp} config.slo {v['config']['slo']} (the P99 a client sees, end "
                                "to end, that validate's peak and soak were judged by)")
    elif tune.get("slo_p99_ms"):
        out["slo_p99"] = Figure(tune["slo_p99_ms"] / 1e3, "s", f"{mp} tune.slo_p99_ms {tune['slo_p99_ms']:g} "
                                "(the P99 of one batch the artifact was tuned to meet)")
    p99 = (tune.get("latency_ms") or {}).get("p99")
    if p99:
        out["batch_p99"] = Figure(p99 / 1e3, "s", f"{mp} tune.latency_ms.p99 {p99:.4g} ms (the tuned "
                                  "winner's batches, measured by tune)")
    pk = v.get("peak") or {}
    if pk.get("sustainable_rps"):
        st = ((pk.get("confirm") or {}).get("steps") or [{}])[-1]
        met = pk.get("slo_with_margin") or pk.get("slo")
        out["sustainable_rps"] = Figure(
            pk["sustainable_rps"], "req/s", f"{vp} peak.sustainable_rps {pk['sustainable_rps']:.4g} (a "
            f"{(pk.get('confirm') or {}).get('duration_s', '?')} s point met {met} there, P99 {st.get('p99_ms')} ms)")
    elif pk.get("rps") and pk.get("source") == "slo-search":
        out["sustainable_rps"] = Figure(pk["rps"], "req/s", f"{vp} peak.rps {pk['rps']:.4g} (the SLO search's "
                                        f"highest rate meeting {pk.get('slo')}; no confirm point)")
    if tune.get("items_per_s"):
        out["items_per_s"] = Figure(tune["items_per_s"], "items/s", f"{mp} tune.items_per_s "
                                    f"{tune['items_per_s']:.4g} (the tuned winner's throughput, measured by tune)")
    _health(out, tune, v, vp, mp)
    return out


def _health(out: dict[str, Figure], tune: dict[str, Any], v: dict[str, Any], vp: str, mp: str) -> None:
    """The error rate, non-finite rows and restarts measured by validate's soak and finite-output drill, else by
    the tune's accuracy check."""
    soak = _drill(v, "soak")
    if soak:
        ev = soak.get("evidence") or {}
        out["error_rate"] = Figure(float(ev.get("error_rate") or 0.0), "ratio", f"{vp} soak evidence.error_rate "
                                   f"{ev.get('error_rate')} ({ev.get('errors')} errors in {ev.get('requests')} "
                                   f"requests at {ev.get('rate_rps')} req/s for {ev.get('duration_s')} s)")
        if ev.get("worker_restarts") is not None:
            out["restarts"] = Figure(float(ev["worker_restarts"]), "count", f"{vp} soak evidence.worker_restarts "
                                     f"{ev['worker_restarts']:g} over {ev.get('duration_s')} s at {ev.get('rate_rps')} "
                                     "req/s")
    fin = _drill(v, "finite-output")
    if fin and fin.get("passed"):
        out["nonfinite_rows"] = Figure(0.0, "count", f"{vp} finite-output drill passed: no NaN or Inf row on the "
                                       "workload's texts and adversarial inputs")
    elif (acc := tune.get("accuracy") or {}).get("cosine_min") is not None:
        out["nonfinite_rows"] = Figure(0.0, "count", f"{mp} tune.accuracy: {acc.get('n')} held texts "
                                       f"embedded with finite rows (min cosine {acc['cosine_min']:.6f} against the "
                                       "reference)")
