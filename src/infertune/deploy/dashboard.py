"""A Grafana dashboard for `infertune serve` (grafana/NAME-dashboard.json): traffic, latency, queue and admission,
errors and engine health, with the alerts' thresholds drawn on the panels they watch. Thresholds are the measured
figures of figures.py, and each panel's description says which figure and where it was measured; a panel without
a figure has no threshold line.

Import it in Grafana (Dashboards > New > Import); it asks for the Prometheus data source (`${datasource}`) and
selects the scrape job NAME (the `job` variable).
"""

from __future__ import annotations

from typing import Any

from infertune.deploy.figures import Figure

SCHEMA_VERSION = 39  # Grafana 10/11's dashboard JSON
ROUTE = "/v1/embeddings"


def _panel(pid: int, title: str, exprs: list[tuple[str, str]], unit: str, x: int, y: int,
           figure: Figure | None = None, what: str = "") -> dict[str, Any]:
    """A time series panel of `exprs` ((PromQL, legend) each), a red threshold at `figure` when there is one."""
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    desc = what
    if figure is not None:
        steps.append({"color": "red", "value": round(figure.value, 6)})
        desc += f" Threshold {figure.value:.6g} {figure.unit}: {figure.source}."
    return {
        "id": pid, "type": "timeseries", "title": title, "description": desc.strip(),
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps},
                                     "custom": {"thresholdsStyle": {"mode": "line" if figure else "off"}}},
                        "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [{"refId": chr(65 + i), "expr": e, "legendFormat": lg,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}} for i, (e, lg) in enumerate(exprs)],
    }


def _p99(bucket: str, sel: str) -> str:
    return f"histogram_quantile(0.99, sum by (le) (rate({bucket}{{{sel}}}[5m])))"


def _seconds(f: Figure | None) -> Figure | None:
    return f if f is None or f.unit == "s" else None


def dashboard(job: str, f: dict[str, Figure]) -> dict[str, Any]:
    sel = 'job="$job"'
    q = _p99("infertune_request_duration_seconds_bucket", f'{sel}, route="{ROUTE}"')
    slo, batch = f.get("slo_p99"), f.get("batch_p99")
    wait_budget = None
    if slo is not None and batch is not None and slo.value > batch.value:
        wait_budget = Figure(slo.value - batch.value, "s", f"SLO {slo.value * 1e3:.4g} ms - measured batch P99 "
                             f"{batch.value * 1e3:.4g} ms ({slo.source}; {batch.source})")
    rate_fig = f.get("sustainable_rps")
    rate_q = (f'sum by (instance) (rate(infertune_requests_total{{{sel}, route="{ROUTE}"}}[5m]))', "{{instance}}")
    if rate_fig is None and f.get("items_per_s") is not None:
        rate_fig = f["items_per_s"]
        rate_q = (f"sum by (instance) (rate(infertune_items_total{{{sel}}}[5m]))", "{{instance}} items/s")
    err = f.get("error_rate")
    panels = [
        _panel(1, "Requests per pod", [rate_q], "reqps" if rate_fig is None or rate_fig.unit == "req/s" else "short",
               0, 0, rate_fig, "Embedding requests (or items) per second per pod."),
        _panel(2, "P99 latency (server side)", [(q, "P99")], "s", 12, 0, _seconds(slo),
               "P99 of /v1/embeddings over 5 minutes."),
        _panel(3, "P99 queue wait", [(_p99("infertune_stage_seconds_bucket", f'{sel}, stage="queue"'), "queue P99")],
               "s", 0, 8, wait_budget,
               "Time items wait between tokenization and their batch."),
        _panel(4, "Expected wait and deadline", [
            (f"max(infertune_expected_wait_seconds{{{sel}}})", "expected wait"),
            (f"max(infertune_max_wait_seconds{{{sel}}})", "deadline (--max-wait-s)")], "s", 12, 8, None,
            "Admission: a request expected to wait past its deadline is refused with 429."),
        _panel(5, "Refused by reason", [(f"sum by (reason) (rate(infertune_rejected_total{{{sel}}}[5m]))",
                                         "{{reason}}")], "reqps", 0, 16, None,
               "queue_full, expected_wait, engine_stalled, rate_limit (per API key: "
               "infertune_api_key_requests_total)."),
        _panel(6, "5xx share of requests", [(f'sum(rate(infertune_errors_total{{{sel}, status=~"5.."}}[5m])) / '
                                             f'sum(rate(infertune_requests_total{{{sel}, route="{ROUTE}"}}[5m]))',
                                             "5xx / requests")], "percentunit", 12, 16, err, ""),
        _panel(7, "Non-finite rows", [(f"increase(infertune_nonfinite_rows_total{{{sel}}}[10m])", "NaN/Inf rows")],
               "short", 0, 24, f.get("nonfinite_rows"), "Embeddings refused because they held NaN or Inf."),
        _panel(8, "Engine restarts", [(f"increase(infertune_worker_restarts_total{{{sel}}}[15m])", "restarts"),
                                      (f"sum(infertune_worker_up{{{sel}}})", "engines up")], "short", 12, 24,
               f.get("restarts"), "Engine processes that died or stalled and were restarted."),
    ]
    return {
        "title": f"infertune serve: {job}", "uid": f"infertune-{job}"[:40], "schemaVersion": SCHEMA_VERSION,
        "version": 1, "editable": True, "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
        "tags": ["infertune"], "panels": panels,
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "job", "type": "custom", "query": job, "current": {"text": job, "value": job},
             "options": [{"text": job, "value": job, "selected": True}], "label": "scrape job"},
        ]},
        "annotations": {"list": []},
    }
