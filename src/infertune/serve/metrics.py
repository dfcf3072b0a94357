"""Prometheus metrics for the server, on a registry of its own (several servers may share a process in
tests). Exposed at GET /metrics in the text format by prometheus_client."""

from __future__ import annotations

from collections.abc import Callable

_LAT = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_ITEMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_TOKENS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_RATIO = (1.0, 1.05, 1.1, 1.25, 1.5, 2, 3, 5, 10)


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.requests = Counter("infertune_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.errors = Counter("infertune_errors", "Requests answered with an error, by status and type",
                              ["status", "type"], registry=r)
        self.latency = Histogram("infertune_request_duration_seconds", "Time from request to response",
                                 ["route"], buckets=_LAT, registry=r)
        self.queue_depth = Gauge("infertune_queue_depth", "Embedding requests admitted and not yet answered",
                                 registry=r)
        self.stage_queue = Gauge("infertune_stage_queue_items", "Work waiting in front of each stage",
                                 ["stage"], registry=r)
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
        self.ready = Gauge("infertune_ready", "1 when the model is loaded and warmed up", registry=r)
        # the supervised model worker (--worker-process); restarts stay 0 without it
        self.worker_restarts = Counter("infertune_worker_restarts", "Times the model worker process died and was "
                                       "restarted", registry=r)
        self.worker_up = Gauge("infertune_worker_up", "1 while a model worker process is loaded and answering",
                               registry=r)
        self.worker_restart_seconds = Gauge("infertune_worker_restart_seconds", "How long the last worker "
                                            "restart took (spawn, load, warm-up)", registry=r)
        self.worker_rss = Gauge("infertune_worker_resident_memory_bytes", "Resident memory of the model worker "
                                "process (0 when the model runs in the server process)", registry=r)
        try:  # process_resident_memory_bytes & co. of the server process (Linux)
            from prometheus_client import ProcessCollector

            ProcessCollector(registry=r)
        except Exception:  # noqa: BLE001
            pass

    def watch_worker(self, pid: Callable[[], int | None]) -> None:
        def rss() -> float:
            import psutil

            p = pid()
            try:
                return float(psutil.Process(p).memory_info().rss) if p else 0.0
            except psutil.Error:
                return 0.0

        self.worker_rss.set_function(rss)

    def watch_queue(self, stage: str, size: Callable[[], float]) -> None:
        self.stage_queue.labels(stage).set_function(size)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
