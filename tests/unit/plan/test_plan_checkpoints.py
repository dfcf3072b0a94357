"""plan names the step that makes a quantized checkpoint and serves its output; it never puts a
--quantization flag on a directory that is not quantized (it used to print `--quantization awq_marlin` for
Llama-3-8B's bf16 weights on an 8 GiB laptop GPU)."""

import json
import shlex
from pathlib import Path

import pytest

from infertune.errors import InfertuneError
from infertune.hardware.gpu_specs import gpu_table
from infertune.plan.planner import PlanConfig, plan
from infertune.workloads.buckets import stratified_split

CONFIGS = Path(__file__).parents[1] / "configs"
LLAMA = str(CONFIGS / "llama-3-8b.json")
QUANTIZED = ("fp8", "int8", "int4")


def served(cmd: str) -> str:
    return shlex.split(cmd)[2]  # vllm serve PATH ...


def by_scheme(r) -> dict:
    return {q["scheme"]: q for q in r.quant_candidates}


def test_rtx_4060_laptop_serves_the_w4a16_checkpoint_its_step_makes():
    r = plan(PlanConfig(model=LLAMA, gpu="RTX 4060 Laptop"))
    assert r.dtype == "int4" and r.fits  # 14.96 GiB of bf16 and 8.46 of 8-bit weights do not fit 8 GiB
    step = r.checkpoint
    assert step.scheme == "w4a16" and step.output.endswith("llama-3-8b-W4A16-G128")
    assert "GPTQModifier" in step.command and '"W4A16"' in step.command
    assert step.calibration["needed"] and step.calibration["split"].startswith("30% of each token-length bucket")
    assert r.commands["llm-compressor"] == step.command
    assert served(r.commands["vllm"]) == step.output
    assert f"{step.output}:/models/" in r.commands["docker"]  # docker mounts the checkpoint, not the bf16 weights
    assert not any("--quantization" in c for c in r.commands.values())
    q = by_scheme(r)
    assert (q["fp8-dynamic"]["status"], q["fp8-dynamic"]["fits"]) == ("candidate", False)  # CC 8.9 has FP8
    assert (q["int8-w8a8"]["fits"], q["w4a16"]["fits"]) == (False, True)
    assert q["w4a16"]["kernel"].startswith("Marlin") and served(q["w4a16"]["vllm"]) == step.output


def test_h100_serves_bf16_and_names_every_quantized_checkpoint_with_its_step():
    r = plan(PlanConfig(model=LLAMA, gpu="H100"))
    assert r.dtype == "bf16" and r.checkpoint is None and "llm-compressor" not in r.commands
    assert served(r.commands["vllm"]) == str(CONFIGS)
    q = by_scheme(r)
    assert all(x["status"] == "candidate" and x["fits"] for x in q.values())
    fp8 = q["fp8-dynamic"]
    assert '"FP8_DYNAMIC"' in fp8["checkpoint"]["command"] and fp8["checkpoint"]["calibration"]["needed"] is False
    assert served(fp8["vllm"]) == fp8["checkpoint"]["output"] and "--quantization" not in fp8["vllm"]
    assert "SmoothQuantModifier" in q["int8-w8a8"]["checkpoint"]["command"]
    assert q["w4a16"]["kernel"].startswith("Machete")
    d = json.loads(r.model_dump_json())  # new keys beside the old ones, none renamed
    assert {"checkpoint", "quant_candidates", "kv_cache_fp8", "commands", "dtype", "kv_cache_dtype"} <= set(d)


def test_h100_fp8_kv_cache_names_flashattention_3():
    r = plan(PlanConfig(model=LLAMA, gpu="H100", kv_cache_dtype="fp8"))
    assert "--kv-cache-dtype fp8" in r.commands["vllm"] and r.kv_cache_fp8["kernel"].startswith("FlashAttention 3")
    assert any(n.startswith("--kv-cache-dtype fp8 on H100-SXM: FlashAttention 3") for n in r.notes)


def test_calibration_is_the_workloads_calibration_split(tmp_path):
    wl = tmp_path / "chats.jsonl"
    texts = [("word " * (4 * (1 + i % 40))).strip() for i in range(100)]
    wl.write_text("".join(json.dumps({"prompt": t, "max_tokens": 32}) + "\n" for t in texts))
    r = plan(PlanConfig(model=LLAMA, gpu="RTX 4060 Laptop", workload=wl))
    c = r.checkpoint.calibration
    lengths = [max(1, round(len(t) / 4)) for t in texts]  # no tokenizer.json beside the config: 4 chars a token
    n = len(stratified_split(lengths, 0.7)[0])
    assert c["source"] == str(wl) and c["requests"] == n and 20 <= n <= 40
    assert r.checkpoint.oneshot["num_calibration_samples"] == n


def test_t4_falls_back_to_int8_w8a8_not_fp8():
    r = plan(PlanConfig(model=LLAMA, gpu="T4"))  # 16 GiB, CC 7.5: no bf16 fit, no FP8 tensor cores
    assert r.dtype == "int8" and r.checkpoint.scheme == "int8-w8a8"
    assert "--dtype float16" in r.commands["vllm"]  # T4 has no bf16 activations
    assert by_scheme(r)["fp8-dynamic"]["status"] == "dropped"


def test_a_16_bit_plan_below_compute_capability_8_is_fp16_everywhere():
    """A model whose 16-bit weights fit a T4 (CC 7.5): vLLM refuses --dtype bfloat16 there, so every command
    says float16, and the plan says why."""
    r = plan(PlanConfig(model=str(CONFIGS / "qwen3-0.6b.json"), gpu="T4"))
    assert r.dtype == "fp16"
    assert "--dtype float16" in r.commands["vllm"] and "bfloat16" not in " ".join(r.commands.values())
    assert any("has no bf16" in n for n in r.notes)
    q = plan(PlanConfig(model=LLAMA, gpu="T4"))  # ModelOpt's int8 path: its other tensors in fp16 too
    assert "bfloat16" not in q.commands["tensorrt-llm-checkpoint"]
    h = plan(PlanConfig(model=str(CONFIGS / "qwen3-0.6b.json"), gpu="H100"))
    assert h.dtype == "bf16" and "--dtype bfloat16" in h.commands["vllm"]


def test_bf16_asked_for_below_compute_capability_8_is_a_user_mistake():
    with pytest.raises(InfertuneError, match="no bf16.*--dtype fp16"):
        plan(PlanConfig(model=str(CONFIGS / "qwen3-0.6b.json"), gpu="T4", dtype="bf16"))


@pytest.mark.parametrize("gpu", [g["name"] for g in gpu_table()])
@pytest.mark.parametrize("dtype", ["auto", *QUANTIZED])
def test_no_quantization_flag_anywhere_and_a_quantized_plan_always_has_its_step(gpu, dtype):
    try:
        r = plan(PlanConfig(model=LLAMA, gpu=gpu, dtype=dtype, context=4096))
    except InfertuneError as e:  # a scheme vLLM cannot serve on that GPU (INT8 W8A8 on Blackwell)
        assert dtype == "int8" and "10.0" in str(e)
        return
    cmds = [*r.commands.values(), *(q["vllm"] for q in r.quant_candidates if "vllm" in q)]
    assert not any("--quantization" in c for c in cmds)
    if r.dtype in QUANTIZED:
        assert r.checkpoint is not None and served(r.commands["vllm"]) == r.checkpoint.output
        assert r.commands["llm-compressor"] == r.checkpoint.command
    else:
        assert r.checkpoint is None and "llm-compressor" not in r.commands


def test_a_directory_that_is_a_checkpoint_already_is_served_as_it_is(tmp_path):
    d = tmp_path / "Llama-3-8B-W4A16"
    d.mkdir()
    cfg = json.loads(Path(LLAMA).read_text())
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}
    (d / "config.json").write_text(json.dumps(cfg))
    r = plan(PlanConfig(model=str(d), gpu="RTX 4060 Laptop"))
    assert r.dtype == "int4" and r.checkpoint is None and "llm-compressor" not in r.commands
    assert served(r.commands["vllm"]) == str(d) and "--quantization" not in r.commands["vllm"]
    assert any("quantized checkpoint already (compressed-tensors" in n for n in r.notes)
    assert not any("checkpoint" in q for q in r.quant_candidates)  # nothing to make


def test_a_scheme_vllm_cannot_serve_on_the_gpu_is_a_user_mistake_that_names_what_it_can():
    with pytest.raises(InfertuneError, match=r"--dtype int8 on B200: .*10\.0.*serves there: fp8, int4"):
        plan(PlanConfig(model=LLAMA, gpu="B200", dtype="int8"))
    r = plan(PlanConfig(model=LLAMA, gpu="A100", dtype="fp8"))  # dropped as a candidate, yet vLLM loads it
    assert r.checkpoint.scheme == "fp8-dynamic" and any("FP8 Marlin" in n for n in r.notes)


def test_a_users_int8_checkpoint_on_blackwell_is_served_with_the_reason_it_will_not_run_well(tmp_path):
    d = tmp_path / "Llama-3-8B-W8A8"
    d.mkdir()
    cfg = json.loads(Path(LLAMA).read_text())
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8}}}}
    (d / "config.json").write_text(json.dumps(cfg))
    r = plan(PlanConfig(model=str(d), gpu="B200", dtype="int4"))  # --dtype cannot change what the files hold
    assert r.dtype == "int8" and r.checkpoint is None
    assert any(n.startswith("--dtype int4 ignored") for n in r.notes)
    assert any(n.startswith("the checkpoint's int8 weights on B200: ") and "10.0" in n for n in r.notes)
