"""`plan` for embedding models. MiniLM (encoder) and a Qwen3-Embedding-0.6B-shaped decoder on an
RTX 4060 Laptop and an H100: fits on one GPU, no KV-cache figures, a vLLM pooling-runner command; the
memory and throughput figures are checked against the formulas in plan/embed.py, computed here by hand."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infertune.cli.main import app
from infertune.errors import InfertuneError
from infertune.plan.planner import PlanConfig, plan

CONFIGS = Path(__file__).parents[1] / "configs"
QWEN3 = CONFIGS / "qwen3-0.6b.json"
GIB = 2**30
NO_KV = (r"\bKV\b", r"max concurrency", r"\bdecode\b", r"KiB/token", r"--max-num-seqs", r"kv-cache")


@pytest.fixture(scope="module")
def qwen3_embedding(tmp_path_factory):
    """Qwen3-Embedding-0.6B's shape: Qwen3-0.6B's config (the embedding model is that backbone) in a directory
    named as the hub names it, which is what tells model_kind it embeds."""
    d = tmp_path_factory.mktemp("hub") / "Qwen3-Embedding-0.6B"
    d.mkdir()
    (d / "config.json").write_text(QWEN3.read_text())
    return str(d)


def _cli(*args):
    res = CliRunner().invoke(app, ["plan", *args])
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize("gpu", ["RTX 4060 Laptop", "H100"])
@pytest.mark.parametrize("which", ["minilm", "qwen3-embedding"])
def test_embedder_fits_one_gpu_without_kv_figures_and_with_a_pooling_runner(which, gpu, qwen3_embedding):
    model = "minilm" if which == "minilm" else qwen3_embedding
    r = plan(PlanConfig(model=model, gpu=gpu))
    assert r.task == "embed" and r.embedding is not None
    assert r.embedding.arch == ("encoder" if which == "minilm" else "decoder")
    assert r.fits and r.tensor_parallel_size == 1 and r.valid_tp_sizes == [1]
    assert r.memory_budget["weights"] + r.memory_budget["activation_peak"] + r.memory_budget["non_torch"] <= (
        r.gpu["memory_gib"] * GIB * 0.9)
    assert r.kv_bytes_per_token is None and r.kv_cache_bytes is None and r.max_concurrency is None
    assert r.decode_step_ms_roofline is None and r.roofline == {}
    v = shlex.split(r.commands["vllm-pooling"])
    assert v[:2] == ["vllm", "serve"] and v[v.index("--runner") + 1] == "pooling"
    assert ("--convert" in v) == (which != "minilm")  # a *ForCausalLM checkpoint must be converted to embed
    assert v[v.index("--convert") + 1] == "embed" if "--convert" in v else True
    assert int(v[v.index("--max-num-batched-tokens") + 1]) >= int(v[v.index("--max-model-len") + 1])
    assert float(v[v.index("--gpu-memory-utilization") + 1]) < 0.9  # not 90% of the GPU for a cache
    assert "--max-num-seqs" not in v and "--kv-cache-dtype" not in v
    assert r.commands["infertune-serve"].startswith(f"infertune serve {shlex.quote(model)} --device cuda")
    assert [e.name for e in r.embedding.engines] == ["infertune-serve", "vllm-pooling", "tensorrt"]
    assert sum(e.chosen for e in r.embedding.engines) == 1 and all(e.why for e in r.embedding.engines)
    out = _cli(model, "--gpu", gpu)
    assert "fits on 1 GPU: yes" in out and "--runner pooling" in out
    for pattern in NO_KV:
        assert not re.search(pattern, out), (pattern, out)


def test_cli_minilm_on_h100_has_no_kv_line():
    out = _cli("minilm", "--gpu", "H100")
    assert not [line for line in out.splitlines() if "KV" in line]
    assert "TP=" not in out and "fits: False" not in out


def test_trtexec_shapes_cover_every_input_token_type_ids_included(qwen3_embedding):
    r = plan(PlanConfig(model="minilm", gpu="H100"))
    t = shlex.split(r.commands["trtexec"])
    for flag in ("--minShapes", "--optShapes", "--maxShapes"):
        args = [x for x in t if x.startswith(flag + "=")]
        assert len(args) >= 2  # one optimisation profile per length bucket
        for arg in args:
            assert [s.split(":")[0] for s in arg.split("=", 1)[1].split(",")] == [
                "input_ids", "attention_mask", "token_type_ids"]
    mx = [x for x in t if x.startswith("--maxShapes=")][-1]
    assert mx.endswith("x256")  # MiniLM's sentence_bert_config max_seq_length
    assert r.context == 256 and r.embedding.inputs == ["input_ids", "attention_mask", "token_type_ids"]
    r = plan(PlanConfig(model=qwen3_embedding, gpu="H100"))
    assert r.embedding.inputs == ["input_ids", "attention_mask"]  # Qwen3 has no token types
    assert "token_type_ids" not in r.commands["trtexec"]
    assert r.commands["onnx-export"] in r.embedding.engines[2].command


def test_memory_and_throughput_follow_the_stated_model(qwen3_embedding):
    r = plan(PlanConfig(model=qwen3_embedding, gpu="H100", max_num_batched_tokens=8192, context=512))
    e = r.embedding
    h, layers, inter, b = 1024, 28, 3072, 2
    assert e.batch_tokens == 8192 and r.context == 512
    assert e.activation_bytes == 8192 * b * (h * layers + 3 * inter)  # gated MLP: gate+up (2I) and product (I)
    # FLOPs per token at 256-token inputs: 2 x Linear weights + causal half of 4 x heads x head_dim x L per layer
    linear = layers * (h * 16 * 128 + 2 * h * 8 * 128 + 16 * 128 * h + 3 * h * inter)
    assert e.flops_per_token == pytest.approx(2 * linear + 0.5 * layers * 2 * 16 * 256 * 256)
    compute_ms = 8192 * e.flops_per_token / 989.5e12 * 1e3  # H100 SXM dense bf16
    assert e.batch_ms_compute == pytest.approx(compute_ms)
    assert e.tokens_per_s == pytest.approx(8192 / (max(e.batch_ms_compute, e.batch_ms_memory) / 1e3))
    assert e.bound == ("compute" if e.batch_ms_compute >= e.batch_ms_memory else "memory")
    assert e.items_per_s == pytest.approx(e.tokens_per_s / 256)
    # the laptop part publishes no tensor peak: the memory side is the only bound, and it says so
    r = plan(PlanConfig(model=qwen3_embedding, gpu="RTX 4060 Laptop"))
    assert r.embedding.batch_ms_compute is None and r.embedding.bound == "memory"


def test_task_overrides_the_decision_both_ways(qwen3_embedding):
    r = plan(PlanConfig(model=str(QWEN3), gpu="H100", task="embed"))
    assert r.task == "embed" and r.embedding.why == "--task embed"
    assert "--task embed" in r.commands["infertune-serve"]  # serve must be told too
    r = plan(PlanConfig(model=qwen3_embedding, gpu="H100", task="generate"))
    assert r.task == "generate" and r.kv_bytes_per_token == 2 * 28 * 8 * 128 * 2 and "vllm" in r.commands
    out = _cli(str(QWEN3), "--gpu", "H100", "--task", "embed", "--json")
    assert json.loads(out[out.index("{"):])["task"] == "embed"
    res = CliRunner().invoke(app, ["plan", "minilm", "--gpu", "H100", "--task", "generate"])
    assert isinstance(res.exception, InfertuneError) and "encoder" in str(res.exception)  # main() exits 2


def test_decoder_embedder_deploys_as_infertune_serve(qwen3_embedding, tmp_path):
    from infertune.deploy.config import DeployConfig
    from infertune.deploy.pod_recipe import resolve_workload

    w = resolve_workload(DeployConfig(source=qwen3_embedding, out=tmp_path, device="cuda"))
    assert w.engine == "infertune-serve" and w.gpus_per_pod == 1


def test_embedding_plan_does_not_import_torch():
    code = ("from infertune.plan.planner import plan, PlanConfig; import sys; "
            "plan(PlanConfig(model='minilm', gpu='H100')); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_more_gpus_means_replicas_not_tensor_parallel():
    r = plan(PlanConfig(model="minilm", gpu="H100", gpus=4))
    assert r.valid_tp_sizes == [1] and r.tensor_parallel_size == 1
    assert "--tensor-parallel-size" not in r.commands["vllm-pooling"]
    assert any("one replica each" in n for n in r.notes)
