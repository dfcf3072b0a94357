"""Prometheus metrics for the server, on a registry of its own (several servers may share a process in
tests). Exposed at GET /metrics in the text format by prometheus_client.

Multi-process serve (launcher.py) starts every process with PROMETHEUS_MULTIPROC_DIR set: prometheus_client
then keeps each process's values in files there, and /metrics (any frontend) adds them up: counters and
histograms summed over every process that ever ran, gauges over the live ones. Gauges read from a callback
(queue sizes, worker memory) are copied into plain gauges once a second there, since the files cannot
hold a callback.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

_LAT = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_ITEMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_TOKENS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_RATIO = (1.0, 1.05, 1.1, 1.25, 1.5, 2, 3, 5, 10)


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self._watched: list[tuple[Any, Callable[[], float]]] = []
        self._poller: threading.Thread | None = None
        self.registry = r = CollectorRegistry()
        self.requests = Counter("infertune_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.errors = Counter("infertune_errors", "Requests answered with an error, by status and type",
                              ["status", "type"], registry=r)
        self.latency = Histogram("infertune_request_duration_seconds", "Time from request to response",
                                 ["route"], buckets=_LAT, registry=r)
        self.queue_depth = Gauge("infertune_queue_depth", "Embedding requests admitted and not yet answered",
                                 registry=r, multiprocess_mode="livesum")
        self.stage_queue = Gauge("infertune_stage_queue_items", "Work waiting in front of each stage",
                                 ["stage"], registry=r, multiprocess_mode="livesum")
        self.batch_items = Histogram("infertune_batch_size_items", "Items per forward pass", buckets=_ITEMS,
                                     registry=r)
        self.batch_tokens = Histogram("infertune_batch_padded_tokens", "Padded tokens per forward pass",
                                      buckets=_TOKENS, registry=r)
        self.padding = Histogram("infertune_batch_padding_ratio", "Padded tokens / real tokens per forward pass",
                                 buckets=_RATIO, registry=r)
        self.stage_seconds = Histogram("infertune_stage_seconds",
                                       "Time in each stage: tokenize (per call), queue (per item, ready to "
                                       "batched), forward and postprocess (per batch)",
                                       ["stage"], buckets=_LAT, registry=r)
        self.items = Counter("infertune_items", "Items embedded", registry=r)
        self.tokens = Counter("infertune_tokens", "Real (unpadded) tokens embedded", registry=r)
        self.batch_failures = Counter("infertune_batch_failures", "Forward passes that raised", registry=r)
        self.nonfinite_rows = Counter("infertune_nonfinite_rows", "Embeddings with NaN or Inf values, never "
                                      "returned (their requests got a 500 naming the input)", registry=r)
        # admission (serve/admission.py) and per-key limits (serve/limits.py)
        self.rejected = Counter("infertune_rejected", "Requests refused at once by admission, by reason: queue_full "
                                "(--max-queue), expected_wait (work ahead longer than the deadline), engine_stalled "
                                "(nothing finished for longer than the deadline), rate_limit (--rate-limit)",
                                ["reason"], registry=r)
        self.expected_wait = Gauge("infertune_expected_wait_seconds", "How long a new request is expected to wait "
                                   "before its rows start: tokens outstanding / measured service rate",
                                   registry=r, multiprocess_mode="livemax")
        self.max_wait = Gauge("infertune_max_wait_seconds", "The deadline a request gets unless it sends "
                              "X-Infertune-Deadline-Ms (--max-wait-s)", registry=r, multiprocess_mode="livemax")
        self.queue_tokens = Gauge("infertune_queue_tokens", "Tokens sent to the engine and not answered (queued and "
                                  "in flight)", registry=r, multiprocess_mode="livesum")
        self.service_rate = Gauge("infertune_service_rate_tokens_per_second", "Tokens per second the engine "
                                  "answered, averaged over its busy time (what admission divides by)", registry=r,
                                  multiprocess_mode="livesum")
        self.key_requests = Counter("infertune_api_key_requests", "Embedding requests per API key (the label is the "
                                    "key's position in --api-key, never the key), by outcome: admitted or "
                                    "rate_limited", ["key", "outcome"], registry=r)
        self.ready = Gauge("infertune_ready", "1 when the model is loaded and warmed up", registry=r,
                           multiprocess_mode="livemax")
        # the supervised model worker (--worker-process); restarts stay 0 without it
        self.worker_restarts = Counter("infertune_worker_restarts", "Times the model worker process died and was "
                                       "restarted", registry=r)
        self.worker_up = Gauge("infertune_worker_up", "1 while a model worker process is loaded and answering",
                               registry=r, multiprocess_mode="livesum")
        self.worker_restart_seconds = Gauge("infertune_worker_restart_seconds", "How long the last worker "
                                            "restart took (spawn, load, warm-up)", registry=r,
                                            multiprocess_mode="livemax")
        self.worker_rss = Gauge("infertune_worker_resident_memory_bytes", "Resident memory of the model worker "
                                "process (0 when the model runs in the server process)", registry=r,
                                multiprocess_mode="livesum")
        if self.multiprocess:
            return
        try:  # process_resident_memory_bytes & co. of the server process (Linux)
            from prometheus_client import ProcessCollector

            ProcessCollector(registry=r)
        except Exception:  # noqa: BLE001
            pass

    def observe_batch(self, items: int, padded: int, real: int) -> None:
        """One forward pass done: its size, padded tokens and padding ratio; items and real tokens counted."""
        self.batch_items.observe(items)
        self.batch_tokens.observe(padded)
        self.padding.observe(padded / max(1, real))
        self.items.inc(items)
        self.tokens.inc(real)

    def watch_worker(self, pid: Callable[[], int | None]) -> None:
        def rss() -> float:
            import psutil

            p = pid()
            try:
                return float(psutil.Process(p).memory_info().rss) if p else 0.0
            except psutil.Error:
                return 0.0

        self._watch(self.worker_rss, rss)

    def watch_queue(self, stage: str, size: Callable[[], float]) -> None:
        self._watch(self.stage_queue.labels(stage), size)

    def watch_gauge(self, gauge: Any, fn: Callable[[], float]) -> None:
        self._watch(gauge, fn)

    def _watch(self, gauge: Any, fn: Callable[[], float]) -> None:
        if not self.multiprocess:
            gauge.set_function(fn)
            return
        self._watched.append((gauge, fn))
        if self._poller is None:
            self._poller = threading.Thread(target=self._poll, name="infertune-metrics-poll", daemon=True)
            self._poller.start()

    def _poll(self) -> None:
        while True:
            for gauge, fn in list(self._watched):
                try:
                    gauge.set(fn())
                except Exception:  # noqa: BLE001 - a gauge is not worth a crash
                    pass
            time.sleep(1.0)

    def exposition(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest

        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        reg = CollectorRegistry()
        MultiProcessCollector(reg)
        return generate_latest(reg)


def totals(registry: Any) -> tuple[dict[str, int], int, int]:
    """Requests by status, items and batches in a registry (multi-process serve: one that adds up every
    process's files)."""
    try:
        counts: dict[str, int] = {}
        items = batches = 0
        for metric in registry.collect():
            for s in metric.samples:
                if s.name == "infertune_requests_total":
                    counts[s.labels["status"]] = counts.get(s.labels["status"], 0) + int(s.value)
                elif s.name == "infertune_items_total":
                    items += int(s.value)
                elif s.name == "infertune_batch_size_items_count":
                    batches += int(s.value)
        return counts, items, batches
    except Exception:  # noqa: BLE001 - a summary, not worth failing the exit for
        return {}, 0, 0
