"""docker compose for one host: one service per replica (each its own GPUs and host port), GPUs reserved
through deploy.resources.reservations.devices, a healthcheck on the server's readiness route, and the
model bind-mounted read-only."""

from __future__ import annotations

from typing import Any

from infertune.deploy.config import DeployConfig, Workload
from infertune.errors import InfertuneError

Obj = dict[str, Any]


def _healthcheck(path: str, port: int, start_s: int) -> Obj:
    # python is in both images (curl is not in infertune's slim one)
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout=4)"
    return {"test": ["CMD", "python3", "-c", probe], "interval": "10s", "timeout": "5s", "retries": 3,
            "start_period": f"{start_s}s"}


def compose_file(cfg: DeployConfig, w: Workload, image: str) -> Obj:
    if w.nodes > 1:
        raise InfertuneError("docker compose runs on one host; a model split over nodes needs Kubernetes "
                             "(LeaderWorkerSet) or a Ray cluster started by hand")
    services: Obj = {}
    for i in range(cfg.replicas):
        name = w.name if cfg.replicas == 1 else f"{w.name}-{i}"
        svc: Obj = {
            "image": image,
            "restart": "unless-stopped",
            "ports": [f"{cfg.port + i}:{cfg.port}"],
            "volumes": [{"type": "bind", "source": w.model_dir, "target": w.mount, "read_only": True}],
            "environment": {"HF_HUB_OFFLINE": "1"},
        }
        if w.engine == "infertune-serve":
            svc["entrypoint"] = ["infertune"]
            svc["command"] = w.args
            svc["environment"]["TOKENIZERS_PARALLELISM"] = "false"
            svc["healthcheck"] = _healthcheck("/ready", cfg.port, 120)
            svc["stop_grace_period"] = "75s"
        else:
            svc["entrypoint"] = ["vllm", "serve"]
            svc["command"] = w.args
            svc["healthcheck"] = _healthcheck("/health", cfg.port, 1800)
            if w.tensor_parallel > 1:
                svc["ipc"] = "host"  # NCCL between the tensor-parallel ranks
            else:
                svc["shm_size"] = "2gb"
        if w.gpus_per_pod:
            first = i * w.gpus_per_pod
            ids = [str(g) for g in range(first, first + w.gpus_per_pod)]
            svc["deploy"] = {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", "device_ids": ids, "capabilities": ["gpu"]}]}}}
        services[name] = svc
    return {"services": services}  # no top-level name: the vendored schema predates it (project = directory)
