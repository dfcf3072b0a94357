"""Kubernetes objects for `infertune serve`: Deployment, Service, ServiceMonitor, HorizontalPodAutoscaler,
and the prometheus-adapter rule that turns the server's /metrics series into the HPA's pods metric.
Shared pieces (labels, the model volume, GPU resources) are used by kube_vllm.py too."""

from __future__ import annotations

from typing import Any

from infertune.deploy.config import DeployConfig, Workload

Obj = dict[str, Any]
INFERTUNE_IMAGE = "infertune:{version}-{device}-{engine}"  # docker/Dockerfile.{cpu,cuda}: code only, no model
# series `infertune serve` exports at /metrics (serve/metrics.py)
QUEUE_SERIES = "infertune_queue_depth"
LATENCY_SERIES = "infertune_request_duration_seconds_bucket"
HPA_METRICS = {"queue-depth": "infertune_queue_depth", "latency-p99": "infertune_request_latency_p99_seconds"}
HPA_DEFAULT = {"queue-depth": 8.0, "latency-p99": 0.25}  # requests in flight per pod; seconds
VLLM_WAITING_SERIES = "vllm:num_requests_waiting"  # vLLM's /metrics: requests queued, not yet scheduled
VLLM_HPA_METRIC = "vllm_num_requests_waiting"


def labels(w: Workload, **extra: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": w.name, "app.kubernetes.io/managed-by": "infertune", **extra}


def model_volume(cfg: DeployConfig, w: Workload) -> tuple[Obj, Obj]:
    """(volume, mount): the model comes from a volume, read-only, never from the image."""
    if cfg.model_host_path:
        vol: Obj = {"name": "model", "hostPath": {"path": cfg.model_host_path, "type": "Directory"}}
    else:
        vol = {"name": "model", "persistentVolumeClaim": {"claimName": cfg.model_pvc or f"{w.name}-model",
                                                          "readOnly": True}}
    mount: Obj = {"name": "model", "mountPath": w.mount, "readOnly": True}
    if cfg.model_path_in_volume:
        mount["subPath"] = cfg.model_path_in_volume
    return vol, mount


def resources(w: Workload, gpus: int | None = None) -> Obj:
    """Requests from the sizing; a memory limit equal to the request where one was sized (no CPU limit: a CFS
    quota throttles a server's bursts, and the threads it runs are the request already)."""
    n = w.gpus_per_pod if gpus is None else gpus
    req: Obj = {"cpu": w.cpu_request, "memory": w.memory_request}
    lim: Obj = {"memory": w.memory_limit} if w.memory_limit else {}
    if n:
        return {"requests": {**req, "nvidia.com/gpu": n}, "limits": {**lim, "nvidia.com/gpu": n}}
    return {"requests": req, "limits": lim or {"memory": w.memory_request}}


def pod_extras(w: Workload) -> Obj:
    """GPU nodes are often tainted nvidia.com/gpu:NoSchedule (GKE, the GPU operator's guidance); every pod gets the
    nodeSelector and node affinity placement.py derived from the artifact."""
    out: Obj = {}
    if w.placement.node_selector:
        out["nodeSelector"] = dict(w.placement.node_selector)
    if aff := w.placement.affinity():
        out["affinity"] = aff
    if w.gpus_per_pod:
        out["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return out


def sizing_annotations(w: Workload) -> dict[str, str]:
    """The figures the requests and the placement come from, next to them in the manifest."""
    out: dict[str, str] = {}
    if w.sizing:
        out["infertune.dev/sizing"] = "; ".join(w.sizing.explain)
    if w.placement.notes:
        out["infertune.dev/placement"] = "; ".join(w.placement.notes)
    if w.image and w.image.build:
        out["infertune.dev/image-build"] = w.image.build
    return out


def http_probe(path: str, port: str, period: int, failures: int, initial: int = 0) -> Obj:
    p: Obj = {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "failureThreshold": failures,
              "timeoutSeconds": 5}
    if initial:
        p["initialDelaySeconds"] = initial
    return p


def scrape_annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def service(w: Workload, cfg: DeployConfig, selector: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": w.name, "labels": labels(w)},
            "spec": {"selector": selector, "ports": [{"name": "http", "port": cfg.port, "targetPort": "http",
                                                      "protocol": "TCP"}]}}


def service_monitor(w: Workload) -> Obj:
    """prometheus-operator's ServiceMonitor (monitoring.coreos.com/v1): scrape the Service's http port."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": w.name, "labels": labels(w)},
            "spec": {"selector": {"matchLabels": labels(w)},
                     "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}]}}


def serve_deployment(cfg: DeployConfig, w: Workload, image: str) -> Obj:
    vol, mount = model_volume(cfg, w)
    container: Obj = {
        "name": "infertune", "image": image, "command": ["infertune"], "args": w.args,
        "ports": [{"name": "http", "containerPort": cfg.port, "protocol": "TCP"}],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "TOKENIZERS_PARALLELISM", "value": "false"}],
        "resources": resources(w), "volumeMounts": [mount],
        # /ready: loaded and warmed up (and fails while draining on SIGTERM); /health: the process answers
        "startupProbe": http_probe("/health", "http", 5, 60),
        "readinessProbe": http_probe("/ready", "http", 5, 2),
        "livenessProbe": http_probe("/health", "http", 10, 3),
    }
    spec: Obj = {"containers": [container], "volumes": [vol],
                 "terminationGracePeriodSeconds": 75, **pod_extras(w)}  # serve's drain 2 s + graceful 60 s
    return deployment(cfg, w, spec)


def deployment(cfg: DeployConfig, w: Workload, pod_spec: Obj) -> Obj:
    """An apps/v1 Deployment of `pod_spec`: the workload's labels and sizing annotations, scraped on cfg.port."""
    sel = labels(w)
    meta: Obj = {"name": w.name, "labels": labels(w)}
    if ann := sizing_annotations(w):
        meta["annotations"] = ann
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": cfg.replicas, "selector": {"matchLabels": sel},
                     "template": {"metadata": {"labels": sel, "annotations": scrape_annotations(cfg.port)},
                                  "spec": pod_spec}}}


def hpa(cfg: DeployConfig, w: Workload, metric: str, default_target: float,
        target_ref: tuple[str, str] = ("apps/v1", "Deployment")) -> Obj:
    """autoscaling/v2 on a pods metric served by prometheus-adapter (the custom.metrics.k8s.io API)."""
    target = {"type": "AverageValue", "averageValue": _quantity(cfg.hpa_target or default_target)}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": w.name, "labels": labels(w)},
            "spec": {"scaleTargetRef": {"apiVersion": target_ref[0], "kind": target_ref[1], "name": w.name},
                     "minReplicas": cfg.replicas, "maxReplicas": cfg.max_replicas or max(cfg.replicas * 4, 2),
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": metric}, "target": target}}],
                     # scale up at once, down slowly: a model replica takes a while to load and warm up
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}}}


def _quantity(x: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, fractions in milli-units (0.25 -> 250m)."""
    return str(int(x)) if float(x).is_integer() else f"{round(x * 1000)}m"


def adapter_rules() -> Obj:
    """prometheus-adapter Helm values (`rules.custom`) exposing the two HPA metrics per pod."""
    matchers = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    return {"rules": {"custom": [
        {"seriesQuery": f'{QUEUE_SERIES}{{namespace!="",pod!=""}}',
         "resources": {"overrides": matchers},
         "name": {"matches": f"^{QUEUE_SERIES}$", "as": HPA_METRICS["queue-depth"]},
         "metricsQuery": "avg_over_time(<<.Series>>{<<.LabelMatchers>>}[1m])"},
        {"seriesQuery": f'{VLLM_WAITING_SERIES}{{namespace!="",pod!=""}}',
         "resources": {"overrides": matchers},
         "name": {"matches": f"^{VLLM_WAITING_SERIES}$", "as": VLLM_HPA_METRIC},
         "metricsQuery": "avg_over_time(<<.Series>>{<<.LabelMatchers>>}[1m])"},
        {"seriesQuery": f'{LATENCY_SERIES}{{namespace!="",pod!=""}}',
         "resources": {"overrides": matchers},
         "name": {"matches": f"^{LATENCY_SERIES}$", "as": HPA_METRICS["latency-p99"]},
         "metricsQuery": 'histogram_quantile(0.99, sum(rate(<<.Series>>{<<.LabelMatchers>>,route="/v1/embeddings"}'
                         '[2m])) by (le, <<.GroupBy>>))'},
    ]}}


def serve_objects(cfg: DeployConfig, w: Workload, image: str) -> list[Obj]:
    objs = [serve_deployment(cfg, w, image), service(w, cfg, labels(w)), service_monitor(w)]
    if cfg.hpa:
        objs.append(hpa(cfg, w, HPA_METRICS[cfg.hpa_metric], HPA_DEFAULT[cfg.hpa_metric]))
    return objs
