"""Candidate isolation: each prepared engine lives in its own process. A candidate that raises,
hangs or kills its process is recorded as failed and the run goes on. Workers stay alive between
timed passes so the parent can interleave candidates round by round (fair under machine drift)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from pathlib import Path
from typing import Any


class WorkerFailed(Exception):
    """The worker raised, crashed or timed out; the message says which."""


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _setup(threads: int | None, device: str = "cpu") -> None:
    # On a GPU host the tokenizer is the bottleneck and spare cores are plenty: let it use them.
    # On CPU it would steal cores from the model.
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if device == "cuda" else "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # noqa: BLE001
        pass
    import torch

    if threads:
        torch.set_num_threads(threads)


def _serve(conn, job: dict[str, Any]) -> None:
    from infertune.config import Batching, Candidate
    from infertune.models.embedding import EmbeddingSpec
    from infertune.registry import load_backend

    _setup(job.get("threads"), job.get("device", "cpu"))
    spec = EmbeddingSpec(**job["spec"])
    cand = Candidate.model_validate(job["candidate"])
    device = job["device"]
    texts: list[str] = job.get("texts", [])
    t0 = time.perf_counter()
    backend = load_backend(cand.backend)
    emb = backend.prepare(spec, cand, device, Path(job["workdir"]), job.get("calibration", []))
    if device == "cuda":  # measured as `serve` runs it: CUDA graphs, packed batches where the candidate says
        from infertune.backends.graphs import tuned_engine
        from infertune.backends.overlap import start_tokenizers

        emb = tuned_engine(emb, cand, device)
        start_tokenizers(emb)  # part of preparing, not of the first timed pass
    conn.send(("ok", {"prepare_s": time.perf_counter() - t0, "executed": emb.describe()}))
    while True:
        cmd, args = conn.recv()
        if cmd == "stop":
            return
        try:
            if cmd == "embed":
                out = emb.embed(texts, Batching.model_validate(args["batching"]), pooled=True)
                conn.send(("ok", out))
            elif cmd == "measure":
                batching = Batching.model_validate(args["batching"])
                if hasattr(emb, "max_tokens") and batching.kind == "tokens":
                    emb.max_tokens = batching.size  # CUDA graphs up to the budget measured, as serve sizes them
                sub = [texts[i] for i in args["subset"]] if args.get("subset") is not None else texts
                cap, seed = args.get("max_s"), args.get("shuffle")
                limit = None
                for _ in range(args.get("warmup", 0)):
                    w = emb.measure_pass(sub, batching, max_s=args.get("warmup_max_s", cap), shuffle=seed)
                    limit = w["batches"] if args.get("match_warmup") else None
                # match_warmup: the timed pass runs exactly the batches the warm-up ran, so no shape meets
                # its first run (oneDNN/AMX kernel creation, a compile) inside the timed pass
                passes = [emb.measure_pass(sub, batching, max_s=None if limit else cap, shuffle=seed,
                                           max_batches=limit) for _ in range(args.get("passes", 1))]
                gpu = None
                if device == "cuda":
                    import torch

                    gpu = torch.cuda.max_memory_allocated() / 2**20
                conn.send(("ok", {"passes": passes, "peak_rss_mb": _peak_rss_mb(), "peak_gpu_mb": gpu}))
            elif cmd == "save":
                conn.send(("ok", emb.save(Path(args["path"]))))
            else:
                conn.send(("error", f"unknown command {cmd}"))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which records the failure
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))


def _stdout_to_stderr() -> None:
    """A worker never writes to the parent's stdout (`tune --json` prints only JSON there): libraries that
    print progress (NNCF's statistics bar, compilers) go to stderr, native code included."""
    import sys

    try:
        sys.stdout.flush()
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    except (OSError, ValueError):
        pass


def _main(conn, job: dict[str, Any]) -> None:
    _stdout_to_stderr()
    # The parent starts workers as daemons (it kills them itself; they must not keep it alive), but a worker may
    # start processes of its own (tune's tokenizer processes on a GPU host, backends/tokenize_pool.py), which
    # multiprocessing refuses to a daemon: session 12's first H200 tune failed its reference on "daemonic processes
    # are not allowed to have children". The worker stops its children when it ends; they also watch for it dying.
    mp.current_process().daemon = False
    try:
        if job.get("kind") == "call":
            import importlib

            _setup(job.get("threads"))
            module, attr = job["target"].split(":")
            conn.send(("ok", getattr(importlib.import_module(module), attr)(**job["kwargs"])))
            return
        if job.get("serve"):  # another kind of engine (e.g. causal LMs): "module:function(conn, job)"
            import importlib

            module, attr = job["serve"].split(":")
            getattr(importlib.import_module(module), attr)(conn, job)
            return
        _serve(conn, job)
    except Exception as e:  # noqa: BLE001
        try:
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))
        except Exception:  # noqa: BLE001
            pass


# Workers fork from a server process that has imported these once: a spawned worker spends ~9 s of a
# 2-core box importing torch and transformers before it does anything (8.5-9.7 s, n=3), a forked one
# ~0.05 s after the server's one-time ~12 s. Importing torch starts no threads and touches no GPU, so the
# fork is safe; each worker still sets its own threads and environment.
PRELOAD = ["torch", "transformers", "sentence_transformers", "numpy", "infertune.backends.base"]
_CTX: Any = None


def context():
    """The multiprocessing context every worker starts from (forkserver with PRELOAD where the platform
    has it, else spawn). INFERTUNE_WORKER_START=spawn forces the old behaviour."""
    global _CTX
    if _CTX is None:
        method = os.environ.get("INFERTUNE_WORKER_START", "forkserver")
        if method not in mp.get_all_start_methods():
            method = "spawn"
        _CTX = mp.get_context(method)
        if method == "forkserver":
            _CTX.set_forkserver_preload(PRELOAD)
    return _CTX


def warm_up_workers() -> None:
    """Start the fork server now (it imports PRELOAD in the background of the caller's own work)."""
    ctx = context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


class Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, job: dict[str, Any], timeout_s: float):
        ctx = context()
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_main, args=(child, job), daemon=True)
        self.timeout_s = timeout_s
        self.proc.start()
        child.close()

    def _recv(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.parent.poll(0.2):
                try:
                    status, payload = self.parent.recv()
                except EOFError as e:
                    self.kill()
                    raise WorkerFailed(f"worker process died (exit code {self.proc.exitcode})") from e
                if status == "ok":
                    return payload
                raise WorkerFailed(str(payload).strip())
            if not self.proc.is_alive() and not self.parent.poll(0):
                raise WorkerFailed(f"worker process died (exit code {self.proc.exitcode})")
        self.kill()
        raise WorkerFailed(f"timed out after {timeout:.0f} s")

    def ready(self) -> dict[str, Any]:
        return self._recv(self.timeout_s)

    def call(self, cmd: str, timeout: float | None = None, **args: Any) -> Any:
        if not self.proc.is_alive():
            raise WorkerFailed(f"worker process is not running (exit code {self.proc.exitcode})")
        self.parent.send((cmd, args))
        return self._recv(timeout or self.timeout_s)

    def stop(self) -> None:
        if self.proc.is_alive():
            try:
                self.parent.send(("stop", {}))
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self.kill()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def run_isolated(target: str, kwargs: dict[str, Any], timeout_s: float, threads: int | None = None) -> Any:
    """Call `module:function(**kwargs)` in a fresh process and return its (picklable) result."""
    w = Worker({"kind": "call", "target": target, "kwargs": kwargs, "threads": threads}, timeout_s)
    try:
        return w.ready()
    finally:
        w.kill()
