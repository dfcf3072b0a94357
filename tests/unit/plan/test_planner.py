"""vllm#10517: Llama-3.1-8B on an RTX 3090, gpu_memory_utilization 0.90, max_model_len 20000 (vLLM 0.6.x,
chunked prefill off, so the profile run batches max_model_len tokens). The log:
  Loading model weights took 14.9888 GB
  total_gpu_memory=23.58GiB peak_torch_memory=17.06GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB
  # GPU blocks: 1952;  Maximum concurrency for 20000 tokens per request: 1.56x
and for max_model_len 29000: kv_cache_size=2.89GiB, # GPU blocks: 1478, 23648 tokens, 0.82x.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infertune.cli.main import app
from infertune.plan.planner import PlanConfig, plan

CONFIGS = Path(__file__).parents[1] / "configs"
LLAMA = str(CONFIGS / "llama-3-8b.json")  # Llama-3.1-8B has the same shapes
GIB = 2**30
PAGE = 16 * 131072  # one block of 16 tokens over all layers: 2 MiB


@pytest.mark.parametrize("logged_gib,blocks,ctx,conc", [(3.81, 1952, 20000, 1.56), (2.89, 1478, 29000, 0.82)])
def test_given_vllms_kv_memory_blocks_bytes_and_concurrency(logged_gib, blocks, ctx, conc):
    r = plan(PlanConfig(model=LLAMA, gpu="RTX-3090", context=ctx, kv_cache_memory_bytes=int(logged_gib * GIB)))
    assert r.kv_bytes_per_token == 131072
    # the log rounds KV memory to 0.01 GiB = 5.12 pages: blocks agree up to that rounding
    half = 0.005 * GIB / PAGE
    assert abs(r.kv_blocks - blocks) <= math.ceil(half)
    assert round(r.max_concurrency, 2) == conc
    assert r.fits == (conc >= 1)  # vLLM refused 29000: "larger than the maximum number of tokens ... (23648)"
    # with the unrounded KV memory the arithmetic is exact: vLLM's blocks, tokens and concurrency
    r = plan(PlanConfig(model=LLAMA, gpu="RTX-3090", context=ctx, kv_cache_memory_bytes=blocks * PAGE))
    assert (r.kv_blocks, r.kv_tokens) == (blocks, blocks * 16)
    assert r.max_concurrency == pytest.approx(blocks / math.ceil(ctx / 16), abs=1e-4)
    assert round(r.max_concurrency, 2) == conc


def test_kv_memory_from_scratch_within_15_percent_of_vllm():
    r = plan(PlanConfig(model=LLAMA, gpu="RTX-3090", context=20000, max_num_batched_tokens=20000, max_num_seqs=256))
    assert r.kv_cache_bytes / GIB == pytest.approx(3.81, rel=0.15)
    assert r.memory_budget["weights"] / GIB == pytest.approx(14.9888, rel=0.01)
    assert r.tensor_parallel_size == 1 and r.fits


def test_smallest_tp_and_valid_sizes():
    r = plan(PlanConfig(model=LLAMA, gpu="L4", context=8192))  # 14.96 GiB bf16 on 24 GiB
    assert r.tensor_parallel_size == 1 and r.dtype == "bf16"
    r = plan(PlanConfig(model=str(CONFIGS / "deepseek-v2-lite.json"), gpu="L4", gpus=8, context=8192))
    assert r.weights_bytes_by_dtype["bf16"] > 24 * GIB * 0.9
    assert r.tensor_parallel_size == 2 and r.valid_tp_sizes == [1, 2, 4, 8]
    r = plan(PlanConfig(model=str(CONFIGS / "deepseek-v2-lite.json"), gpu="L4", gpus=1, context=8192))
    assert r.tensor_parallel_size == 1 and r.dtype in ("fp8", "int4")


def test_decode_roofline_is_weight_bytes_over_bandwidth():
    r = plan(PlanConfig(model=str(CONFIGS / "qwen3-0.6b.json"), gpu="H200", context=1))
    # tied embeddings: the lm_head reads the whole table, so every weight byte is read once per step
    expect = (r.weights_bytes + r.kv_bytes_per_token) / 4.8e12 * 1e3
    assert r.decode_step_ms_roofline == pytest.approx(expect, rel=1e-9)


def test_commands_have_the_planned_flags():
    r = plan(PlanConfig(model=LLAMA, gpu="H100", gpus=2, context=8192, concurrency=32, kv_cache_dtype="fp8",
                        dtype="fp8"))
    v = r.commands["vllm"]
    for flag in ("--max-model-len 8192", "--max-num-seqs 32", "--gpu-memory-utilization 0.9",
                 f"--tensor-parallel-size {r.tensor_parallel_size}", "--kv-cache-dtype fp8"):
        assert flag in v
    # fp8 weights are served from the checkpoint llm-compressor writes, which says its method in config.json:
    # a --quantization flag would be refused by vLLM
    assert v.split()[2] == r.checkpoint.output and "--quantization" not in v
    assert "FP8_DYNAMIC" in r.commands["llm-compressor"]
    d = r.commands["docker"]
    assert "--gpus" in d and ":ro" in d and "/models/" in d and ("--ipc=host" in d or "--shm-size" in d)
    assert r.engine.name == "vllm" and r.engine.reasons


def test_tensorrt_llm_lengths_from_workload(tmp_path):
    """A causal LM's TensorRT route is TensorRT-LLM: no trtexec on an ONNX nothing writes."""
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": n, "output_tokens": 16}) + "\n" for n in range(8, 108)))
    r = plan(PlanConfig(model=str(CONFIGS / "qwen3-0.6b.json"), gpu="L4", workload=wl, concurrency=4))
    assert "trtexec" not in r.commands
    t = r.commands["trtllm-build"]
    assert "--max_input_len 107" in t and "--max_seq_len 256" in t and "--max_batch_size 4" in t
    assert r.context == 256  # max prompt + output (123) rounded up to 256


def test_plan_does_not_import_torch():
    code = (f"from infertune.plan.planner import plan, PlanConfig; import sys; "
            f"plan(PlanConfig(model={LLAMA!r}, gpu='H200')); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_plan_json_contract_and_unknown_gpu():
    res = CliRunner().invoke(app, ["plan", LLAMA, "--gpu", "h200", "--context", "4096", "--concurrency", "8", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    for k in ("weights_bytes", "kv_bytes_per_token", "kv_cache_bytes", "kv_blocks", "max_concurrency",
              "tensor_parallel_size", "decode_step_ms_roofline"):
        assert k in d
    assert set(d["engine"]) >= {"name", "reasons"} and set(d["commands"]) >= {"vllm", "trtllm-build", "docker"}
    res = CliRunner().invoke(app, ["plan", LLAMA, "--gpu", "voodoo5"])
    assert res.exit_code != 0 and "unknown GPU" in str(res.exception)
