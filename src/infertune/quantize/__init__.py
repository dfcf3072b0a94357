"""Quantization methods, one file per family: each exposes `available(device, ...) -> reason | None` and the
function that applies it; the engines in engines/ call them by the candidate's `quant` (int8_weight_only.py is the
causal-LM decode loop's own int8 Linear). The llm-compressor checkpoints vLLM serves are made here too: the rules per
host (llm_checkpoint_rules.py), the step (llm_checkpoint_step.py), making them (llm_checkpoint_make.py), their cache
(llm_checkpoint_cache.py) and the calibration split (llm_calibration.py)."""
