"""Memory bandwidth of this machine, the roofline's denominator: tune's causal-LM pass measures it with this one
function. Needs torch only."""

from __future__ import annotations

import time
from typing import Any


def memory_bandwidth(device: str = "cpu", mib: int = 512, reps: int = 7, warmup: int = 1) -> dict[str, Any]:
    """Memory bandwidth of this machine, the roofline's denominator.

    GPU: device-to-device copy, bytes read + written, median over `reps` (the convention behind
    the 4.15 TB/s often quoted for an H200). CPU: torch (all threads) reading a `mib` MiB buffer (a sum: decode reads
    weights, it does not write them) and copying it; the best of the two medians. On a shared box the
    median under load underestimates the hardware, so `range` and `best` are reported too. `warmup`: untimed
    passes first (tune: 1; the GPU scripts: 3).
    """
    import torch

    ts: list[float] = []
    if device == "cuda":
        a = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        for _ in range(warmup):
            b.copy_(a)
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            b.copy_(a)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / 1000)
        gbs = sorted(2 * mib * 2**20 / t / 1e9 for t in ts)
        method = f"torch d2d copy of {mib} MiB, read + write bytes"
    else:
        a = torch.ones(mib * 2**18, dtype=torch.float32)
        b = torch.empty_like(a)
        runs = {}
        for name, fn, factor in (("read", lambda: a.sum(), 1), ("copy", lambda: b.copy_(a), 2)):
            for _ in range(warmup):
                fn()
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            runs[name] = sorted(factor * mib * 2**20 / t / 1e9 for t in ts)
        name = max(runs, key=lambda k: runs[k][len(runs[k]) // 2])
        gbs = runs[name]
        method = f"torch {name} of {mib} MiB with {torch.get_num_threads()} threads" + (
            ", read + write bytes" if name == "copy" else "")
    return {"gb_per_s": gbs[len(gbs) // 2], "range": (gbs[0], gbs[-1]), "best": gbs[-1], "n": reps,
            "method": method}


def gpu_bandwidth_in_child(free_gib: float | None = None, timeout_s: float = 180.0) -> dict[str, Any]:
    """memory_bandwidth("cuda") measured in a child process, so this process never holds a CUDA context or the
    copy's buffers (about 0.5 GiB and 1 GiB that tune's workers would otherwise not have: on a card with little free
    memory that decides what fits). The buffers shrink to a quarter of `free_gib` each where that is less."""
    import json
    import subprocess
    import sys

    mib = 512 if free_gib is None else max(16, min(512, int(free_gib * 1024 / 4)))
    code = ("import json, sys; from infertune.hardware.bandwidth import memory_bandwidth; "
            f"print(json.dumps(memory_bandwidth('cuda', mib={mib})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        from infertune.errors import InfertuneError

        raise InfertuneError(f"measuring the GPU's memory bandwidth failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
