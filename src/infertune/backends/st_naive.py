"""The naive baseline: `SentenceTransformer.encode`, fp32, batch 32 — what most code does.

Note: encode() already sorts its input by length before batching; we time it the same way, one
chunk of 32 (in encode's own length order) at a time, so per-batch latency is observable."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.backends.base import Backend, Embedder, missing
from infertune.config import Batching, Candidate
from infertune.models.embedding import EmbeddingSpec


class STEmbedder(Embedder):
    def __init__(self, spec: EmbeddingSpec, st: Any, batch_size: int, device: str):
        super().__init__(spec, st.tokenizer, device)
        self.st = st
        self.batch_size = batch_size

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:  # pragma: no cover - not used
        raise NotImplementedError("the baseline encodes text directly")

    def embed(self, texts: Sequence[str], batching: Batching | None = None, pooled: bool = False) -> np.ndarray:
        return self.st.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                              show_progress_bar=False, normalize_embeddings=False)

    def measure_pass(self, texts: Sequence[str], batching: Batching, max_s: float | None = None,
                     shuffle: int | None = None, max_batches: int | None = None) -> dict[str, Any]:
        texts = list(texts)
        order = np.argsort([-len(t) for t in texts], kind="stable")  # as SentenceTransformer.encode sorts
        chunks = [order[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        if shuffle is not None:
            import random

            random.Random(shuffle).shuffle(chunks)
        if max_batches is not None:
            chunks = chunks[:max_batches]
        t0 = time.perf_counter()
        lat, done = [], []
        for c in chunks:
            t = time.perf_counter()
            self.st.encode([texts[j] for j in c], batch_size=self.batch_size, convert_to_numpy=True,
                           show_progress_bar=False)
            if self.device == "cuda":
                import torch

                torch.cuda.synchronize()
            lat.append((time.perf_counter() - t) * 1000)
            done.append(c)
            if max_s is not None and time.perf_counter() - t0 > max_s:
                break
        wall = time.perf_counter() - t0
        ids = self.token_ids(texts)
        lengths = [len(x) for x in ids]
        padded = [int(len(c) * max(lengths[j] for j in c)) for c in done]
        return {"wall_s": wall, "latency_ms": lat, "items": int(sum(map(len, done))),
                "tokens": int(sum(lengths[j] for c in done for j in c)), "padded_tokens": int(sum(padded)),
                "padded_per_batch": padded, "batches": len(lat), "complete": len(done) == len(chunks)}

    def describe(self) -> dict[str, Any]:
        import sentence_transformers
        import torch

        return {"engine": "sentence-transformers", "version": sentence_transformers.__version__,
                "torch": torch.__version__, "dtype": "fp32", "batch_size": self.batch_size,
                "threads": torch.get_num_threads()}


class SentenceTransformerNaive(Backend):
    name = "st-naive"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        return missing("sentence_transformers")

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        from sentence_transformers import SentenceTransformer

        # a plain HF encoder directory is wrapped by ST with mean pooling, the same as our default
        st = SentenceTransformer(spec.path, device=device)
        st.max_seq_length = spec.max_length
        return STEmbedder(spec, st, candidate.batching.size, device)
