"""Generative (causal) language models: tune, verify, measure, write a vLLM-loadable artifact, serve
through vLLM. Entry point: `infertune.llm.tune:tune_lm` (reached through `infertune.tune.tune`)."""
