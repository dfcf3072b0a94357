"""Server-side series during a run: the target's Prometheus /metrics scraped on an interval, and local
GPUs through NVML when pynvml is installed. Times are seconds on the client's monotonic clock since the
bench started, the same clock the load points use, so both line up."""

from __future__ import annotations

import threading
import time

from infertune.bench.results import TelemetrySeries

MAX_SERIES = 400  # a big server exports thousands of label sets; keep the first ones seen


class _Sampler:
    def __init__(self, source: str, interval: float, t0: float):
        self.out = TelemetrySeries(source=source, interval_s=interval)
        self.t0 = t0

    def add(self, t: float, values: dict[str, float], types: dict[str, str]) -> None:
        s = self.out
        k = len(s.t)
        s.t.append(round(t - self.t0, 3))
        for name, v in values.items():
            if name not in s.series:
                if len(s.series) >= MAX_SERIES:
                    continue
                s.series[name] = [None] * k
                s.types[name] = types.get(name, "untyped")
            s.series[name].append(v)
        for col in s.series.values():
            if len(col) < k + 1:
                col.append(None)


def parse_prometheus(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """Samples as {'name{a="b"}': value}; histogram buckets and *_created timestamps are dropped."""
    from prometheus_client.parser import text_string_to_metric_families

    vals, types = {}, {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith(("_bucket", "_created")):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            key = f"{s.name}{{{labels}}}" if labels else s.name
            vals[key] = float(s.value)
            types[key] = fam.type
    return vals, types


class Telemetry:
    """Background thread; start() before the load, stop() after. Never raises into the run."""

    def __init__(self, metrics_url: str | None, interval: float, t0: float):
        self.interval, self.t0 = interval, t0
        self.prom = _Sampler(metrics_url, interval, t0) if metrics_url else None
        self.url = metrics_url
        self.nvml = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="infertune-telemetry", daemon=True)
        try:
            import pynvml  # type: ignore

            pynvml.nvmlInit()
            self._nv = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.nvml = _Sampler("nvml", interval, t0) if self._handles else None
        except Exception:
            self.nvml = None

    def start(self) -> Telemetry:
        if self.prom or self.nvml:
            self._thread.start()
        return self

    def _loop(self) -> None:
        import httpx

        client = httpx.Client(timeout=max(1.0, self.interval * 2)) if self.prom else None
        while not self._stop.is_set():
            t = time.monotonic()
            if self.prom and client:
                try:
                    r = client.get(self.url)
                    r.raise_for_status()
                    vals, types = parse_prometheus(r.text)
                    self.prom.add(t, vals, types)
                except Exception as e:  # telemetry is best effort; note the first few failures
                    if len(self.prom.out.errors) < 5:
                        self.prom.out.errors.append(f"t={t - self.t0:.1f}s {type(e).__name__}: {str(e)[:120]}")
            if self.nvml:
                gpu = self._gpu_sample()
                self.nvml.add(t, gpu, dict.fromkeys(gpu, "gauge"))  # readings, not counters
            # a stall (the server or this box busy) skips the missed slots instead of firing them back to back:
            # samples stay at least an interval apart, so a rate read between two of them means something. From the
            # sample's own time, not the slot's: a late wake-up then an on-time one put samples 0.898 s apart
            nxt = max(t + self.interval, time.monotonic())
            self._stop.wait(max(0.0, nxt - time.monotonic()))
        if client:
            client.close()

    def _gpu_sample(self) -> dict[str, float]:
        nv, out = self._nv, {}
        for i, h in enumerate(self._handles):
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                m = nv.nvmlDeviceGetMemoryInfo(h)
                out[f'gpu_util_percent{{gpu="{i}"}}'] = float(u.gpu)
                out[f'gpu_memory_used_mib{{gpu="{i}"}}'] = m.used / 2**20
                out[f'gpu_power_w{{gpu="{i}"}}'] = nv.nvmlDeviceGetPowerUsage(h) / 1000
            except Exception:
                pass
        return out

    def stop(self) -> list[TelemetrySeries]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval * 3 + 5)
        return [s.out for s in (self.prom, self.nvml) if s is not None]
