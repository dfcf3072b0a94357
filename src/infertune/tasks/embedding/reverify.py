"""`infertune verify ARTIFACT`: prove a tuned embedding artifact again in this environment. The loaded engine embeds
the held texts (held.py) and is compared with the fp32 reference vectors tune stored, per length bucket, under the
artifact's accuracy budget; its speed is measured the way tune measured the winner at artifact time (same function,
same texts) and compared as a ratio; this host's fingerprint is diffed against the artifact's; verify.json has all."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from infertune.engines.held_check import AccuracyCheck, check_accuracy, load_for_verify, read_held
from infertune.errors import InfertuneError
from infertune.hardware.fingerprint import environment_diff  # noqa: F401 - verify's diff, read here too
from infertune.results import ArtifactVerdict


class VerifyConfig(BaseModel):
    artifact: Path
    workload: Path | None = Field(None, description="measure speed on these texts instead of the held ones")
    device: Literal["cpu", "cuda"] | None = None  # default: the artifact's
    max_slowdown: float = Field(0.10, ge=0, lt=1, description="fail when speed falls below (1 - this) x tune's")
    passes: int = Field(10, ge=1, description="timed passes over the texts (after one warm-up pass)")
    out: Path = Field(Path("."), description="directory verify.json is written to")
    accuracy_only: bool = Field(False, description="the accuracy half only (serve --verify; --accuracy-only)")
    lm_duration_s: float = Field(15.0, gt=0, description="causal LMs: seconds of the closed-loop load point")


class SpeedCheck(BaseModel):
    ok: bool
    ratio: float  # best pass here / best pass at tune time (held.measure_speed both)
    median_ratio: float | None
    max_slowdown: float
    here: dict[str, Any]
    tuned: dict[str, Any]
    texts: str  # "held" or the --workload path
    note: str = ""


class VerifyResult(ArtifactVerdict):
    accuracy: AccuracyCheck
    speed: SpeedCheck | None = None


def verify(config: VerifyConfig) -> VerifyResult | Any:
    """Re-run the artifact's accuracy check (engines/held_check.py, also serve --verify's gate) and speed check
    here; `ok` is False when accuracy falls outside its budget or speed drops more than `max_slowdown` (the CLI exits
    1). A causal-LM artifact served by vLLM is verified through vLLM (tasks/causal_lm/reverify.py: an
    LMVerifyResult)."""
    from infertune.hardware.fingerprint import fingerprint
    from infertune.tasks.embedding.held import measure_speed

    t0 = time.perf_counter()
    root, m = _manifest(config.artifact)
    if m.get("kind") == "causal-lm":
        from infertune.tasks.causal_lm.reverify import verify_lm

        return verify_lm(config, root, m)
    held = read_held(root, m)
    device = config.device or m.get("device", "cpu")
    emb, batching = load_for_verify(root, m, device)
    acc = check_accuracy(emb, batching, held, m)
    failures = [] if acc.ok else [f"accuracy: {acc.why}"]
    speed = None
    if not config.accuracy_only:
        # the held texts tune's speed passes ran (the first `items`: fewer where its budget was short)
        texts, source = held["texts"][:((m.get("verify") or {}).get("speed") or {}).get("items") or None], "held"
        if config.workload is not None:
            from infertune.workloads.texts import load_workload

            texts, source = load_workload(config.workload).items, str(config.workload)
        speed = _judge_speed(measure_speed(emb, texts, batching, config.passes), m, config.max_slowdown, source)
        if not speed.ok:
            failures.append(f"speed: {speed_line(speed)}")
    env = fingerprint((m.get("verify") or {}).get("threads"))
    r = VerifyResult(artifact=str(root), model=m.get("model", ""), candidate_id=m.get("candidate_id", ""),
                     device=device, ok=not failures, failures=failures, accuracy=acc, speed=speed,
                     environment_diff=environment_diff(m.get("fingerprint") or {}, env.model_dump(mode="json")),
                     wall_s=0.0)
    r.wall_s = round(time.perf_counter() - t0, 2)
    config.out.mkdir(parents=True, exist_ok=True)
    path = config.out / "verify.json"
    r.path = str(path)
    path.write_text(json.dumps({**r.model_dump(mode="json"), "environment": env.model_dump(mode="json")}, indent=2))
    return r


def _manifest(path: Path) -> tuple[Path, dict[str, Any]]:
    from infertune.artifact import read_manifest

    root = Path(path)
    m = read_manifest(root)
    if m.get("kind") == "causal-lm" and m.get("engine") != "vllm":
        raise InfertuneError(f"{root} is a causal-LM artifact of infertune's own decode loops; `infertune verify` "
                             "proves embedding artifacts and causal LMs served by vLLM (tune --lm-engine vllm)")
    if m.get("kind") not in ("embedding", "causal-lm"):
        raise InfertuneError(f"{root} is a {m.get('kind')} artifact; `infertune verify` proves embedding and "
                             "causal-LM artifacts")
    return (root if root.is_dir() else root.parent), m


def _judge_speed(here: dict[str, Any], m: dict[str, Any], max_slowdown: float, source: str) -> SpeedCheck:
    tuned, note = dict((m.get("verify") or {}).get("speed") or {}), ""
    if source != "held" or not tuned:
        tune = m.get("tune") or {}
        tuned = {"items_per_s": tune.get("items_per_s"), "items_per_s_median": None, "n": None}
        note = ("compared with tune's figure on its eval split (other texts, tune's passes): a rough ratio; "
                + ("without --workload verify compares like with like" if source != "held" else
                   "this artifact keeps no speed figure measured the way verify measures"))
    ratio = here["items_per_s"] / tuned["items_per_s"] if tuned.get("items_per_s") else float("nan")
    med = (here["items_per_s_median"] / tuned["items_per_s_median"]) if tuned.get("items_per_s_median") else None
    return SpeedCheck(ok=ratio >= 1 - max_slowdown, ratio=round(ratio, 4),
                      median_ratio=None if med is None else round(med, 4), max_slowdown=max_slowdown,
                      here=here, tuned=tuned, texts=source, note=note)


def speed_line(s: SpeedCheck) -> str:
    h, t = s.here, s.tuned
    med = f", medians {s.median_ratio:.3f}x" if s.median_ratio is not None else ""
    return (f"{h['items_per_s']:.1f} items/s here vs {t['items_per_s']:.1f} at tune time: ratio {s.ratio:.3f}x"
            f"{med} (best of n={h['n']} passes here, range {h['spread'][0]:.1f}-{h['spread'][1]:.1f}; tune n="
            f"{t.get('n') or '-'}, range {_range(t)}), limit {1 - s.max_slowdown:.2f}x")


def _range(t: dict[str, Any]) -> str:
    s = t.get("spread")
    return f"{s[0]:.1f}-{s[1]:.1f}" if s else "-"
