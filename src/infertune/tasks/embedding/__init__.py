"""Embedding models (sentence-transformers / HF encoders): candidates, batching search, the task."""
