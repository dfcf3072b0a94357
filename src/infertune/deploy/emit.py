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

    # no folded lines: commands stay whole
    return "---\n".join(yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=10**6)
                         for d in docs)


def default_image(w: Workload) -> str:
    if w.image is not None:
        return w.image.name
    if w.engine == "vllm":
        from infertune.doctor.compat import vllm_images

        return vllm_images()[0]["image"]  # only when no tag was chosen (deploy/image.py picks one): never :latest
    from infertune import __version__

    return f"infertune:{__version__}-{w.device}"


def build(cfg: DeployConfig) -> tuple[Workload, dict[str, list[dict[str, Any]]], list[str]]:
    """(workload, {relative file path: objects}, notes) without writing anything (the dashboard, JSON, is
    monitoring.monitoring's)."""
    from infertune.deploy.monitoring import monitoring
    from infertune.deploy.pod_recipe import resolve_workload

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
    rules, _, watch_notes = monitoring(cfg, w)
    return w, {**out, **rules}, notes + watch_notes


def _write(path: Path, text: str, mode: int | None = None) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if mode is not None:
            path.chmod(mode)
    except OSError as e:
        raise InfertuneError(f"cannot write {path}: {e}") from e


def image_scripts(cfg: DeployConfig, w: Workload) -> dict[str, str]:
    """image/build.sh (infertune serve: the docker build of the image the manifests name) and image/run.sh."""
    from infertune.deploy.compose import docker_run

    image = cfg.image or default_image(w)
    out = {}
    if w.image and w.image.build and not cfg.image:
        out["image/build.sh"] = (f"#!/bin/sh\n# {w.engine} image for {w.name}: extras {','.join(w.image.extras)} "
                                 f"(what the artifact's engine needs); push it where the cluster pulls from, e.g.\n"
                                 f"#   docker tag {image} REGISTRY/{image} && docker push REGISTRY/{image}\n"
                                 f"# and deploy with --image REGISTRY/{image}\nset -e\n{w.image.build}\n")
    if w.nodes == 1:
        out["image/run.sh"] = (f"#!/bin/sh\n# one container on this host, like compose.yaml's first service\n"
                               f"{docker_run(cfg, w, image)}\n")
    return out


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
            elif rel.startswith("prometheus/"):
                what = "checked after writing"
            else:
                what = "; ".join(sorted({v.validate_k8s(o) for o in objs}))
                v.check_links(objs)
        path = Path(cfg.out) / rel
        _write(path, dump_yaml(objs))
        if rel.startswith("prometheus/"):  # promtool, when installed, reads the file as Prometheus will
            what = v.check_rules(path)
        kinds = [o.get("kind", "compose" if rel == "compose.yaml" else "rules" if "groups" in o else "values")
                 for o in objs]
        written.append(DeployFile(path=str(path), kinds=kinds, validated=what))
    from infertune.deploy.monitoring import monitoring

    for rel, text in monitoring(cfg, w)[1].items():
        path = Path(cfg.out) / rel
        _write(path, text)
        written.append(DeployFile(path=str(path), kinds=["grafana-dashboard"], validated="JSON (Grafana import)"))
    for rel, text in image_scripts(cfg, w).items():
        path = Path(cfg.out) / rel
        _write(path, text, 0o755)
        written.append(DeployFile(path=str(path), kinds=["script"], validated="shell script: not validated"))
    if w.image and w.image.build and not cfg.image:
        notes.append(f"image {w.image.name}: build it with {Path(cfg.out) / 'image/build.sh'} ({w.image.build})")
    notes += w.image.notes if w.image else []
    return DeployResult(workload=w, files=written, notes=notes)
