"""deploy's alerts and dashboard: every threshold is a measured figure of a real MiniLM artifact (tuned on the
2-core CPU box) and of the real `infertune validate` of it (tests/unit/deploy/data/minilm-cpu: the artifact's
manifest.json and validate.json as written), each with its source beside it; promtool accepts the rules and its
rule tests fire them on synthetic series above the threshold and not below."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infertune.deploy.config import DeployConfig
from infertune.deploy.emit import deploy
from infertune.errors import InfertuneError

DATA = Path(__file__).parent / "data" / "minilm-cpu"
PROMTOOL = shutil.which("promtool")


@pytest.fixture
def artifact(tmp_path):
    d = tmp_path / "artifact"
    d.mkdir()
    shutil.copy(DATA / "manifest.json", d / "manifest.json")
    return d


def _rules(out: Path) -> dict[str, dict]:
    (path,) = (out / "prometheus").glob("*-rules.yaml")
    groups = yaml.safe_load(path.read_text())["groups"]
    return {r["alert"]: r for r in groups[0]["rules"]}


def _threshold(rule: dict) -> float:
    """The number the expression compares with, which must equal the annotation's."""
    value = float(re.search(r">\s*([-\d.e+]+)\s*$", rule["expr"]).group(1))
    assert value == pytest.approx(float(rule["annotations"]["threshold"]), rel=1e-6)
    return value


def test_thresholds_are_the_measured_figures(artifact, tmp_path):
    out = tmp_path / "out"
    deploy(DeployConfig(source=str(artifact), out=out, from_validate=DATA / "validate.json"))
    m = json.loads((DATA / "manifest.json").read_text())["tune"]
    v = json.loads((DATA / "validate.json").read_text())
    soak = next(d for d in v["drills"] if d["name"] == "soak")["evidence"]
    slo_s = float(re.search(r"p99_e2e_ms<=([\d.]+)", v["config"]["slo"]).group(1)) / 1e3
    rules = _rules(out)
    assert _threshold(rules["InfertuneP99OverSLO"]) == pytest.approx(slo_s)
    assert _threshold(rules["InfertuneOverSustainableRate"]) == pytest.approx(v["peak"]["sustainable_rps"], rel=1e-5)
    assert _threshold(rules["InfertuneErrorRate"]) == soak["error_rate"]
    assert _threshold(rules["InfertuneEngineRestarts"]) == soak["worker_restarts"]
    assert _threshold(rules["InfertuneNonFiniteRows"]) == 0  # the finite-output drill passed
    if slo_s > m["latency_ms"]["p99"] / 1e3:  # the SLO's room for waiting, when the batch P99 leaves some
        wait = _threshold(rules["InfertuneQueueWaitHigh"])
        assert wait == pytest.approx(slo_s - m["latency_ms"]["p99"] / 1e3, rel=1e-5)
    for r in rules.values():  # every threshold names the file and field it came from
        src = r["annotations"]["threshold_source"]
        assert "validate.json" in src or "manifest.json" in src, r
    assert "finite-output" in rules["InfertuneNonFiniteRows"]["annotations"]["threshold_source"]
    # the PrometheusRule holds the same rules; the dashboard draws the same thresholds
    (crd,) = yaml.safe_load_all((out / "k8s" / "minilm.yaml").with_name("minilm-alerts.yaml").read_text())
    assert crd["kind"] == "PrometheusRule" and {r["alert"] for r in crd["spec"]["groups"][0]["rules"]} == set(rules)
    dash = json.loads((out / "grafana" / "minilm-dashboard.json").read_text())
    lines = {p["title"]: p["fieldConfig"]["defaults"]["thresholds"]["steps"][-1].get("value") for p in dash["panels"]}
    assert lines["P99 latency (server side)"] == pytest.approx(slo_s)
    assert lines["Requests per pod"] == pytest.approx(v["peak"]["sustainable_rps"], rel=1e-5)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dash["panels"])


def test_without_validate_the_artifacts_own_figures(artifact, tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(artifact), out=out, targets=["compose"]))
    m = json.loads((DATA / "manifest.json").read_text())["tune"]
    rules = _rules(out)
    assert _threshold(rules["InfertuneP99OverSLO"]) == pytest.approx(m["slo_p99_ms"] / 1e3)
    assert _threshold(rules["InfertuneOverTunedThroughput"]) == pytest.approx(m["items_per_s"], rel=1e-5)
    assert "tune.accuracy" in rules["InfertuneNonFiniteRows"]["annotations"]["threshold_source"]
    # no soak measured errors or restarts: those alerts are not written, and the notes say what would add them
    assert "InfertuneErrorRate" not in rules and "InfertuneEngineRestarts" not in rules
    assert any("InfertuneErrorRate (needs a soak's error rate: --from-validate)" in n for n in r.notes)
    assert not (out / "k8s").exists()  # compose only: no PrometheusRule, the rule file and dashboard still


def test_a_file_that_is_not_validate_json_is_a_user_mistake(artifact, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"results": []}')
    with pytest.raises(InfertuneError, match="not an infertune validate.json"):
        deploy(DeployConfig(source=str(artifact), out=tmp_path / "o", from_validate=bad))
    with pytest.raises(InfertuneError, match="no such file"):
        deploy(DeployConfig(source=str(artifact), out=tmp_path / "o", from_validate=tmp_path / "missing.json"))


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)")
def test_promtool_checks_the_written_rules(artifact, tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(artifact), out=out, from_validate=DATA / "validate.json"))
    written = {Path(f.path).name: f.validated for f in r.files}
    assert written["minilm-rules.yaml"] == "promtool check rules"
    plain = out / "prometheus" / "minilm-rules.yaml"
    crd = yaml.safe_load((out / "k8s" / "minilm-alerts.yaml").read_text())
    spec = tmp_path / "crd-spec.yaml"  # the PrometheusRule's spec is a rule file too
    spec.write_text(yaml.safe_dump(crd["spec"]))
    for path in (plain, spec):
        p = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
        print(p.stdout.strip())
        assert p.returncode == 0 and f"SUCCESS: {len(_rules(out))} rules found" in p.stdout, p.stdout + p.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)")
def test_promtool_fires_the_alerts_above_their_thresholds_only(artifact, tmp_path):
    out = tmp_path / "out"
    deploy(DeployConfig(source=str(artifact), out=out, from_validate=DATA / "validate.json"))
    rules = _rules(out)
    rps = _threshold(rules["InfertuneOverSustainableRate"])
    per_min_over, per_min_under = round(rps * 1.5 * 60), round(rps * 0.5 * 60)  # counter increments per minute
    series = 'infertune_requests_total{job="minilm", route="/v1/embeddings", instance="%s"}'
    tests = {"rule_files": [str(out / "prometheus" / "minilm-rules.yaml")], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": [
                 {"series": series % "busy", "values": f"0+{per_min_over}x30"},
                 {"series": series % "calm", "values": f"0+{per_min_under}x30"},
                 {"series": 'infertune_worker_restarts_total{job="minilm"}', "values": "0x10 1x20"}],
                 "alert_rule_test": [
                     {"eval_time": "25m", "alertname": "InfertuneOverSustainableRate", "exp_alerts": [
                         {"exp_labels": {"severity": "warn", "instance": "busy"},
                          "exp_annotations": rules["InfertuneOverSustainableRate"]["annotations"]}]},
                     {"eval_time": "5m", "alertname": "InfertuneEngineRestarts", "exp_alerts": []},
                     {"eval_time": "12m", "alertname": "InfertuneEngineRestarts", "exp_alerts": [
                         {"exp_labels": {"severity": "page", "job": "minilm"},
                          "exp_annotations": rules["InfertuneEngineRestarts"]["annotations"]}]}]}]}
    path = tmp_path / "tests.yaml"
    path.write_text(yaml.safe_dump(tests))
    p = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
