"""`infertune serve`: an OpenAI-compatible embedding server with token-budget dynamic batching.

Modules: config (ServeConfig, ServeResult, defaults from the artifact), schema (request parsing and
OpenAI-shaped errors), engine (tokenize -> batch -> forward -> post-process stages), metrics
(Prometheus), app (FastAPI app and the `serve()` entry point). Importing this package is light.

`infertune.serve(cfg)` is the function (`infertune/_api.py` says how); this package stays a plain module.
"""

