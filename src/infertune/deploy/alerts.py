"""Prometheus alerting rules for `infertune serve`, every threshold a measured figure (figures.py).

Written as a PrometheusRule (prometheus-operator, k8s/NAME-alerts.yaml) and as a plain rule file for a Prometheus
of your own (prometheus/NAME-rules.yaml, what `promtool check rules` reads). Each alert's `threshold_source`
annotation says which figure its threshold is and where it was measured; an alert whose figure is missing is not
written, and deploy's notes say which figure would add it.

The windows (rates over 5 m, `for` 5-10 m) are alerting practice, not thresholds: long enough that a scrape gap or
one slow batch does not page, short enough to page within minutes. Queries select the scrape job NAME (a
ServiceMonitor names the job after its Service, which deploy names NAME; with a Prometheus of your own, name the
scrape job NAME).
"""

from __future__ import annotations

from typing import Any

from infertune.deploy.figures import Figure

ROUTE = "/v1/embeddings"
WINDOW = "5m"


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g} ms"


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str, source: str,
           threshold: float) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description, "threshold": f"{threshold:.6g}",
                            "threshold_source": source}}


def _latency_rules(job: str, f: dict[str, Figure], skipped: list[str]) -> list[dict[str, Any]]:
    out = []
    sel = f'job="{job}"'
    if (slo := f.get("slo_p99")) is not None:
        expr = (f'histogram_quantile(0.99, sum by (le) (rate(infertune_request_duration_seconds_bucket'
                f'{{{sel}, route="{ROUTE}"}}[{WINDOW}]))) > {slo.value:.6g}')
        out.append(_alert("InfertuneP99OverSLO", expr, "5m", "page", f"{job}: P99 latency over the SLO "
                          f"({_ms(slo.value)})", "P99 of /v1/embeddings over 5 minutes, server side (the client "
                          "adds its network)", slo.source, slo.value))
    else:
        skipped.append("InfertuneP99OverSLO (no SLO: a tuned artifact's tune.slo_p99_ms, or --from-validate)")
    if slo is not None and (batch := f.get("batch_p99")) is not None and slo.value > batch.value:
        budget = slo.value - batch.value
        expr = (f'histogram_quantile(0.99, sum by (le) (rate(infertune_stage_seconds_bucket{{{sel}, '
                f'stage="queue"}}[{WINDOW}]))) > {budget:.6g}')
        out.append(_alert("InfertuneQueueWaitHigh", expr, "5m", "warn", f"{job}: P99 queue wait over "
                          f"{_ms(budget)}, the SLO's room for waiting", "a batch's own P99 leaves this much of "
                          "the SLO for the wait before it; waits past it break the SLO however fast the batch",
                          f"SLO {_ms(slo.value)} - measured batch P99 {_ms(batch.value)}; SLO: {slo.source}; batch "
                          f"P99: {batch.source}", budget))
    else:
        skipped.append("InfertuneQueueWaitHigh (needs the SLO and a tuned artifact's batch P99 below it)")
    return out


def _load_rules(job: str, f: dict[str, Figure], skipped: list[str]) -> list[dict[str, Any]]:
    sel = f'job="{job}"'
    if (rps := f.get("sustainable_rps")) is not None:
        expr = (f'sum by (instance) (rate(infertune_requests_total{{{sel}, route="{ROUTE}"}}[{WINDOW}])) > '
                f'{rps.value:.6g}')
        return [_alert("InfertuneOverSustainableRate", expr, "10m", "warn", f"{job}: a pod takes more than the "
                       f"{rps.value:.4g} req/s validate confirmed", "requests per second per pod above the rate "
                       "that held the SLO: add replicas before latency follows", rps.source, rps.value)]
    if (ips := f.get("items_per_s")) is not None:
        expr = f'sum by (instance) (rate(infertune_items_total{{{sel}}}[{WINDOW}])) > {ips.value:.6g}'
        return [_alert("InfertuneOverTunedThroughput", expr, "10m", "warn", f"{job}: a pod embeds more than the "
                       f"{ips.value:.4g} items/s the tune measured", "items per second per pod above the tuned "
                       "engine's measured throughput: the queue can only grow", ips.source, ips.value)]
    skipped.append("a load alert (no sustainable rate from --from-validate, no tune.items_per_s)")
    return []


def _health_rules(job: str, f: dict[str, Figure], skipped: list[str]) -> list[dict[str, Any]]:
    out = []
    sel = f'job="{job}"'
    if (err := f.get("error_rate")) is not None:
        expr = (f'sum(rate(infertune_errors_total{{{sel}, status=~"5.."}}[{WINDOW}])) / sum(rate('
                f'infertune_requests_total{{{sel}, route="{ROUTE}"}}[{WINDOW}])) > {err.value:.6g}')
        out.append(_alert("InfertuneErrorRate", expr, "5m", "page", f"{job}: 5xx share of requests above the "
                          f"{err.value:.4g} the soak measured", "answers with a 5xx (failed batches, non-finite "
                          "rows, a stalled or restarting engine) per embedding request", err.source, err.value))
    else:
        skipped.append("InfertuneErrorRate (needs a soak's error rate: --from-validate)")
    if (nan := f.get("nonfinite_rows")) is not None:
        expr = f'increase(infertune_nonfinite_rows_total{{{sel}}}[10m]) > {nan.value:.6g}'
        out.append(_alert("InfertuneNonFiniteRows", expr, "0m", "page", f"{job}: embeddings with NaN or Inf",
                          "rows the engine returned non-finite (refused with a 500 naming the input): an fp16 "
                          "overflow on some input; serve bf16 or fp32", nan.source, nan.value))
    else:
        skipped.append("InfertuneNonFiniteRows (needs a tuned artifact's accuracy check or validate's finite-output)")
    if (rs := f.get("restarts")) is not None:
        expr = f'increase(infertune_worker_restarts_total{{{sel}}}[15m]) > {rs.value:.6g}'
        out.append(_alert("InfertuneEngineRestarts", expr, "0m", "page", f"{job}: the model engine restarted",
                          "an engine process died or stalled and was restarted (its requests got 503)", rs.source,
                          rs.value))
    else:
        skipped.append("InfertuneEngineRestarts (needs a soak's restart count: --from-validate)")
    return out


def rule_groups(job: str, f: dict[str, Figure]) -> tuple[list[dict[str, Any]], list[str]]:
    """([one rule group], the alerts not written and the figure each needs)."""
    skipped: list[str] = []
    rules = _latency_rules(job, f, skipped) + _load_rules(job, f, skipped) + _health_rules(job, f, skipped)
    return [{"name": f"infertune-{job}", "rules": rules}], skipped


def prometheus_rule(job: str, labels: dict[str, str], groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The PrometheusRule (monitoring.coreos.com/v1) holding `groups`."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": f"{job}-alerts", "labels": labels}, "spec": {"groups": groups}}
