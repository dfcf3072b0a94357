"""Causal LMs (HF directories, GGUF, configs with random weights), the search side: candidates (torch decode loops
and served checkpoints x vLLM arguments), the fit check, the tasks and their workers, measurement, accuracy, report
and artifact. The engines themselves (model loading, the static-cache decode loops and CUDA graphs, the vLLM process)
live in infertune.engines.causal_lm; checkpoints are made in infertune.quantize (llm_checkpoint_*)."""
