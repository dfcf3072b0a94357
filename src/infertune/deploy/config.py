"""What `deploy` is asked for (DeployConfig), what runs in each pod (Workload) and what it wrote."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from infertune.deploy.image import Image
from infertune.deploy.placement import Placement
from infertune.deploy.sizing import Sizing

Target = Literal["k8s", "compose"]


class DeployConfig(BaseModel):
    source: str = Field(description="tune artifact dir, model dir, config.json or alias")
    out: Path = Path("deploy")
    targets: list[Target] = ["k8s", "compose"]
    # where it runs
    device: Literal["cpu", "cuda"] | None = Field(None, description="infertune serve: default from the artifact")
    gpu: str | None = Field(None, description="GPU model for plan (LLMs); default: the local GPU")
    gpus: int | None = Field(None, ge=1, description="GPUs per pod (per node for multi-node)")
    nodes: int = Field(1, ge=1, description="nodes per model replica; > 1 means pipeline parallel over nodes")
    replicas: int = Field(1, ge=1)
    # what plan needs for LLMs
    context: int | None = Field(None, gt=0)
    concurrency: int | None = Field(None, gt=0)
    dtype: Literal["auto", "bf16", "fp16", "fp8", "int8", "int4"] = "auto"
    # the model volume: never baked into the image
    model_pvc: str | None = Field(None, description="existing PersistentVolumeClaim holding the model")
    model_host_path: str | None = Field(None, description="node path holding the model (hostPath)")
    model_path_in_volume: str | None = Field(None, description="the model's directory inside the volume")
    image: str | None = None
    cuda: str | None = Field(None,
                             description="vLLM: the CUDA version the nodes' driver supports (default: this host's)")
    memory_headroom: float = Field(0.3, ge=0, le=4, description="memory request/limit = measured peak x (1 + this)")
    name: str | None = Field(None, description="app name (default: from the model)")
    port: int = Field(8000, ge=1, le=65535)
    # autoscaling (infertune serve)
    hpa: bool = False
    hpa_metric: Literal["queue-depth", "latency-p99"] = "queue-depth"
    hpa_target: float | None = Field(None, gt=0, description="per pod: requests in flight, or P99 seconds")
    max_replicas: int | None = Field(None, ge=1)
    validate_files: bool = True
    # alerts and dashboard: thresholds from the artifact's and this validate.json's measured figures
    from_validate: Path | None = Field(None, description="validate.json of `infertune validate` against this model")


class Workload(BaseModel):
    """One model replica: the engine, its arguments and the GPUs it needs."""

    engine: Literal["infertune-serve", "vllm"]
    name: str  # DNS-1035 label: app name, Service name
    served_name: str
    model_dir: str  # on the host (compose bind mount, hostPath default)
    mount: str  # inside the container
    device: Literal["cpu", "cuda"]
    gpus_per_pod: int = 0
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    nodes: int = 1
    args: list[str]  # the serving command's arguments after the executable
    cpu_request: str = "2"
    memory_request: str = "4Gi"
    memory_limit: str | None = None  # CPU pods: = the request (sizing.py says why)
    sizing: Sizing | None = None  # the figures the requests come from
    placement: Placement = Placement()
    image: Image | None = None
    # a quantized plan: the llm-compressor step that writes model_dir, to run before the pods start
    checkpoint: dict[str, Any] | None = None
    notes: list[str] = []


class DeployFile(BaseModel):
    path: str
    kinds: list[str]
    validated: str  # what it was checked against, or why it was not


class DeployResult(BaseModel):
    workload: Workload
    files: list[DeployFile]
    notes: list[str] = []


def dns_name(s: str) -> str:
    """A DNS-1035 label (lowercase alphanumerics and '-', starts with a letter, <= 40 chars so that
    suffixes like '-model' and LeaderWorkerSet's pod names still fit in 63)."""
    n = re.sub(r"[^a-z0-9-]+", "-", s.lower()).strip("-")
    n = re.sub(r"-{2,}", "-", n)
    if not n or not n[0].isalpha():
        n = "m-" + n
    return n[:40].rstrip("-")
