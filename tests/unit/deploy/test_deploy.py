"""`infertune deploy`: issue 15's four acceptance cases, each written to disk, read back and validated offline
(Kubernetes schemas via kubernetes-validate, our CRD schemas, the Compose Specification schema), plus
negative tests showing that a file that does not validate fails."""

import copy
import json
import shlex
from pathlib import Path

import pytest
import yaml

from infertune.deploy.config import DeployConfig
from infertune.deploy.emit import deploy
from infertune.deploy.validate import InvalidManifest, check_links, validate_compose, validate_k8s

CONFIGS = Path(__file__).parents[1] / "configs"


@pytest.fixture
def minilm_artifact(tmp_path):
    """The manifest of a tuned MiniLM artifact (deploy reads only the manifest; weights stay on the volume)."""
    d = tmp_path / "artifact"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({
        "format": "infertune-artifact/1", "kind": "embedding", "model": "all-MiniLM-L6-v2",
        "candidate_id": "onnxruntime/int8/tokens-2048", "device": "cpu", "files": {"onnx": "model.onnx"},
        "tune": {"threads": 2, "batch_token_budget": 2048}}))
    return d


def _read(path):
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]


def _written(result, out):
    """Every file read back from disk and validated again (what is on disk is what gets applied)."""
    docs = {}
    for f in result.files:
        rel = str(Path(f.path).relative_to(out))
        if rel.startswith(("image/", "prometheus/", "grafana/")):  # build/run scripts (test_deploy_sizing.py), alert
            continue  # rules and the dashboard (test_deploy_monitoring.py)
        objs = _read(f.path)
        if rel == "compose.yaml":
            validate_compose(objs[0])
        elif "prometheus-adapter" not in rel:
            for o in objs:
                validate_k8s(o)
            check_links(objs)
        docs[rel] = objs
    return docs


def _kind(objs, kind):
    (o,) = [o for o in objs if o["kind"] == kind]
    return o


def _flag(args, flag):
    return args[args.index(flag) + 1]


def test_minilm_artifact_on_cpu_three_replicas(minilm_artifact, tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(minilm_artifact), out=out, replicas=3))
    docs = _written(r, out)
    k8s = docs["k8s/all-minilm-l6-v2.yaml"]
    assert [o["kind"] for o in k8s] == ["Deployment", "Service", "ServiceMonitor"]
    dep = _kind(k8s, "Deployment")
    assert dep["spec"]["replicas"] == 3
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    assert c["args"][:2] == ["serve", "/models/all-minilm-l6-v2"] and _flag(c["args"], "--device") == "cpu"
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready" and c["livenessProbe"]["httpGet"]["path"] == "/health"
    # the model comes from a volume, read-only; the image carries only code
    assert c["volumeMounts"][0] == {"name": "model", "mountPath": "/models/all-minilm-l6-v2", "readOnly": True}
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert _kind(k8s, "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"
    compose = docs["compose.yaml"][0]["services"]
    assert len(compose) == 3 and [s["ports"][0] for s in compose.values()] == ["8000:8000", "8001:8000", "8002:8000"]
    for s in compose.values():
        assert s["volumes"][0]["read_only"] is True and s["volumes"][0]["source"] == str(minilm_artifact)
        assert "/ready" in s["healthcheck"]["test"][-1] and "devices" not in json.dumps(s.get("deploy", {}))


def test_minilm_on_one_gpu_two_replicas_with_hpa(minilm_artifact, tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(minilm_artifact), out=out, replicas=2, device="cuda", hpa=True, max_replicas=6))
    docs = _written(r, out)
    k8s = docs["k8s/all-minilm-l6-v2.yaml"]
    dep = _kind(k8s, "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert dep["spec"]["replicas"] == 2 and _flag(c["args"], "--device") == "cuda"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1 == c["resources"]["requests"]["nvidia.com/gpu"]
    h = _kind(k8s, "HorizontalPodAutoscaler")
    assert (h["spec"]["minReplicas"], h["spec"]["maxReplicas"]) == (2, 6)
    assert h["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "all-minilm-l6-v2"}
    metric = h["spec"]["metrics"][0]["pods"]["metric"]["name"]
    # the adapter rule exposes that name from a series `infertune serve` really exports at /metrics
    rules = docs["k8s/prometheus-adapter-values.yaml"][0]["rules"]["custom"]
    (rule,) = [x for x in rules if x["name"]["as"] == metric]
    series = rule["seriesQuery"].split("{")[0]
    pytest.importorskip("prometheus_client")
    from infertune.serve.metrics import Metrics

    assert f"\n{series} " in Metrics().exposition().decode()
    assert any("tuned on cpu and is served on cuda" in n for n in r.notes)
    svc = next(iter(docs["compose.yaml"][0]["services"].values()))
    assert svc["entrypoint"] == ["infertune"] and svc["command"][:2] == ["serve", "/models/all-minilm-l6-v2"]
    devices = [s["deploy"]["resources"]["reservations"]["devices"][0]
               for s in docs["compose.yaml"][0]["services"].values()]
    assert [d["device_ids"] for d in devices] == [["0"], ["1"]] and all(d["capabilities"] == ["gpu"] for d in devices)


def test_latency_hpa_uses_the_request_duration_histogram(minilm_artifact, tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(minilm_artifact), out=out, hpa=True, hpa_metric="latency-p99", hpa_target=0.2,
                            targets=["k8s"]))
    docs = _written(r, out)
    h = _kind(docs["k8s/all-minilm-l6-v2.yaml"], "HorizontalPodAutoscaler")
    assert h["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "200m"
    rules = docs["k8s/prometheus-adapter-values.yaml"][0]["rules"]["custom"]
    (rule,) = [x for x in rules if x["name"]["as"] == h["spec"]["metrics"][0]["pods"]["metric"]["name"]]
    assert rule["seriesQuery"].startswith("infertune_request_duration_seconds_bucket{")
    assert "histogram_quantile(0.99" in rule["metricsQuery"]


def test_llama3_8b_on_two_gpus_tensor_parallel_2(tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(CONFIGS / "llama-3-8b.json"), out=out, gpu="H100", gpus=2))
    docs = _written(r, out)
    dep = _kind(docs["k8s/llama-3-8b.yaml"], "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["vllm", "serve"] and c["args"][0] == "/models/llama-3-8b"
    assert _flag(c["args"], "--tensor-parallel-size") == "2" and "--pipeline-parallel-size" not in c["args"]
    assert int(_flag(c["args"], "--max-num-seqs")) > 1 and _flag(c["args"], "--max-model-len") == "8192"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    (svc,) = docs["compose.yaml"][0]["services"].values()
    assert svc["ipc"] == "host" and svc["entrypoint"] == ["vllm", "serve"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0", "1"]
    assert _flag(svc["command"], "--tensor-parallel-size") == "2"


def test_llama3_70b_on_two_nodes_of_eight_gpus_tp8_pp2(tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(CONFIGS / "llama-3-70b.json"), out=out, gpu="H100", gpus=8, nodes=2))
    docs = _written(r, out)
    assert "compose.yaml" not in docs and any("compose skipped" in n for n in r.notes)
    k8s = docs["k8s/llama-3-70b.yaml"]
    lws = _kind(k8s, "LeaderWorkerSet")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = lwt["leaderTemplate"]["spec"]["containers"][0]
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    for c in (leader, worker):
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    lead = shlex.split(leader["command"][-1].replace("&&", " && "))
    assert "leader" in lead and "--ray_cluster_size=$(LWS_GROUP_SIZE)" in lead
    assert _flag(lead, "--tensor-parallel-size") == "8" and _flag(lead, "--pipeline-parallel-size") == "2"
    assert _flag(lead, "--distributed-executor-backend") == "ray"
    assert "worker" in worker["command"][-1] and "--ray_address=$(LWS_LEADER_ADDRESS)" in worker["command"][-1]
    svc = _kind(k8s, "Service")
    assert svc["spec"]["selector"]["role"] == "leader"
    assert r.workload.tensor_parallel == 8 and r.workload.pipeline_parallel == 2


# ---- a file that does not validate fails ------------------------------------------------------------------

@pytest.fixture
def written(minilm_artifact, tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(minilm_artifact), out=out, device="cuda", hpa=True))
    return _written(r, out)


def test_misspelt_kubernetes_field_fails(written):
    dep = copy.deepcopy(_kind(written["k8s/all-minilm-l6-v2.yaml"], "Deployment"))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["readynessProbe"] = c.pop("readinessProbe")
    with pytest.raises(InvalidManifest, match="readynessProbe"):
        validate_k8s(dep)


def test_wrong_type_in_hpa_fails(written):
    h = copy.deepcopy(_kind(written["k8s/all-minilm-l6-v2.yaml"], "HorizontalPodAutoscaler"))
    h["spec"]["maxReplicas"] = "lots"
    with pytest.raises(InvalidManifest, match="maxReplicas"):
        validate_k8s(h)


def test_servicemonitor_without_selector_fails(written):
    sm = copy.deepcopy(_kind(written["k8s/all-minilm-l6-v2.yaml"], "ServiceMonitor"))
    del sm["spec"]["selector"]
    with pytest.raises(InvalidManifest, match="selector"):
        validate_k8s(sm)


def test_bad_container_inside_a_leaderworkerset_fails(tmp_path):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(CONFIGS / "llama-3-70b.json"), out=out, gpu="H100", gpus=8, nodes=2))
    lws = _kind(_read(r.files[0].path), "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"] = "8 GPUs"
    with pytest.raises(InvalidManifest, match="workerTemplate"):
        validate_k8s(lws)
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    with pytest.raises(InvalidManifest, match="restartPolicy"):
        validate_k8s(lws)


def test_invalid_compose_fails(written):
    doc = copy.deepcopy(written["compose.yaml"][0])
    svc = next(iter(doc["services"].values()))
    svc["deploy"]["resources"]["reservations"]["devices"][0]["gpu_count"] = 1
    with pytest.raises(InvalidManifest, match="gpu_count"):
        validate_compose(doc)


def test_service_that_selects_no_pod_fails(written):
    objs = copy.deepcopy(written["k8s/all-minilm-l6-v2.yaml"])
    _kind(objs, "Service")["spec"]["selector"] = {"app": "typo"}
    with pytest.raises(InvalidManifest, match="matches no pod"):
        check_links(objs)


def test_deploy_refuses_to_write_a_file_that_does_not_validate(minilm_artifact, tmp_path, monkeypatch):
    import infertune.deploy.compose as compose

    real = compose.compose_file

    def broken(*a, **k):
        doc = real(*a, **k)
        next(iter(doc["services"].values()))["healthcheck"]["retries"] = "three"
        return doc

    monkeypatch.setattr(compose, "compose_file", broken)
    with pytest.raises(InvalidManifest, match="retries"):
        deploy(DeployConfig(source=str(minilm_artifact), out=tmp_path / "out", targets=["compose"]))
    assert not (tmp_path / "out" / "compose.yaml").exists()


# ---- user mistakes and the CLI ----------------------------------------------------------------------------

def test_cli_writes_and_reports_json(minilm_artifact, tmp_path):
    from typer.testing import CliRunner

    from infertune.cli.main import app

    res = CliRunner().invoke(app, ["deploy", str(minilm_artifact), "--out", str(tmp_path / "o"), "--replicas", "3",
                                   "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout[res.stdout.index("{"):])
    # the dashboard too; no alert rules: this manifest holds no measured figure to set a threshold from
    assert {Path(f["path"]).name for f in data["files"]} == {"all-minilm-l6-v2.yaml", "compose.yaml", "build.sh",
                                                             "run.sh", "all-minilm-l6-v2-dashboard.json"}


def test_model_too_big_for_the_gpus_is_a_user_mistake(tmp_path):
    from infertune.errors import InfertuneError

    with pytest.raises(InfertuneError, match="does not fit"):
        deploy(DeployConfig(source=str(CONFIGS / "llama-3-70b.json"), out=tmp_path, gpu="L4", gpus=1))


def test_embedding_model_over_nodes_is_a_user_mistake(minilm_artifact, tmp_path):
    from infertune.errors import InfertuneError

    with pytest.raises(InfertuneError, match="--replicas"):
        deploy(DeployConfig(source=str(minilm_artifact), out=tmp_path, nodes=2))


@pytest.mark.parametrize("nodes,kind", [(1, "Deployment"), (2, "LeaderWorkerSet")])
def test_vllm_hpa_scales_on_requests_waiting(tmp_path, nodes, kind):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(CONFIGS / "llama-3-70b.json"), out=out, gpu="H100", gpus=8, nodes=nodes,
                            hpa=True, targets=["k8s"]))
    docs = _written(r, out)
    h = _kind(docs["k8s/llama-3-70b.yaml"], "HorizontalPodAutoscaler")
    assert h["spec"]["scaleTargetRef"]["kind"] == kind
    metric = h["spec"]["metrics"][0]["pods"]["metric"]["name"]
    rules = docs["k8s/prometheus-adapter-values.yaml"][0]["rules"]["custom"]
    (rule,) = [x for x in rules if x["name"]["as"] == metric]
    assert rule["seriesQuery"].startswith("vllm:num_requests_waiting{")


def test_cli_compose_only_with_host_path(minilm_artifact, tmp_path):
    from typer.testing import CliRunner

    from infertune.cli.main import app

    res = CliRunner().invoke(app, ["deploy", str(minilm_artifact), "--out", str(tmp_path / "o"), "--target", "compose"])
    assert res.exit_code == 0, res.output
    # compose only: no k8s/; the dashboard is for any Grafana (no alert rules: no measured figure in this manifest)
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["compose.yaml", "grafana", "image"]
    res = CliRunner().invoke(app, ["deploy", str(minilm_artifact), "--out", str(tmp_path / "k"), "--target", "k8s",
                                   "--model-host-path", "/data/models/minilm"])
    assert res.exit_code == 0, res.output
    dep = _kind(_read(tmp_path / "k" / "k8s" / "all-minilm-l6-v2.yaml"), "Deployment")
    assert dep["spec"]["template"]["spec"]["volumes"][0]["hostPath"] == {"path": "/data/models/minilm",
                                                                          "type": "Directory"}


def test_cli_user_mistake_exits_2_without_traceback(minilm_artifact, tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "infertune.cli.main", "deploy", str(minilm_artifact), "--nodes", "2",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "--replicas" in p.stderr
