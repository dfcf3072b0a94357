"""The in-loop handle of a served causal-LM candidate: one vLLM server, held by tune's search loop like a worker
process.

The loop talks to an engine through `ready()`, `call(cmd, timeout, **args)`, `stop()` and `kill()`. For a served
candidate the engine is a vLLM server (its own process group, started by engines/causal_lm/vllm_server.py), so this
handle lives in tune's process and answers each call over HTTP (served_measure.py): a bench point, teacher-forced
logprobs, greedy continuations, the SLO search. Preparing it makes the quantized checkpoint first (cached by
content, quantize/llm_checkpoint_cache.py), so the checkpoint's cost is charged to the candidate that needs it.
Any failure is the loop's WorkerFailed: the candidate is recorded as failed with the reason and the run goes on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.tuning.worker import WorkerFailed


class ServedWorker:
    """`job`: built by the served task (tasks/causal_lm/served.py): checkpoint or scheme, vLLM arguments, device,
    port, the calibration file and where logs go."""

    def __init__(self, job: dict[str, Any], timeout_s: float):
        self.job, self.timeout_s = job, timeout_s
        self.srv = None

    def ready(self) -> dict[str, Any]:
        from infertune.engines.causal_lm.vllm_server import launch

        j, t0 = self.job, time.monotonic()
        record: dict[str, Any] = {}
        try:
            ckpt = j.get("checkpoint")
            if j.get("scheme"):
                ckpt, made = self._checkpoint()
                record["checkpoint_made"] = made  # how it was made (or found in the cache): results.json
            self.srv, load_s = launch(ckpt, tuple(j["args"]), device=j["device"], dtype=j["dtype"],
                                      max_model_len=j["max_model_len"], port=j["port"], python=j.get("python"),
                                      log=Path(j["log"]) if j.get("log") else None, timeout_s=self.timeout_s,
                                      served_name="candidate", env=dict(j.get("env") or {}))
        except InfertuneError as e:
            raise WorkerFailed(str(e)[-900:]) from e
        executed = {"engine": "vllm", "checkpoint": str(ckpt), "args": list(j["args"]), "load_s": round(load_s, 1),
                    "command": " ".join(self.srv.argv), "env": dict(self.srv.env), **record}
        return {"prepare_s": time.monotonic() - t0, "executed": executed, "record": {}}

    def _checkpoint(self) -> tuple[str, dict[str, Any]]:
        from infertune.quantize.llm_checkpoint_cache import cached_checkpoint
        from infertune.quantize.llm_checkpoint_rules import SCHEMES
        from infertune.quantize.llm_checkpoint_step import MAX_SEQ

        j = self.job
        scheme = next(s for s in SCHEMES if s.id == j["scheme"])
        path, rec, reused = cached_checkpoint(j["model_dir"], scheme, j.get("calibration"), j["cache_dir"],
                                              venv=j.get("llmc_venv"), max_seq_length=j.get("max_seq_length", MAX_SEQ))
        return str(path), {"path": str(path), "reused": reused, "wall_s": rec.wall_s, "size_bytes": rec.size_bytes,
                           "n_calibration": rec.n_calibration, "recipe": rec.recipe, "versions": rec.versions,
                           "quantization_config": rec.quantization_config}

    def call(self, cmd: str, timeout: float | None = None, **args: Any) -> Any:
        from infertune.tasks.causal_lm import served_measure as measure

        if self.srv is None or self.srv.proc.poll() is not None:
            code = None if self.srv is None else self.srv.proc.returncode
            raise WorkerFailed(f"the vLLM server is not running (exit code {code})"
                               f"{self.srv._tail() if self.srv else ''}")
        url = self.srv.url
        try:
            if cmd == "logprobs":
                return measure.position_logprobs(url, "candidate", args["seqs"], timeout_s=timeout or 300)
            if cmd == "greedy":
                return measure.greedy(url, "candidate", args["prompts"], args["n_new"], timeout_s=timeout or 300,
                                     concurrency=args.get("concurrency", 1))
            if cmd == "load":
                return measure.load(url, Path(args["workload"]), model="candidate", **args.get("options", {}))
        except (InfertuneError, OSError, RuntimeError) as e:
            raise WorkerFailed(f"{cmd}: {e}"[-900:]) from e
        except Exception as e:  # noqa: BLE001 - httpx's errors, a malformed answer: the candidate fails, not the run
            raise WorkerFailed(f"{cmd}: {type(e).__name__}: {e}"[-900:]) from e
        raise ValueError(f"unknown call {cmd!r}")

    def stop(self) -> None:
        if self.srv is not None:
            self.srv.stop(grace_s=20)
            self.srv = None

    def kill(self) -> None:
        if self.srv is not None:
            self.srv.stop(grace_s=5)
            self.srv = None


__all__ = ["ServedWorker"]
