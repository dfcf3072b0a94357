"""docker compose for one host: one service per replica (each its own GPUs and host port), GPUs reserved
through deploy.resources.reservations.devices, a healthcheck on the server's readiness route, and the
model bind-mounted read-only."""

from __future__ import annotations

from typing import Any

from infertune.deploy.config import DeployConfig, Workload
from infertune.deploy.image import GPU_ULIMITS
from infertune.errors import InfertuneError

Obj = dict[str, Any]


def _healthcheck(path: str, port: int, start_s: int) -> Obj:
    # python is in both images (curl is not in infertune's slim one)
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout=4)"
    return {"test": ["CMD", "python3", "-c", probe], "interval": "10s", "timeout": "5s", "retries": 3,
            "start_period": f"{start_s}s"}


def _resources(w: Workload, replica: int) -> Obj:
    """Memory limit and reservation from the sizing (a docker memory string), CPUs reserved, GPUs by id."""
    res: Obj = {"reservations": {}}
    if w.memory_limit and w.sizing:
        res["limits"] = {"memory": w.sizing.compose_memory()}
        res["reservations"]["memory"] = w.sizing.compose_memory()
    res["reservations"]["cpus"] = w.cpu_request
    if w.gpus_per_pod:
        first = replica * w.gpus_per_pod
        ids = [str(g) for g in range(first, first + w.gpus_per_pod)]
        res["reservations"]["devices"] = [{"driver": "nvidia", "device_ids": ids, "capabilities": ["gpu"]}]
    return res


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
        svc["deploy"] = {"resources": _resources(w, i)}
        if w.gpus_per_pod:
            svc["ulimits"] = dict(GPU_ULIMITS)  # pinned host memory and NCCL: Docker's memlock default is tiny
        if w.sizing:
            svc["x-infertune-sizing"] = w.sizing.explain
        services[name] = svc
    return {"services": services}  # no top-level name: the vendored schema predates it (project = directory)


def docker_run(cfg: DeployConfig, w: Workload, image: str) -> str:
    """The one-container counterpart of the compose service, for a quick try on one host."""
    import shlex

    args = ["docker", "run", "--rm", "-p", f"{cfg.port}:{cfg.port}", "-v", f"{w.model_dir}:{w.mount}:ro",
            "-e", "HF_HUB_OFFLINE=1"]
    if w.sizing and w.memory_limit:
        args += ["--memory", w.sizing.compose_memory()]
    if w.gpus_per_pod:
        args += ["--gpus", str(w.gpus_per_pod) if w.gpus_per_pod > 1 else "1"]
        args += [f"--ulimit={k}={v}" for k, v in GPU_ULIMITS.items()]
        args += ["--ipc=host"] if w.tensor_parallel > 1 else ["--shm-size=2g"]
    if w.engine == "infertune-serve":
        args += ["--entrypoint", "infertune", image, *w.args]
    else:
        args += ["--entrypoint", "vllm", image, "serve", *w.args]
    return shlex.join(args)
