"""Memory and CPU for a pod, from what tune measured, with the headroom stated next to the figures.

Tuned artifact: the winner's peak RSS in tune's worker (getrusage max RSS over its timed passes: weights,
activations of its batches, the imported libraries) and, on a GPU, its peak allocated GPU memory. The request and
the limit are that peak x (1 + headroom): equal, so the scheduler reserves what the limit lets the pod use and the
pod is not OOM-killed for memory the node promised someone else. CPU: the threads tune measured with.

No measurement (an untuned model, or an artifact written before tune recorded it): fp32 weights + one default
batch's activations (plan/embed.py's upper bound) + the serving process's own footprint, x (1 + headroom)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MIB = 2**20
# the serving process without its model: `infertune serve minilm` (fp32, 2-core CPU, torch 2.13+cpu) held 552-553
# MiB RSS after one 8-text request (n=2), of which 87 MiB are MiniLM's weights
SERVE_RUNTIME_MIB = 470
CPU_BATCH_TOKENS = 4096  # serve's default padded-token budget on CPU without an artifact (serve/config.py)


class Sizing(BaseModel):
    memory_mib: int  # request = limit
    cpu: str  # request
    gpu_memory_mib: int | None = None  # GPU memory the pod needs (node placement, not a Kubernetes resource)
    figures: dict[str, Any] = {}  # what the numbers come from, with units
    explain: list[str] = []  # one line per figure: measured value, headroom, result

    def k8s_memory(self) -> str:
        return f"{self.memory_mib}Mi"

    def compose_memory(self) -> str:
        return f"{self.memory_mib}m"


def _with_headroom(mib: float, headroom: float) -> int:
    return int(math.ceil(mib * (1 + headroom) / 16) * 16)  # whole 16 MiB steps


def measured(manifest: dict[str, Any], artifact: Path) -> dict[str, Any]:
    """peak_rss_mb / peak_gpu_mb / threads from the manifest, else from the run's results.json beside it."""
    mem = dict(manifest.get("memory") or {})
    threads = (manifest.get("tune") or {}).get("threads")
    if mem.get("peak_rss_mb") is None and (artifact.parent / "results.json").is_file():
        try:
            r = json.loads((artifact.parent / "results.json").read_text())
        except (OSError, ValueError):
            r = {}
        m = ((r.get("winner") or {}).get("measurement") or {})
        mem = {"peak_rss_mb": m.get("peak_rss_mb"), "peak_gpu_mb": m.get("peak_gpu_mb"),
               "source": f"{artifact.parent / 'results.json'}: the winner's measurement"}
        threads = threads or (r.get("environment") or {}).get("threads")
    threads_from = "tune measured with" if threads else None
    if not threads:  # tune left the thread count at the engine's default: one per physical core of the tune host
        fp = manifest.get("fingerprint") or {}
        threads = fp.get("cpu_cores_physical") or fp.get("cpu_cores_logical")
        threads_from = "tune ran with (the engine's default: the tune host's cores)" if threads else None
    return {**mem, "threads": threads, "threads_from": threads_from}


def _files_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and ".work" not in p.parts) / MIB


def tuned_sizing(manifest: dict[str, Any], artifact: Path, headroom: float, device: str) -> Sizing:
    m = measured(manifest, artifact)
    threads = m.get("threads")
    cpu = str(threads) if threads else "2"
    cpu_line = (f"cpu request {cpu}: the {threads} thread(s) {m['threads_from']}" if threads
                else "cpu request 2: the artifact records no thread count")
    rss = m.get("peak_rss_mb")
    if rss is None:
        files = _files_mib(artifact)
        est = files + SERVE_RUNTIME_MIB
        mib = _with_headroom(est, headroom)
        return Sizing(memory_mib=mib, cpu=cpu, figures={"artifact_files_mib": round(files, 1), "estimated": True,
                                                        "headroom": headroom, "threads": threads},
                      explain=[f"memory {mib} MiB = (artifact files {files:.0f} MiB + serving process "
                               f"{SERVE_RUNTIME_MIB} MiB) x {1 + headroom:g} headroom: no measured peak RSS in "
                               "the artifact (tune it again to record one)", cpu_line])
    mib = _with_headroom(rss, headroom)
    lines = [f"memory {mib} MiB = peak RSS {rss:.0f} MiB measured by tune x {1 + headroom:g} headroom", cpu_line]
    gpu = m.get("peak_gpu_mb")
    gmib = None
    if device == "cuda" and gpu:
        gmib = _with_headroom(gpu, headroom)
        lines.append(f"GPU memory >= {gmib} MiB = peak allocated {gpu:.0f} MiB measured by tune x {1 + headroom:g}")
    return Sizing(memory_mib=mib, cpu=cpu, gpu_memory_mib=gmib, explain=lines,
                  figures={"peak_rss_mb": rss, "peak_gpu_mb": gpu, "headroom": headroom, "threads": threads,
                           "source": m.get("source", "artifact manifest")})


def untuned_sizing(model_dir: str, headroom: float, device: str) -> Sizing:
    """fp32 weights + one default CPU batch's activations + the serving process, x (1 + headroom)."""
    from infertune.plan.arch import arch_from_config, load_config
    from infertune.plan.embed import activation_bytes

    a = arch_from_config(load_config(model_dir))
    weights = a.weights_bytes("fp32") / MIB
    act = activation_bytes(a, CPU_BATCH_TOKENS, "fp32") / MIB if device == "cpu" else 0.0
    est = weights + act + SERVE_RUNTIME_MIB
    mib = _with_headroom(est, headroom)
    lines = [f"memory {mib} MiB = (fp32 weights {weights:.0f} MiB + activations of a {CPU_BATCH_TOKENS}-token batch "
             f"{act:.0f} MiB + serving process {SERVE_RUNTIME_MIB} MiB) x {1 + headroom:g} headroom: untuned, "
             "nothing measured", "cpu request 2: untuned (tune records the threads it measured with)"]
    return Sizing(memory_mib=mib, cpu="2", explain=lines,
                  figures={"weights_fp32_mib": round(weights, 1), "activations_mib": round(act, 1),
                           "runtime_mib": SERVE_RUNTIME_MIB, "headroom": headroom, "estimated": True})
