"""issue 29: pods sized from what tune measured and placed by the artifact's engine and fingerprint, in
node-feature-discovery / GPU feature discovery label names; the image deploy names and the command that builds it;
the vLLM tag from the CUDA compat table. Every written file is read back and validated strictly."""

import json
import math
import shlex
from pathlib import Path

import pytest
import yaml

from infertune.deploy.config import DeployConfig
from infertune.deploy.emit import deploy
from infertune.deploy.validate import check_links, validate_compose, validate_k8s
from infertune.errors import InfertuneError

CONFIGS = Path(__file__).parents[1] / "configs"
NFD = "feature.node.kubernetes.io/cpu-cpuid."
EPYC = ["avx2", "fma"]  # the AVX2-only build box
SPR = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
       "amx_int8"]
CASCADE = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]


def artifact(tmp_path, backend, precision, flags, quant=None, device="cpu", peak_rss=812.4, peak_gpu=None, gpu=None,
             threads=2, name="artifact"):
    d = tmp_path / name
    d.mkdir()
    cand = {"backend": backend, "precision": precision, "quant": quant, "options": [],
            "batching": {"kind": "tokens", "size": 1024, "max_items": 256}}
    (d / "manifest.json").write_text(json.dumps({
        "format": "infertune-artifact/1", "kind": "embedding", "model": "all-MiniLM-L6-v2", "source": "minilm",
        "candidate": cand, "candidate_id": f"{backend}/{precision}/tokens-1024", "device": device,
        "files": {}, "tune": {"threads": threads, "batch_token_budget": 1024},
        "fingerprint": {"cpu_model": "test CPU", "cpu_flags": flags, "gpu": gpu or [],
                        "libraries": {"onnxruntime": "1.32.0", "openvino": "2026.4.1", "torch": "2.13.0"}},
        "memory": {"peak_rss_mb": peak_rss, "peak_gpu_mb": peak_gpu}}))
    return d


def written(result, out):
    docs = {}
    for f in result.files:
        rel = str(Path(f.path).relative_to(out))
        if rel.startswith(("image/", "prometheus/", "grafana/")):  # alerts and dashboard: test_deploy_monitoring.py
            docs[rel] = Path(f.path).read_text()
            continue
        objs = [d for d in yaml.safe_load_all(Path(f.path).read_text()) if d is not None]
        if rel == "compose.yaml":
            validate_compose(objs[0])
        else:
            for o in objs:
                validate_k8s(o)
            check_links(objs)
        docs[rel] = objs
    return docs


def pod_of(docs, name="all-minilm-l6-v2"):
    (dep,) = [o for o in docs[f"k8s/{name}.yaml"] if o["kind"] == "Deployment"]
    return dep, dep["spec"]["template"]["spec"]


def expected_mib(peak_mib, headroom=0.3):
    return math.ceil(peak_mib * (1 + headroom) / 16) * 16


def test_demo_shaped_ort_artifact_on_the_avx2_box(tmp_path):
    """The acceptance case: requests from the measured figures, shown next to them; a nodeSelector naming the CPU
    feature the engine needs; the image's build command with the engine's extras."""
    art = artifact(tmp_path, "onnxruntime", "int8", EPYC, quant="ort-dynamic", peak_rss=812.4, threads=2)
    out = tmp_path / "out"
    docs = written(deploy(DeployConfig(source=str(art), out=out)), out)
    dep, spec = pod_of(docs)
    c = spec["containers"][0]
    mib = expected_mib(812.4)
    assert c["resources"]["requests"] == {"cpu": "2", "memory": f"{mib}Mi"}
    assert c["resources"]["limits"] == {"memory": f"{mib}Mi"}
    note = dep["metadata"]["annotations"]["infertune.dev/sizing"]
    assert f"memory {mib} MiB = peak RSS 812 MiB measured by tune x 1.3 headroom" in note
    assert "2 thread(s) tune measured with" in note
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64", NFD + "AVX2": "true", NFD + "FMA3": "true"}
    assert "affinity" not in spec  # the tune host had nothing beyond what the engine needs
    # the image the manifest names is the one build.sh builds, with the ORT engine's extras
    build = shlex.split(docs["image/build.sh"].strip().splitlines()[-1])
    assert build[:2] == ["docker", "build"] and build[build.index("-f") + 1].endswith("docker/Dockerfile.cpu")
    assert build[build.index("--build-arg") + 1] == "EXTRAS=serve,onnx"
    assert build[build.index("-t") + 1] == c["image"] == "infertune:0.1.0-cpu-onnxruntime"
    assert Path(build[-1], "docker", "Dockerfile.cpu").is_file()
    svc = docs["compose.yaml"][0]["services"]["all-minilm-l6-v2"]
    assert svc["deploy"]["resources"]["limits"]["memory"] == f"{mib}m" and "ulimits" not in svc


@pytest.mark.parametrize("backend,precision,quant,flags,required,preferred", [
    ("openvino", "bf16", None, SPR, ["AMXBF16"], ["AVX512F", "AVX512BF16", "AMXINT8", "AVX512VNNI"]),
    ("openvino", "int8", "nncf-ptq", SPR, ["AMXINT8"], ["AVX512F", "AMXBF16", "AVX512BF16", "AVX512VNNI"]),
    ("onnxruntime", "int8", "ort-dynamic", SPR, ["AVX512VNNI"], ["AVX512F", "AMXBF16", "AVX512BF16", "AMXINT8"]),
    ("onnxruntime", "int8", "ort-dynamic", CASCADE, ["AVX512VNNI"], ["AVX512F"]),
    ("openvino", "fp32", None, SPR, ["AVX2", "FMA3"], ["AVX512F"]),
    ("torch-eager", "bf16", None, ["avx2", "fma", "avx512f", "avx512_bf16"], ["AVX512BF16"], ["AVX512F"]),
])
def test_node_selector_names_what_the_engine_runs_on(tmp_path, backend, precision, quant, flags, required, preferred):
    art = artifact(tmp_path, backend, precision, flags, quant=quant)
    out = tmp_path / "out"
    docs = written(deploy(DeployConfig(source=str(art), out=out, targets=["k8s"])), out)
    _, spec = pod_of(docs)
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64", **{NFD + r: "true" for r in required}}
    pref = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
    assert [e["key"].removeprefix(NFD) for e in pref["matchExpressions"]] == preferred


def test_gpu_artifact_is_placed_by_compute_capability_memory_and_product(tmp_path):
    h200 = [{"index": 0, "name": "NVIDIA H200", "memory_gb": 139.8, "capability": "9.0", "cuda": "13.0"}]
    art = artifact(tmp_path, "torch-eager", "bf16", EPYC, device="cuda", peak_rss=2900.0, peak_gpu=1210.0, gpu=h200)
    out = tmp_path / "out"
    docs = written(deploy(DeployConfig(source=str(art), out=out)), out)
    dep, spec = pod_of(docs)
    c = spec["containers"][0]
    assert c["resources"]["limits"] == {"memory": f"{expected_mib(2900.0)}Mi", "nvidia.com/gpu": 1}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    gmem = {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": [str(expected_mib(1210.0) - 1)]}
    # bf16 needs compute capability >= 8.0: major > 8, or major 8 with any minor
    assert [t["matchExpressions"] for t in terms] == [
        [{"key": "nvidia.com/gpu.compute.major", "operator": "Gt", "values": ["8"]}, gmem],
        [{"key": "nvidia.com/gpu.compute.major", "operator": "In", "values": ["8"]},
         {"key": "nvidia.com/gpu.compute.minor", "operator": "Gt", "values": ["-1"]}, gmem]]
    pref = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
    assert pref["matchExpressions"] == [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H200"]}]
    assert "GPU memory >= " in dep["metadata"]["annotations"]["infertune.dev/sizing"]
    svc = docs["compose.yaml"][0]["services"]["all-minilm-l6-v2"]
    assert svc["ulimits"] == {"memlock": -1, "stack": 67108864}
    run = docs["image/run.sh"]
    assert "--ulimit=memlock=-1" in run and "--ulimit=stack=67108864" in run and "--gpus 1" in run


def test_measurements_come_from_results_json_for_an_older_artifact(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    art = artifact(run, "openvino", "fp32", EPYC, peak_rss=None)
    (run / "results.json").write_text(json.dumps({"winner": {"measurement": {"peak_rss_mb": 1333.0}},
                                                  "environment": {"threads": 2}}))
    out = tmp_path / "out"
    docs = written(deploy(DeployConfig(source=str(art), out=out, targets=["k8s"], memory_headroom=0.5)), out)
    _, spec = pod_of(docs)
    assert spec["containers"][0]["resources"]["requests"]["memory"] == f"{expected_mib(1333.0, 0.5)}Mi"


def qwen3_params(c):
    """Qwen3's parameter count from its config, written out here independently of plan/arch.py."""
    h, hd, layers = c["hidden_size"], c["head_dim"], c["num_hidden_layers"]
    # q,o + k,v + qk norms
    attn = h * c["num_attention_heads"] * hd * 2 + h * c["num_key_value_heads"] * hd * 2 + 2 * hd
    mlp = 3 * h * c["intermediate_size"]
    return layers * (attn + mlp + 2 * h) + c["vocab_size"] * h + h


def test_untuned_qwen3_embedding_on_cpu_covers_its_fp32_weights(tmp_path):
    d = tmp_path / "Qwen3-Embedding-0.6B"
    d.mkdir()
    cfg = json.loads((CONFIGS / "qwen3-0.6b.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(d), out=out, device="cpu"))
    docs = written(r, out)
    _, spec = pod_of(docs, "qwen3-embedding-0-6b")
    lim = spec["containers"][0]["resources"]["limits"]["memory"]
    weights = 4 * qwen3_params(cfg)
    assert weights / 2**30 == pytest.approx(2.22, abs=0.01)  # the figure for its fp32 weights
    assert int(lim.removesuffix("Mi")) * 2**20 >= weights * 1.3
    assert r.workload.sizing.figures["estimated"] is True
    assert spec["nodeSelector"][NFD + "AVX2"] == "true"


@pytest.mark.parametrize("cuda,image,driver_major", [
    ("13.0", "vllm/vllm-openai:v0.21.0", 580), ("12.9", "vllm/vllm-openai:v0.21.0-cu129", 575),
])
def test_vllm_tag_follows_the_driver_cuda(tmp_path, cuda, image, driver_major):
    out = tmp_path / "out"
    r = deploy(DeployConfig(source=str(CONFIGS / "llama-3-8b.json"), out=out, gpu="H100", gpus=1, cuda=cuda))
    docs = written(r, out)
    dep, spec = pod_of(docs, "llama-3-8b")
    assert spec["containers"][0]["image"] == image
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/cuda.driver.major", "operator": "Gt",
                                            "values": [str(driver_major - 1)]}]}]
    assert docs["compose.yaml"][0]["services"]["llama-3-8b"]["ulimits"]["memlock"] == -1


def test_a_driver_no_vllm_image_runs_on_is_a_user_mistake(tmp_path):
    with pytest.raises(InfertuneError, match="no vLLM image .* CUDA 12.2"):
        deploy(DeployConfig(source=str(CONFIGS / "llama-3-8b.json"), out=tmp_path, gpu="H100", gpus=1, cuda="12.2"))


def test_the_dockerfiles_run_the_install_script_the_venv_test_runs():
    root = Path(__file__).parents[3]
    for df in ("Dockerfile.cpu", "Dockerfile.cuda"):
        text = (root / "docker" / df).read_text()
        assert 'sh /src/docker/install.sh /src "$EXTRAS" "$TORCH_INDEX"' in text, df
        copies = [ln for ln in text.splitlines() if ln.startswith("COPY")]
        assert "COPY src /src/src" in copies and all("model" not in ln and "runs" not in ln for ln in copies), df


def test_cpu_request_is_the_tune_hosts_cores_when_tune_left_threads_at_the_default(tmp_path):
    art = artifact(tmp_path, "onnxruntime", "int8", EPYC, quant="ort-static", threads=None)
    m = json.loads((art / "manifest.json").read_text())
    m["fingerprint"].update(cpu_cores_physical=4, cpu_cores_logical=8)
    (art / "manifest.json").write_text(json.dumps(m))
    r = deploy(DeployConfig(source=str(art), out=tmp_path / "out", targets=["k8s"]))
    assert r.workload.cpu_request == "4"
    assert "cpu request 4: the 4 thread(s) tune ran with (the engine's default" in "; ".join(r.workload.sizing.explain)
