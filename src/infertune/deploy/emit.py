"""`infertune.deploy(cfg)`: resolve what runs, build the objects, validate them, write the files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infertune.deploy.config import DeployConfig, DeployFile, DeployResult, Workload
from infertune.errors import InfertuneError


def dump_yaml(docs: list[dict[str, Any]]) -> str:
    """Block-style YAML in the order built, without anchors (shared sub-objects are written out in full)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return "---\n".join(yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=10**6)  # no folded lines: commands stay whole
                         for d in docs)


def default_image(w: Workload) -> str:
    if w.engine == "vllm":
        from infertune.deploy.kube_vllm import VLLM_IMAGE

        return VLLM_IMAGE
    from infertune import __version__

    return f"infertune:{__version__}-{w.device}"


def build(cfg: DeployConfig) -> tuple[Workload, dict[str, list[dict[str, Any]]], list[str]]:
    """(workload, {relative file path: objects}, notes) without writing anything."""
    from infertune.deploy.workload import resolve_workload

    w = resolve_workload(cfg)
    image = cfg.image or default_image(w)
    notes = list(w.notes)
    out: dict[str, list[dict[str, Any]]] = {}
    if "k8s" in cfg.targets:
        if w.engine == "vllm":
            from infertune.deploy.kube_vllm import vllm_objects

            out[f"k8s/{w.name}.yaml"] = vllm_objects(cfg, w, image)
        else:
            from infertune.deploy.kube import serve_objects

            out[f"k8s/{w.name}.yaml"] = serve_objects(cfg, w, image)
        if cfg.hpa:
            from infertune.deploy.kube import adapter_rules

            out["k8s/prometheus-adapter-values.yaml"] = [adapter_rules()]
        if not (cfg.model_pvc or cfg.model_host_path):
            notes.append(f"the model is read from PersistentVolumeClaim {w.name}-model (create it and copy "
                         f"{w.model_dir} into it, or pass --model-pvc / --model-host-path)")
    if "compose" in cfg.targets:
        if w.nodes > 1:
            notes.append("compose skipped: a model split over nodes needs Kubernetes (LeaderWorkerSet)")
        else:
            from infertune.deploy.compose import compose_file

            out["compose.yaml"] = [compose_file(cfg, w, image)]
    return w, out, notes


def deploy(cfg: DeployConfig) -> DeployResult:
    from infertune.deploy import validate as v

    w, docs, notes = build(cfg)
    check = cfg.validate_files and v.available()
    if cfg.validate_files and not check:
        notes.append(f"files not validated: {v.INSTALL_HINT}")
    written: list[DeployFile] = []
    for rel, objs in docs.items():
        what = "not validated"
        if check:
            if rel == "compose.yaml":
                what = v.validate_compose(objs[0])
            elif rel.endswith("prometheus-adapter-values.yaml"):
                what = "Helm values (prometheus-adapter rules): YAML only"
            else:
                what = "; ".join(sorted({v.validate_k8s(o) for o in objs}))
                v.check_links(objs)
        path = Path(cfg.out) / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dump_yaml(objs))
        except OSError as e:
            raise InfertuneError(f"cannot write {path}: {e}") from e
        kinds = [o.get("kind", "compose" if rel == "compose.yaml" else "values") for o in objs]
        written.append(DeployFile(path=str(path), kinds=kinds, validated=what))
    return DeployResult(workload=w, files=written, notes=notes)
