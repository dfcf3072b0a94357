"""Result records of `infertune bench`.

Contract (read by other tools; extend, never rename): bench.json has `config`, `environment`, `points`
(each: `offered` {`concurrency` or `rate`}, `achieved_rps`, `n`, `errors`, `valid`, `latency_ms`
{p50,p90,p95,p99,p999} and, for streaming, `ttft_ms`/`itl_ms` likewise) and, after an SLO search,
`slo` {`target`, `max_load`, `met`}.

Added since: a point's `error_laden` (more than the error budget, 1% by default, of its
requests failed: `valid` is then false too, and `invalid_reason` says so), `target.ready` (how long bench
waited for the server), and after `--slo-confirm`, `slo.confirm` and `slo.sustainable_load`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from infertune.results import EnvFingerprint


class Percentiles(BaseModel):
    """Milliseconds over n samples."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    n: int = 0


class Offered(BaseModel):
    concurrency: int | None = None
    rate: float | None = None
    arrivals: str | None = None  # constant | poisson, for rate points


class Errors(BaseModel):
    total: int = 0
    rate: float = 0.0  # errors / requests counted
    by_kind: dict[str, int] = {}
    examples: dict[str, str] = {}  # kind -> first message seen


class ClientCheck(BaseModel):
    """Could the load generator keep up? Lag = actual dispatch - scheduled send time."""

    workers: int = 1
    cpu_util: float = 0.0  # busiest worker, share of one core over the point
    lag_ms: Percentiles = Percentiles()
    loop_lag_ms: Percentiles = Percentiles()  # event-loop heartbeat overshoot
    sent_rps: float = 0.0
    scheduled: int = 0
    unsent: int = 0  # scheduled in the window but never sent (client far behind)
    inflight_capped: bool = False


class Point(BaseModel):
    offered: Offered
    # served items/s (req/s x inputs per request) over the forward-only ceiling given with --ceiling
    of_ceiling: float | None = None
    label: str = ""
    phase: str = ""  # sweep | search | fixed
    valid: bool = True
    invalid_reason: str = ""
    # more than the error budget of the requests failed: ok req/s and latency describe the few that succeeded,
    # not the server's throughput, so the point is also not valid (and never quoted as max throughput)
    error_laden: bool = False
    warning: str = ""  # a caveat that does not invalidate the point (e.g. client loop delayed by a busy host)
    n: int = 0  # requests scheduled in the measured window (warm-up excluded)
    ok: int = 0
    achieved_rps: float = 0.0  # completed ok / measured window
    errors: Errors = Errors()
    latency_ms: Percentiles = Percentiles()  # end to end, from the scheduled send time
    ttft_ms: Percentiles | None = None
    itl_ms: Percentiles | None = None
    tpot_ms: Percentiles | None = None
    input_tokens_per_s: float | None = None
    output_tokens_per_s: float | None = None
    tokens_estimated: bool = False  # True when the server gave no usage and tokens were estimated
    goodput_rps: float | None = None  # ok requests that met every per-request SLO bound / window
    mean_inflight: float | None = None  # Little's law: achieved_rps x mean latency
    slo_pass: bool | None = None
    slo_detail: list[str] = []
    client: ClientCheck = ClientCheck()
    window_s: float = 0.0
    t_start: float = 0.0  # seconds since the bench started (client clock, same as telemetry)
    t_end: float = 0.0
    requests: list[dict[str, Any]] | None = None  # per-request records with --save-requests


class ConfirmStep(BaseModel):
    """One long point of the confirm stage: the load, its figures, and whether it met the SLO."""

    load: float
    passed: bool
    window_s: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    achieved_rps: float = 0.0
    sent_rps: float = 0.0
    error_rate: float = 0.0
    notes: list[str] = []


class ConfirmResult(BaseModel):
    """The confirm stage after an SLO search: the candidate re-measured with points long enough for a queue to
    settle, backing off until one meets the SLO. `load` is that sustainable load (None: none did)."""

    duration_s: float
    start: float  # the first load measured (the search's answer, or a fraction of it)
    backoff: float  # each failed long point: the next load is at most this fraction of the last
    load: float | None = None
    met: bool = False
    steps: list[ConfirmStep] = []


class SLOResult(BaseModel):
    target: str
    over: str  # rate | concurrency
    max_load: float | None = None
    met: bool = False
    bracket: list[float | None] = [None, None]  # [highest passing, lowest failing]
    repeats: int = 0
    steps: list[str] = []
    # loads that failed although the same or a higher load passed in this search: the boundary is as noisy
    # as the host there (e.g. a tail SLO at the size of the host's hiccups); empty when the evidence is monotone
    contradicted: list[float] = []
    rechecks: int = 0  # marginal failures measured a second time (the load failed only if both failed)
    noise_note: str = ""
    # --slo-confirm: the highest load whose long point met the SLO (max_load stays the short points' answer)
    sustainable_load: float | None = None
    confirm: ConfirmResult | None = None


class Knee(BaseModel):
    over: str  # concurrency | rate
    load: float
    throughput: float
    rule: str
    recommended_max_num_seqs: int | None = None
    derivation: str = ""


class TelemetrySeries(BaseModel):
    source: str
    interval_s: float
    t: list[float] = []  # seconds since bench start
    series: dict[str, list[float | None]] = {}  # "name{labels}" -> values aligned with t
    types: dict[str, str] = {}
    errors: list[str] = []


class BenchResult(BaseModel):
    config: dict[str, Any]
    environment: EnvFingerprint
    target: dict[str, Any] = {}  # url, api, model, workload summary
    points: list[Point] = []
    slo: SLOResult | None = None
    knee: Knee | None = None
    telemetry: list[TelemetrySeries] = []
    warnings: list[str] = []
    out_dir: str | None = None
    started: str = ""
    wall_s: float | None = None
    notes: list[str] = Field(default_factory=list)
    ceiling: dict[str, Any] | None = None  # --ceiling: {items_per_s, source}
