"""The causal-LM run side: model loading, the decode loops (static cache, compiled step, CUDA graphs), the vLLM
server process, its supervision and the engine versions it runs, and the 16-bit reference computed off the GPU.
The search over them is infertune.tasks.causal_lm; quantized checkpoints are made in infertune.quantize."""
