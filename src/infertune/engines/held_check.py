"""An embedding artifact's held texts embedded again and judged against the fp32 reference vectors tune stored
with it (held.npz), per length bucket, under the artifact's accuracy budget: `infertune verify`'s accuracy half and
`serve --verify`'s gate before /ready. The engine is loaded as tune's worker measured it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infertune.config import Candidate
from infertune.errors import InfertuneError

HELD_FILE = "held.npz"


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


def read_held(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """held.npz as lists and arrays, or an InfertuneError saying the artifact predates verify."""
    import numpy as np

    section = manifest.get("verify")
    if not section or not (root / section.get("file", HELD_FILE)).is_file():
        raise InfertuneError(f"{root} keeps no held texts and reference vectors (an artifact written before "
                             "`infertune verify` existed, or with an incomplete save); re-run `infertune tune` to "
                             "write one that can be verified")
    with np.load(root / section.get("file", HELD_FILE)) as z:
        return {"texts": [str(x) for x in z["texts"]], "lengths": [int(x) for x in z["lengths"]],
                "buckets": [str(x) for x in z["buckets"]], "reference": np.asarray(z["reference"], dtype=np.float32)}


def load_for_verify(root: Path, m: dict[str, Any], device: str) -> tuple[Any, Any]:
    """The artifact's engine as tune's worker measured it (on a GPU: CUDA graphs, overlapped tokenizers), and its
    batching."""
    from infertune.engines.embedding_artifact import load_embedder
    from infertune.engines.worker_setup import setup

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


def accuracy_gate(root: Path, m: dict[str, Any], device: str) -> AccuracyCheck:
    """serve --verify: the accuracy half, before /ready, on the artifact directory `root` whose manifest serve has
    read; an InfertuneError naming the bucket when it fails."""
    emb, batching = load_for_verify(root, m, device)
    acc = check_accuracy(emb, batching, read_held(root, m), m)
    if not acc.ok:
        raise InfertuneError(f"--verify: {root} fails its accuracy check on this host: {acc.why}; not serving "
                             f"(run `infertune verify {root}` for the figures)")
    return acc
