"""Generative (causal) language models: tune, verify, measure, write a vLLM-loadable artifact, serve
through vLLM. The search loop is infertune.tuning; this family plugs in through infertune.tasks.causal_lm."""
