"""An EmbeddingTask ready to verify, with in-process fake engines standing in for the worker processes (the
worker's `embed` protocol: a batching, and either the eval split by position or the texts sent)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from infertune.backends.fake import FakeBackend, _CharTokenizer
from infertune.config import Batching, Candidate, TuneConfig
from infertune.models.embedding import EmbeddingSpec
from infertune.tasks.embedding.task import EmbeddingTask

SPEC = EmbeddingSpec(name="fake", path="", max_length=2048, dim=64)
B = Batching(kind="tokens", size=8192)


def fake(**opts: str) -> Candidate:
    return Candidate(backend="fake", options=tuple(sorted(opts.items())), batching=B)


class EngineWorker:
    """Answers `embed` as a tune worker does, from an engine in this process; `transform` alters its vectors
    (texts, vectors -> vectors) to make an engine with a given flaw."""

    def __init__(self, cand: Candidate, texts: Sequence[str],
                 transform: Callable[[Sequence[str], np.ndarray], np.ndarray] | None = None):
        self.emb = FakeBackend.prepare(SPEC, cand, "cpu", workdir=None)
        self.texts, self.transform = list(texts), transform

    def call(self, cmd: str, batching: dict, subset: list[int] | None = None, texts: list[str] | None = None,
             **_) -> np.ndarray:
        assert cmd == "embed"
        sel = texts if texts is not None else self.texts if subset is None else [self.texts[i] for i in subset]
        vec = self.emb.embed(sel, Batching.model_validate(batching), pooled=True)
        return vec if self.transform is None else self.transform(sel, vec)


def verifying_task(cfg: TuneConfig, texts: Sequence[str]) -> EmbeddingTask:
    """The task after its workload step: `texts` is the eval split, every text verified."""
    task = EmbeddingTask(cfg, None, None)
    task.evals = list(texts)
    task.lengths = [len(x) for x in _CharTokenizer()(list(texts))["input_ids"]]
    task.acc_idx = None
    return task


def words(rng: np.random.Generator, n: int) -> str:
    return " ".join(f"w{int(i)}" for i in rng.integers(0, 5000, n))
