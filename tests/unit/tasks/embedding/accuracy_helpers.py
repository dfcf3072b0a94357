"""An EmbeddingTask ready to verify, with in-process fake engines standing in for the worker processes (the
worker's `embed` protocol: a batching, and either the eval split by position or the texts sent)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from infertune.config import Batching, Candidate, TuneConfig
from infertune.engines.fake import FakeBackend, _CharTokenizer
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

    def call(self, cmd: str, batching: dict | None = None, subset: list[int] | None = None,
             texts: list[str] | None = None, **args) -> np.ndarray | dict:
        if cmd == "kernels":  # the one profiled batch the worker records after preparing
            from infertune.tasks.embedding.kernels import record

            return record(self.emb, self.texts)
        sel = texts if texts is not None else self.texts if subset is None else [self.texts[i] for i in subset]
        if cmd == "invariance":  # the worker's check, on this engine (transformed vectors are not batch-dependent)
            from infertune.tasks.embedding.invariance import run

            return run(self.emb, sel, args["lengths"])
        assert cmd == "embed"
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


class TableWorker:
    """An engine that looks each text's vector up in `table`, plus noise of `rel` times the vector's norm (seeded by
    the text: the same text gets the same vector in every call), as a precision change that nudges every vector."""

    def __init__(self, table: dict[str, np.ndarray], eval_texts: Sequence[str], rel: float = 0.0):
        self.table, self.texts, self.rel = table, list(eval_texts), rel

    def call(self, cmd: str, batching: dict | None = None, subset: list[int] | None = None,
             texts: list[str] | None = None, **_) -> np.ndarray | dict:
        import zlib

        if cmd == "invariance":  # a text's vector is its own, whatever its batch
            return {"worst": [0.0] * len(subset or []), "n_batches": 0}
        assert cmd == "embed"
        sel = texts if texts is not None else self.texts if subset is None else [self.texts[i] for i in subset]
        out = np.stack([self.table[t] for t in sel]).astype(np.float64)
        if self.rel:
            for r, t in enumerate(sel):
                n = np.random.default_rng(zlib.crc32(t.encode())).normal(size=out.shape[1])
                out[r] += self.rel * np.linalg.norm(out[r]) * n / np.sqrt(out.shape[1])
        return out.astype(np.float32)


def hard_pairs(n_queries: int = 40, n_neg: int = 12, dim: int = 64, seed: int = 0):
    """(pairs rows, vectors by text): each query's positive is its nearest document, but only just: its negatives
    are the positive turned by 0.02-0.06 rad away from the query, so a nudge of a percent reorders them."""
    rng = np.random.default_rng(seed)
    unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
    rows, table = [], {}
    for i in range(n_queries):
        q = unit(rng.normal(size=dim))
        p = unit(q + 0.4 * unit(rng.normal(size=dim)))
        table[f"q{i}"], table[f"p{i}"] = q, p
        negs = []
        for j in range(n_neg):
            w = rng.normal(size=dim)
            qp = unit(q - (q @ p) * p)
            w -= (w @ p) * p + (w @ qp) * qp  # orthogonal to both: turning p along w lowers its cosine with q
            theta = 0.02 + 0.04 * j / n_neg
            table[f"n{i}_{j}"] = np.cos(theta) * p + np.sin(theta) * unit(w)
            negs.append(f"n{i}_{j}")
        rows.append({"query": f"q{i}", "positive": f"p{i}", "negatives": negs})
    return rows, table
