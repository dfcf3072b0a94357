"""kill-worker for an LLM server: `infertune serve` of a causal-LM artifact runs vLLM (an API server and its
engine core, one process group) and restarts it when it exits unasked (engines/causal_lm/supervise.py). Under load, the
drill SIGKILLs that process group, then measures how long until /health answers again from a new vLLM and
the first request sent after the kill succeeds, counts the requests that failed meanwhile (vLLM keeps no
request across a restart: those are expected, and counted) and judges that none hung and none failed once
it was back."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx

from infertune.validate.config import Drill, ValidateConfig
from infertune.validate.load import BackgroundLoad, Stream, scatter, summarize
from infertune.validate.target import Target
from infertune.workloads.bodies import Requests

Log = Callable[[str], None]
# vLLM starts again in its full time (minutes on a shared CPU box): the budget unless --recovery-budget is given
LLM_RECOVERY_BUDGET_S = 300.0


def vllm_pid(target: Target) -> int | None:
    """The vLLM API server's pid (the leader of vLLM's process group) under the `infertune serve` validate
    started, or None (a URL target, or no vLLM running right now)."""
    if not target.owned or not target.alive():
        return None
    import psutil

    try:
        for c in psutil.Process(target.proc.pid).children():
            if "vllm" in " ".join(c.cmdline()):
                return c.pid
    except psutil.Error:
        return None
    return None


def group_pids(pid: int) -> list[int]:
    """The pids of `pid`'s process group that psutil can see (vLLM's API server and engine core)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pid:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return sorted(out)


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def budget(cfg: ValidateConfig) -> tuple[float, str]:
    if "recovery_budget_s" in cfg.model_fields_set:
        return cfg.recovery_budget_s, "--recovery-budget"
    return LLM_RECOVERY_BUDGET_S, "default for an LLM server (vLLM starts again from scratch)"


def restarts_logged(target: Target) -> int | None:
    """How many restarts `infertune serve` logged (the lines of engines/causal_lm/supervise.py), None without a log."""
    if not target.log_path or not target.log_path.exists():
        return None
    return target.log_path.read_text(errors="replace").count("vLLM exited unexpectedly")


def _wait_back(target: Target, old: int, limit_s: float, t_kill: float) -> tuple[float | None, int | None]:
    """(monotonic time /health answered 200 from a vLLM other than `old`, its pid), or (None, None)."""
    while time.monotonic() - t_kill < limit_s and target.alive():
        pid = vllm_pid(target)
        if pid not in (None, old) and healthy(target.url):
            return time.monotonic(), pid
        time.sleep(0.2)
    return None, None


def kill_engine(target: Target, api: str, req: Requests, peak: float, cfg: ValidateConfig, log: Log) -> Drill:
    pid = vllm_pid(target)
    if pid is None:
        why = ("validate did not start this server, so it cannot reach vLLM's processes; pass the artifact "
               "instead of a URL to run this drill") if not target.owned else "no vLLM process under the server"
        return Drill(name="kill-worker", reason=why)
    t_wall = time.monotonic()
    rate = cfg.soak_fraction * peak
    limit, source = budget(cfg)
    restarts0 = restarts_logged(target)
    log(f"kill-worker: {rate:.3g} req/s; SIGKILL to vLLM's process group {pid} after 3 s; waiting up to "
        f"{limit:g} s for /health from a new vLLM")
    with BackgroundLoad(target.url, api, Stream("kill", req.bodies, req.input_tokens, rate), cfg.timeout_s,
                        seed=cfg.seed) as bg:
        time.sleep(3.0)
        killed = group_pids(pid)
        os.killpg(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        t_ready, new_pid = _wait_back(target, pid, limit, t_kill)
        # long enough after /health for the load to send one more request and have it answered: at 0.16 req/s
        # a request goes every 6.25 s, and a fixed 3 s once ended the drill before any was sent to the new vLLM
        time.sleep(max(3.0, 2.0 / rate) if t_ready is not None and rate > 0 else 3.0)
        recs = bg.stop()
        load_error = bg.error
    return _judge(target, recs, load_error, t_kill, t_ready, (pid, killed, new_pid), (limit, source), rate,
                  restarts0, cfg, t_wall)


def _judge(target: Target, recs: list[tuple], load_error: str | None, t_kill: float, t_ready: float | None,
           pids: tuple[int, list[int], int | None], budget_s: tuple[float, str], rate: float,
           restarts0: int | None, cfg: ValidateConfig, t_wall: float) -> Drill:
    (pid, killed, new_pid), (limit, source) = pids, budget_s
    s = summarize(recs, cfg.timeout_s)
    after = [r for r in recs if r.sent >= t_kill]
    first_ok = min((r.done for r in after if not r.error), default=None)
    recovery = round(first_ok - t_kill, 3) if first_ok is not None else None
    failed = [r for r in recs if r.error]
    post = [r for r in recs if t_ready is not None and r.sched >= t_ready + 0.5]
    post_err = sum(1 for r in post if r.error)
    restarts1 = restarts_logged(target)
    delta = restarts1 - restarts0 if restarts0 is not None and restarts1 is not None else None
    fails = []
    if not target.alive():
        fails.append(f"`infertune serve` itself exited (code {target.proc.returncode})")
    if t_ready is None:
        fails.append(f"no new vLLM answered /health within {limit:g} s of the kill")
    if recovery is None or recovery > limit:
        fails.append(f"no successful answer within {limit:g} s of the kill (first: {recovery} s)")
    if s["hung"]:
        fails.append(f"{s['hung']} request(s) hung until the client timeout ({cfg.timeout_s:g} s)")
    if post_err:
        fails.append(f"{post_err} error(s) after vLLM was back")
    if load_error:
        fails.append(f"load generator failed: {load_error}")
    evidence: dict[str, Any] = {
        "rate_rps": round(rate, 3), "killed_pid": pid, "killed_pids": killed, "new_pid": new_pid,
        "signal": "SIGKILL", "target_process": "vLLM process group (API server + engine core)",
        "recovery_s": recovery, "recovery_rule": "kill -> end of the first successful request sent after the kill",
        "ready_again_s": round(t_ready - t_kill, 3) if t_ready else None, "recovery_budget_s": limit,
        "recovery_budget_source": source, "requests": s["requests"], "failed_requests": len(failed),
        "errors_by_kind": s["errors_by_kind"], "error_examples": s["error_examples"], "hung_requests": s["hung"],
        "max_latency_ms": s["max_latency_ms"], "client_timeout_s": cfg.timeout_s, "errors_after_recovery": post_err,
        "requests_after_recovery": len(post), "server_restarts_logged_delta": delta, "server_alive": target.alive(),
        "ttft_ok_ms": s.get("ttft_ok_ms"),
    }
    return Drill(name="kill-worker", passed=not fails, evidence=evidence, series=scatter(recs, t_kill, "kill"),
                 reason="; ".join(fails) or (
                     f"vLLM answered /health again {evidence['ready_again_s']} s and a request {recovery} s after "
                     f"SIGKILL (budget {limit:g} s); {len(failed)} of {s['requests']} requests failed while it was "
                     f"away, {post_err} after; none hung"),
                 wall_s=round(time.monotonic() - t_wall, 1))
