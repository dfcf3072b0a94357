"""Kubernetes objects for vLLM. One node: a Deployment whose pod holds all tensor-parallel GPUs. Several
nodes: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), one group per model replica, with a Ray cluster
across the group's pods (leader = Ray head + the API server, workers join it) the way vLLM's multi-node
guide does it: tensor parallel = GPUs per node, pipeline parallel = nodes."""

from __future__ import annotations

import shlex

from infertune.deploy.config import DeployConfig, Workload
from infertune.deploy.kube import (
    VLLM_HPA_METRIC,
    Obj,
    deployment,
    hpa,
    http_probe,
    labels,
    model_volume,
    pod_extras,
    resources,
    scrape_annotations,
    service,
    service_monitor,
)

# in the vllm/vllm-openai image (vLLM's examples/online_serving/multi-node-serving.sh)
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"
RAY_PORT = 6379


def _shm() -> tuple[Obj, Obj]:
    """NCCL and Ray pass tensors through /dev/shm; a container's default 64 MiB is too small."""
    return ({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "dshm", "mountPath": "/dev/shm"})


def _env() -> list[Obj]:
    return [{"name": "HF_HUB_OFFLINE", "value": "1"}]


def _probes(port: str = "http") -> Obj:
    # the API server listens only once the weights are loaded: a big model needs minutes (startup: 30 min)
    return {"startupProbe": http_probe("/health", port, 10, 180),
            "readinessProbe": http_probe("/health", port, 5, 3),
            "livenessProbe": http_probe("/health", port, 15, 4)}


def vllm_deployment(cfg: DeployConfig, w: Workload, image: str) -> Obj:
    vol, mount = model_volume(cfg, w)
    shm_vol, shm_mount = _shm()
    container: Obj = {
        "name": "vllm", "image": image, "command": ["vllm", "serve"], "args": w.args,
        "ports": [{"name": "http", "containerPort": cfg.port, "protocol": "TCP"}], "env": _env(),
        "resources": resources(w), "volumeMounts": [mount, shm_mount], **_probes(),
    }
    return deployment(cfg, w, {"containers": [container], "volumes": [vol, shm_vol],
                               "terminationGracePeriodSeconds": 60, **pod_extras(w)})


def leader_worker_set(cfg: DeployConfig, w: Workload, image: str) -> Obj:
    vol, mount = model_volume(cfg, w)
    shm_vol, shm_mount = _shm()
    serve = shlex.join(["vllm", "serve", *w.args])
    # LWS sets LWS_GROUP_SIZE and LWS_LEADER_ADDRESS in every pod of a group; $(VAR) is expanded by Kubernetes
    leader_cmd = (f"bash {MULTI_NODE_SCRIPT} leader --ray_port={RAY_PORT} --ray_cluster_size=$(LWS_GROUP_SIZE) "
                  f"&& exec {serve}")
    worker_cmd = f"bash {MULTI_NODE_SCRIPT} worker --ray_port={RAY_PORT} --ray_address=$(LWS_LEADER_ADDRESS)"
    common: Obj = {"image": image, "env": _env(), "resources": resources(w), "volumeMounts": [mount, shm_mount]}
    leader: Obj = {
        "name": "vllm-leader", "command": ["sh", "-c", leader_cmd], **common,
        "ports": [{"name": "http", "containerPort": cfg.port, "protocol": "TCP"},
                  {"name": "ray", "containerPort": RAY_PORT, "protocol": "TCP"}], **_probes(),
    }
    worker: Obj = {"name": "vllm-worker", "command": ["sh", "-c", worker_cmd], **common}
    pod = {"volumes": [vol, shm_vol], **pod_extras(w)}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": w.name, "labels": labels(w)},
        "spec": {
            "replicas": cfg.replicas,
            "leaderWorkerTemplate": {
                "size": w.nodes,
                # a Ray/NCCL group cannot lose a member and go on: restart the whole group
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": labels(w, role="leader"),
                                                "annotations": scrape_annotations(cfg.port)},
                                   "spec": {"containers": [leader], **pod}},
                "workerTemplate": {"metadata": {"labels": labels(w, role="worker")},
                                   "spec": {"containers": [worker], **pod}},
            },
            "startupPolicy": "LeaderCreated",
        },
    }


def vllm_objects(cfg: DeployConfig, w: Workload, image: str) -> list[Obj]:
    if w.nodes > 1:
        objs = [leader_worker_set(cfg, w, image), service(w, cfg, labels(w, role="leader")), service_monitor(w)]
        target = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    else:
        objs = [vllm_deployment(cfg, w, image), service(w, cfg, labels(w)), service_monitor(w)]
        target = ("apps/v1", "Deployment")
    if cfg.hpa:
        objs.append(hpa(cfg, w, VLLM_HPA_METRIC, 2.0, target))
    return objs
