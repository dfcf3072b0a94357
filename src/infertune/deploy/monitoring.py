"""What deploy writes to watch an `infertune serve` deployment: alerting rules (alerts.py) and a Grafana dashboard
(dashboard.py), their thresholds the artifact's and validate.json's measured figures (figures.py).

Files: k8s/NAME-alerts.yaml (a PrometheusRule, with the k8s target), prometheus/NAME-rules.yaml (the same rules as
a plain rule file, for `promtool check rules` and a Prometheus of your own) and grafana/NAME-dashboard.json.
vLLM deployments export vLLM's own metrics: none of these is written for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infertune.deploy.config import DeployConfig, Workload


def monitoring(cfg: DeployConfig, w: Workload) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str], list[str]]:
    """({YAML file: objects}, {JSON file: text}, notes) for `w`; nothing for a vLLM workload."""
    if w.engine != "infertune-serve":
        return {}, {}, []
    from infertune.deploy.alerts import prometheus_rule, rule_groups
    from infertune.deploy.dashboard import dashboard
    from infertune.deploy.figures import measured, read_validate
    from infertune.deploy.kube import labels
    from infertune.deploy.pod_recipe import artifact_manifest

    src = Path(cfg.source).expanduser()
    manifest = artifact_manifest(src)
    validate = read_validate(cfg.from_validate) if cfg.from_validate else None
    figs = measured(manifest, validate, str(cfg.from_validate or "validate.json"), str(src / "manifest.json"))
    groups, skipped = rule_groups(w.name, figs)
    yaml_docs: dict[str, list[dict[str, Any]]] = {}
    n = len(groups[0]["rules"])
    if n:  # no figure, no alert: nothing to write (the notes say what would add them)
        yaml_docs[f"prometheus/{w.name}-rules.yaml"] = [{"groups": groups}]
        if "k8s" in cfg.targets:
            yaml_docs[f"k8s/{w.name}-alerts.yaml"] = [prometheus_rule(w.name, labels(w), groups)]
    texts = {f"grafana/{w.name}-dashboard.json": json.dumps(dashboard(w.name, figs), indent=2) + "\n"}
    notes = [f"{n} alert(s), thresholds from measured figures: " + ("; ".join(
        f"{name} {f.value:.4g} {f.unit}" for name, f in figs.items()) or "none found")]
    if skipped:
        notes.append("alerts not written (no measured figure): " + "; ".join(skipped))
    return yaml_docs, texts, notes
