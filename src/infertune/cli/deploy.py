"""`infertune deploy`: thin shell over infertune.deploy.emit.deploy()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

HELP = """Write deployment files: Kubernetes manifests and a docker compose file.

SOURCE is a `tune` artifact directory or an encoder (served by `infertune serve`), or a causal LM's directory / config.json (served by vLLM with the flags `plan` computes: tensor parallel = --gpus, pipeline parallel = --nodes).

\b
Writes (under --out):
  k8s/NAME.yaml                      Deployment (or LeaderWorkerSet for --nodes > 1), Service, ServiceMonitor, HPA with --hpa
  k8s/prometheus-adapter-values.yaml the custom-metrics rules the HPA reads (with --hpa)
  compose.yaml                       one host: a service per replica, GPUs reserved, healthcheck, model mounted read-only
  image/build.sh, image/run.sh       infertune serve: the docker build of the image (docker/Dockerfile.cpu|cuda, the engine's extras); one docker run
  k8s/NAME-alerts.yaml               infertune serve: a PrometheusRule (P99 over the SLO, queue wait, load over the measured rate, 5xx share, NaN rows, engine restarts)
  prometheus/NAME-rules.yaml         the same alerts as a Prometheus rule file (checked with `promtool check rules` when installed)
  grafana/NAME-dashboard.json        a Grafana dashboard with the same thresholds drawn on its panels

Memory requests/limits come from tune's measured peak RSS (+ --memory-headroom), CPU requests from the threads tune measured with, node selectors from the artifact's engine and the host it was tuned on (node-feature-discovery / GPU feature discovery labels); the vLLM image tag from the driver's CUDA (--cuda, default this host's).
Alert and dashboard thresholds are measured figures, never guesses: the artifact's SLO, its batch P99 and items/s (manifest.json), and with --from-validate validate.json's SLO, sustainable rate, the soak's error rate and restart count, the finite-output drill; each alert's threshold_source annotation says which. An alert without a figure is not written (the notes say which figure would add it).
Every file is validated offline (Kubernetes schemas, the CRDs' fields, the Compose Specification) when the [deploy] extra is installed.

\b
Examples:
  infertune deploy runs/latest/artifact --replicas 3
  infertune deploy runs/latest/artifact --device cuda --replicas 2 --hpa
  infertune deploy runs/latest/artifact --from-validate runs/validate/validate.json
  infertune deploy ./Meta-Llama-3-8B --gpu H100 --gpus 2
  infertune deploy ./Meta-Llama-3-70B --gpu H100 --gpus 8 --nodes 2"""  # noqa: E501


def register(app: typer.Typer) -> None:
    app.command("deploy", help=HELP)(deploy_cmd)


def deploy_cmd(
    source: Annotated[str, typer.Argument(help="tune artifact dir, model dir, config.json or alias")],
    out: Annotated[Path, typer.Option(help="directory to write into")] = Path("deploy"),
    target: Annotated[list[str] | None, typer.Option(help="k8s and/or compose (default both)")] = None,
    device: Annotated[str | None, typer.Option(help="infertune serve: cpu or cuda (default: the artifact's)")] = None,
    gpu: Annotated[str | None, typer.Option(help="LLMs: GPU model for the plan (default: this host's GPU)")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs per pod; with --nodes, per node (= tensor parallel)")] = None,
    nodes: Annotated[int, typer.Option(help="nodes per model replica (= pipeline parallel; LeaderWorkerSet)")] = 1,
    replicas: Annotated[int, typer.Option(help="model replicas (HPA minimum with --hpa)")] = 1,
    context: Annotated[int | None, typer.Option(help="LLMs: max-model-len")] = None,
    concurrency: Annotated[int | None, typer.Option(help="LLMs: concurrent sequences (sets --max-num-seqs)")] = None,
    dtype: Annotated[str, typer.Option(help="LLMs: auto|bf16|fp16|fp8|int8|int4")] = "auto",
    model_pvc: Annotated[str | None, typer.Option(
        help="PersistentVolumeClaim holding the model (default NAME-model)")] = None,
    model_host_path: Annotated[str | None, typer.Option(
        help="node directory holding the model (hostPath) instead of a PVC")] = None,
    model_subpath: Annotated[str | None, typer.Option(help="the model's directory inside the volume")] = None,
    image: Annotated[str | None, typer.Option(
        help="container image (default infertune:VERSION-DEVICE-ENGINE, built by "
             "image/build.sh; vLLM: the vllm/vllm-openai tag for --cuda)")] = None,
    cuda: Annotated[str | None, typer.Option(
        help="vLLM: the CUDA version the nodes' driver supports, e.g. 12.9 "
             "(`nvidia-smi`, `infertune doctor`; default: this host's driver)")] = None,
    memory_headroom: Annotated[float, typer.Option(
        help="memory request = limit = measured peak RSS x (1 + this)")] = 0.3,
    name: Annotated[str | None, typer.Option(help="app name (default: from the model)")] = None,
    port: Annotated[int, typer.Option(help="container port")] = 8000,
    hpa: Annotated[bool, typer.Option(
        "--hpa", help="HorizontalPodAutoscaler on a server metric via prometheus-adapter")] = False,
    hpa_metric: Annotated[str, typer.Option(
        help="infertune serve: queue-depth or latency-p99 (vLLM: requests waiting)")] = "queue-depth",
    hpa_target: Annotated[float | None, typer.Option(
        help="per pod: requests in flight (default 8; vLLM waiting 2) or P99 seconds (0.25)")] = None,
    max_replicas: Annotated[int | None, typer.Option(help="HPA maximum (default 4x --replicas)")] = None,
    from_validate: Annotated[Path | None, typer.Option(
        help="validate.json of `infertune validate` against this model: its SLO, sustainable rate, the soak's "
             "error rate and restarts become the alerts' and dashboard's thresholds (beside the artifact's own "
             "SLO, batch P99 and throughput)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")] = False,
) -> None:
    from infertune.console import console
    from infertune.deploy.config import DeployConfig
    from infertune.deploy.emit import deploy

    r = deploy(DeployConfig(
        source=source, out=out, targets=target or ["k8s", "compose"], device=device, gpu=gpu, gpus=gpus, nodes=nodes,
        replicas=replicas, context=context, concurrency=concurrency, dtype=dtype, model_pvc=model_pvc,
        model_host_path=model_host_path, model_path_in_volume=model_subpath, image=image, cuda=cuda,
        memory_headroom=memory_headroom, name=name, port=port,
        hpa=hpa, hpa_metric=hpa_metric, hpa_target=hpa_target, max_replicas=max_replicas, from_validate=from_validate,
    ))
    con = console(stderr=as_json)  # what was written is the result: stdout, unless --json takes it
    w = r.workload
    par = f", TP={w.tensor_parallel} x PP={w.pipeline_parallel}" if w.engine == "vllm" else ""
    con.print(f"[bold]{w.name}[/]: {w.engine} on {w.device}, {w.gpus_per_pod} GPU(s) per pod{par}; image "
              f"{w.image.name if w.image else '?'}; requests cpu {w.cpu_request}, memory {w.memory_request}"
              f"{', limit ' + w.memory_limit if w.memory_limit else ''}", highlight=False)
    for f in r.files:
        con.print(f"  wrote {f.path} ({', '.join(f.kinds)}) - validated: {f.validated}", highlight=False)
    for n in r.notes:
        con.print(f"[dim]note: {n}[/]", highlight=False)
    if as_json:
        typer.echo(json.dumps(r.model_dump(mode="json"), indent=2))
