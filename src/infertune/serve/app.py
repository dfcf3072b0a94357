"""`serve()`, the library entry point: it resolves the model and chooses the topology, nothing more.

- a causal-LM artifact: vLLM (engines/causal_lm/vllm_server.py), never a home-made generation server;
- one frontend and one device: everything in this process, the batch core in a thread (inproc.py);
- several frontends, several GPUs, or --worker-process: a launcher with frontend processes and an engine
  process per device, supervised and restarted (launcher.py).
Both embedding topologies run the same engine client (engine_client.py) and batch core (batch_core.py).
"""

import sys
import time
from pathlib import Path
from typing import Any

from infertune.errors import InfertuneError
from infertune.serve.config import ServeConfig, ServeResult, resolve_settings
from infertune.serve.http import ROUTES, State, bind_tcp, create_app, draining_server  # noqa: F401 - re-exported


def _serve_llm(cfg: ServeConfig, manifest: dict[str, Any], path: Any) -> ServeResult:
    """LLM artifacts are served by vLLM (never by a home-made generation server)."""
    import importlib

    try:
        mod = importlib.import_module("infertune.engines.causal_lm.vllm_server")
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("infertune.engines.causal_lm"):
            raise
        mod = None
    fn = getattr(mod, "serve_llm", None)
    if fn is None:
        raise InfertuneError(f"{cfg.model} is a causal-LM artifact; serving it needs "
                             "infertune.engines.causal_lm.vllm_server:serve_llm, which this installation does not have")
    t0 = time.monotonic()
    code = fn(path, host=cfg.host, port=cfg.port, strict_host=cfg.strict_host)
    if code not in (0, None):
        raise InfertuneError(f"vLLM exited with code {code}; its log above says why (try `infertune doctor explain`)")
    return ServeResult(model=str(cfg.model), url=f"http://{cfg.host}:{cfg.port}",
                       uptime_s=round(time.monotonic() - t0, 1), exit_reason="vLLM stopped cleanly")


def _print_keys(cfg: ServeConfig) -> None:
    """Refuse --rate-limit without keys; name each key's /metrics label by its first characters (never the key)."""
    keys = cfg.api_keys
    if cfg.rate_limit and not keys:
        raise InfertuneError("--rate-limit is per API key: give the keys with --api-key (repeat it, or separate them "
                             "with commas)")
    if not keys:
        return
    shown = ", ".join(f"{i + 1} = " + (f"{k[:4]}..." if len(k) >= 12 else f"a {len(k)}-character key")
                      for i, k in enumerate(keys))
    limit = f"; {cfg.rate_limit:g} requests/s per key (--rate-limit)" if cfg.rate_limit else ""
    print(f"API keys (their /metrics label = position): {shown}{limit}", file=sys.stderr, flush=True)


def serve(config: ServeConfig) -> ServeResult:
    """Serve an embedding model until SIGTERM/SIGINT; return what was served."""
    import importlib.util

    from infertune.artifact import read_manifest
    from infertune.models.resolve import resolve_model

    ref = resolve_model(config.model)
    manifest = read_manifest(ref.path) if ref.format == "artifact" else None
    if manifest is not None and manifest.get("kind") == "causal-lm":
        return _serve_llm(config, manifest, ref.path)
    if manifest is None:
        from infertune.models.embedding import embedding_spec

        o = config.load_options()  # says clearly when this is not an embedder, or a prompt is unknown
        embedding_spec(ref, o["pooling"], o["task"], o["prompts"], o["default_prompt_name"])
    for mod, pkg in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus-client")):
        if importlib.util.find_spec(mod) is None:
            raise InfertuneError(f"serving needs {pkg}: pip install 'infertune[serve]'")
    if config.verify and manifest is None:
        raise InfertuneError(f"--verify checks a tuned artifact; {config.model} is not one (run `infertune tune`)")
    settings = resolve_settings(config, manifest)
    _print_keys(config)
    if manifest is not None:
        from infertune.serve.host_check import check_host

        if line := check_host(manifest, settings.device, config.strict_host):
            print(line, file=sys.stderr, flush=True)
        if config.verify:  # before any server starts, so before /ready
            from infertune.engines.held_check import accuracy_gate

            acc = accuracy_gate(ref.path, manifest, settings.device)
            print(f"--verify: accuracy holds on {acc.n} held texts (mean cosine {acc.cosine_mean:.5f}, min "
                  f"{acc.cosine_min:.5f})", file=sys.stderr, flush=True)
    name = config.served_model_name or (manifest or {}).get("model") or ref.name
    served = list(dict.fromkeys([name, config.model, Path(config.model).name]))
    from infertune.serve.engine_setup import warmup_texts
    from infertune.serve.launcher import Launcher, wants_processes

    multi, devices, frontends = wants_processes(config, settings.device,
                                                ((manifest or {}).get("tune") or {}).get("frontends_per_gpu"))
    if multi:
        if importlib.util.find_spec("zmq") is None:
            raise InfertuneError("serving with several frontends or devices, or --worker-process, needs pyzmq: "
                                 "pip install 'infertune[serve]'")
        return Launcher(config, settings, served, devices, frontends, warmup_texts()).run()
    from infertune.serve.inproc import serve_in_process

    return serve_in_process(config, settings, served)
