"""What runs in each pod: `infertune serve` for a tuned embedding artifact or an encoder, vLLM (with the
flags `plan` computed) for a causal LM."""

from __future__ import annotations

import shlex
from pathlib import Path

from infertune.deploy.config import DeployConfig, Workload, dns_name
from infertune.errors import InfertuneError

GPUS_PER_NODE_DEFAULT = 8


def _artifact_manifest(src: Path) -> dict | None:
    if not (src.is_dir() and (src / "manifest.json").is_file()):
        return None
    from infertune.artifact import read_manifest

    return read_manifest(src)


def resolve_workload(cfg: DeployConfig) -> Workload:
    src = Path(cfg.source).expanduser()
    manifest = _artifact_manifest(src)
    if manifest is not None and manifest.get("kind", "embedding") == "embedding":
        return _serve_workload(cfg, src.resolve(), manifest)
    if manifest is not None:  # a causal-LM artifact: vLLM serves artifact/model
        model_dir = str((src / "model").resolve())
        return _vllm_workload(cfg, model_dir, manifest.get("model") or src.name, model_dir)
    from infertune.models.kind import model_kind
    from infertune.models.resolve import resolve_model
    from infertune.plan.arch import arch_from_config, load_config
    from infertune.plan.planner import model_location

    arch_from_config(load_config(cfg.source))  # a readable transformer config, or the user mistake says why
    name, model_dir = model_location(cfg.source)
    if model_kind(resolve_model(cfg.source)).task == "embed":  # encoder or decoder embedder: infertune serve
        return _serve_workload(cfg, Path(model_dir), {"model": name})
    return _vllm_workload(cfg, model_dir, name, cfg.source)


def _serve_workload(cfg: DeployConfig, model_dir: Path, manifest: dict) -> Workload:
    if cfg.nodes > 1:
        raise InfertuneError("--nodes > 1 is for LLMs split over nodes; an embedding model scales with --replicas")
    device = cfg.device or ("cuda" if str(manifest.get("device", "cpu")).startswith("cuda") else "cpu")
    gpus = (cfg.gpus or 1) if device == "cuda" else 0
    name = dns_name(cfg.name or manifest.get("model") or model_dir.name)
    mount = f"/models/{name}"
    args = ["serve", mount, "--host", "0.0.0.0", "--port", str(cfg.port), "--device", device,
            "--served-model-name", str(manifest.get("model") or name)]
    if gpus > 1:
        args += ["--devices", ",".join(str(i) for i in range(gpus))]
    threads = (manifest.get("tune") or {}).get("threads")
    notes = []
    tuned_on = "cuda" if str(manifest.get("device", "cpu")).startswith("cuda") else "cpu"
    if manifest.get("format"):
        notes.append(f"tuned artifact {manifest.get('candidate_id', '')}: batching sized from its measurements")
        if tuned_on != device:
            notes.append(f"the artifact was tuned on {tuned_on} and is served on {device}: its pick and batch sizes "
                         f"were measured there; run `infertune tune --device {device}` on the target for its own")
    else:
        notes.append("untuned embedding model: run `infertune tune` and deploy the artifact to serve the fastest candidate")
    return Workload(engine="infertune-serve", name=name, served_name=str(manifest.get("model") or name),
                    model_dir=str(model_dir), mount=mount, device=device, gpus_per_pod=gpus, args=args,
                    cpu_request=str(threads or 2), memory_request="2Gi" if device == "cpu" else "4Gi", notes=notes)


def _vllm_workload(cfg: DeployConfig, model_dir: str, model_name: str, config_source: str) -> Workload:
    from infertune.plan.planner import PlanConfig, plan

    if cfg.device == "cpu":
        raise InfertuneError("deploy writes GPU manifests for causal LMs (vLLM); for CPU serving see docs/llm.md")
    per_node = cfg.gpus or (GPUS_PER_NODE_DEFAULT if cfg.nodes > 1 else 1)
    notes = []
    if cfg.nodes > 1 and not cfg.gpus:
        notes.append(f"--nodes {cfg.nodes} without --gpus: {per_node} GPUs per node")
    # vLLM's rule: tensor parallel inside a node (NVLink), pipeline parallel across nodes
    r = plan(PlanConfig(model=config_source, gpu=cfg.gpu, gpus=per_node,
                        tensor_parallel_size=per_node, pipeline_parallel_size=cfg.nodes, context=cfg.context,
                        concurrency=cfg.concurrency, dtype=cfg.dtype, task="generate"))
    if not r.fits:
        raise InfertuneError(f"{model_name} does not fit on {cfg.nodes} x {per_node} x {r.gpu['name']} with "
                             f"{r.dtype} weights at {r.context} tokens (KV for {r.max_concurrency:.2f} sequences); "
                             "raise --gpus or --nodes, lower --context, or pick --dtype fp8/int4")
    name = dns_name(cfg.name or model_name)
    mount = f"/models/{name}"
    flags = shlex.split(r.commands["vllm"])[3:]  # drop "vllm serve MODEL"
    args = [mount, "--served-model-name", model_name, "--host", "0.0.0.0", "--port", str(cfg.port), *flags]
    if cfg.nodes > 1:
        args += ["--distributed-executor-backend", "ray"]
    notes += [f"plan: {r.gpu['name']}, {r.dtype} weights, TP={per_node}, PP={cfg.nodes}, max-model-len {r.context}, "
              f"KV for {r.max_concurrency:.2f} full-length sequences per replica, --max-num-seqs {r.max_num_seqs}",
              *[n for n in r.notes if "max-num-seqs" in n or "MoE" in n]]
    return Workload(engine="vllm", name=name, served_name=model_name, model_dir=model_dir, mount=mount,
                    device="cuda", gpus_per_pod=per_node, tensor_parallel=per_node, pipeline_parallel=cfg.nodes,
                    nodes=cfg.nodes, args=args, cpu_request=str(max(4, 2 * per_node)),
                    memory_request=f"{max(16, 8 * per_node)}Gi", notes=notes)
