"""Offline validation of what deploy writes: Kubernetes kinds against Kubernetes' own schemas
(kubernetes-validate, strict: an unknown or misspelt field fails), the CRDs (ServiceMonitor,
LeaderWorkerSet) against the small schemas in schemas/ plus their pod templates against Kubernetes'
PodTemplate, compose against the Compose Specification's schema, and the links between objects
(selectors, ports, GPU requests = limits) that no schema sees."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

K8S_VERSION = "1.30"  # oldest release still widely run with autoscaling/v2 and sidecar-free pods; newer pass too
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
               ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
               ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset.json"}
INSTALL_HINT = "pip install 'infertune[deploy]' (kubernetes-validate, jsonschema) to validate"


class InvalidManifest(ValueError):
    """A generated object does not validate (a bug in deploy, or a value passed through unchecked)."""


def available() -> bool:
    try:
        import jsonschema  # noqa: F401
        import kubernetes_validate  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=4)
def _schema(name: str) -> dict[str, Any]:
    return json.loads((files("infertune.deploy") / "schemas" / name).read_text())


def _where(e: Any) -> str:
    path = "/".join(str(p) for p in getattr(e, "absolute_path", []) or getattr(e, "path", []))
    return f"{path or '(root)'}: {getattr(e, 'message', e)}"


def validate_k8s(obj: dict[str, Any], version: str = K8S_VERSION) -> str:
    """Validate one object; returns what it was checked against, raises InvalidManifest."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    name = f"{key[1]} {obj.get('metadata', {}).get('name')}"
    if key in CRD_SCHEMAS:
        import jsonschema

        v = jsonschema.Draft202012Validator(_schema(CRD_SCHEMAS[key]))
        errs = sorted(v.iter_errors(obj), key=lambda e: list(e.absolute_path))
        if errs:
            raise InvalidManifest(f"{name}: {_where(errs[0])}")
        checked = f"schemas/{CRD_SCHEMAS[key]}"
        if key[1] == "LeaderWorkerSet":
            lwt = obj["spec"]["leaderWorkerTemplate"]
            for role in ("leaderTemplate", "workerTemplate"):
                if role in lwt:
                    pt = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{role.lower()}"},
                          "template": lwt[role]}
                    _kv(pt, f"{name} {role}", version)
            checked += f" + pod templates vs Kubernetes {version} PodTemplate"
        return checked
    _kv(obj, name, version)
    return f"Kubernetes {version} schema (strict)"


def _kv(obj: dict[str, Any], name: str, version: str) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise InvalidManifest(f"{name}: {_where(e)}") from None
    except kubernetes_validate.SchemaNotFoundError as e:
        raise InvalidManifest(f"{name}: {e.message}") from None


def check_rules(path: Any) -> str:
    """`promtool check rules` on a written rule file when promtool is installed (Debian: apt-get install
    prometheus); raises InvalidManifest when it refuses the file."""
    import shutil
    import subprocess

    tool = shutil.which("promtool")
    if tool is None:
        return "Prometheus rule file: not checked (install promtool to check it)"
    r = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise InvalidManifest(f"promtool check rules {path}: {(r.stderr or r.stdout).strip()[-500:]}")
    return "promtool check rules"


def validate_compose(doc: dict[str, Any]) -> str:
    import jsonschema

    v = jsonschema.Draft201909Validator(_schema("compose-spec.json"))
    errs = sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errs:
        raise InvalidManifest(f"compose: {_where(errs[0])}")
    return "compose-spec.json (Compose Specification schema)"


def _pod_specs(obj: dict[str, Any]) -> list[tuple[dict, dict]]:
    """(template metadata labels, pod spec) of every pod template in an object."""
    spec = obj.get("spec", {})
    if obj.get("kind") == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate", {})
        return [(t.get("metadata", {}).get("labels", {}), t.get("spec", {}))
                for t in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")) if t]
    if "template" in spec:
        return [(spec["template"].get("metadata", {}).get("labels", {}), spec["template"].get("spec", {}))]
    return []


def check_links(objs: list[dict[str, Any]]) -> None:
    """What schemas cannot see: a Service that selects no pod, a ServiceMonitor that selects no Service,
    an HPA aimed at nothing, a named port nobody declares, GPU requests that differ from limits."""
    pods = [p for o in objs for p in _pod_specs(o)]
    services = [o for o in objs if o.get("kind") == "Service"]
    for _labels, spec in pods:
        for c in spec.get("containers", []):
            res = c.get("resources", {})
            req, lim = res.get("requests", {}), res.get("limits", {})
            if req.get("nvidia.com/gpu") != lim.get("nvidia.com/gpu"):
                raise InvalidManifest(f"container {c.get('name')}: nvidia.com/gpu requests != limits")
    for s in services:
        sel = s["spec"].get("selector", {})
        hit = [(lab, spec) for lab, spec in pods if sel and all(lab.get(k) == v for k, v in sel.items())]
        if not hit:
            raise InvalidManifest(f"Service {s['metadata']['name']}: selector {sel} matches no pod template")
        for p in s["spec"].get("ports", []):
            tp = p.get("targetPort")
            if isinstance(tp, str) and not any(cp.get("name") == tp for _, spec in hit
                                               for c in spec.get("containers", []) for cp in c.get("ports", [])):
                raise InvalidManifest(f"Service {s['metadata']['name']}: targetPort {tp!r} is no container's port")
    for m in (o for o in objs if o.get("kind") == "ServiceMonitor"):
        want = m["spec"]["selector"].get("matchLabels", {})
        svc = [s for s in services if all(s["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
        ports = {p.get("name") for s in svc for p in s["spec"].get("ports", [])}
        if not svc or any(e.get("port") not in ports for e in m["spec"].get("endpoints", []) if "port" in e):
            raise InvalidManifest(f"ServiceMonitor {m['metadata']['name']}: selects no Service port it names")
    names = {(o.get("kind"), o.get("metadata", {}).get("name")) for o in objs}
    for h in (o for o in objs if o.get("kind") == "HorizontalPodAutoscaler"):
        ref = h["spec"]["scaleTargetRef"]
        if (ref["kind"], ref["name"]) not in names:
            raise InvalidManifest(f"HorizontalPodAutoscaler {h['metadata']['name']}: no {ref['kind']} {ref['name']}")
