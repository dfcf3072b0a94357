"""Backends: one file per engine. Each answers four questions (see base.Backend). The causal-LM run side (decode
loops, the vLLM process) is the causal_lm subpackage."""
