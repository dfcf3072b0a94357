"""The TensorRT steps plan prints and export writes are right. Encoders: trtexec with one profile per
length bucket of the tokenized workload, capped at the model's limit, every input named; decoders: the
TensorRT-LLM route and no trtexec on a file nothing makes. Every printed flag is checked against the tools'
documented flags (data/tool_flags.toml); the checker itself is shown to catch a misspelt flag."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from infertune.plan.planner import PlanConfig, plan
from infertune.plan.tensorrt import (
    length_profiles,
    script,
    tool_flags,
    trtexec_bench,
    trtexec_build,
    trtllm_steps,
)
from infertune.workloads.texts import sample_path

CONFIGS = Path(__file__).parents[1] / "configs"
LLAMA = str(CONFIGS / "llama-3-8b.json")
TOOLS = {"trtexec": "trtexec", "trtllm-build": "trtllm-build", "trtllm-serve": "trtllm-serve",
         "quantize.py": "quantize.py", "convert_checkpoint.py": "convert_checkpoint.py"}


def unknown_flags(command: str) -> list[str]:
    """Flags in a shell line (commands joined by &&) that are not in the documented list of their tool."""
    bad = []
    for part in command.split("&&"):
        words = shlex.split(part)
        if not words:
            continue
        tool = Path(words[1]).name if words[0] == "python" else words[0]
        if tool not in TOOLS:
            continue
        allowed = set(tool_flags()[TOOLS[tool]]["flags"])
        bad += [w for w in words if w.startswith("--") and w.split("=", 1)[0] not in allowed]
    return bad


def test_the_checker_catches_a_misspelt_flag():
    assert unknown_flags("trtexec --onnx=m.onnx --minShape=input_ids:1x1") == ["--minShape=input_ids:1x1"]
    assert unknown_flags("trtllm-build --checkpoint_dir c --max_batch 8") == ["--max_batch"]
    assert unknown_flags("trtexec --onnx=m.onnx --fp16 && infertune export x --to onnx") == []


def _shapes(cmd: str, flag: str) -> list[dict[str, tuple[int, int]]]:
    out = []
    for w in shlex.split(cmd):
        if w.startswith(flag + "="):
            out.append({k: tuple(int(x) for x in v.split("x")) for k, v in
                        (s.split(":") for s in w.split("=", 1)[1].split(","))})
    return out


def test_plan_minilm_on_l4_has_a_profile_per_bucket_capped_at_its_positions():
    r = plan(PlanConfig(model="minilm", gpu="L4", workload=sample_path()))
    cmd = r.commands["trtexec"]
    assert unknown_flags(cmd) == [] and unknown_flags(r.commands["trtexec-bench"]) == []
    mins, opts, maxs = (_shapes(cmd, f) for f in ("--minShapes", "--optShapes", "--maxShapes"))
    assert len(mins) == len(opts) == len(maxs) >= 2  # one profile per length bucket, not one for all
    names = ["input_ids", "attention_mask", "token_type_ids"]
    assert all(list(p) == names for p in (*mins, *opts, *maxs))  # every input named in every profile
    lo = [p["input_ids"][1] for p in mins]
    hi = [p["input_ids"][1] for p in maxs]
    assert lo[0] == 1 and all(lo[i + 1] == hi[i] + 1 for i in range(len(hi) - 1))  # contiguous: no length unserved
    assert max(hi) == r.context <= 512  # MiniLM: 512 positions, 256 in its sentence_bert_config
    for mn, op, mx in zip(mins, opts, maxs, strict=True):
        for i in names:
            assert mn[i][0] <= op[i][0] <= mx[i][0] and mn[i][1] <= op[i][1] <= mx[i][1]
    # the sample has inputs over 256 tokens: plan says so instead of planning shapes the model cannot take
    assert any("capped at 256 tokens" in n and "truncated" in n for n in r.notes), r.notes
    assert any("model's tokenizer" in n for n in r.notes), r.notes
    for flag in ("--timingCacheFile=", "--memPoolSize=workspace:", "--builderOptimizationLevel=", "--bf16"):
        assert flag in cmd, flag
    assert "--useCudaGraph" in r.commands["trtexec-bench"]
    assert r.commands["onnx-export"].startswith("infertune export minilm --to onnx")


def test_token_counts_come_from_the_tokenizer_not_four_characters(tmp_path):
    wl = tmp_path / "cjk.jsonl"
    wl.write_text("".join(json.dumps({"input": "这是一个用来测试分词器长度估计的中文句子，" * k}) + "\n"
                          for k in (1, 4, 12)))
    r = plan(PlanConfig(model="minilm", gpu="L4", workload=wl))
    from tokenizers import Tokenizer

    from infertune.models.resolve import resolve_model

    tok = Tokenizer.from_file(str(resolve_model("minilm").path / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    real = max(len(tok.encode(json.loads(line)["input"]).ids) for line in wl.read_text().splitlines())
    estimated = round(len(json.loads(wl.read_text().splitlines()[-1])["input"]) / 4)
    assert r.workload["prompt_p100"] == real and real > 2 * estimated  # CJK: ~1 token per character, not 4
    assert "model's tokenizer" in r.workload["lengths"]


def test_without_a_tokenizer_the_estimate_says_so(tmp_path):
    wl = tmp_path / "w.txt"
    wl.write_text("a short line of text\n" * 3)
    r = plan(PlanConfig(model=LLAMA, gpu="H100", workload=wl))  # a config.json alone: no tokenizer.json
    assert "estimated at 4 characters per token" in r.workload["lengths"]
    assert "CJK" in r.workload["lengths"]


def test_decoder_plan_is_the_tensorrt_llm_route_not_trtexec(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": n, "output_tokens": 200}) + "\n" for n in range(100, 1100, 10)))
    r = plan(PlanConfig(model=LLAMA, gpu="H100", fixed_shapes=True, workload=wl))
    assert r.engine.name == "tensorrt-llm"
    assert not any("trtexec" in c or ".onnx" in c for c in r.commands.values()), r.commands
    ck, build, serve = (r.commands[k] for k in ("tensorrt-llm-checkpoint", "trtllm-build", "trtllm-serve"))
    for c in (ck, build, serve):
        assert unknown_flags(c) == [], c
    b = shlex.split(build)
    assert b[0] == "trtllm-build" and b[b.index("--checkpoint_dir") + 1] == "trtllm-ckpt"
    assert int(b[b.index("--max_input_len") + 1]) == r.workload["prompt_p100"] == 1090
    assert int(b[b.index("--max_seq_len") + 1]) == r.context >= 1090 + 200
    assert int(b[b.index("--max_batch_size") + 1]) == r.max_num_seqs
    assert "--output_dir trtllm-ckpt" in ck and shlex.split(serve)[1] == "trtllm-engine"


def test_plan_caps_a_generator_context_at_its_positions(tmp_path):
    cfg = json.loads(Path(LLAMA).read_text())
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"prompt_tokens": n, "output_tokens": 512}) + "\n" for n in (100, 9000, 9500)))
    r = plan(PlanConfig(model=LLAMA, gpu="H100", workload=wl))
    assert r.context == cfg["max_position_embeddings"]
    assert any("2 of 3 workload requests need more" in n for n in r.notes), r.notes


@pytest.fixture
def fake_tools(tmp_path):
    """trtexec, trtllm-build, trtllm-serve and python stand-ins that record their argv, one JSON list a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    for tool in ("trtexec", "trtllm-build", "trtllm-serve", "python"):
        (bin_dir / tool).write_text("#!/usr/bin/env bash\nprintf '%s\\0' \"$(basename \"$0\")\" \"$@\" | "
                                    f"{shlex.quote(sys.executable)} -c 'import sys,json; "
                                    f"print(json.dumps(sys.stdin.read().split(chr(0))[:-1]))' >> {log}\n")
        (bin_dir / tool).chmod(0o755)
    return bin_dir, log


def _run_script(text: str, where: Path, fake) -> list[list[str]]:
    bin_dir, log = fake
    path = where / "s.sh"
    path.write_text(text)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TRTLLM": "/opt/TensorRT-LLM"}
    subprocess.run(["bash", str(path)], cwd=where, env=env, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_written_scripts_pass_exactly_the_documented_flags(tmp_path, fake_tools):
    """The scripts' comments sit inside bash arrays: run them with stand-in tools and read what each received."""
    inputs = ("input_ids", "attention_mask", "token_type_ids")
    profiles, over = length_profiles([3, 9, 20, 40, 41, 90, 200, 700], 512, 16384)
    assert over == 1 and profiles[-1].max_len == 512 and len(profiles) == 6  # 700 counts as 512, in 257-512
    text = script([("build", trtexec_build("model.onnx", "model.plan", profiles, inputs, "fp16", 4096)),
                   ("time", trtexec_bench("model.plan", profiles[0], inputs))], "test")
    calls = _run_script(text, tmp_path, fake_tools)
    assert [c[0] for c in calls] == ["trtexec", "trtexec"]
    build = calls[0]
    assert sum(a.startswith("--minShapes=") for a in build) == len(profiles)
    assert not [a for c in calls for a in c[1:] if a.split("=", 1)[0] not in tool_flags()["trtexec"]["flags"]]
    steps = trtllm_steps("/models/llama", "llama", "fp8", tp=2, pp=1, max_batch=16, max_input=900, max_seq=1400,
                         max_tokens=8192)
    (tmp_path / "calls.jsonl").unlink()
    calls = _run_script(script(list(steps.items()), "test"), tmp_path, fake_tools)
    assert [c[0] for c in calls] == ["python", "trtllm-build", "trtllm-serve"]
    assert calls[0][1] == "/opt/TensorRT-LLM/examples/quantization/quantize.py"  # $TRTLLM expanded
    for c, tool in zip(calls, ("quantize.py", "trtllm-build", "trtllm-serve"), strict=True):
        args = c[2:] if tool == "quantize.py" else c[1:]
        assert not [a for a in args if a.startswith("--") and a not in tool_flags()[tool]["flags"]], (tool, args)
    assert re.search(r"--qformat', 'fp8'", str(calls[0])) and "--tp_size" in calls[0]
