"""Tokenization in several processes for `tune`'s GPU passes, as `serve` tokenizes in its frontend processes.

Why: on a GPU host the tokenizer, not the GPU, bounds an embedding model like MiniLM, and tune should measure what
`serve` delivers with its frontend processes, not what one process's threads tokenize
(docs/measurements/2026-12-01-h200-engine-overlap). So tune tokenizes in as many processes as serve starts frontends
per GPU (`default_frontends`).

How: each process rebuilds the encoder that `fast_tokens.fast_encoder` set up and checked against transformers (its
`recipe`: tokie or the Rust tokenizer, from the same JSON), so the ids are the ones the engine would get; it imports
`tokenizers` (and tokie) and numpy only. A chunk goes out as its texts and comes back as (lengths, flat ids) int32 arrays, split into rows here.
The pool belongs to the embedder and lives as long as its process (a tune worker), so it starts once.
"""  # noqa: E501

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

log = logging.getLogger("infertune")
_ENCODE: Any = None  # in a pool process: the Rust tokenizer's batch encode
_BARRIER: Any = None  # in a pool process: where the start-up calls meet (TokenizerPool.__init__)


def _watch_parent(parent: int) -> None:
    """Exit when the process that started this one is gone (killed on a timeout, say): a pool process otherwise
    waits on its queue for ever."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _init(recipe: tuple, parent: int, barrier: Any = None) -> None:
    import threading

    global _BARRIER, _ENCODE
    _BARRIER = barrier
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the processes are the parallelism
    threading.Thread(target=_watch_parent, args=(parent,), name="infertune-parent-watch", daemon=True).start()
    from infertune.fast_tokens import from_recipe

    _ENCODE = from_recipe(recipe)


def _rendezvous() -> int:
    """Wait until every process of the pool holds one of these calls; this process's pid."""
    _BARRIER.wait(timeout=60)
    _encode(["warm-up"])
    return os.getpid()


def _encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    rows = _ENCODE(texts)
    lens = np.fromiter((len(r) for r in rows), dtype=np.int32, count=len(rows))
    flat = np.fromiter((i for r in rows for i in r), dtype=np.int32, count=int(lens.sum()))
    return lens, flat


def split(lens: np.ndarray, flat: np.ndarray) -> list[np.ndarray]:
    """Rows of ids (int64 arrays, as collate takes them) from lengths and flat ids."""
    return np.split(flat.astype(np.int64), np.cumsum(lens)[:-1]) if len(lens) else []


class TokenizerPool:
    """`submit(texts)` -> a Future of (the texts' ids as a list of int64 arrays, seconds from submit to result),
    computed in another process."""

    def __init__(self, recipe: tuple, processes: int, mp_context: Any = None):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        self.processes = processes
        # spawned, not forked: the caller (a tune worker) holds a CUDA context; a spawned process imports numpy and
        # the tokenizers only (~0.5 s)
        ctx = mp_context or mp.get_context("spawn")
        self.pool = ProcessPoolExecutor(processes, mp_context=ctx, initializer=_init,
                                        initargs=(recipe, os.getpid(), ctx.Barrier(processes)))
        try:  # start every process now (they start on demand), so a failure shows here and no pass pays for it:
            # each warm-up call waits at a barrier until all the processes hold one, so every process has started
            # and answered before the pool is used (a plain warm-up can be answered by the first process alone)
            self.pids = {f.result(timeout=120) for f in [self.pool.submit(_rendezvous) for _ in range(processes)]}
            if len(self.pids) != processes:
                raise RuntimeError(f"{len(self.pids)} of {processes} tokenizer processes answered")
        except BaseException:
            self.close()
            raise

    def submit(self, texts: Sequence[str]) -> Future:
        out: Future = Future()
        t0 = time.perf_counter()
        inner = self.pool.submit(_encode, list(texts))

        def done(f: Future) -> None:
            if out.done():  # cancelled: the pass stopped before it needed these
                return
            try:
                out.set_result((split(*f.result()), time.perf_counter() - t0))
            except Exception as e:  # noqa: BLE001 - the caller sees it
                out.set_exception(e)

        inner.add_done_callback(done)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def pool_for(emb: Any, processes: int) -> TokenizerPool | None:
    """The embedder's tokenizer pool (started on first use), or None where its ids come only from transformers
    (no fast encoder that matches) or processes cannot start."""
    pool = getattr(emb, "_token_pool", None)
    if pool is not None or processes < 2:
        return pool or None
    enc = emb.token_encoder()
    if enc is None:
        emb._token_pool = False
        return None
    try:
        emb._token_pool = TokenizerPool(enc.recipe, processes)
    except Exception as e:  # noqa: BLE001 - threads of this process tokenize instead
        log.warning("tokenizer processes did not start (%s: %s); tokenizing on threads", type(e).__name__, e)
        emb._token_pool = False
        return None
    return emb._token_pool


def encode_in_processes(recipe: tuple, texts: list[str], processes: int = 2) -> list[list[int]]:
    """The texts' ids from a fresh pool of `processes` tokenizer processes (a check that a pool starts and answers
    where it runs: in a tune worker, say)."""
    pool = TokenizerPool(tuple(recipe), processes)
    try:
        rows, _ = pool.submit(texts).result(timeout=120)
        return [r.tolist() for r in rows]
    finally:
        pool.close()
