"""The server under validation: one validate starts (`infertune serve ARTIFACT --worker-process`, its own
process group, log in the out dir) or one already running at a URL. Both answer the same questions: is it
ready, what are its limits, what is its memory, which process is the model worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from infertune.errors import InfertuneError
from infertune.ports import free_port


def scrape(url: str, timeout: float = 5.0) -> dict[str, float]:
    """The target's /metrics as {'name{labels}': value} (bench's parser); {} when it has none."""
    from infertune.bench.telemetry import parse_prometheus

    try:
        r = httpx.get(url + "/metrics", timeout=timeout)
        if r.status_code != 200:
            return {}
        return parse_prometheus(r.text)[0]
    except (httpx.HTTPError, ValueError):
        return {}


def models_info(body: Any) -> dict[str, Any]:
    """What a server without /ready says of itself in /v1/models: vLLM's `max_model_len` becomes the input
    limit the drills test (the long tail's over-limit bucket)."""
    try:
        n = body["data"][0].get("max_model_len")
    except (KeyError, IndexError, TypeError, AttributeError):
        return {}
    return {"limits": {"max_input_tokens": int(n)}} if n else {}


class Target:
    def __init__(self, url: str, proc: subprocess.Popen | None = None, log_path: Path | None = None,
                 api: str = "embeddings"):
        self.url = url.rstrip("/")
        self.proc = proc
        self.log_path = log_path
        self.api = api
        self.info: dict[str, Any] = {}  # the last /ready answer
        self.model: str | None = None
        self.workload: Path | None = None  # the artifact's own requests (an LLM artifact's load.jsonl)
        self.llm = False  # validate started `infertune serve` on a causal-LM artifact (vLLM)
        self.greedy_expected = False  # that artifact keeps greedy continuations, which serve checks at start

    # --- starting -------------------------------------------------------------------------------------
    @classmethod
    def start(cls, model: str, flags: list[str], log_dir: Path) -> Target:
        """`infertune serve MODEL --worker-process` on a free loopback port (LLM artifacts go to vLLM)."""
        from infertune.artifact import read_manifest
        from infertune.models.resolve import resolve_model

        ref = resolve_model(model)
        manifest = read_manifest(ref.path) if ref.format == "artifact" else {}
        llm = manifest.get("kind") == "causal-lm"
        port = free_port()
        argv = [sys.executable, "-m", "infertune.cli.main", "serve", model, "--port", str(port), *flags]
        if not llm and "--in-process" not in flags and "--worker-process" not in flags:
            argv.append("--worker-process")  # the fault drills need a worker process to kill
        if not llm and not any(f.startswith("--drain-s") for f in flags):
            argv += ["--drain-s", "0"]  # nothing routes to a server validate started: stop() need not wait 2 s
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / "server.log"
        log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"), TOKENIZERS_PARALLELISM="false")
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
        t = cls(f"http://127.0.0.1:{port}", proc, log_path, api="completions" if llm else "embeddings")
        t._log = log
        t.llm = llm
        t.greedy_expected = llm and bool((manifest.get("greedy") or {}).get("samples"))
        if llm and (ref.path / "load.jsonl").exists():
            t.workload = ref.path / "load.jsonl"
        return t

    @property
    def owned(self) -> bool:
        return self.proc is not None

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def wait_ready(self, timeout: float, unreachable_s: float = 3.0) -> dict[str, Any]:
        """Poll /ready until it answers 200. A server validate started gets `timeout` (loading a model takes
        a while); a URL given by the user where nothing accepts connections fails after `unreachable_s`
        (a server that answers, even 503 while loading, gets the full timeout)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        last = ""
        answered = False
        while time.monotonic() < deadline:
            if not self.owned and not answered and time.monotonic() - t0 > unreachable_s:
                raise InfertuneError(f"nothing answers at {self.url} ({last} for {unreachable_s:g} s); start the "
                                     "server first, check the URL and port, or pass an artifact to let validate "
                                     "start `infertune serve` itself")
            if not self.alive():
                raise InfertuneError(f"the server exited with code {self.proc.returncode} before it was ready; "
                                     f"see {self.log_path}:\n{self.log_tail()}")
            try:
                r = httpx.get(self.url + "/ready", timeout=httpx.Timeout(5.0, connect=2.0))
                answered = True
                if r.status_code == 200:
                    self.info = r.json()
                    return self.info
                if r.status_code == 404:  # not infertune serve (vLLM, TEI...): /v1/models answering is enough
                    m = httpx.get(self.url + "/v1/models", timeout=5)
                    if m.status_code == 200:
                        self.info = models_info(m.json())
                        if self.greedy_expected:
                            self.info["greedy_check"] = self._greedy_line(deadline)
                        return self.info
                last = f"/ready answered {r.status_code}"
            except httpx.HTTPError as e:
                last = {"ConnectError": "connection refused", "ConnectTimeout": "connect timed out"}.get(
                    type(e).__name__, type(e).__name__)
            time.sleep(0.2)
        raise InfertuneError(f"{self.url} was not ready within {timeout:g} s (last: {last})")

    def _greedy_line(self, deadline: float) -> str:
        """serve's own check of the continuations tune recorded (its line in the log), awaited before any load:
        run beside the drills' requests, its prompts would share batches with them, and need not round alike."""
        from infertune.engines.causal_lm.vllm_server import GREEDY_LINE

        while time.monotonic() < deadline and self.alive():
            text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
            lines = [x for x in text.splitlines() if x.startswith(GREEDY_LINE)]
            if lines:
                return lines[-1].strip()
            time.sleep(0.5)
        if not self.alive():  # as wait_ready says it: a server that exited is not one that is slow
            raise InfertuneError(f"the server exited with code {self.proc.returncode} during serve's greedy check; "
                                 f"see {self.log_path}:\n{self.log_tail()}")
        raise InfertuneError(f"serve's greedy check printed no line within the ready timeout; see {self.log_path}:\n"
                             f"{self.log_tail()}")

    def ready_now(self) -> dict[str, Any] | None:
        """The /ready answer if it is 200 right now, else None; a server without /ready (vLLM) answers with
        its /health: {} when 200."""
        try:
            r = httpx.get(self.url + "/ready", timeout=2)
            if r.status_code == 404:
                return {} if httpx.get(self.url + "/health", timeout=2).status_code == 200 else None
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def default_model(self) -> str | None:
        try:
            data = httpx.get(self.url + "/v1/models", timeout=10).json().get("data") or []
            return data[0]["id"] if data else None
        except (httpx.HTTPError, ValueError, KeyError, AttributeError, TypeError):
            return None

    # --- what the drills ask --------------------------------------------------------------------------
    @property
    def limits(self) -> dict[str, Any]:
        return self.info.get("limits") or {}

    def worker_pid(self) -> int | None:
        """The model worker's pid, when validate owns the server and it runs one."""
        if not self.owned:
            return None
        info = self.ready_now() or self.info
        w = info.get("worker") or {}
        return w.get("pid") if w.get("mode") in ("process", "processes") else None

    def rss_mb(self) -> float | None:
        """Resident memory of the server and its children (psutil) when validate owns it, else what its
        /metrics reports (process_resident_memory_bytes + the worker's)."""
        if self.owned:
            import psutil

            try:
                p = psutil.Process(self.proc.pid)
                procs = [p, *p.children(recursive=True)]
            except psutil.Error:
                return None
            total = 0
            for q in procs:
                try:
                    total += q.memory_info().rss
                except psutil.Error:
                    pass
            return total / 2**20
        m = scrape(self.url)
        if "process_resident_memory_bytes" not in m:
            return None
        return (m["process_resident_memory_bytes"] + m.get("infertune_worker_resident_memory_bytes", 0.0)) / 2**20

    def log_tail(self, n: int = 15) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever is left of its group (a worker, vLLM's engine process)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        if getattr(self, "_log", None):
            self._log.close()
        return self.proc.returncode
