"""Multi-process `serve`: N frontend processes share the port, one engine process per device owns the model.

    clients --HTTP--> frontend 0..N-1 (SO_REUSEPORT)  --ZeroMQ, token ids-->  engine 0..M-1 (one per GPU)
                      HTTP, JSON, tokenize, render    <--ZeroMQ, float32 rows--  batching + forward

This process (the launcher) reserves the port, starts the frontends first (so /health answers at once)
and the engines beside them, then supervises both: an engine that dies is restarted with back-off while
the frontends fail its outstanding requests with 503 and route new ones to the others; a frontend that
dies is restarted on the same port. Metrics are written by every process into one directory
(prometheus_client's multiprocess mode) and any frontend's /metrics adds them up.

SIGTERM/SIGINT: every frontend drains (/ready 503, still accepting for --drain-s, then answers what it
accepted and exits); only then are the engines stopped (each finishes what it took), and the launcher exits 0.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from infertune.errors import InfertuneError
from infertune.hardware.sizing import default_frontends
from infertune.serve.config import ServeConfig, ServeResult, Settings
from infertune.serve.http import bind_tcp

MP_ENV = "PROMETHEUS_MULTIPROC_DIR"


def cuda_devices(cfg: ServeConfig) -> list[str]:
    if cfg.devices:
        return [d if d.startswith("cuda") else f"cuda:{d}" for d in cfg.devices]
    import torch

    n = torch.cuda.device_count()
    if n == 0:
        raise InfertuneError("--device cuda, but no GPU is visible (CUDA_VISIBLE_DEVICES, the driver, or the "
                             "container's GPU access); `infertune doctor` says which")
    return [f"cuda:{i}" for i in range(n)]


def wants_processes(cfg: ServeConfig, device: str, tuned: int | None = None) -> tuple[bool, list[str], int]:
    """(multi-process?, devices, frontends) for this config. `tuned`: the frontends per GPU the artifact's tune
    figure was measured to match (manifest tune.frontends_per_gpu), used on a GPU unless --frontends is given,
    never more than this host's default allows (an artifact tuned on a bigger host)."""
    if cfg.devices and device != "cuda":
        raise InfertuneError(f"--devices {','.join(cfg.devices)} picks GPUs; add --device cuda (this server's "
                             f"device is {device})")
    devices = cuda_devices(cfg) if device == "cuda" else ["cpu"]
    frontends = cfg.frontends or default_frontends(device, len(devices))
    if not cfg.frontends and tuned and device == "cuda":
        frontends = max(1, min(tuned * len(devices), frontends))
    # --worker-process: the model in a supervised process of its own, so the processes topology (1 frontend)
    return frontends > 1 or len(devices) > 1 or cfg.worker_process, devices, frontends


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def await_ready(proc: Any, conn: Any, who: str, stop: Any = None) -> dict[str, Any]:
    """Wait for a child's ("ready", info) on `conn`; kill it and raise RuntimeError saying why when it dies,
    sends an error, or `stop()`. No load deadline: a big model on a slow disk may take minutes, and a child
    that hangs is visible in /ready (loading) and in its log."""
    while not conn.poll(0.2):
        stopping = stop is not None and stop()
        if not proc.is_alive() or stopping:
            proc.kill()
            proc.join(5)
            if stopping:
                raise RuntimeError("stopping")
            raise RuntimeError(f"{who} {describe_exit(proc.exitcode)} while loading")
    try:
        kind, info = conn.recv()
    except (EOFError, OSError):
        proc.join(5)
        raise RuntimeError(f"{who} {describe_exit(proc.exitcode)} while loading") from None
    if kind != "ready":
        proc.join(5)
        raise RuntimeError(f"{who} could not load the model: {info}")
    return info


class _Spawner:
    """Starts children with the metrics directory in their environment (and only theirs)."""

    def __init__(self, mp_dir: str):
        self.ctx = mp.get_context("spawn")
        self.mp_dir = mp_dir
        self.lock = threading.Lock()

    def start(self, target: Any, args: tuple, name: str, env: dict[str, str] | None = None) -> Any:
        env = {MP_ENV: self.mp_dir, **(env or {})}
        with self.lock:
            old = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                proc = self.ctx.Process(target=target, args=args, name=name, daemon=False)
                proc.start()
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        return proc


# Thread pools (OpenMP, BLAS) sized to the machine in every one of N+M processes oversubscribe the cores:
# frontends do no math, and an engine that drives a GPU needs one CPU thread. An engine on the CPU keeps
# the defaults (or --threads): its pool is the model's compute.
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


class Launcher:
    def __init__(self, cfg: ServeConfig, settings: Settings, served: list[str], devices: list[str],
                 frontends: int, warmup: list[str]):
        self.cfg, self.settings, self.served, self.devices = cfg.model_copy(update={"frontends": frontends}), \
            settings, served, devices
        self.n_frontends = frontends
        self.warmup = warmup
        self.run_dir = tempfile.mkdtemp(prefix="infertune-serve-")
        self.mp_dir = os.path.join(self.run_dir, "metrics")
        os.mkdir(self.mp_dir)
        self.spawner = _Spawner(self.mp_dir)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.closing = False
        self.info: dict[str, Any] | None = None
        self.load_error: str | None = None
        self.engines: list[dict[str, Any]] = [{"device": d, "pid": None, "up": False, "restarts": 0,
                                               "last_exit": None} for d in devices]
        self.engine_procs: list[Any] = [None] * len(devices)
        self.engine_conns: list[Any] = [None] * len(devices)
        self.fe_procs: list[Any] = [None] * frontends
        self.fe_conns: list[Any] = [None] * frontends
        self.port = 0

    # --- frontends --------------------------------------------------------------------------------------
    def _start_frontend(self, i: int) -> None:
        from infertune.serve.frontend import frontend_main

        parent, child = self.spawner.ctx.Pipe()
        proc = self.spawner.start(frontend_main, (child, i, self.cfg.model_dump_json(),
                                                  self.settings.model_dump_json(), self.served, self.port,
                                                  self.run_dir, len(self.devices)), f"infertune-frontend-{i}",
                                 env=ONE_THREAD)
        child.close()
        with self.lock:
            self.fe_procs[i], self.fe_conns[i] = proc, parent
            if self.info is not None:  # a restarted frontend: the others are open already
                self._send(i, ("ready", self.info))
                self._send(i, ("open",))
            if self.load_error is not None:
                self._send(i, ("load_error", self.load_error))
            self._send(i, ("engines", self.engines))

    def _send(self, i: int, msg: Any) -> None:
        try:
            self.fe_conns[i].send(msg)
        except (OSError, ValueError):
            pass  # that frontend is gone: the monitor restarts it and sends it the state again

    def _broadcast(self, msg: Any) -> None:
        with self.lock:
            for i in range(self.n_frontends):
                if self.fe_conns[i] is not None:
                    self._send(i, msg)

    def _await_armed(self, timeout: float = 60.0) -> None:
        """Wait until every frontend has its engine client, so /ready turns 200 on all of them together:
        with SO_REUSEPORT a client's next connection may land on any frontend, and a 200 from one followed
        by a "loading" 503 from another would tell a load balancer or `bench --wait-ready` the wrong thing.
        A frontend that dies or stalls meanwhile is left to the monitor, which restarts it."""
        deadline = time.monotonic() + timeout
        for k, conn in enumerate(self.fe_conns):
            if conn is None:
                continue
            try:
                while conn.poll(max(0.0, deadline - time.monotonic())):
                    if conn.recv()[0] == "armed":
                        break
                else:
                    print(f"frontend {k} did not take the engine within {timeout:g} s; opening the others",
                          file=sys.stderr, flush=True)
            except (EOFError, OSError):
                pass

    # --- engines ------------------------------------------------------------------------------------------
    def _spawn_engine(self, i: int, restart_t0: float | None = None) -> dict[str, Any]:
        from infertune.serve.core import engine_main

        parent, child = self.spawner.ctx.Pipe()
        e = self.engines[i]
        proc = self.spawner.start(engine_main, (child, i, self.cfg.model, e["device"], self.settings.threads,
                                                self.warmup, self.run_dir, self.settings.model_dump(),
                                                e["restarts"], self.cfg.load_options(), restart_t0),
                                 f"infertune-engine-{i}",
                                 env=ONE_THREAD if e["device"].startswith("cuda") and not self.settings.threads
                                     else None)
        child.close()
        info = await_ready(proc, parent, f"engine {i} ({e['device']})", stop=lambda: self.closing)
        self.engine_procs[i], self.engine_conns[i] = proc, parent
        return info

    def _run_engine(self, i: int) -> None:
        """Start engine i, then keep it running: restart it with back-off whenever it dies."""
        from multiprocessing.connection import wait

        e = self.engines[i]
        backoff, first, died_at = 1.0, True, None
        while not self.closing:
            t0 = time.perf_counter()
            try:
                info = self._spawn_engine(i, died_at)
            except Exception as ex:  # noqa: BLE001
                if self.closing:
                    return
                if first and self.info is None:  # nothing ever loaded: the model itself is the problem
                    self.load_error = str(ex)
                    self._broadcast(("load_error", self.load_error))
                    self.stop.set()
                    return
                print(f"engine {i} restart failed: {ex}; retrying in {backoff:g} s", file=sys.stderr, flush=True)
                time.sleep(backoff)
                backoff = min(30.0, backoff * 2)
                continue
            backoff = 1.0
            with self.lock:
                e.update(pid=info["pid"], up=True)
                if not first:
                    e["last_restart_s"] = round(time.perf_counter() - t0, 2)
                if self.info is None:
                    self.info = info
                    for k in range(self.n_frontends):
                        if self.fe_conns[k] is not None:
                            self._send(k, ("ready", info))
                    self._await_armed()
                    for k in range(self.n_frontends):
                        if self.fe_conns[k] is not None:
                            self._send(k, ("open",))
                    print(f"ready: {self.served[0]} loaded and warmed up in {info['load_s']} s on "
                          f"{len(self.devices)} engine(s)", file=sys.stderr, flush=True)
            if not first:
                print(f"engine {i} restarted (pid {info['pid']}) in {e['last_restart_s']} s", file=sys.stderr,
                      flush=True)
            self._broadcast(("engines", self.engines))
            first = False
            proc = self.engine_procs[i]
            wait([proc.sentinel])
            if self.closing:
                return
            died_at = time.time()
            proc.join(5)
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(proc.pid, self.mp_dir)
            with self.lock:
                e.update(up=False, restarts=e["restarts"] + 1, last_exit=describe_exit(proc.exitcode), pid=None)
            print(f"engine {i} (pid {proc.pid}) {e['last_exit']}; restarting it (restart {e['restarts']})",
                  file=sys.stderr, flush=True)
            self._broadcast(("engines", self.engines))

    # --- the whole server -----------------------------------------------------------------------------------
    def run(self) -> ServeResult:
        # bound, not listening: the port is ours and known; frontends bind it too, with SO_REUSEPORT
        reserve = bind_tcp(self.cfg.host, self.cfg.port, reuse_port=True, listen=False)
        self.port = reserve.getsockname()[1]
        host = self.cfg.host
        url = f"http://{host if ':' not in host else f'[{host}]'}:{self.port}"
        print(f"listening on {url} (model {self.served[0]!r}, loading...): {self.n_frontends} frontend "
              f"process(es) (HTTP, tokenization), {len(self.devices)} engine process(es) on "
              f"{', '.join(self.devices)}; batching {self.settings.batch_tokens} padded tokens, growing to "
              f"{self.settings.max_batch_tokens}, <= {self.settings.max_batch_items} items, max wait "
              f"{self.settings.max_wait_ms} ms", file=sys.stderr, flush=True)
        main = threading.current_thread() is threading.main_thread()
        old = {s: signal.signal(s, lambda *_: self.stop.set()) for s in (signal.SIGTERM, signal.SIGINT)} \
            if main else {}
        t0 = time.perf_counter()
        engine_threads = []
        try:
            for i in range(self.n_frontends):
                self._start_frontend(i)
            for i in range(len(self.devices)):
                th = threading.Thread(target=self._run_engine, args=(i,), name=f"infertune-engine-{i}",
                                      daemon=True)
                th.start()
                engine_threads.append(th)
            while not self.stop.wait(0.5):
                self._restart_dead_frontends()
        finally:
            self._shutdown(engine_threads)
            for s, h in old.items():
                signal.signal(s, h)
            reserve.close()
        counts, items, batches = _totals(self.mp_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.load_error is not None and self.info is None:
            raise InfertuneError(f"could not load {self.cfg.model}: {self.load_error}")
        return ServeResult(model=self.served[0], url=url, settings=self.settings,
                           load_s=(self.info or {}).get("load_s"), uptime_s=round(time.perf_counter() - t0, 2),
                           requests=counts, items=items, batches=batches, exit_reason="signal")

    def _restart_dead_frontends(self) -> None:
        for i, proc in enumerate(self.fe_procs):
            if proc is not None and not proc.is_alive() and not self.stop.is_set():
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(proc.pid, self.mp_dir)
                print(f"frontend {i} (pid {proc.pid}) {describe_exit(proc.exitcode)}; restarting it",
                      file=sys.stderr, flush=True)
                self._start_frontend(i)

    def _shutdown(self, engine_threads: list[threading.Thread]) -> None:
        """Frontends drain and exit first; then the engines finish what they took and stop."""
        self._broadcast(("drain",))
        deadline = time.monotonic() + self.cfg.drain_s + self.cfg.graceful_timeout_s + 10
        for proc in self.fe_procs:
            if proc is not None:
                proc.join(max(0.1, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
        self.closing = True
        for conn in self.engine_conns:
            if conn is not None:
                try:
                    conn.send(None)
                except (OSError, ValueError):
                    pass
        for proc in self.engine_procs:
            if proc is not None:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
        for th in engine_threads:
            th.join(5)


def _totals(mp_dir: str) -> tuple[dict[str, int], int, int]:
    """Requests by status, items and batches, added up over every process that wrote metrics."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    from infertune.serve.metrics import totals

    reg = CollectorRegistry()
    try:
        MultiProcessCollector(reg, path=mp_dir)
    except Exception:  # noqa: BLE001 - a summary, not worth failing the exit for
        return {}, 0, 0
    return totals(reg)
