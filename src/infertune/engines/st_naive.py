"""The naive baseline: `SentenceTransformer.encode`, fp32, batch 32 — what most code does.

Note: encode() already sorts its input by length before batching; we time it the same way, one
chunk of 32 (in encode's own length order) at a time, so per-batch latency is observable."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.config import Batching, Candidate
from infertune.engines.base import Backend, Embedder, missing
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


# the baseline is fp32 whatever the config's dtype says (sentence-transformers >= 5 loads a bf16 config as bf16);
# transformers >= 4.56 reads `dtype`, older ones `torch_dtype` (and ignore the other)
FP32 = {"dtype": "float32", "torch_dtype": "float32"}

# our pooling names -> sentence-transformers' Pooling modes
ST_POOLING = {"mean": "mean", "cls": "cls", "max": "max", "last": "lasttoken", "mean_sqrt_len": "mean_sqrt_len_tokens"}


def _modules(spec: EmbeddingSpec) -> list:
    """Transformer -> Pooling (-> Normalize) for a directory with no modules.json, e.g. a decoder published as
    a causal LM (Qwen3-Embedding's plain HF form): last-token pooling and normalisation, as the spec resolved
    them, so the naive baseline computes the same embedding as the reference, only the naive way."""
    import inspect

    from sentence_transformers import models

    kw: dict[str, Any] = {}
    if "modality_config" in inspect.signature(models.Transformer.__init__).parameters:
        # sentence-transformers >= 6 renders text through a decoder's chat template ("message" modality),
        # which wraps every text in a system prompt: pin plain text, as the reference tokenizes it
        kw = {"modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
              "module_output_name": "token_embeddings"}
    body = models.Transformer(spec.path, max_seq_length=spec.max_length, model_kwargs=FP32, **kw)
    tok = body.tokenizer
    if tok.pad_token is None:  # decoders often ship without one (SmolLM2, Llama); padding is masked anyway
        tok.pad_token = tok.eos_token
    mods = [body, models.Pooling(body.get_word_embedding_dimension(), pooling_mode=ST_POOLING[spec.pooling])]
    return mods + ([models.Normalize()] if spec.normalize else [])


class SentenceTransformerNaive(Backend):
    name = "st-naive"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        return missing("sentence_transformers")

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        from sentence_transformers import SentenceTransformer

        if (Path(spec.path) / "modules.json").exists():  # a sentence-transformers directory: its own modules
            st = SentenceTransformer(spec.path, device=device, model_kwargs=FP32)
        else:  # a plain HF directory: ST would default to mean pooling; build what the spec says instead
            st = SentenceTransformer(modules=_modules(spec), device=device)
        st.float()  # the weights are loaded in fp32 (FP32); this also covers any buffer left in another dtype
        st.max_seq_length = spec.max_length
        return STEmbedder(spec, st, candidate.batching.size, device)
