"""What every backend provides, and the Embedder that a prepared candidate becomes.

A backend answers four questions:
  available(candidate, device) -> None if it can run here, else one sentence saying why not;
  prepare(...)                 -> an Embedder (build / export / quantize; cached by candidate id);
  Embedder.forward(batch)      -> run one batch;
  Embedder.describe()          -> what actually executed (dtypes, providers, quantized layers).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from infertune.batching import plan_batches
from infertune.config import Batching, Candidate
from infertune.models.embedding import EmbeddingSpec


class Embedder:
    """A prepared embedding model: token ids -> padded batch -> pooled vectors -> (normalised) output."""

    compiles_per_shape = False  # True: new batch shapes may trigger a (slow) compile on first sight

    def __init__(self, spec: EmbeddingSpec, tokenizer: Any, device: str = "cpu"):
        self.spec = spec
        self.tokenizer = tokenizer
        self.device = device
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self.needs_token_types = True
        self._fast: Any = None  # texts -> ids from the Rust tokenizer, once checked equal (fast_tokens.py)

    # --- stages -------------------------------------------------------------------------------
    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenize with truncation to the model's limit (special tokens included): transformers' ids, from the
        Rust tokenizer directly where it gives the same (fast_tokens.py)."""
        from infertune.fast_tokens import fast_encoder, reference_ids

        fast = getattr(self, "_fast", None)
        if fast is None:
            fast = self._fast = fast_encoder(self.tokenizer, self.spec.max_length) or False
        return fast(texts) if fast else reference_ids(self.tokenizer, texts, self.spec.max_length)

    def token_encoder(self) -> Any:
        """The checked fast encoder `token_ids` uses (fast_tokens.TokenIds: tokie or the Rust tokenizer; its `recipe`
        rebuilds it in other processes, engines/tokenize_pool.py), or None where the ids come from transformers."""
        if getattr(self, "_fast", None) is None:
            self.token_ids([""])  # sets up the checked fast path once
        return self._fast or None

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Untruncated lengths: to report and reject over-length input."""
        return [len(x) for x in self.tokenizer(list(texts), truncation=False)["input_ids"]]

    def collate(self, ids: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        longest = max(len(x) for x in ids)
        input_ids = np.full((len(ids), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), longest), dtype=np.int64)
        for r, row in enumerate(ids):
            input_ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        batch = {"input_ids": input_ids, "attention_mask": mask}
        if self.needs_token_types:
            batch["token_type_ids"] = np.zeros_like(input_ids)
        return batch

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Pooled, un-normalised float32 vectors [B, dim]. Backends implement this."""
        raise NotImplementedError

    def postprocess(self, pooled: np.ndarray) -> np.ndarray:
        if not self.spec.normalize:
            return pooled
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)

    def synchronize(self) -> None:
        """Wait for queued device work (CUDA backends override)."""

    # an engine overlaps its host work with the device's: start a batch, do other work, then collect it (at most
    # batching.ASYNC_DEPTH launched and not collected). Synchronous by default (the handle is the result); CUDA backends
    # return before the device is done.
    async_launch = False

    def launch(self, batch: dict[str, np.ndarray]) -> Any:
        """Start `forward(batch)`; `collect` of the returned handle gives its rows."""
        return self.forward(batch)

    def collect(self, handle: Any) -> np.ndarray:
        """The pooled rows of a launched batch (waits for the device)."""
        return handle

    # --- whole pipelines ----------------------------------------------------------------------
    def embed(self, texts: Sequence[str], batching: Batching | None = None, pooled: bool = False) -> np.ndarray:
        """Embed texts in their given order (batched internally)."""
        batching = batching or Batching()
        ids = self.token_ids(texts)
        out = np.zeros((len(texts), self.spec.dim), dtype=np.float32)
        for b in plan_batches([len(x) for x in ids], batching):
            vec = self.forward(self.collate([ids[i] for i in b]))
            out[b] = vec if pooled else self.postprocess(vec)
        return out

    def measure_pass(self, texts: Sequence[str], batching: Batching, max_s: float | None = None,
                     shuffle: int | None = None, max_batches: int | None = None) -> dict[str, Any]:
        """One timed pass: tokenize all, batch, forward, post-process. Tokenization time is spread
        over batches in proportion to their items, so per-batch latency is end to end.

        Probes: `shuffle` runs the planned batches in a seeded random order and `max_s` stops after the
        batch that crosses it, so a partial pass still samples every length (items/s counts the items of
        the batches that ran).

        An engine whose launches return before the device is done (CUDA) is measured as it serves: tokenization,
        the host's batch work and the device overlapped (engines/overlap.py)."""
        if self.async_launch:
            from infertune.engines.overlap import overlapped_pass

            return overlapped_pass(self, texts, batching, max_s, shuffle, max_batches)
        t0 = time.perf_counter()
        ids = self.token_ids(texts)
        t_tok = time.perf_counter() - t0
        lengths = [len(x) for x in ids]
        batches = plan_batches(lengths, batching)
        if shuffle is not None:
            import random

            random.Random(shuffle).shuffle(batches)
        if max_batches is not None:
            batches = batches[:max_batches]
        lat, done = [], []
        for b in batches:
            t = time.perf_counter()
            vec = self.forward(self.collate([ids[i] for i in b]))
            self.postprocess(vec)
            self.synchronize()
            lat.append((time.perf_counter() - t + t_tok * len(b) / len(texts)) * 1000)
            done.append(b)
            if max_s is not None and time.perf_counter() - t0 > max_s:
                break
        wall = time.perf_counter() - t0
        if sum(map(len, done)) < len(texts):  # partial: charge only the tokenization of the items that ran
            wall -= t_tok * (1 - sum(map(len, done)) / len(texts))
        padded = [len(b) * max(lengths[i] for i in b) for b in done]
        return {"wall_s": wall, "latency_ms": lat, "items": sum(map(len, done)),
                "tokens": sum(lengths[i] for b in done for i in b), "padded_tokens": sum(padded),
                "padded_per_batch": padded, "batches": len(done), "complete": len(done) == len(batches)}

    def describe(self) -> dict[str, Any]:
        return {}

    def save(self, path: Path) -> dict[str, Any]:
        """Write what `embedding_artifact.load_embedder` needs into `path`; return manifest fields."""
        raise NotImplementedError(f"{type(self).__name__} cannot be saved as an artifact")


class Backend:
    """Base class for backends: override `available` and `prepare`."""

    name = "base"

    @classmethod
    def available(cls, candidate: Candidate, device: str) -> str | None:
        return None

    @classmethod
    def prepare(cls, spec: EmbeddingSpec, candidate: Candidate, device: str, workdir: Path,
                calibration: Sequence[str] = ()) -> Embedder:
        raise NotImplementedError


def missing(module: str) -> str | None:
    """None if `module` imports, else a one-line reason with the install hint."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        hint = {"onnxruntime": "pip install 'infertune[onnx]'", "torchao": "pip install torchao",
                "tensorrt": "pip install tensorrt", "vllm": "pip install vllm"}.get(module, f"pip install {module}")
        return f"{module} is not installed ({hint})"
    return None
