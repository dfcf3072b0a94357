"""The llm-compressor step plan names is a command that calls `oneshot` with the scheme's recipe and the
calibration split. It is run here against stand-in llmcompressor modules, which record what they receive."""

import shlex
import sys
import types

import pytest

from infertune.quantize.llm_checkpoint_rules import FP8, INT8, W4A16
from infertune.quantize.llm_checkpoint_step import llm_compressor_step, output_dir


@pytest.fixture
def fake_llmcompressor(monkeypatch):
    """llmcompressor, llmcompressor.modifiers.quantization and .transform as recorders."""
    seen: dict = {}

    def modifier(name):
        def init(self, **kw):
            self.kw = kw
        return type(name, (), {"__init__": init, "__repr__": lambda self: f"{name}({self.kw})"})

    root = types.ModuleType("llmcompressor")
    root.oneshot = lambda **kw: seen.update(kw)
    quant = types.ModuleType("llmcompressor.modifiers.quantization")
    quant.GPTQModifier, quant.QuantizationModifier = modifier("GPTQModifier"), modifier("QuantizationModifier")
    transform = types.ModuleType("llmcompressor.modifiers.transform")
    transform.SmoothQuantModifier = modifier("SmoothQuantModifier")
    for m in (root, types.ModuleType("llmcompressor.modifiers"), quant, transform):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    return seen


def run(step, seen) -> dict:
    argv = shlex.split(step.command)
    assert argv[0].endswith("/bin/python") and argv[1] == "-c" and len(argv) == 3
    exec(compile(argv[2], "<step>", "exec"), {})  # noqa: S102 - our own generated line, against stand-ins
    return seen


def test_w4a16_step_calibrates_on_the_split_and_writes_beside_the_model(fake_llmcompressor):
    step = llm_compressor_step(W4A16, "/models/Meta-Llama-3-8B", "Meta-Llama-3-8B", workload="/data/chats.jsonl",
                               n_calibration=72, max_seq_length=8192)
    assert step.output == "/models/Meta-Llama-3-8B-W4A16-G128"
    got = run(step, fake_llmcompressor)
    assert got["model"] == "/models/Meta-Llama-3-8B" and got["output_dir"] == step.output
    assert (got["dataset"], got["splits"], got["text_column"]) == ("json", "train", "text")
    assert (got["dataset_path"] == step.output + ".calibration"
            and step.calibration["file"].startswith(got["dataset_path"]))
    assert got["num_calibration_samples"] == 72  # the split's size, not oneshot's default 512
    assert got["max_seq_length"] == 2048  # vLLM's guides' length, not the 8192-token context
    [gptq] = got["recipe"]
    assert type(gptq).__name__ == "GPTQModifier"
    assert gptq.kw == {"targets": "Linear", "scheme": "W4A16", "ignore": ["lm_head"]}
    assert step.calibration["source"] == "/data/chats.jsonl" and step.calibration["requests"] == 72


def test_int8_step_smooths_then_quantizes(fake_llmcompressor):
    got = run(llm_compressor_step(INT8, "/m/llama", "llama"), fake_llmcompressor)
    sq, gptq = got["recipe"]
    assert type(sq).__name__ == "SmoothQuantModifier" and sq.kw == {"smoothing_strength": 0.8}
    assert gptq.kw["scheme"] == "W8A8"
    assert got["num_calibration_samples"] == 512  # no split size known: oneshot's default


def test_fp8_dynamic_step_needs_no_calibration_data(fake_llmcompressor):
    step = llm_compressor_step(FP8, "/m/llama", "llama", workload="/data/chats.jsonl", n_calibration=72)
    got = run(step, fake_llmcompressor)
    assert "dataset" not in got and got["output_dir"] == "/m/llama-FP8-Dynamic"
    assert got["recipe"][0].kw["scheme"] == "FP8_DYNAMIC" and step.calibration["needed"] is False


def test_output_is_absolute_for_a_config_folder_and_a_hub_id(tmp_path, monkeypatch):
    assert output_dir("/cfgs", "llama-3-8b", W4A16) == "/cfgs/llama-3-8b-W4A16-G128"  # a folder of configs
    monkeypatch.chdir(tmp_path)
    assert output_dir("meta-llama/Meta-Llama-3-8B", "Meta-Llama-3-8B", W4A16) == \
        str(tmp_path / "Meta-Llama-3-8B-W4A16-G128")
