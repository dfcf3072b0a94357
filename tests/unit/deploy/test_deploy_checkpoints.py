"""deploy of Llama-3-8B on an RTX 4060 Laptop and on an H100 names the llm-compressor step when the
weights are quantized, mounts the checkpoint it writes, and never passes vLLM a --quantization flag."""

from pathlib import Path

import yaml

from infertune.deploy.config import DeployConfig
from infertune.deploy.emit import build, deploy

CONFIGS = Path(__file__).parents[1] / "configs"
LLAMA = str(CONFIGS / "llama-3-8b.json")


def _container_args(objs: list[dict]) -> list[str]:
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    return dep["spec"]["template"]["spec"]["containers"][0]["args"]


def test_rtx_4060_laptop_deploys_the_w4a16_checkpoint_and_names_its_step(tmp_path):
    r = deploy(DeployConfig(source=LLAMA, out=tmp_path, gpu="RTX 4060 Laptop", cuda="13.0"))
    w = r.workload
    assert w.checkpoint["scheme"] == "w4a16" and w.model_dir == w.checkpoint["output"]
    assert w.model_dir.endswith("llama-3-8b-W4A16-G128")
    step = [n for n in w.notes if n.startswith("int4 weights: make the checkpoint before the pods start")]
    assert len(step) == 1 and w.checkpoint["command"] in step[0] and "llmcompressor==" in step[0]
    compose = yaml.safe_load((tmp_path / "compose.yaml").read_text())
    (svc,) = compose["services"].values()
    assert svc["volumes"][0]["source"] == w.checkpoint["output"]  # the pod mounts the checkpoint, not bf16 weights
    args = _container_args(list(yaml.safe_load_all((tmp_path / "k8s/llama-3-8b.yaml").read_text())))
    assert args[0] == w.mount and "--quantization" not in args and "--max-model-len" in args


def test_h100_deploys_bf16_and_lists_the_checkpoints_it_could_serve():
    w, docs, _ = build(DeployConfig(source=LLAMA, gpu="H100", cuda="13.0"))
    assert w.checkpoint is None and w.model_dir == str(CONFIGS)
    (alt,) = [n for n in w.notes if "quantized checkpoints vLLM serves on H100-SXM" in n]
    assert "FP8 W8A8 on CUTLASS FP8 scaled-mm" in alt and "INT4 W4A16 (GPTQ) on Machete" in alt
    assert "--dtype fp8|int8|int4" in alt
    assert "--quantization" not in _container_args(docs["k8s/llama-3-8b.yaml"])


def test_h100_fp8_deploys_the_fp8_dynamic_checkpoint():
    w, docs, _ = build(DeployConfig(source=LLAMA, gpu="H100", dtype="fp8", cuda="13.0"))
    assert w.checkpoint["scheme"] == "fp8-dynamic" and w.model_dir.endswith("llama-3-8b-FP8-Dynamic")
    assert w.checkpoint["calibration"]["needed"] is False and "FP8_DYNAMIC" in w.checkpoint["command"]
    args = _container_args(docs["k8s/llama-3-8b.yaml"])
    assert "--quantization" not in args and args[args.index("--dtype") + 1] == "bfloat16"
