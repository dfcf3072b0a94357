"""Load for the drills, on bench's machinery (its worker processes, open-loop schedules, request client and
point statistics); what bench lacks is added here:

- several streams at once with one start time (the long-tail mix: one stream per length bucket, so every
  record knows its bucket);
- a background load that runs until told to stop (the fault drills do not know in advance how long a
  recovery takes);
- windows: one long run cut into consecutive bench Points (the soak's P99 over time).

Records are bench.records.Record (sched, sent, first, done, error, ...: time.monotonic() seconds).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from infertune.bench import profiles
from infertune.bench.config import BenchConfig
from infertune.bench.engine import WorkerPool
from infertune.bench.results import Offered, Point
from infertune.bench.stats import build_point

ENDPOINTS = {"embeddings": "/v1/embeddings", "completions": "/v1/completions"}


@dataclass
class Stream:
    label: str
    bodies: list[bytes]
    in_tokens: list[int]
    rate: float  # requests/s, open loop, constant spacing


@dataclass
class Run:
    """Raw worker results of one run, per stream, and its clock: t0 = the first scheduled send."""

    t0: float
    warmup: float
    duration: float
    results: dict[str, list[dict[str, Any]]]

    def records(self, label: str | None = None) -> list[tuple]:
        labels = [label] if label else list(self.results)
        return [r for lb in labels for res in self.results[lb] for r in res["records"]]


def streamed(api: str) -> bool:
    """Completions are streamed, as bench streams them: every record has its first token's time (TTFT) and
    its output token count (TPOT); embeddings answer in one piece."""
    return api == "completions"


def _bench_cfg(url: str, api: str, timeout: float) -> BenchConfig:
    # build_point's client self-check reads max_lag_ms / max_client_cpu / max_connections from this
    return BenchConfig(url=url, api=api, timeout=timeout, metrics_url="")


def _spec_base(url: str, api: str, t0: float, warmup: float, duration: float, timeout: float) -> dict[str, Any]:
    return {"url": url + ENDPOINTS[api], "api": api, "stream": streamed(api), "t0": t0, "warmup": warmup,
            "duration": duration, "timeout": timeout, "max_connections": 1024}


def run_streams(url: str, api: str, streams: list[Stream], warmup: float, duration: float, timeout: float,
                seed: int = 0, on_start: Any = None) -> Run:
    """All streams at once, open loop, from one start time; blocks until every answer is in (or timed out).
    `on_start(t0)` runs once the load processes exist (forked before any sampler thread starts)."""
    pools = []
    try:
        for s in streams:
            pools.append(WorkerPool(profiles.choose_workers("auto", s.rate, None), s.bodies, s.in_tokens))
        t0 = time.monotonic() + 0.5
        if on_start is not None:
            on_start(t0)
        base = _spec_base(url, api, t0, warmup, duration, timeout)
        out: dict[str, list[dict[str, Any]]] = {}
        errors: list[str] = []

        def go(i: int, s: Stream, pool: WorkerPool) -> None:
            specs = profiles.split_point(base, len(pool), s.rate, None, "constant", seed + i, None)
            try:
                res = pool.run(specs, deadline_s=warmup + duration + timeout + 60)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{s.label}: {e}")
                return
            errors.extend(f"{s.label}: {r['error']}" for r in res if "error" in r)
            out[s.label] = [r for r in res if "error" not in r]

        threads = [threading.Thread(target=go, args=(i, s, p)) for i, (s, p) in enumerate(zip(streams, pools,
                                                                                               strict=True))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise RuntimeError(f"load worker failed: {errors[0]}")
        return Run(t0, warmup, duration, out)
    finally:
        for p in pools:
            p.close()


def point(run: Run, url: str, api: str, timeout: float, label: str | None = None, start: float | None = None,
          length: float | None = None, rate: float | None = None, error_budget: float | None = None) -> Point:
    """A bench Point over [start, start+length) seconds after run.t0 (default: the measured window).
    `error_budget`: bench's error-laden rule (None: off; the drills judge errors by their own rules)."""
    start = run.warmup if start is None else start
    length = run.duration if length is None else length
    results = [res for lb in ([label] if label else list(run.results)) for res in run.results[lb]]
    return build_point(results, offered=Offered(rate=rate, arrivals="constant"), t0=run.t0 + start, warmup=0.0,
                       duration=length, streaming=streamed(api), bench_t0=run.t0, cfg=_bench_cfg(url, api, timeout),
                       mode="rate", error_budget=error_budget)


class BackgroundLoad:
    """Open-loop load at a fixed rate in back-to-back segments, until stop(). Segments restart the client
    sessions, so there is a gap of a few hundred ms between them; requests are never in a gap. A segment holds
    at least 4 arrivals and lasts its full length even when every request fails at once (a server that refuses
    connections while it restarts): a segment's schedule starts with a send, so short or early-ending segments
    would send faster than the rate."""

    def __init__(self, url: str, api: str, stream: Stream, timeout: float, segment_s: float = 2.0, seed: int = 0):
        self.url, self.api, self.stream, self.timeout, self.seed = url, api, stream, timeout, seed
        self.segment_s = max(segment_s, 4.0 / stream.rate) if stream.rate > 0 else segment_s
        self.records: list[tuple] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="validate-load", daemon=True)
        self.pool: WorkerPool | None = None
        self.t_start = 0.0

    def __enter__(self) -> BackgroundLoad:
        self.pool = WorkerPool(profiles.choose_workers("auto", self.stream.rate, None), self.stream.bodies,
                               self.stream.in_tokens)
        self.t_start = time.monotonic()
        self._thread.start()
        return self

    def _loop(self) -> None:
        k = 0
        while not self._stop.is_set():
            t0 = time.monotonic() + 0.05
            base = _spec_base(self.url, self.api, t0, 0.0, self.segment_s, self.timeout)
            specs = profiles.split_point(base, len(self.pool), self.stream.rate, None, "constant", self.seed + k, None)
            k += 1
            try:
                res = self.pool.run(specs, deadline_s=self.segment_s + self.timeout + 60)
            except Exception as e:  # noqa: BLE001
                self.error = str(e)
                return
            for r in res:
                if "error" in r:
                    self.error = r["error"]
                else:
                    self.records.extend(r["records"])
            self._stop.wait(max(0.0, t0 + self.segment_s - time.monotonic()))

    def stop(self) -> list[tuple]:
        self._stop.set()
        self._thread.join()
        return sorted(self.records, key=lambda r: r.sched)

    def __exit__(self, *exc) -> None:
        if self._thread.is_alive():
            self.stop()
        if self.pool is not None:
            self.pool.close()


def is_429(rec: tuple) -> bool:
    return rec.error == "http_4xx" and str(rec.detail).startswith("HTTP 429")


def is_stalled_503(rec: tuple) -> bool:
    """A 503 of `infertune serve` refusing a request at once because its engine stalled (code engine_stalled)."""
    return rec.error == "http_5xx" and str(rec.detail).startswith("HTTP 503") and "stalled" in str(rec.detail)


def is_refused(rec: tuple) -> bool:
    """Shed load: a 429, or a 503 for a stalled engine. Neither is an error of the server: both say "not now"."""
    return is_429(rec) or is_stalled_503(rec)


def summarize(records: list[tuple], timeout: float) -> dict[str, Any]:
    """Counts by outcome and latency figures (ms) of a set of records. `errors` counts what is neither an answer
    nor a refusal (is_refused); `latency_refused_ms` is how long the refused requests waited for their refusal."""
    from infertune.bench.stats import percentiles

    ok = [r for r in records if not r.error]
    r429 = [r for r in records if is_429(r)]
    r503 = [r for r in records if is_stalled_503(r)]
    other = [r for r in records if r.error and not is_refused(r)]
    kinds: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in other:
        kinds[r.error] = kinds.get(r.error, 0) + 1
        examples.setdefault(r.error, str(r.detail)[:300])
    lat = [(r.done - r.sched) * 1e3 for r in records]
    return {
        "requests": len(records), "ok": len(ok), "http_429": len(r429), "http_503_stalled": len(r503),
        "refused": len(r429) + len(r503), "errors": len(other),
        "errors_by_kind": kinds, "error_examples": examples,
        "latency_ok_ms": percentiles([(r.done - r.sched) * 1e3 for r in ok]).model_dump(),
        "latency_429_ms": percentiles([(r.done - r.sched) * 1e3 for r in r429]).model_dump(),
        "latency_refused_ms": percentiles([(r.done - r.sched) * 1e3 for r in r429 + r503]).model_dump(),
        "max_latency_ms": round(max(lat), 1) if lat else None,
        "hung": sum(1 for r in records if r.error == "timeout" or (r.done - r.sched) > timeout),
        **token_latency(ok),
    }


def token_latency(ok: list[tuple]) -> dict[str, Any]:
    """Streamed answers' time to first token and time per output token after it (ms), as bench computes
    them; {} when none was streamed."""
    import math

    from infertune.bench.stats import percentiles

    first = [r for r in ok if math.isfinite(r.first)]
    if not first:
        return {}
    tpot = [(r.done - r.first) * 1e3 / (r.out_tokens - 1) for r in first if r.out_tokens > 1]
    return {"ttft_ok_ms": percentiles([(r.first - r.sched) * 1e3 for r in first]).model_dump(),
            "tpot_ok_ms": percentiles(tpot).model_dump()}


def scatter(recs: list[tuple], t_ref: float, what: str) -> dict[str, Any]:
    """Per-request scatter for the plots: send time (s from the fault) -> latency (ms), and the outcome."""
    step = max(1, len(recs) // 4000)
    sel = recs[::step]
    return {"t_ref": what, "sent_s": [round(r.sched - t_ref, 3) for r in sel],
            "latency_ms": [round((r.done - r.sched) * 1e3, 1) for r in sel],
            "outcome": ["ok" if not r.error else "429" if is_429(r) else "503 stalled" if is_refused(r) else r.error
                        for r in sel]}
