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
    accuracy_only: bool = False  # serve --verify: the accuracy half only
    lm_duration_s: float = Field(15.0, gt=0, description="causal LMs: seconds of the closed-loop load point")


class BucketCheck(BaseModel):
    bucket: str
    n: int
    cosine_mean: float
    cosine_min: float
    ok: bool


class AccuracyCheck(BaseModel):
    ok: bool
    why: str = ""
    cosine_mean: float
    cosine_min: float
    n: int
    dimensions: int | None = None
    budget: dict[str, float]
    buckets: list[BucketCheck]


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
    """Re-run the artifact's accuracy and speed checks here; `ok` is False when accuracy falls outside its budget or
    speed drops more than `max_slowdown` (the CLI exits 1). A causal-LM artifact served by vLLM is verified through
    vLLM (tasks/causal_lm/reverify.py: an LMVerifyResult)."""
    from infertune.hardware.fingerprint import fingerprint
    from infertune.tasks.embedding.held import measure_speed, read_held

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


def load_for_verify(root: Path, m: dict[str, Any], device: str) -> tuple[Any, Any]:
    """The artifact's engine as tune's worker measured it (on a GPU: CUDA graphs, overlapped tokenizers), and its
    batching."""
    from infertune.config import Candidate
    from infertune.tasks.embedding.artifact import load_embedder
    from infertune.tuning.worker import setup

    setup((m.get("verify") or {}).get("threads"), device)
    cand = Candidate.model_validate(m["candidate"])
    emb = load_embedder(root, device)
    if device == "cuda":
        from infertune.engines.graphs import tuned_engine
        from infertune.engines.overlap import start_tokenizers

        emb = tuned_engine(emb, cand, device)
        start_tokenizers(emb)
    return emb, cand.batching


def check_accuracy(emb: Any, batching: Any, held: dict[str, Any], m: dict[str, Any]) -> AccuracyCheck:
    """The held texts' vectors vs the stored reference, judged by tune's rules: every text's cosine >= the budget's
    minimum (the worst bucket is named), the mean of each bucket holding enough texts and the pooled mean >= the
    budget's mean."""
    import numpy as np

    from infertune.models.embedding import row_cosines

    v = m["verify"]
    budget = {"min_cosine_mean": 0.995, "min_cosine_min": 0.98, "min_bucket_items": 20, **(v.get("budget") or {})}
    d = v.get("dimensions") or held["reference"].shape[1]
    got = emb.embed(held["texts"], batching, pooled=True)
    cos = row_cosines(held["reference"][:, :d], got[:, :d])
    cos = np.where(np.isfinite(cos), cos, -1.0)  # a NaN/inf row fails as the worst cosine
    buckets = []
    for label in dict.fromkeys(held["buckets"]):
        c = [float(x) for x, b in zip(cos, held["buckets"], strict=True) if b == label]
        mean, low = sum(c) / len(c), min(c)
        ok = low >= budget["min_cosine_min"] and (len(c) < budget["min_bucket_items"]
                                                  or mean >= budget["min_cosine_mean"])
        buckets.append(BucketCheck(bucket=label, n=len(c), cosine_mean=mean, cosine_min=low, ok=ok))
    buckets.sort(key=lambda b: _bucket_order(b.bucket))
    pooled = float(cos.mean())
    why = ""
    if bad := [b for b in buckets if not b.ok]:
        w = min(bad, key=lambda b: b.cosine_min - budget["min_cosine_min"])
        why = (f"texts of {w.bucket} tokens (n={w.n}): cosine vs the reference min {w.cosine_min:.5f}, mean "
               f"{w.cosine_mean:.5f}; budget min >= {budget['min_cosine_min']}, mean >= {budget['min_cosine_mean']}")
    elif pooled < budget["min_cosine_mean"]:
        why = f"mean cosine {pooled:.5f} < budget {budget['min_cosine_mean']} over {len(cos)} held texts"
    return AccuracyCheck(ok=not why, why=why, cosine_mean=pooled, cosine_min=float(cos.min()), n=len(cos),
                         dimensions=v.get("dimensions"), budget=budget, buckets=buckets)


def _bucket_order(label: str) -> int:
    return 10**9 if label.startswith(">") else int(label.split("-")[0])


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


def accuracy_gate(path: str | Path, device: str) -> AccuracyCheck:
    """serve --verify: the accuracy half, before /ready; an InfertuneError naming the bucket when it fails."""
    root, m = _manifest(Path(path))
    from infertune.tasks.embedding.held import read_held

    emb, batching = load_for_verify(root, m, device)
    acc = check_accuracy(emb, batching, read_held(root, m), m)
    if not acc.ok:
        raise InfertuneError(f"--verify: {root} fails its accuracy check on this host: {acc.why}; not serving "
                             f"(run `infertune verify {root}` for the figures)")
    return acc
