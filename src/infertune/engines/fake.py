"""A fake backend for unit tests of batching, measurement and decision logic: deterministic vectors,
a configurable per-token cost, optional failure or noise, noise on long inputs only (`perturb` relative to the
vector's norm, on texts of more than `perturb_over` tokens: a precision that drifts on long documents), and an
optional memory leak (`leak_mb_per_batch`: each forward pass keeps that much written memory forever, for the soak
drill's slope check), and answers that depend on the batch (`batch_noise`, relative to the norm, seeded by the batch;
with `base=<backend>` on that real engine's vectors, so the accuracy check passes and the batch check must catch it).
Never used for real results."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import Candidate
from infertune.engines.base import Backend, Embedder
from infertune.models.embedding import EmbeddingSpec


class _CharTokenizer:
    pad_token_id = 0

    def __call__(self, texts, truncation=False, max_length=None, **_):
        ids = [[1] + [2 + (sum(map(ord, w)) % 200) for w in t.split()] for t in texts]
        if truncation and max_length:
            ids = [x[:max_length] for x in ids]
        return {"input_ids": ids}


class FakeEmbedder(Embedder):
    def __init__(self, spec: EmbeddingSpec, candidate: Candidate):
        super().__init__(spec, _CharTokenizer())
        self.needs_token_types = False
        opts = dict(candidate.options)
        self.us_per_token = float(opts.get("us_per_token", "1"))
        self.noise = float(opts.get("noise", "0"))
        self.perturb = float(opts.get("perturb", "0"))
        self.batch_noise = float(opts.get("batch_noise", "0"))
        self.perturb_over = int(opts.get("perturb_over", "0"))
        self.fail = opts.get("fail")
        self.gemms = opts.get("gemms")
        self.rng = np.random.default_rng(0)
        self.leak_bytes = int(float(opts.get("leak_mb_per_batch", "0")) * 2**20)
        self._leaked: list[np.ndarray] = []

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        if self.fail == "forward":
            raise RuntimeError("fake backend asked to fail in forward")
        ids = batch["input_ids"]
        if self.leak_bytes:
            self._leaked.append(np.ones(self.leak_bytes, dtype=np.uint8))  # written, so it is resident
        time.sleep(ids.size * self.us_per_token / 1e6)
        dim = self.spec.dim
        out = np.zeros((ids.shape[0], dim), dtype=np.float32)
        for r, row in enumerate(ids):
            for t in row[batch["attention_mask"][r] > 0]:
                out[r, int(t) % dim] += 1.0
        if self.noise:
            out += self.rng.normal(0, self.noise, out.shape).astype(np.float32)
        if self.batch_noise:
            out = batch_noise(out, ids, self.batch_noise)
        if self.perturb:
            long = batch["attention_mask"].sum(1) > self.perturb_over
            norm = np.linalg.norm(out[long], axis=1, keepdims=True)
            noise = self.rng.normal(0, 1, (int(long.sum()), dim))
            out[long] += (self.perturb * norm * noise / np.sqrt(dim)).astype(np.float32)
        return out

    def kernel_mix(self, batch: dict[str, np.ndarray]) -> dict[str, Any] | None:
        """The GEMMs option `gemms` says ran ("fp32:36" or "int8:30,fp32:6"), standing for a real profile in tests;
        None (nothing reported) without it."""
        from collections import Counter

        from infertune.engines.kernels import mix

        if not self.gemms:
            return None
        counts = Counter({k: int(n) for k, n in (part.split(":") for part in self.gemms.split(","))})
        return mix(counts, Counter(), 4 * self.spec.dim * self.spec.dim, "fake", [f"fake {k} gemm" for k in counts])

    def describe(self) -> dict[str, Any]:
        return {"engine": "fake", "us_per_token": self.us_per_token,
                "leak_mb_per_batch": self.leak_bytes / 2**20}


def batch_noise(out: np.ndarray, ids: np.ndarray, rel: float) -> np.ndarray:
    """`out` plus noise of `rel` times each row's norm, seeded by the whole batch's ids: the same batch always gets the
    same vectors, a text in another batch (other neighbours, position or padding) another answer."""
    import zlib

    rng = np.random.default_rng(zlib.crc32(np.ascontiguousarray(ids, dtype=np.int64).tobytes()))
    noise = rng.normal(0, 1, out.shape) / np.sqrt(out.shape[1])
    return (out + rel * np.linalg.norm(out, axis=1, keepdims=True) * noise).astype(np.float32)


def _wrapped(spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path, calibration: Sequence[str]):
    """option base=<backend>: that real engine (fp32), its vectors given `batch_noise`: a model's answers, as close to
    the reference as the noise lets them, that depend on what each text was batched with."""
    from infertune.registry import load_backend

    base = candidate.option("base")
    emb = load_backend(base).prepare(spec, Candidate(backend=base), device, workdir, calibration)
    rel, inner = float(candidate.option("batch_noise") or 0), emb.forward
    emb.forward = lambda batch: batch_noise(inner(batch), batch["input_ids"], rel)
    return emb


class FakeBackend(Backend):
    name = "fake"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        return candidate.option("unavailable")

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        how = candidate.option("fail")
        if how == "prepare":
            raise RuntimeError("fake backend asked to fail in prepare")
        if how == "crash":
            import os

            os._exit(3)
        if how == "hang":
            time.sleep(3600)
        if candidate.option("base"):
            return _wrapped(spec, candidate, device, workdir, calibration)
        return FakeEmbedder(spec, candidate)
