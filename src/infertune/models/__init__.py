"""Model loading: find a model by alias or path, and load it for a task (embedding, causal LM)."""
