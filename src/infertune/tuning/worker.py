"""Candidate isolation: each prepared engine lives in its own process. A candidate that raises,
hangs or kills its process is recorded as failed and the run goes on. Workers stay alive between
timed passes so the parent can interleave candidates round by round (fair under machine drift)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from typing import Any

from infertune.engines.worker_setup import setup


class WorkerFailed(Exception):
    """The worker raised, crashed or timed out; the message says which."""


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def answer_commands(conn, handlers: dict[str, Any]) -> None:
    """A family's job, once its engine is prepared: answer the parent's (command, args) with
    ("ok", handlers[command](args)) until "stop"; a command that raises (or is unknown) answers ("error", what and
    where), and the parent records the candidate as failed."""
    while True:
        cmd, args = conn.recv()
        if cmd == "stop":
            return
        try:
            if cmd not in handlers:
                raise ValueError(f"unknown command {cmd}")
            conn.send(("ok", handlers[cmd](args)))
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


def _fork_unsafe() -> str | None:
    """Why this process must not run (it was forked from a server whose imports initialised CUDA), or None."""
    import sys

    pre = sys.modules.get("infertune.tuning.worker_preload")
    torch = sys.modules.get("torch")
    bad_fork = torch is not None and getattr(torch.cuda, "_is_in_bad_fork", lambda: False)()
    if (pre is not None and getattr(pre, "CUDA_INITIALISED", False)) or bad_fork:
        return "the fork server's imports initialised CUDA (torchao does when transformers imports it)"
    return None


def _main(conn, job: dict[str, Any]) -> None:
    if (why := _fork_unsafe()) is not None:
        conn.send(("respawn", why))  # the parent starts this job again with spawn
        return
    if job.get("library_log"):  # the parent's run log: a fork server started by an earlier run has another
        from infertune.logs import ENV

        os.environ[ENV] = job["library_log"]
    _stdout_to_stderr()
    # The parent starts workers as daemons (it kills them itself; they must not keep it alive), but a worker may
    # start processes of its own (tune's tokenizer processes on a GPU host, engines/tokenize_pool.py), which
    # multiprocessing refuses to a daemon ("daemonic processes are not allowed to have children" fails the tune).
    # The worker stops its children when it ends; they also watch for it dying.
    mp.current_process().daemon = False
    try:
        if job.get("kind") == "call":
            import importlib

            setup(job.get("threads"))
            module, attr = job["target"].split(":")
            conn.send(("ok", getattr(importlib.import_module(module), attr)(**job["kwargs"])))
            return
        import importlib

        # the family's engine loop: "module:function(conn, job)" (embeddings: infertune.tasks.embedding.worker:serve)
        module, attr = job["serve"].split(":")
        getattr(importlib.import_module(module), attr)(conn, job)
    except Exception as e:  # noqa: BLE001
        try:
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))
        except Exception:  # noqa: BLE001
            pass


# Workers fork from a server process that has imported torch and transformers once (worker_preload.py): a
# spawned worker spends ~9 s of a 2-core box importing them before it does anything (8.5-9.7 s, n=3), a forked
# one ~0.05 s after the server's one-time ~12 s. A fork is safe only while CUDA is not initialised in the
# server; where its imports did initialise it, the first forked worker says so and every worker from then on is
# spawned (Worker._respawn): CUDA hosts pay the imports, CPU hosts keep the fork.
PRELOAD = ["infertune.tuning.worker_preload"]
_CTX: Any = None
_FELL_BACK: str | None = None


def context():
    """The multiprocessing context every worker starts from (forkserver with PRELOAD where the platform
    has it, else spawn)."""
    global _CTX
    if _CTX is None:
        method = "forkserver"
        if method not in mp.get_all_start_methods():
            method = "spawn"
        _CTX = mp.get_context(method)
        if method == "forkserver":
            _CTX.set_forkserver_preload(PRELOAD)
    return _CTX


def start_method() -> dict[str, Any]:
    """How workers start in this process, and why (results.json's search.worker_start)."""
    ctx = context()
    return {"method": ctx.get_start_method(), "fell_back": _FELL_BACK}


def _fall_back_to_spawn(why: str) -> None:
    global _CTX, _FELL_BACK
    import sys

    if _FELL_BACK is None:
        print(f"workers: {why}, so they start with spawn from now on (each imports torch itself)",
              file=sys.stderr, flush=True)
    _FELL_BACK = why
    _CTX = mp.get_context("spawn")


def warm_up_workers() -> None:
    """Start the fork server now (it imports PRELOAD in the background of the caller's own work)."""
    ctx = context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


class Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, job: dict[str, Any], timeout_s: float):
        from infertune.logs import ENV

        self.job, self.timeout_s = {**job, "library_log": os.environ.get(ENV)}, timeout_s
        self._launch()

    def _launch(self) -> None:
        ctx = context()
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_main, args=(child, self.job), daemon=True)
        self.proc.start()
        child.close()

    def _respawn(self, why: str) -> None:
        """The forked process refused to run (CUDA initialised in the fork server): the same job, spawned."""
        self.proc.join(5)
        self.parent.close()
        _fall_back_to_spawn(why)
        self._launch()

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
                if status == "respawn":
                    self._respawn(str(payload))
                    deadline += 60.0  # a spawned worker imports torch and transformers first
                    continue
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
