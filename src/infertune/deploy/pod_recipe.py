"""What runs in each pod: `infertune serve` for a tuned embedding artifact or an encoder, vLLM (with the
flags `plan` computed) for a causal LM."""

from __future__ import annotations

import shlex
from pathlib import Path

from infertune.deploy.config import DeployConfig, Workload, dns_name
from infertune.deploy.image import serve_image
from infertune.errors import InfertuneError

GPUS_PER_NODE_DEFAULT = 8


def artifact_manifest(src: Path) -> dict | None:
    if not (src.is_dir() and (src / "manifest.json").is_file()):
        return None
    from infertune.artifact import read_manifest

    return read_manifest(src)


def resolve_workload(cfg: DeployConfig) -> Workload:
    src = Path(cfg.source).expanduser()
    manifest = artifact_manifest(src)
    if manifest is not None and manifest.get("kind", "embedding") == "embedding":
        return _serve_workload(cfg, src.resolve(), manifest)
    if manifest is not None:  # a causal-LM artifact: vLLM serves artifact/model
        model_dir = str((src / "model").resolve())
        tuned = (manifest.get("vllm") or {}).get("args") or []
        return _vllm_workload(cfg, model_dir, manifest.get("model") or src.name, model_dir, tuned,
                              str(manifest.get("device", "cpu")), (manifest.get("versions") or {}).get("vllm"))
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
    tuned_on = "cuda" if str(manifest.get("device", "cpu")).startswith("cuda") else "cpu"
    device = cfg.device or tuned_on
    gpus = (cfg.gpus or 1) if device == "cuda" else 0
    name = dns_name(cfg.name or manifest.get("model") or model_dir.name)
    mount = f"/models/{name}"
    args = ["serve", mount, "--host", "0.0.0.0", "--port", str(cfg.port), "--device", device,
            "--served-model-name", str(manifest.get("model") or name)]
    if gpus > 1:
        args += ["--devices", ",".join(str(i) for i in range(gpus))]
    notes = []
    if manifest.get("format"):
        notes.append(f"tuned artifact {manifest.get('candidate_id', '')}: batching sized from its measurements")
        if tuned_on != device:
            notes.append(f"the artifact was tuned on {tuned_on} and is served on {device}: its pick and batch sizes "
                         f"were measured there; run `infertune tune --device {device}` on the target for its own")
    else:
        notes.append("untuned embedding model: run `infertune tune` and deploy the artifact to serve the fastest "
                     "candidate")
    sizing, place = _size_and_place(cfg, model_dir, manifest, device, tuned_on)
    cand = manifest.get("candidate") or {}
    backend = (cand.get("backend") or str(manifest.get("candidate_id", "")).split("/")[0] or None
               if manifest.get("format") else None)
    return Workload(engine="infertune-serve", name=name, served_name=str(manifest.get("model") or name),
                    model_dir=str(model_dir), mount=mount, device=device, gpus_per_pod=gpus, args=args,
                    cpu_request=sizing.cpu, memory_request=sizing.k8s_memory(), memory_limit=sizing.k8s_memory(),
                    sizing=sizing, placement=place, image=serve_image(backend, device, cfg.image),
                    notes=notes + sizing.explain + place.notes)


def _size_and_place(cfg: DeployConfig, model_dir: Path, manifest: dict, device: str, tuned_on: str):
    """(Sizing, Placement) from the artifact's measurements and fingerprint, or from the model's shape."""
    from infertune.deploy.placement import cpu_placement, gpu_placement
    from infertune.deploy.sizing import tuned_sizing, untuned_sizing
    from infertune.hardware.engine_features import engine_features

    if manifest.get("format"):
        sizing = tuned_sizing(manifest, model_dir, cfg.memory_headroom, device)
        # a device other than the tuned one: only the engine's own minimum holds there
        feats = engine_features(manifest if tuned_on == device else
                                {"candidate": manifest.get("candidate") or {}, "device": device})
    else:
        sizing = untuned_sizing(str(model_dir), cfg.memory_headroom, device)
        feats = engine_features({"candidate": {"backend": "torch-eager", "precision": "fp32"}, "device": device})
    if device == "cuda":
        return sizing, gpu_placement(feats, sizing.gpu_memory_mib)
    return sizing, cpu_placement(feats)


def _vllm_workload(cfg: DeployConfig, model_dir: str, model_name: str, config_source: str,
                   tuned: list[str] | None = None, tuned_on: str = "cpu", vllm: str | None = None) -> Workload:
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
    if r.checkpoint is not None:  # quantized weights: the pods serve the checkpoint its step writes
        model_dir = r.checkpoint.output
        notes.append(f"{r.dtype} weights: make the checkpoint before the pods start ({r.checkpoint.label}, "
                     f"llm-compressor, {r.checkpoint.install}): {r.checkpoint.command}")
    else:
        notes += quant_alternatives(r)
    args = [mount, "--served-model-name", model_name, "--host", "0.0.0.0", "--port", str(cfg.port), *flags]
    if tuned:  # the engine arguments tune measured; after plan's flags, so they win where both name one
        args += list(tuned)
        notes.append(f"vLLM arguments tune measured on {tuned_on}: {shlex.join(tuned)}")
    if cfg.nodes > 1:
        args += ["--distributed-executor-backend", "ray"]
    notes += [f"plan: {r.gpu['name']}, {r.dtype} weights, TP={per_node}, PP={cfg.nodes}, max-model-len {r.context}, "
              f"KV for {r.max_concurrency:.2f} full-length sequences per replica, --max-num-seqs {r.max_num_seqs}",
              *[n for n in r.notes if "max-num-seqs" in n or "MoE" in n]]
    image, place, image_notes = _vllm_image(cfg, vllm)
    return Workload(engine="vllm", name=name, served_name=model_name, model_dir=model_dir, mount=mount,
                    device="cuda", gpus_per_pod=per_node, tensor_parallel=per_node, pipeline_parallel=cfg.nodes,
                    nodes=cfg.nodes, args=args, cpu_request=str(max(4, 2 * per_node)),
                    memory_request=f"{max(16, 8 * per_node)}Gi", placement=place, image=image,
                    checkpoint=r.checkpoint.model_dump() if r.checkpoint else None,
                    notes=notes + image_notes + place.notes)


def quant_alternatives(r) -> list[str]:
    """The quantized checkpoints vLLM serves on this GPU, for a plan that serves 16-bit weights."""
    ok = [q for q in r.quant_candidates if q["status"] == "candidate" and q.get("checkpoint")]
    if not ok:
        return []
    flags = "|".join(dict.fromkeys(q["weights"] for q in ok))
    return [f"{r.dtype} weights; quantized checkpoints vLLM serves on {r.gpu['name']}: "
            + "; ".join(f"{q['label']} on {q['kernel'].split(' (')[0]} ({q['checkpoint']['output']})" for q in ok)
            + f". Deploy one with --dtype {flags}: deploy then names its llm-compressor step"]


def _vllm_image(cfg: DeployConfig, vllm: str | None = None):
    """(Image, Placement, notes): the vLLM tag for the nodes' driver (of the release an artifact was measured
    with, `vllm`), and nodes whose driver runs it."""
    from infertune.deploy.image import Image, local_driver_cuda, pinned_vllm_tag, vllm_tag
    from infertune.deploy.placement import Placement, driver_placement

    if cfg.image:
        return Image(name=cfg.image), Placement(), [f"image {cfg.image} (--image): no driver check"]
    driver_cuda = cfg.cuda or local_driver_cuda()
    tag, need, notes = pinned_vllm_tag(vllm, driver_cuda) if vllm else vllm_tag(driver_cuda)
    return Image(name=tag), driver_placement(need), notes
