"""plan bugs, one test each: GPU count, nvidia-smi names, H100 PCIe, --max-num-seqs, model names,
llama.cpp command, local GPU detection."""

import shlex
from pathlib import Path

import pytest

from infertune.errors import InfertuneError
from infertune.hardware.gpu_specs import find_gpu
from infertune.plan.planner import PlanConfig, plan

CONFIGS = Path(__file__).parents[1] / "configs"
DSV2 = str(CONFIGS / "deepseek-v2-lite.json")
LLAMA = str(CONFIGS / "llama-3-8b.json")


def _flag(cmd: str, flag: str) -> str:
    parts = shlex.split(cmd)
    return parts[parts.index(flag) + 1]


@pytest.mark.parametrize("smi_name,ours", [
    ("NVIDIA GeForce RTX 4060 Laptop GPU", "RTX-4060-Laptop"), ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"), ("Tesla T4", "T4"), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
])
def test_nvidia_smi_names_are_accepted(smi_name, ours):
    assert find_gpu(smi_name)["name"] == ours


def test_h100_pcie_has_its_own_figures_and_source():
    g = find_gpu("H100 PCIe")
    assert (g["memory_gib"], g["bandwidth_gbs"], g["cc"]) == (80, 2000, "9.0")
    assert g["bf16_tflops"] == pytest.approx(1513 / 2) and g["source"].startswith("https://")


def test_laptop_without_gpus_is_one_gpu_with_a_concrete_answer_and_its_command():
    r = plan(PlanConfig(model=DSV2, gpu="NVIDIA GeForce RTX 4060 Laptop GPU", context=4096))
    assert r.valid_tp_sizes == [1] and (r.tensor_parallel_size or 1) == 1
    assert _flag(r.commands["vllm"], "--tensor-parallel-size") == "1"
    assert "device=" not in r.commands["docker"]  # not an 8-GPU docker line
    assert r.engine.name in ("llama.cpp", "vllm")
    if r.engine.name == "llama.cpp":  # 16 B parameters do not fit 8 GiB even at 4 bit
        cmd = r.commands["llama.cpp"]
        assert cmd.startswith("llama-server -m ") and "Q4_K_M.gguf" in cmd and int(_flag(cmd, "-ngl")) >= 0
    else:
        assert r.dtype in ("int4", "fp8")


def test_laptop_stays_one_gpu_even_when_gpus_says_more():
    r = plan(PlanConfig(model=DSV2, gpu="RTX-4060-Laptop", gpus=8, context=4096))
    assert r.valid_tp_sizes == [1] and any("laptop part" in n for n in r.notes)


def test_no_gpus_means_one_gpu_and_says_so():
    r = plan(PlanConfig(model=DSV2, gpu="L4", context=8192))
    assert r.valid_tp_sizes == [1] and any("--gpus" in n for n in r.notes)


def test_max_num_seqs_from_concurrency_else_from_kv_capacity_stated():
    r = plan(PlanConfig(model=LLAMA, gpu="H100", context=8192, concurrency=32))
    assert _flag(r.commands["vllm"], "--max-num-seqs") == "32" == str(r.max_num_seqs)
    r = plan(PlanConfig(model=LLAMA, gpu="H100", context=8192))
    seqs = int(_flag(r.commands["vllm"], "--max-num-seqs"))
    assert seqs == min(256, int(r.max_concurrency)) and seqs > 1  # not a throttled server of 1
    assert any(f"--max-num-seqs {seqs} from the KV capacity" in n for n in r.notes)


def test_model_name_comes_from_the_directory_not_config(tmp_path):
    d = tmp_path / "Meta-Llama-3-8B"
    d.mkdir()
    (d / "config.json").write_text(Path(LLAMA).read_text())
    r = plan(PlanConfig(model=str(d / "config.json"), gpu="H100"))
    assert "/models/Meta-Llama-3-8B" in r.commands["docker"] and "/models/config" not in r.commands["docker"]
    assert f"{d}:/models/Meta-Llama-3-8B:ro" in r.commands["docker"]


def test_hub_id_is_not_mounted_as_a_named_volume():
    from infertune.plan.commands import docker_cmd

    cmd = docker_cmd("meta-llama/Llama-3.1-8B", "Llama-3.1-8B", "vllm serve meta-llama/Llama-3.1-8B --max-model-len 8",
                     1, 1)
    assert ":/models/" not in cmd and "--model meta-llama/Llama-3.1-8B" in cmd


def test_local_gpu_is_used_when_gpu_is_absent(monkeypatch):
    import infertune.hardware.gpus as probes

    monkeypatch.setattr(probes, "gpus_nvml", lambda: None)
    monkeypatch.setattr(probes, "gpus_smi", lambda: {"available": True, "gpus": [
        {"name": "NVIDIA H100 PCIe", "memory_mib": 81559}]})
    r = plan(PlanConfig(model=LLAMA, context=8192))
    assert r.gpu["name"] == "H100-PCIe" and any("this host's NVIDIA H100 PCIe" in n for n in r.notes)
    assert r.memory_budget["total"] == pytest.approx(81559 / 1024 * 2**30, rel=1e-3)  # the driver's figure


def test_no_local_gpu_says_so(monkeypatch):
    import infertune.hardware.gpus as probes

    monkeypatch.setattr(probes, "gpus_nvml", lambda: None)
    monkeypatch.setattr(probes, "gpus_smi", lambda: {"available": False, "error": "nvidia-smi not found"})
    with pytest.raises(InfertuneError, match="no local GPU found.*nvidia-smi not found.*--gpu"):
        plan(PlanConfig(model=LLAMA))


def test_pipeline_parallel_halves_weights_and_kv_per_gpu():
    one = plan(PlanConfig(model=LLAMA, gpu="H100", gpus=8, tensor_parallel_size=8, context=8192))
    two = plan(PlanConfig(model=LLAMA, gpu="H100", gpus=8, tensor_parallel_size=8, pipeline_parallel_size=2,
                          context=8192))
    assert two.memory_budget["weights"] == pytest.approx(one.memory_budget["weights"] / 2)
    assert two.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu // 2
    assert _flag(two.commands["vllm"], "--pipeline-parallel-size") == "2"


def test_moe_model_gets_expert_parallel_advice_with_several_gpus():
    r = plan(PlanConfig(model=DSV2, gpu="H100", gpus=2, tensor_parallel_size=2, context=8192))
    assert any("--enable-expert-parallel" in n for n in r.notes)


def test_tensor_parallel_over_pcie_is_flagged_and_nvlink_is_not():
    pcie = plan(PlanConfig(model=LLAMA, gpu="H100 PCIe", gpus=2, tensor_parallel_size=2, context=8192))
    assert any("TP=2 over PCIe (assumed for H100-PCIe" in n for n in pcie.notes)
    sxm = plan(PlanConfig(model=LLAMA, gpu="H100", gpus=2, tensor_parallel_size=2, context=8192))
    assert any("TP=2 over NVLink" in n for n in sxm.notes) and not any("over PCIe" in n for n in sxm.notes)
    bridged = plan(PlanConfig(model=LLAMA, gpu="H100 PCIe", gpus=2, tensor_parallel_size=2, context=8192,
                              interconnect="nvlink"))
    assert any("TP=2 over NVLink (given)" in n for n in bridged.notes)
    geforce = plan(PlanConfig(model=LLAMA, gpu="RTX-4090", gpus=2, tensor_parallel_size=2, context=4096))
    assert any("NCCL_P2P_DISABLE=1" in n for n in geforce.notes)


def test_chunked_prefill_and_prefix_caching_guidance_names_the_batched_tokens():
    r = plan(PlanConfig(model=LLAMA, gpu="L4", context=4096, max_num_batched_tokens=4096))
    assert any("--max-num-batched-tokens 4096" in n and "prefix caching" in n for n in r.notes)
