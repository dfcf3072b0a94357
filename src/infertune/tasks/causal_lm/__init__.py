"""Causal LMs (HF directories, GGUF, configs with random weights): candidates and the task. The engines
themselves live in infertune.llm (load, static-cache decode loop, CUDA graphs, vLLM)."""
