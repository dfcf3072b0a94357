"""CPU that other processes on this host used while validate ran its load: everything but validate itself and
its children (the server it started, the load workers). On the shared 2-core box a soak slowed down from
the middle on because another engineer's test run started there (docs/measurements/2026-12-02-epyc-validate-acceptance,
run 4); without this figure the verdict blamed the server."""

from __future__ import annotations

import time

# other processes using this much CPU (cores) in a third of the soak count as a busy host: on the 2-core box
# half a core is a quarter of the machine, enough to push a CPU server near its capacity into a queue
HOST_BUSY_CORES = 0.5


def _tree_cpu_s(proc) -> float:
    """CPU seconds (user + system) of a process and its living descendants."""
    import psutil

    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


class OtherCPU:
    """sample() -> cores used by other processes since the previous sample (None the first time).
    Descendants that exit between samples make it read a little high, new ones a little low."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._last: tuple[float, float, float] | None = None

    def sample(self) -> float | None:
        import psutil

        now = time.monotonic()
        ct = psutil.cpu_times()
        busy = ct.user + ct.nice + ct.system + getattr(ct, "irq", 0.0) + getattr(ct, "softirq", 0.0)
        own = _tree_cpu_s(self._me)
        last, self._last = self._last, (now, busy, own)
        if last is None:
            return None
        then, busy_then, own_then = last
        if now <= then:
            return None
        return round(max(0.0, (busy - busy_then) - (own - own_then)) / (now - then), 3)


def by_third(t_s: list[float], values: list[float | None], start: float, end: float) -> list[float | None]:
    """Mean of `values` (sampled at `t_s`) over each third of [start, end)."""
    out: list[float | None] = []
    step = (end - start) / 3
    for i in range(3):
        lo, hi = start + i * step, start + (i + 1) * step
        v = [x for t, x in zip(t_s, values, strict=True) if x is not None and lo <= t < hi]
        out.append(round(sum(v) / len(v), 2) if v else None)
    return out


def busy_spell(t_s: list[float], cores: list[float | None], window_t: list[float], window_p99: list[float | None],
               window_s: float, bound: float | None) -> dict | None:
    """The longest run of samples in which other processes used HOST_BUSY_CORES or more, when it overlaps a
    window whose P99 broke `bound`: {from_s, to_s, mean_cores}. A third's mean dilutes a 12 s spell of one
    busy core into 0.4; the windows it slowed are the evidence, so the spell is matched against them."""
    if bound is None:
        return None
    runs, cur = [], []
    for t, x in zip(t_s, cores, strict=True):
        if x is not None and x >= HOST_BUSY_CORES:
            cur.append((t, x))
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    slow = [(w - window_s / 2, w + window_s / 2) for w, p in zip(window_t, window_p99, strict=True)
            if p is not None and p > bound]
    best = None
    for r in runs:
        (lo, _), (last_t, _) = r[0], r[-1]
        hi = last_t + 1.0
        if hi - lo < 3.0 or not any(a < hi and lo < b for a, b in slow):
            continue
        if best is None or hi - lo > best["to_s"] - best["from_s"]:
            best = {"from_s": round(lo, 1), "to_s": round(hi, 1),
                    "mean_cores": round(sum(x for _, x in r) / len(r), 2)}
    return best
